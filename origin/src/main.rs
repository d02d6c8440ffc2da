//! `bloomgate-origin` command line.
#![forbid(unsafe_code)]

fn main() {
    eprintln!("bloomgate-origin: not built yet; see the origin issue");
    std::process::exit(2);
}
