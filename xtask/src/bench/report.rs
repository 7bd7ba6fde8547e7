//! One result row per benchmark run, printed as a JSON line (`--json`, exactly the keys below) or as a table
//! row, and the process's peak resident memory.

use serde_json::json;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Row {
    pub workload: String,
    pub pods: usize,
    /// Threads the simulation used (the scheduler is single-threaded).
    pub threads: usize,
    /// Wall time of `schedule` (best of the runs).
    pub seconds: f64,
    pub pods_per_second: f64,
    pub nodes: usize,
    pub node_lower_bound: usize,
    /// The sum of the launch prices of the new NodeClaims.
    pub cost_per_hour: f64,
    pub cost_lower_bound: f64,
    /// VmHWM after the runs (reset before them where the kernel allows it).
    pub peak_rss_bytes: u64,
    /// Pods left pending (not in the JSON line; reported on stderr and under the table).
    pub pending: usize,
}

impl Row {
    pub fn to_json(&self) -> String {
        json!({
            "workload": self.workload,
            "pods": self.pods,
            "threads": self.threads,
            "seconds": self.seconds,
            "pods_per_second": self.pods_per_second,
            "nodes": self.nodes,
            "node_lower_bound": self.node_lower_bound,
            "cost_per_hour": self.cost_per_hour,
            "cost_lower_bound": self.cost_lower_bound,
            "peak_rss_bytes": self.peak_rss_bytes,
        })
        .to_string()
    }
}

pub fn print_table_header() {
    println!(
        "{:<26} {:>6} {:>3} {:>9} {:>9} {:>6} {:>6} {:>6} {:>10} {:>10} {:>6} {:>8}",
        "WORKLOAD",
        "PODS",
        "THR",
        "SECONDS",
        "PODS/S",
        "NODES",
        "NODE≥",
        "RATIO",
        "COST/H",
        "COST≥",
        "RATIO",
        "RSS MiB"
    );
}

pub fn print_table_row(r: &Row) {
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.3}", a / b)
        } else {
            "-".into()
        }
    };
    println!(
        "{:<26} {:>6} {:>3} {:>9.4} {:>9.0} {:>6} {:>6} {:>6} {:>10.2} {:>10.2} {:>6} {:>8.1}",
        r.workload,
        r.pods,
        r.threads,
        r.seconds,
        r.pods_per_second,
        r.nodes,
        r.node_lower_bound,
        ratio(r.nodes as f64, r.node_lower_bound as f64),
        r.cost_per_hour,
        r.cost_lower_bound,
        ratio(r.cost_per_hour, r.cost_lower_bound),
        r.peak_rss_bytes as f64 / (1024.0 * 1024.0),
    );
}

/// The per-pod time ratio between the largest and smallest diverse runs (1.00 = linear scaling), and pending
/// pods.
pub fn print_table_footer(rows: &[Row]) {
    let per_pod = |name: &str| {
        rows.iter()
            .find(|r| r.workload == name)
            .map(|r| r.seconds / r.pods as f64)
    };
    if let (Some(small), Some(large)) = (per_pod("diverse-1000"), per_pod("diverse-20000")) {
        println!(
            "\nper-pod time, diverse-20000 / diverse-1000: {:.2}x \
             ({:.1} us vs {:.1} us per pod; 1.00 = linear)",
            large / small,
            large * 1e6,
            small * 1e6
        );
    }
    for r in rows.iter().filter(|r| r.pending > 0) {
        println!("{}: {} pod(s) left pending", r.workload, r.pending);
    }
}

/// Resets the kernel's peak-RSS mark (VmHWM) to the current RSS (`echo 5 > /proc/self/clear_refs`, Linux
/// 4.0+). Best effort: where it fails, the peak covers the whole process so far.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// VmHWM from /proc/self/status, in bytes (0 where unavailable).
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let rest = l.strip_prefix("VmHWM:")?;
                rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
            })
        })
        .map_or(0, |kib| kib * 1024)
}
