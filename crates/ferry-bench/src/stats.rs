//! Order statistics over per-operation samples: median, 99th percentile and
//! minimum. Samples are nanoseconds per operation, either one timed
//! operation each or a timed batch divided by its length.

/// Median, p99 and minimum of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The middle sample (mean of the two middle ones for an even count).
    pub median: f64,
    /// The sample below which 99% of the samples lie (nearest rank).
    pub p99: f64,
    /// The smallest sample.
    pub min: f64,
}

/// Summarises `samples`; `None` when there are none.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    let rank = ((n as f64) * 0.99).ceil() as usize;
    let p99 = v[rank.clamp(1, n) - 1];
    Some(Summary { median, p99, min: v[0] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_even_and_p99() {
        assert_eq!(summarize(&[]), None);
        let s = summarize(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.p99, s.min), (2.0, 3.0, 1.0));
        assert_eq!(summarize(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(summarize(&v).unwrap().p99, 990.0);
    }
}
