//! `karpenter disrupt` end to end: the built binary on a snapshot fixture, checked against the output contract
//! of architecture.md, with `--now` making budgets reproducible.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

use std::{path::Path, process::Command};

use serde_json::Value;

fn disrupt(now: &str, output: &str) -> (String, String) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["disrupt", "--snapshot"])
        .arg(dir.join("disrupt/cluster.yaml"))
        .arg("--instance-types")
        .arg(dir.join("catalog.json"))
        .args(["--now", now, "-o", output])
        .output()
        .expect("run the karpenter binary");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "exit {:?}; stderr:\n{stderr}", out.status);
    (String::from_utf8_lossy(&out.stdout).to_string(), stderr)
}

fn json(now: &str) -> Value {
    serde_json::from_str(&disrupt(now, "json").0).unwrap()
}

#[test]
fn an_underused_node_is_consolidated_and_the_others_are_explained() {
    // A Saturday: the business-hours budget is not active, one node may go.
    let out = json("2026-12-05T12:00:00Z");
    let commands = out["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 1, "{out:#}");
    let cmd = &commands[0];
    assert_eq!(cmd["reason"], "Underutilized");
    assert_eq!(cmd["decision"], "delete");
    assert_eq!(cmd["candidates"].as_array().unwrap().len(), 1);
    assert_eq!(cmd["candidates"][0]["nodePool"], "default");
    assert!(cmd["savingsPerHour"].as_f64().unwrap() > 0.0);
    let blocked = out["blocked"].as_array().unwrap();
    let batch = blocked.iter().find(|b| b["node"] == "node-c").unwrap();
    assert_eq!(
        batch["reason"],
        "pod default/batch has karpenter.sh/do-not-disrupt"
    );
    assert_eq!(blocked.len(), 2, "every node not acted on is listed: {blocked:?}");
    let claims = out["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 3);
    assert_eq!(claims[0]["conditions"]["Consolidatable"]["status"], "True");
    assert_eq!(claims[0]["conditions"]["Drifted"]["status"], "False");
    assert!(out["errors"].as_array().unwrap().is_empty());
}

#[test]
fn a_cron_budget_blocks_consolidation_during_its_window() {
    // A Wednesday at noon UTC: the 09:00-17:00 weekday budget allows nothing.
    let out = json("2026-12-02T12:00:00Z");
    assert!(out["commands"].as_array().unwrap().is_empty(), "{out:#}");
    let budgets = out["budgets"].as_array().unwrap();
    let under = budgets.iter().find(|b| b["reason"] == "Underutilized").unwrap();
    assert_eq!(under["allowed"], 0);
    assert_eq!(under["nodePool"], "default");
    let reasons: Vec<&str> = out["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("allows no more disruptions for Underutilized")),
        "{reasons:?}"
    );
}

#[test]
fn the_table_shows_the_command_savings_and_blocked_nodes() {
    let (table, _) = disrupt("2026-12-05T12:00:00Z", "table");
    assert!(
        table.contains("single-node-consolidation (Underutilized): delete"),
        "{table}"
    );
    assert!(table.contains("saves 0.2000/h"), "{table}");
    assert!(
        table.contains("node-c  pod default/batch has karpenter.sh/do-not-disrupt"),
        "{table}"
    );
}

#[test]
fn expired_node_claims_are_listed_as_expirations_not_as_blocked() {
    // The fixture's NodeClaims were created on 2026-12-01 with the default expireAfter (720h): past it here.
    let now = "2027-01-02T12:00:00Z";
    let out = json(now);
    let expirations = out["expirations"].as_array().unwrap();
    assert_eq!(expirations.len(), 3, "{out:#}");
    assert_eq!(expirations[0]["expiredAt"], "2026-12-31T00:00:00Z");
    let held = expirations.iter().find(|e| e["node"] == "node-c").unwrap();
    assert_eq!(
        held["drainBlockedBy"],
        "pod default/batch has karpenter.sh/do-not-disrupt"
    );
    assert!(out["commands"].as_array().unwrap().is_empty());
    assert!(out["blocked"].as_array().unwrap().is_empty(), "{out:#}");
    let (table, _) = disrupt(now, "table");
    assert!(
        table.contains("Expired, deleted whatever the budgets (3):"),
        "{table}"
    );
}
