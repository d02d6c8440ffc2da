//! Statistics over measured figures that several reports share.

/// The median of the values present (none if there are none).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 })
}

/// `count` per second over `seconds` (0 over no time at all).
pub fn per_second(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// The `q` quantile of sorted `v` (nearest rank); NaN for none.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    match v.len() {
        0 => f64::NAN,
        n => v[((q * n as f64).ceil() as usize).clamp(1, n) - 1],
    }
}

/// Quantile `q` of a latency histogram kept in µs, in ms.
pub fn quantile_ms(latency_us: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    latency_us.value_at_quantile(q) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_over_no_time_is_zero_not_infinite() {
        assert_eq!(per_second(10, 0.0), 0.0);
        assert_eq!(per_second(10, 4.0), 2.5);
    }

    #[test]
    fn quantiles_are_nearest_ranks() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((quantile(&v, 0.5), quantile(&v, 0.99), quantile(&v, 1.0)), (50.0, 99.0, 100.0));
        assert_eq!(quantile(&[3.0], 0.99), 3.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn quantiles_come_out_in_milliseconds() {
        let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        for us in [1_000, 2_000, 3_000] {
            h.record(us).unwrap();
        }
        assert_eq!(quantile_ms(&h, 0.5), 2.0);
    }
}
