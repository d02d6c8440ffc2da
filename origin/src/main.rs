//! `bloomgate-origin` command line.

fn main() {
    eprintln!("bloomgate-origin: not built yet; see the origin issue");
    std::process::exit(2);
}
