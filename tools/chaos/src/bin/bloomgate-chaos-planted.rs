//! `bloomgate-chaos-planted`: the history checker built with the origin's planted bugs (feature
//! `planted-bugs`, test builds only) for the negative controls. Its own name, so that a build of
//! it never replaces the `bloomgate-chaos` every other test runs: build it with
//! `cargo build -p bloomgate-chaos --features planted-bugs --bin bloomgate-chaos-planted`.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    bloomgate_chaos::cli::main()
}
