//! The performance suite's reports (`<prefix>_performance_report.json`, which the suite writes to `OUTPUT_DIR`):
//! kept with the run's results and read back into a table, per controller and side by side
//! (`cargo xtask e2e compare`), so both controllers' runs of one workload are compared on every row the suite
//! measures.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::Context;
use serde::Deserialize;

/// What the suite reports for one phase of one workload (the fields of upstream's `PerformanceReport`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Report {
    pub test_name: String,
    pub test_type: String,
    pub total_pods: i64,
    pub total_nodes: i64,
    /// Nanoseconds (a Go `time.Duration`).
    pub total_time: i64,
    pub pods_disrupted: i64,
    pub total_reserved_cpu_utilization: f64,
    pub total_reserved_memory_utilization: f64,
    pub resource_efficiency_score: f64,
    pub pods_per_node: f64,
    pub rounds: i64,
    pub karpenter_p95_memory_mb: f64,
    pub karpenter_p95_heap_mb: f64,
    pub karpenter_p95_cpu_cores: f64,
    pub karpenter_avg_cpu_cores: f64,
    pub metrics_sample_count: i64,
}

const SUFFIX: &str = "_performance_report.json";

/// Copies the suite's reports from `run_dir` into `dest` (emptied first) and reads them, by file prefix.
pub fn collect(run_dir: &Path, dest: &Path) -> anyhow::Result<BTreeMap<String, Report>> {
    if dest.exists() {
        std::fs::remove_dir_all(dest).with_context(|| format!("removing {}", dest.display()))?;
    }
    let mut reports = BTreeMap::new();
    for (prefix, path) in report_files(run_dir)? {
        std::fs::create_dir_all(dest)?;
        std::fs::copy(&path, dest.join(path.file_name().unwrap_or_default()))
            .with_context(|| format!("copying {}", path.display()))?;
        reports.insert(prefix, read(&path)?);
    }
    Ok(reports)
}

/// The reports in `dir`, by file prefix.
pub fn read_dir(dir: &Path) -> anyhow::Result<BTreeMap<String, Report>> {
    report_files(dir)?
        .into_iter()
        .map(|(prefix, path)| Ok((prefix, read(&path)?)))
        .collect()
}

fn report_files(dir: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if let Some(prefix) = name.strip_suffix(SUFFIX) {
            files.push((prefix.to_string(), path.clone()));
        }
    }
    files.sort();
    Ok(files)
}

fn read(path: &Path) -> anyhow::Result<Report> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a performance report", path.display()))
}

/// A row of the table: its label and how a report shows it.
type Row = (&'static str, fn(&Report) -> String);

/// The rows of the table.
fn rows() -> Vec<Row> {
    vec![
        ("wall time", |r| format!("{:.1} s", r.total_time as f64 / 1e9)),
        ("pods", |r| r.total_pods.to_string()),
        ("nodes", |r| r.total_nodes.to_string()),
        ("pods per node", |r| format!("{:.1}", r.pods_per_node)),
        ("reserved CPU used", |r| {
            format!("{:.1}%", r.total_reserved_cpu_utilization * 100.0)
        }),
        ("reserved memory used", |r| {
            format!("{:.1}%", r.total_reserved_memory_utilization * 100.0)
        }),
        ("efficiency score", |r| {
            format!("{:.1}%", r.resource_efficiency_score)
        }),
        ("consolidation rounds", |r| r.rounds.to_string()),
        ("pods disrupted", |r| r.pods_disrupted.to_string()),
        ("controller memory P95 (RSS)", |r| {
            metric(r, r.karpenter_p95_memory_mb, "MB")
        }),
        ("controller live heap P95", |r| {
            metric(r, r.karpenter_p95_heap_mb, "MB")
        }),
        ("controller CPU P95", |r| {
            metric(r, r.karpenter_p95_cpu_cores, "cores")
        }),
        ("controller CPU average", |r| {
            metric(r, r.karpenter_avg_cpu_cores, "cores")
        }),
        ("metrics samples", |r| r.metrics_sample_count.to_string()),
    ]
}

fn metric(report: &Report, value: f64, unit: &str) -> String {
    if report.metrics_sample_count == 0 {
        "not sampled".into()
    } else if unit == "cores" {
        format!("{value:.3} {unit}")
    } else {
        format!("{value:.1} {unit}")
    }
}

fn title(prefix: &str, report: &Report) -> String {
    if report.test_name.is_empty() {
        prefix.to_string()
    } else {
        format!("{} ({})", report.test_name, report.test_type)
    }
}

/// One controller's reports, a table each.
pub fn markdown(reports: &BTreeMap<String, Report>) -> String {
    let mut text = String::new();
    for (prefix, report) in reports {
        let _ = write!(text, "\n### {}\n\n| | |\n|---|---|\n", title(prefix, report));
        for (label, show) in rows() {
            let _ = writeln!(text, "| {label} | {} |", show(report));
        }
    }
    text
}

/// Both controllers' reports side by side, a table per report either has.
pub fn compare(ours: &BTreeMap<String, Report>, upstream: &BTreeMap<String, Report>) -> String {
    let mut prefixes: Vec<&String> = ours.keys().chain(upstream.keys()).collect();
    prefixes.sort();
    prefixes.dedup();
    let mut text = String::new();
    for prefix in prefixes {
        let (a, b) = (ours.get(prefix), upstream.get(prefix));
        let Some(any) = a.or(b) else { continue };
        let _ = write!(
            text,
            "\n### {}\n\n| | ours | upstream's |\n|---|---|---|\n",
            title(prefix, any)
        );
        for (label, show) in rows() {
            let cell = |r: Option<&Report>| r.map(show).unwrap_or_else(|| "not run".into());
            let _ = writeln!(text, "| {label} | {} | {} |", cell(a), cell(b));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"{"test_name": "Basic Scale Out", "test_type": "scale-out", "total_pods": 700,
        "total_nodes": 40, "total_time": 95500000000, "change_in_pod_count": 700, "change_in_node_count": 40,
        "pods_disrupted": 0, "total_reserved_cpu_utilization": 0.91, "total_reserved_memory_utilization": 0.5,
        "resource_efficiency_score": 80.31, "pods_per_node": 17.5, "rounds": 0, "timestamp": "2026-12-07T20:00:00Z",
        "karpenter_p95_memory_mb": 61.2, "karpenter_avg_memory_mb": 50, "karpenter_max_memory_mb": 70,
        "karpenter_p95_heap_mb": 20.5, "karpenter_avg_heap_mb": 18, "karpenter_max_heap_mb": 25,
        "karpenter_p95_cpu_cores": 0.25, "karpenter_avg_cpu_cores": 0.1, "karpenter_max_cpu_cores": 0.4,
        "metrics_sample_count": 19}"#;

    #[test]
    fn reads_the_suites_report_and_tables_both_controllers() {
        let ours: Report = serde_json::from_str(REPORT).unwrap();
        assert_eq!((ours.total_pods, ours.total_nodes), (700, 40));
        let upstream = Report {
            karpenter_p95_memory_mb: 250.0,
            metrics_sample_count: 0,
            ..ours.clone()
        };
        let ours = BTreeMap::from([("basic".to_string(), ours)]);
        let upstream = BTreeMap::from([
            ("basic".to_string(), upstream),
            ("wide".to_string(), Report::default()),
        ]);
        let text = compare(&ours, &upstream);
        assert!(text.contains("### Basic Scale Out (scale-out)"), "{text}");
        assert!(text.contains("| wall time | 95.5 s | 95.5 s |"), "{text}");
        assert!(
            text.contains("| controller memory P95 (RSS) | 61.2 MB | not sampled |"),
            "{text}"
        );
        assert!(text.contains("| efficiency score | 80.3% | 80.3% |"), "{text}");
        assert!(text.contains("### wide\n"), "{text}");
        assert!(text.contains("| pods | not run | 0 |"), "{text}");
    }

    #[test]
    fn reports_are_copied_beside_the_results_and_read_back() {
        let dir = std::env::temp_dir().join(format!("xtask-perf-{}", std::process::id()));
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join("basic_performance_report.json"), REPORT).unwrap();
        std::fs::write(run.join("other.json"), "{}").unwrap();
        let reports = collect(&run, &dir.join("kept")).unwrap();
        assert_eq!(reports.keys().collect::<Vec<_>>(), ["basic"]);
        assert_eq!(read_dir(&dir.join("kept")).unwrap(), reports);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
