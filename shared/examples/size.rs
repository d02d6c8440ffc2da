//! Sizing calculator: what a filter for N keys at false-positive rate P costs.
//!
//! `cargo run -p bloomgate-filter --example size -- 100000000 0.01`

use bloomgate_filter::Params;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(n), Some(p)) = (args.first(), args.get(1)) else {
        eprintln!("usage: size CAPACITY FP_RATE   (e.g. size 100000000 0.01)");
        std::process::exit(2);
    };
    let Ok(n) = n.replace('_', "").parse::<u64>() else {
        eprintln!("CAPACITY must be a whole number of keys, got {n:?}");
        std::process::exit(2);
    };
    let Ok(p) = p.parse::<f64>() else {
        eprintln!("FP_RATE must be a number such as 0.01, got {p:?}");
        std::process::exit(2);
    };
    match Params::for_capacity(n, p) {
        Ok(params) => {
            println!("capacity        {n} keys");
            println!("target fp_rate  {p}");
            println!("k               {}", params.k);
            println!("bits per key    {:.2}", params.bits_per_key(n));
            println!("memory          {:.1} MiB", params.total_bytes() as f64 / (1 << 20) as f64);
            println!("segments        {} x {} KiB", params.segment_count, params.segment_bytes() / 1024);
            println!("expected fp     {:.4} % at capacity", 100.0 * params.expected_fp_rate(n));
            println!("                {:.4} % at 2x capacity", 100.0 * params.expected_fp_rate(2 * n));
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
}
