//! The benchmarks' smoke mode. With [`SMOKE_ENV`] set (`scripts/test.sh` sets it), every
//! benchmark runs a handful of iterations and short idle windows, prints its figures as usual
//! and exits within seconds: CI executes each one, so a benchmark cannot rot unnoticed, without
//! waiting for figures worth quoting. Smoke figures are no measurement (few samples, usually a
//! debug build) and nothing asserts on them; `scripts/bench.sh` runs the full benchmarks.

use std::time::Duration;

/// Environment variable that turns smoke mode on (any value but empty or `0`).
pub const SMOKE_ENV: &str = "EDGEGPU_BENCH_SMOKE";

/// Iterations of a loop in smoke mode (at most; fewer where the full run has fewer).
pub const SMOKE_ITERATIONS: usize = 3;

/// Longest wait or idle window in smoke mode.
pub const SMOKE_WINDOW: Duration = Duration::from_millis(200);

/// Whether the benchmarks run in smoke mode.
pub fn smoke() -> bool {
    is_on(std::env::var_os(SMOKE_ENV).as_deref())
}

fn is_on(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// `full` iterations, or at most [`SMOKE_ITERATIONS`] in smoke mode.
pub fn iterations(full: usize) -> usize {
    scaled(full, SMOKE_ITERATIONS, smoke())
}

/// A wait or idle window of `full`, or at most [`SMOKE_WINDOW`] in smoke mode.
pub fn window(full: Duration) -> Duration {
    scaled(full, SMOKE_WINDOW, smoke())
}

fn scaled<T: Ord>(full: T, most: T, smoke: bool) -> T {
    if smoke {
        full.min(most)
    } else {
        full
    }
}

/// Prints one line of latency figures for `samples`: count, min, p50, p95, p99 and max (the
/// nearest-rank percentiles of the sorted samples). Nothing when there are none.
pub fn print_latencies(what: &str, mut samples: Vec<Duration>) {
    if samples.is_empty() {
        return;
    }
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{what:<48} n={:<5} min {:>9.3?}  p50 {:>9.3?}  p95 {:>9.3?}  p99 {:>9.3?}  max {:>9.3?}",
        samples.len(),
        samples[0],
        pct(0.5),
        pct(0.95),
        pct(0.99),
        samples[samples.len() - 1]
    );
}

/// Prints the line a benchmark starts with in smoke mode (nothing otherwise), so that nobody
/// quotes its figures.
pub fn announce_smoke_mode() {
    if smoke() {
        println!(
            "smoke mode ({SMOKE_ENV}): at most {SMOKE_ITERATIONS} iterations and {SMOKE_WINDOW:?} windows; figures are not measurements"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn on_unless_unset_empty_or_zero() {
        assert!(!is_on(None));
        assert!(!is_on(Some(OsStr::new(""))));
        assert!(!is_on(Some(OsStr::new("0"))));
        assert!(is_on(Some(OsStr::new("1"))));
        assert!(is_on(Some(OsStr::new("yes"))));
    }

    #[test]
    fn scaled_down_only_in_smoke_mode() {
        assert_eq!(scaled(2000, SMOKE_ITERATIONS, false), 2000);
        assert_eq!(scaled(2000, SMOKE_ITERATIONS, true), SMOKE_ITERATIONS);
        assert_eq!(scaled(1, SMOKE_ITERATIONS, true), 1);
        let five = Duration::from_secs(5);
        assert_eq!(scaled(five, SMOKE_WINDOW, false), five);
        assert_eq!(scaled(five, SMOKE_WINDOW, true), SMOKE_WINDOW);
        let short = Duration::from_millis(2);
        assert_eq!(scaled(short, SMOKE_WINDOW, true), short);
    }
}
