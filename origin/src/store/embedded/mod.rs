//! The quick-start backends: the filter in process ([`MemoryFilterStore`], in `memory`) and the
//! keys in an embedded redb file ([`RedbDatabase`], in `key_file`), so `bloomgate-origin serve`
//! answers with nothing else installed. Same traits, same guarantees (the filter is rebuilt
//! from the key file at start-up), one process only.

pub mod key_file;
pub mod memory;

pub use key_file::RedbDatabase;
pub use memory::MemoryFilterStore;
