//! `bloomgate-chaos`: the history checker's command line (see `bloomgate_chaos::cli`).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    bloomgate_chaos::cli::main()
}
