//! The autoscaling signal as the HorizontalPodAutoscaler reads it. The origin's refusal
//! counters (`bloomgate_overloaded_total`, by class) are scraped on a fixed grid through a
//! burst; the shipped recording rule's value (`bloomgate:overloaded_per_pod:rate1m`, the sum
//! over classes of `rate(...[1m])`) is computed from them as Prometheus 2.x computes it on that
//! grid; and both are written as a promtool rule test, so `promtool test rules` evaluates the
//! shipped rule on a real burst's counters and holds it to the values expected of it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The window of the recording rule's `rate`, in seconds.
const WINDOW_SECS: u64 = 60;

/// Counter values by class, one per step of the grid.
#[derive(Clone, Debug)]
pub struct Series {
    /// Seconds between scrapes (divides the window).
    pub step_secs: u64,
    /// Class → the counter at each step.
    pub classes: BTreeMap<String, Vec<f64>>,
    steps: usize,
}

impl Series {
    /// An empty series scraped every `step_secs`.
    pub fn new(step_secs: u64) -> Series {
        assert!(step_secs > 0 && WINDOW_SECS.is_multiple_of(step_secs), "the step must divide {WINDOW_SECS} s");
        Series { step_secs, classes: BTreeMap::new(), steps: 0 }
    }

    /// Appends one scrape (class → counter). A class missing from a scrape keeps its last value.
    pub fn push(&mut self, scrape: &BTreeMap<String, f64>) {
        for (class, value) in scrape {
            self.classes.entry(class.clone()).or_insert_with(|| vec![0.0; self.steps]).push(*value);
        }
        for values in self.classes.values_mut() {
            if values.len() == self.steps {
                let last = values.last().copied().unwrap_or(0.0);
                values.push(last);
            }
        }
        self.steps += 1;
    }

    /// Steps recorded.
    pub fn len(&self) -> usize {
        self.steps
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.steps == 0
    }

    /// The rule's value at step `at`: the sum over classes (in label order, as Prometheus sums)
    /// of each counter's increase over the window, resets counted, per second. On a grid whose
    /// samples sit on both ends of the window, Prometheus's extrapolation multiplies by 1.
    /// `None` before a whole window has been scraped. (Prometheus 2.x's range includes both ends;
    /// 3.x leaves the start out, and would extrapolate here.)
    pub fn per_pod_rate(&self, at: usize) -> Option<f64> {
        let span = (WINDOW_SECS / self.step_secs) as usize;
        if at < span || at >= self.steps {
            return None;
        }
        let mut sum: Option<f64> = None;
        for values in self.classes.values() {
            let window = &values[at - span..=at];
            let mut increase = window[span] - window[0];
            for pair in window.windows(2) {
                if pair[1] < pair[0] {
                    increase += pair[0];
                }
            }
            // Prometheus multiplies by a factor (extrapolated / sampled interval, here 1, over the
            // range's seconds) rather than dividing: the same in exact arithmetic, not always
            // to the last bit, and promtool compares to the last bit.
            let factor = 1.0 / WINDOW_SECS as f64;
            let rate = increase * factor;
            sum = Some(sum.map_or(rate, |s| s + rate));
        }
        Some(sum.unwrap_or(0.0))
    }

    /// A promtool rule test (`rule_files: alerts.yml`, so it sits beside it) with these counters
    /// as one pod's input series (`pod_labels`, e.g. `namespace="bench",pod="origin-0"`) and the
    /// rule's expected value every `eval_every` steps from the first whole window on.
    pub fn promtool_test(&self, header: &str, pod_labels: &str, eval_every: usize) -> String {
        let step = self.step_secs;
        let mut out = String::new();
        for line in header.lines() {
            let _ = writeln!(out, "# {line}");
        }
        let _ = writeln!(out, "rule_files:\n  - alerts.yml\nevaluation_interval: {step}s\ntests:");
        let _ = writeln!(out, "  - interval: {step}s\n    input_series:");
        for (class, values) in &self.classes {
            let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
            let _ = writeln!(out, "      - series: 'bloomgate_overloaded_total{{class=\"{class}\",{pod_labels}}}'");
            let _ = writeln!(out, "        values: '{}'", values.join(" "));
        }
        let _ = writeln!(out, "    promql_expr_test:");
        let first = (WINDOW_SECS / step) as usize;
        for at in (first..self.steps).step_by(eval_every.max(1)) {
            let Some(rate) = self.per_pod_rate(at) else { continue };
            let _ = writeln!(
                out,
                "      - expr: bloomgate:overloaded_per_pod:rate1m\n        eval_time: {}s",
                at as u64 * step
            );
            let _ = writeln!(out, "        exp_samples:");
            let _ = writeln!(out, "          - labels: 'bloomgate:overloaded_per_pod:rate1m{{{pod_labels}}}'");
            let _ = writeln!(out, "            value: {rate}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Series;
    use std::collections::BTreeMap;

    fn scrape(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn the_rate_is_the_window_s_increase_per_second_summed_over_classes() {
        let mut s = Series::new(15);
        for i in 0..9 {
            // 30 refusals of writes per step from step 4 on; lookups never refused.
            let writes = if i < 4 { 0.0 } else { 30.0 * (i - 3) as f64 };
            s.push(&scrape(&[("lookup", 0.0), ("write_or_batch", writes)]));
        }
        assert_eq!(s.per_pod_rate(3), None, "no whole window yet");
        assert_eq!(s.per_pod_rate(4), Some(30.0 / 60.0));
        assert_eq!(s.per_pod_rate(8), Some(120.0 / 60.0));
        assert_eq!(s.per_pod_rate(9), None, "past the end");
    }

    #[test]
    fn a_counter_reset_counts_what_was_before_it() {
        let mut s = Series::new(30);
        for v in [10.0, 20.0, 5.0] {
            s.push(&scrape(&[("write_or_batch", v)]));
        }
        // 10 → 20 (+10), reset to 5 (+5 since the restart): 15 over the minute.
        assert_eq!(s.per_pod_rate(2), Some(15.0 / 60.0));
    }

    #[test]
    fn a_class_first_seen_late_starts_from_zero_and_a_missing_one_holds() {
        let mut s = Series::new(30);
        s.push(&scrape(&[("lookup", 1.0)]));
        s.push(&scrape(&[("write_or_batch", 4.0)]));
        assert_eq!(s.classes["lookup"], vec![1.0, 1.0]);
        assert_eq!(s.classes["write_or_batch"], vec![0.0, 4.0]);
    }

    #[test]
    fn the_promtool_test_lists_the_series_and_the_expected_values() {
        let mut s = Series::new(30);
        for v in [0.0, 0.0, 6.0, 12.0] {
            s.push(&scrape(&[("write_or_batch", v)]));
        }
        let yaml = s.promtool_test("from a test", "namespace=\"bench\",pod=\"origin-0\"", 1);
        assert!(yaml.starts_with("# from a test\nrule_files:\n  - alerts.yml\nevaluation_interval: 30s"));
        assert!(yaml.contains("bloomgate_overloaded_total{class=\"write_or_batch\",namespace=\"bench\",pod=\"origin-0\"}'\n        values: '0 0 6 12'"));
        assert!(yaml.contains("eval_time: 60s\n        exp_samples:\n          - labels: 'bloomgate:overloaded_per_pod:rate1m{namespace=\"bench\",pod=\"origin-0\"}'\n            value: 0.1\n"));
        assert!(yaml.contains("eval_time: 90s"));
        assert!(!yaml.contains("eval_time: 30s"), "no whole window at 30 s");
    }
}
