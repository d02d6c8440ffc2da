//! Debian's libfaketime, to run a process of the tests whose wall clock is off from the
//! machine's (an origin whose clock runs ahead), with timers and leases left on the real
//! monotonic clock.

use std::process::Command;

/// Where Debian's `faketime` package puts the library.
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

/// Debian's libfaketime, or a failure that says how to install it.
pub fn libfaketime() -> &'static str {
    LIBFAKETIME.iter().copied().find(|p| std::path::Path::new(p).exists()).unwrap_or_else(|| {
        panic!("libfaketime not found at {LIBFAKETIME:?}: install Debian's faketime (apt-get install faketime)")
    })
}

/// Makes `command` run with its wall clock moved by `offset` (libfaketime's relative form:
/// `+20m`, `+0.2`, `-1.5`); its monotonic clock stays the machine's.
pub fn with_wall_clock_off_by<'c>(command: &'c mut Command, offset: &str) -> &'c mut Command {
    command.env("LD_PRELOAD", libfaketime()).env("FAKETIME", offset).env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
}

/// How far this process's wall clock runs ahead of the test Redis's clock (`TIME`), in µs
/// (negative: behind): what a process started under libfaketime checks first, so that a library
/// that did not load fails the test instead of letting it prove nothing.
pub async fn wall_clock_ahead_of_redis_us() -> i64 {
    let client = redis::Client::open(format!("redis://{}/", crate::redis_addr())).expect("the test Redis's URL");
    let mut redis = client.get_multiplexed_async_connection().await.expect("the test Redis answers");
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut redis).await.expect("Redis's TIME");
    let ours = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_micros();
    ours as i64 - (secs * 1_000_000 + micros)
}
