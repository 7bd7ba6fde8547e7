//! `karpenter schedule` end to end: the built binary on the snapshot fixtures in tests/fixtures, checked
//! against the output contract of architecture.md ("Contracts the CLI keeps").
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn karpenter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .output()
        .expect("run the karpenter binary")
}

fn schedule(args: &[&str]) -> (Value, String) {
    let mut all = vec!["schedule"];
    all.extend_from_slice(args);
    let out = karpenter(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "exit {:?}; stderr:\n{stderr}", out.status);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (json, stderr)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("fixture paths are UTF-8")
}

fn cluster_args() -> (PathBuf, PathBuf) {
    (fixture("cluster"), fixture("catalog.json"))
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

#[test]
fn json_output_has_the_contract_shape() {
    let (cluster, catalog) = cluster_args();
    let (out, _) = schedule(&["--snapshot", path(&cluster), "--instance-types", path(&catalog)]);
    assert_eq!(
        keys(&out),
        ["existingNodes", "nodeClaims", "podErrors", "summary"]
    );

    let claims = out["nodeClaims"].as_array().expect("nodeClaims");
    assert_eq!(claims.len(), 1, "the three web pods fit on one node: {claims:#?}");
    let c = &claims[0];
    assert_eq!(
        keys(c),
        [
            "annotations",
            "expireAfter",
            "instanceTypes",
            "labels",
            "launch",
            "nodeClassRef",
            "nodeLabels",
            "nodePool",
            "pods",
            "requests",
            "requirements",
            "startupTaints",
            "taints",
            "terminationGracePeriod"
        ]
    );
    assert_eq!(c["nodePool"], "default");
    // 2.5 vCPU of pods: small (1.9 allocatable) is out; every remaining option, cheapest first.
    assert_eq!(
        c["instanceTypes"],
        serde_json::json!(["medium-instance-type", "large-instance-type"])
    );
    let mut pods: Vec<&str> = c["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    pods.sort_unstable();
    assert_eq!(pods, ["shop/web-1", "shop/web-2", "shop/web-3"]);
    assert_eq!(c["requests"]["cpu"], "2500m");
    assert_eq!(c["requests"]["pods"], "3");

    for r in c["requirements"].as_array().unwrap() {
        assert!(
            r["key"].is_string() && r["operator"].is_string() && r["values"].is_array(),
            "{r}"
        );
        assert_ne!(r["key"], "kubernetes.io/hostname");
    }
    let ct = c["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "karpenter.sh/capacity-type")
        .expect("the NodePool's capacity-type requirement");
    assert_eq!(ct["operator"], "In");
    assert_eq!(ct["values"], serde_json::json!(["on-demand"]));

    assert_eq!(
        c["taints"],
        serde_json::json!([{"key": "example.com/dedicated", "value": "checkout", "effect": "NoSchedule"}])
    );
    assert_eq!(c["startupTaints"], serde_json::json!([]));
    assert_eq!(c["labels"]["team"], "checkout");
    assert_eq!(c["labels"]["karpenter.sh/nodepool"], "default");
    assert_eq!(c["labels"]["karpenter.sh/capacity-type"], "on-demand");
    assert!(c["labels"].get("kubernetes.io/hostname").is_none());
    assert_eq!(c["annotations"]["example.com/owner"], "checkout");
    assert!(c["annotations"]["karpenter.sh/nodepool-hash"].is_string());
    assert!(c["annotations"]["karpenter.sh/nodepool-hash-version"].is_string());
    assert_eq!(
        c["nodeClassRef"],
        serde_json::json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"})
    );
    assert_eq!(c["expireAfter"], "720h");
    assert!(c["terminationGracePeriod"].is_null());

    let launch = &c["launch"];
    assert_eq!(
        keys(launch),
        ["capacityType", "instanceType", "price", "reservationId", "zone"]
    );
    assert_eq!(launch["instanceType"], "medium-instance-type");
    assert_eq!(launch["capacityType"], "on-demand");
    assert_eq!(launch["price"], 0.2);
    assert!(launch["reservationId"].is_null());

    let nl = &c["nodeLabels"];
    assert_eq!(nl["node.kubernetes.io/instance-type"], "medium-instance-type");
    assert_eq!(nl["topology.kubernetes.io/zone"], launch["zone"]);
    assert_eq!(nl["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(nl["karpenter.sh/nodepool"], "default");
    assert_eq!(nl["size"], "medium");
    assert_eq!(nl["kubernetes.io/arch"], "amd64");
    assert_eq!(nl["team"], "checkout");

    assert_eq!(out["existingNodes"], serde_json::json!([]));
    let summary = &out["summary"];
    assert_eq!(
        keys(summary),
        ["costPerHour", "newNodeClaims", "pods", "scheduled"]
    );
    assert_eq!(summary["pods"], 4);
    assert_eq!(summary["scheduled"], 3);
    assert_eq!(summary["newNodeClaims"], 1);
    assert_eq!(summary["costPerHour"], 0.2);
}

#[test]
fn a_pod_that_fits_nowhere_is_a_pod_error_naming_the_nodepool() {
    let (cluster, catalog) = cluster_args();
    let (out, _) = schedule(&["--snapshot", path(&cluster), "--instance-types", path(&catalog)]);
    let errors = out["podErrors"].as_array().expect("podErrors");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0]["pod"], "shop/huge");
    let msg = errors[0]["error"].as_str().expect("a message");
    assert!(
        msg.starts_with("incompatible with nodepool \"default\", daemonset overhead="),
        "names the NodePool, in upstream's words: {msg}"
    );
    assert!(
        msg.contains("no instance type has enough resources, requirements=")
            && msg.contains("resources={\"cpu\":"),
        "says why: {msg}"
    );
}

#[test]
fn malformed_objects_and_unknown_kinds_are_noted_and_the_rest_is_used() {
    let (cluster, catalog) = cluster_args();
    let nodepool = cluster.join("nodepool.yaml");
    let malformed = fixture("malformed.yaml");
    let (out, stderr) = schedule(&[
        "--snapshot",
        path(&nodepool),
        "--snapshot",
        path(&malformed),
        "--instance-types",
        path(&catalog),
    ]);
    assert!(
        stderr.contains("broken"),
        "the malformed pod is reported: {stderr}"
    );
    assert!(
        stderr.contains("ConfigMap"),
        "the unknown kind is reported: {stderr}"
    );
    for line in stderr.lines() {
        assert!(line.starts_with("note: "), "one note per line: {line:?}");
    }
    let claims = out["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0]["pods"], serde_json::json!(["shop/worker"]));
    assert_eq!(out["summary"]["pods"], 1);
}

#[test]
fn pods_go_onto_existing_nodes_with_room() {
    let (cluster, catalog) = cluster_args();
    let nodepool = cluster.join("nodepool.yaml");
    let existing = fixture("existing");
    let (out, _) = schedule(&[
        "--snapshot",
        path(&nodepool),
        "--snapshot",
        path(&existing),
        "--instance-types",
        path(&catalog),
    ]);
    assert_eq!(
        out["existingNodes"],
        serde_json::json!([{"name": "node-a", "pods": ["shop/cache"]}])
    );
    assert_eq!(out["nodeClaims"], serde_json::json!([]));
    assert_eq!(out["summary"]["scheduled"], 1);
    assert_eq!(out["summary"]["costPerHour"], 0.0);
}

#[test]
fn the_embedded_aws_catalog_is_used_without_a_catalog_file() {
    let aws = fixture("aws");
    let (out, _) = schedule(&["--snapshot", path(&aws), "--region", "us-east-1"]);
    assert_eq!(out["podErrors"], serde_json::json!([]), "{out:#}");
    let claims = out["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "two 1-vCPU pods share a node");
    let c = &claims[0];
    assert_eq!(c["nodePool"], "general");
    let launch = &c["launch"];
    let it = launch["instanceType"].as_str().expect("a launch");
    assert!(it.starts_with('m'), "instance-category m: {it}");
    assert_eq!(launch["capacityType"], "on-demand");
    assert!(launch["price"].as_f64().unwrap() > 0.0);
    assert_eq!(c["nodeLabels"]["node.kubernetes.io/instance-type"], it);
    assert!(
        c["nodeLabels"]["topology.kubernetes.io/zone"]
            .as_str()
            .unwrap()
            .starts_with("us-east-1"),
        "{:#}",
        c["nodeLabels"]
    );
    // The default --region is us-east-1 too.
    let (default_region, _) = schedule(&["--snapshot", path(&aws)]);
    assert_eq!(default_region, out);
}

#[test]
fn table_output_prints_a_row_per_nodeclaim_and_the_pending_pods() {
    let (cluster, catalog) = cluster_args();
    let out = karpenter(&[
        "schedule",
        "--snapshot",
        path(&cluster),
        "--instance-types",
        path(&catalog),
        "-o",
        "table",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let header = text.lines().next().unwrap();
    assert!(
        header.starts_with('#') && header.contains("NODEPOOL") && header.contains("PRICE"),
        "{text}"
    );
    let row = text.lines().nth(1).unwrap();
    assert!(
        row.contains("default") && row.contains("medium-instance-type") && row.contains("on-demand"),
        "{text}"
    );
    assert!(text.contains("Pending pods (1):"), "{text}");
    assert!(text.contains("shop/huge:"), "{text}");
    assert!(text.contains("Existing nodes: 0 pod(s)"), "{text}");
}

#[test]
fn yaml_output_has_the_same_structure() {
    let (cluster, catalog) = cluster_args();
    let (json, _) = schedule(&["--snapshot", path(&cluster), "--instance-types", path(&catalog)]);
    let out = karpenter(&[
        "schedule",
        "--snapshot",
        path(&cluster),
        "--instance-types",
        path(&catalog),
        "-o",
        "yaml",
    ]);
    assert!(out.status.success());
    let yaml: Value = serde_saphyr::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(yaml, json);
}

#[test]
fn settings_are_read_and_a_bad_value_names_the_setting() {
    let (cluster, catalog) = cluster_args();
    let good = fixture("settings-ignore.yaml");
    let (out, _) = schedule(&[
        "--snapshot",
        path(&cluster),
        "--instance-types",
        path(&catalog),
        "--settings",
        path(&good),
    ]);
    assert_eq!(out["summary"]["scheduled"], 3);

    let bad = fixture("settings-bad.yaml");
    let out = karpenter(&[
        "schedule",
        "--snapshot",
        path(&cluster),
        "--instance-types",
        path(&catalog),
        "--settings",
        path(&bad),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("PREFERENCE_POLICY") && stderr.contains("Sometimes"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn the_clusters_default_spread_constraints_spread_a_workload_that_declares_none() {
    let workload = fixture("default-spread");
    let catalog = fixture("catalog.json");
    let base = ["--snapshot", path(&workload), "--instance-types", path(&catalog)];
    let (packed, _) = schedule(&base);
    assert_eq!(packed["summary"]["scheduled"], 3);
    assert_eq!(packed["nodeClaims"].as_array().map(Vec::len), Some(1), "{packed}");

    let settings = fixture("settings-default-spread.yaml");
    let mut args = base.to_vec();
    args.extend(["--settings", path(&settings)]);
    let (spread, _) = schedule(&args);
    assert_eq!(spread["summary"]["scheduled"], 3);
    assert_eq!(spread["nodeClaims"].as_array().map(Vec::len), Some(3), "{spread}");
}

#[test]
fn unusable_input_fails_with_a_clear_message() {
    let (cluster, catalog) = cluster_args();
    let missing = karpenter(&["schedule", "--snapshot", "/nonexistent/snapshot.yaml"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/snapshot.yaml"));

    // A snapshot file is not a catalog.
    let bad_catalog = cluster.join("nodepool.yaml");
    let out = karpenter(&[
        "schedule",
        "--snapshot",
        path(&cluster),
        "--instance-types",
        path(&bad_catalog),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nodepool.yaml"), "{stderr}");

    let out = karpenter(&[
        "schedule",
        "--snapshot",
        path(&cluster),
        "--region",
        "mars-north-1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mars-north-1"));

    let out = karpenter(&[
        "schedule",
        "--snapshot",
        path(&cluster),
        "--instance-types",
        path(&catalog),
        "--now",
        "yesterday",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--now"));

    let ok = karpenter(&[
        "schedule",
        "--snapshot",
        path(&cluster),
        "--instance-types",
        path(&catalog),
        "--now",
        "2026-01-02T15:04:05Z",
    ]);
    assert!(ok.status.success());
}

#[test]
fn help_explains_every_flag() {
    let out = karpenter(&["schedule", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--snapshot",
        "--instance-types",
        "--region",
        "--now",
        "--settings",
        "--output",
    ] {
        assert!(help.contains(flag), "{flag} in:\n{help}");
    }
}
