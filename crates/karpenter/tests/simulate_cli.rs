//! `karpenter simulate` end to end: the built binary runs the built-in scenario's first minutes (the consumer's
//! scale-up) and prints the summary contract.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

use std::process::Command;

use serde_json::Value;

#[test]
fn the_scale_up_launches_nodes_runs_every_pod_and_violates_no_pdb() {
    let chart = std::env::temp_dir().join(format!("karpenter-simulate-{}.svg", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["simulate", "--minutes", "6", "--quiet", "-o", "json", "--chart"])
        .arg(&chart)
        .output()
        .expect("run the karpenter binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}; stderr:\n{stderr}", out.status);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "nodesLaunched",
        "costTotal",
        "costPerHourPeak",
        "podPendingSecondsP50",
        "podPendingSecondsP99",
        "disruptionsByReason",
        "evictions",
        "pdbViolations",
        "simulatedSeconds",
        "wallSeconds",
    ] {
        assert!(summary.get(key).is_some(), "{key} missing from {summary:#}");
    }
    assert!(
        summary["nodesLaunched"].as_u64().unwrap() >= 2,
        "a spot and an on-demand node at least: {summary:#}"
    );
    assert_eq!(summary["pdbViolations"], 0);
    assert_eq!(summary["simulatedSeconds"], 360);
    assert!(summary["costPerHourPeak"].as_f64().unwrap() > 0.0);
    // Every pod of the 400-replica scale-up found a place within the six minutes.
    assert!(
        summary["podPendingSecondsP99"].as_f64().unwrap() < 240.0,
        "{summary:#}"
    );
    let svg = std::fs::read_to_string(&chart).unwrap();
    let _ = std::fs::remove_file(&chart);
    assert!(svg.starts_with("<svg") && svg.matches("<polyline").count() == 2);
}
