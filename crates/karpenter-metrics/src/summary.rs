//! Prometheus summaries, for the upstream metrics that are summaries: by NodePool
//! (`karpenter_nodes_termination_duration_seconds`) and without labels (`karpenter_pods_startup_duration_seconds`).
//! prometheus-client has no summary type, so [`crate::Metrics::encode_chunks`] writes them itself.
//!
//! As upstream's (client_golang's defaults with upstream's objectives), it reports the 0, 0.5, 0.9, 0.99 and 1
//! quantiles of the observations of the last ten minutes, and the sum and count of every observation since
//! the start. The quantiles are exact over the window rather than estimated: node terminations come by the
//! dozen, not by the million, so keeping the window's values costs next to nothing; pod starts come by the
//! thousand at most in ten minutes (16 bytes each: 150,000 starts in the window would be 2.4 MB).

use std::{
    collections::{BTreeMap, VecDeque},
    fmt::Write,
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::node_gauges::write_label_value;

/// The quantiles reported, upstream's objectives.
pub const SUMMARY_QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];

/// How long an observation counts towards the quantiles (client_golang's default MaxAge).
pub const SUMMARY_MAX_AGE: Duration = Duration::from_secs(600);

#[derive(Debug, Default)]
struct Series {
    window: VecDeque<(Instant, f64)>,
    sum: f64,
    count: u64,
}

impl Series {
    fn record(&mut self, value: f64, at: Instant) {
        self.window.push_back((at, value));
        self.sum += value;
        self.count += 1;
    }

    fn forget_older_than(&mut self, oldest: Option<Instant>) {
        let Some(oldest) = oldest else { return };
        while self.window.front().is_some_and(|(at, _)| *at < oldest) {
            self.window.pop_front();
        }
    }

    /// The `q` quantile of the window (nearest rank), NaN when it is empty, as client_golang reports it.
    fn quantile(sorted: &[f64], q: f64) -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let last = sorted.len() - 1;
        // The rank is in 0..=last, so the float-to-index conversion neither truncates nor overflows.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let rank = ((q * last as f64).round() as usize).min(last);
        sorted[rank]
    }
}

/// A summary with one series per NodePool.
#[derive(Debug, Default)]
pub struct NodePoolSummary {
    series: Mutex<BTreeMap<String, Series>>,
}

impl NodePoolSummary {
    /// Records one observation for `nodepool`.
    pub fn observe(&self, nodepool: &str, value: f64) {
        self.observe_at(nodepool, value, Instant::now());
    }

    fn observe_at(&self, nodepool: &str, value: f64, at: Instant) {
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        series.entry(nodepool.to_string()).or_default().record(value, at);
    }

    /// The OpenMetrics text of the summary: its HELP and TYPE lines, then per NodePool the quantiles, `_sum` and
    /// `_count`.
    pub fn text(&self, name: &str, help: &str) -> String {
        self.text_at(name, help, Instant::now())
    }

    fn text_at(&self, name: &str, help: &str, now: Instant) -> String {
        let mut out = header(name, help);
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (nodepool, s) in series.iter_mut() {
            write_series(&mut out, name, Some(("nodepool", nodepool)), s, now);
        }
        out
    }
}

/// The HELP and TYPE lines of a summary.
fn header(name: &str, help: &str) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} summary");
    out
}

/// Writes one series' quantiles over the window ending at `now`, `_sum` and `_count`, with `label` if any.
fn write_series(out: &mut String, name: &str, label: Option<(&str, &str)>, s: &mut Series, now: Instant) {
    s.forget_older_than(now.checked_sub(SUMMARY_MAX_AGE));
    let mut values: Vec<f64> = s.window.iter().map(|(_, v)| *v).collect();
    values.sort_by(f64::total_cmp);
    let (first, only) = match label {
        Some((key, value)) => {
            let mut escaped = String::with_capacity(value.len());
            write_label_value(&mut escaped, value);
            let value = escaped;
            (format!("{key}=\"{value}\","), format!("{{{key}=\"{value}\"}}"))
        }
        None => (String::new(), String::new()),
    };
    // Writing into a String cannot fail.
    for q in SUMMARY_QUANTILES {
        let value = Series::quantile(&values, q);
        let _ = writeln!(out, "{name}{{{first}quantile=\"{q:?}\"}} {}", number(value));
    }
    let _ = writeln!(out, "{name}_sum{only} {}", number(s.sum));
    let _ = writeln!(out, "{name}_count{only} {}", s.count);
}

/// A summary without labels (`karpenter_pods_startup_duration_seconds`): one series, always exported.
#[derive(Debug, Default)]
pub struct Summary {
    series: Mutex<Series>,
}

impl Summary {
    /// Records one observation.
    pub fn observe(&self, value: f64) {
        self.observe_at(value, Instant::now());
    }

    fn observe_at(&self, value: f64, at: Instant) {
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .record(value, at);
    }

    /// The OpenMetrics text of the summary: HELP, TYPE, the quantiles, `_sum` and `_count`.
    pub fn text(&self, name: &str, help: &str) -> String {
        self.text_at(name, help, Instant::now())
    }

    fn text_at(&self, name: &str, help: &str, now: Instant) -> String {
        let mut out = header(name, help);
        let mut s = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        write_series(&mut out, name, None, &mut s, now);
        out
    }
}

/// A float as OpenMetrics writes it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else {
        format!("{v:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_cover_the_last_ten_minutes_and_sum_and_count_everything() {
        let summary = NodePoolSummary::default();
        let start = Instant::now();
        summary.observe_at("default", 100.0, start);
        for v in [10.0, 20.0, 30.0, 40.0] {
            summary.observe_at("default", v, start + Duration::from_secs(300));
        }
        summary.observe_at("gpu\"x", 5.0, start + Duration::from_secs(300));

        let text = summary.text_at("t", "Help.", start + Duration::from_secs(301));
        assert!(text.starts_with("# HELP t Help.\n# TYPE t summary\n"), "{text}");
        assert!(
            text.contains("t{nodepool=\"default\",quantile=\"1.0\"} 100.0\n"),
            "{text}"
        );
        assert!(
            text.contains("t{nodepool=\"default\",quantile=\"0.0\"} 10.0\n"),
            "{text}"
        );
        assert!(
            text.contains("t{nodepool=\"default\",quantile=\"0.5\"} 30.0\n"),
            "{text}"
        );
        assert!(text.contains("t_sum{nodepool=\"default\"} 200.0\n"), "{text}");
        assert!(text.contains("t_count{nodepool=\"default\"} 5\n"), "{text}");
        assert!(text.contains("t_count{nodepool=\"gpu\\\"x\"} 1\n"), "{text}");

        // Ten minutes after the first observation it no longer counts towards the quantiles, but still towards
        // the sum and count.
        let later = summary.text_at("t", "Help.", start + Duration::from_secs(601));
        assert!(
            later.contains("t{nodepool=\"default\",quantile=\"1.0\"} 40.0\n"),
            "{later}"
        );
        assert!(later.contains("t_count{nodepool=\"default\"} 5\n"), "{later}");
        let empty = summary.text_at("t", "Help.", start + Duration::from_secs(2000));
        assert!(
            empty.contains("t{nodepool=\"default\",quantile=\"0.5\"} NaN\n"),
            "{empty}"
        );
    }

    #[test]
    fn an_unlabelled_summary_is_one_series_exported_before_any_observation() {
        let summary = Summary::default();
        let start = Instant::now();
        let empty = summary.text_at("s", "Help.", start);
        assert_eq!(
            empty,
            "# HELP s Help.\n# TYPE s summary\ns{quantile=\"0.0\"} NaN\ns{quantile=\"0.5\"} NaN\n\
             s{quantile=\"0.9\"} NaN\ns{quantile=\"0.99\"} NaN\ns{quantile=\"1.0\"} NaN\ns_sum 0.0\ns_count 0\n"
        );
        summary.observe_at(12.0, start);
        summary.observe_at(4.0, start);
        let text = summary.text_at("s", "Help.", start + Duration::from_secs(1));
        assert!(text.contains("s{quantile=\"1.0\"} 12.0\n"), "{text}");
        assert!(text.contains("s{quantile=\"0.0\"} 4.0\n"), "{text}");
        assert!(text.contains("s_sum 16.0\ns_count 2\n"), "{text}");
    }
}
