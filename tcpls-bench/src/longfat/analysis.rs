//! Goodput over time from a receiver's timeline: `(CLOCK_MONOTONIC ns, bytes received so far)`
//! samples, non-decreasing in both.

/// Bytes received by time `t` (ns), interpolated linearly between samples; before the first
/// sample the first count, after the last the last count.
pub fn bytes_at(timeline: &[(u64, u64)], t: u64) -> f64 {
    let Some(&(t0, b0)) = timeline.first() else {
        return 0.0;
    };
    if t <= t0 {
        return b0 as f64;
    }
    for pair in timeline.windows(2) {
        let ((ta, ba), (tb, bb)) = (pair[0], pair[1]);
        if t <= tb {
            if tb == ta {
                return bb as f64;
            }
            let f = (t - ta) as f64 / (tb - ta) as f64;
            return ba as f64 + f * (bb as f64 - ba as f64);
        }
    }
    timeline.last().map_or(0.0, |&(_, b)| b as f64)
}

/// Goodput in Gbit/s between `from` and `to` (ns); None for an empty window.
pub fn gbit_s_between(timeline: &[(u64, u64)], from: u64, to: u64) -> Option<f64> {
    if to <= from {
        return None;
    }
    let bytes = bytes_at(timeline, to) - bytes_at(timeline, from);
    Some(bytes * 8.0 / (to - from) as f64)
}

/// When the transfer ended: the last sample's time.
pub fn end_ns(timeline: &[(u64, u64)]) -> Option<u64> {
    timeline.last().map(|&(t, _)| t)
}

/// Seconds from `from` (ns) until goodput over a sliding window of `window_ns` first reaches
/// `target_gbit_s`, counted to the end of that window; None if it never does before the end.
pub fn seconds_until(timeline: &[(u64, u64)], from: u64, window_ns: u64, target_gbit_s: f64) -> Option<f64> {
    let end = end_ns(timeline)?;
    let step = window_ns / 10;
    let mut start = from;
    while start + window_ns <= end && step > 0 {
        if gbit_s_between(timeline, start, start + window_ns)? >= target_gbit_s {
            return Some((start + window_ns - from) as f64 / 1e9);
        }
        start += step;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// 1 Gbit/s (125 MB/s) for 10 s, then 0.25 Gbit/s for 4 s, then 1 Gbit/s again for 6 s.
    fn example() -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut bytes = 0u64;
        for tenth in 0..=200u64 {
            v.push((100 + tenth * S / 10, bytes));
            let rate = if (100..140).contains(&tenth) { 125_000_000 / 4 } else { 125_000_000 };
            bytes += rate / 10;
        }
        v
    }

    #[test]
    fn interpolates_between_samples() {
        let t = [(10, 0), (20, 100), (30, 100)];
        assert_eq!(bytes_at(&t, 0), 0.0);
        assert_eq!(bytes_at(&t, 15), 50.0);
        assert_eq!(bytes_at(&t, 25), 100.0);
        assert_eq!(bytes_at(&t, 99), 100.0);
        assert_eq!(bytes_at(&[], 5), 0.0);
    }

    #[test]
    fn goodput_windows() {
        let t = example();
        let g = gbit_s_between(&t, 100 + S, 100 + 9 * S).unwrap();
        assert!((g - 1.0).abs() < 1e-9, "{g}");
        let g = gbit_s_between(&t, 100 + 10 * S, 100 + 14 * S).unwrap();
        assert!((g - 0.25).abs() < 1e-9, "{g}");
        assert_eq!(gbit_s_between(&t, 5, 5), None);
    }

    #[test]
    fn recovery_time() {
        let t = example();
        // From the slowdown at 10 s, a 1 s window reaches 0.9 Gbit/s once at most 2/15 of it
        // lies before 14 s: [13.8, 14.8] averages 0.85, [13.9, 14.9] 0.925, so 4.9 s.
        let r = seconds_until(&t, 100 + 10 * S, S, 0.9).unwrap();
        assert!(r > 4.8 && r <= 5.0 + 1e-9, "{r}");
        assert_eq!(seconds_until(&t, 100 + 10 * S, S, 1.5), None);
    }
}
