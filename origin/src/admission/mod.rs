//! Admission: how much work the origin takes on at once, derived from the memory it may use, so
//! that a burst is refused (429 + Retry-After) instead of absorbed until the process is killed.
//! Single-key lookups and the rest (writes, batches, the edge's feed) are admitted by limiters
//! of their own, so a burst of writes never sheds lookups.
//!
//! # Layout
//! - `budget`: the memory this process may use: `memory_budget_bytes`, its cgroup's limit (v2
//!   or v1), the machine's.
//! - `cost`: the measured worst-case memory of each kind of request, for the limits configured.
//! - `caps`: the budget divided (the process, local copies, connections, lookups, writes and
//!   batches) into the caps in force, or `max_in_flight` instead.
//! - `limit`: the layer that admits a request into its class's limiter or answers 429.

pub mod budget;
pub mod caps;
pub mod cost;
pub mod in_flight;
pub mod limit;

pub use budget::MemoryLimit;
pub use caps::{Caps, CapsError};
pub use limit::Admission;
