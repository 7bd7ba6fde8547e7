//! The real API server as the oracle for our CRDs and for `validate()`: a kube-apiserver (built from the pinned
//! k8s.io/kubernetes in tests/control-plane/, started once for this binary by `control_plane::shared`, the code
//! behind `cargo xtask cluster up`) with the CRDs of `crds/` installed.
//!
//! - Every example manifest in `config/` is accepted by the server (server-side apply) and by `validate()`.
//! - A table of NodePools, NodeClaims and EC2NodeClasses, mostly invalid, gets the same verdict from the server
//!   (`kubectl create --dry-run=server --validate=strict`: OpenAPI schema, CEL rules, unknown fields) as from
//!   strict decoding plus `validate()`, and that verdict is upstream Karpenter v1.14's (for the checks upstream's
//!   controller makes at run time, the server accepts and `validate()` rejects, as upstream's two do).
//!
//! Needs Go (to build the binaries once), `openssl` and `kubectl`; fails, never skips, when one is missing.

use std::{
    fs,
    io::Write,
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use karpenter_api::{
    capacitybuffer::CapacityBuffer,
    ec2nodeclass::EC2NodeClass,
    label_policy::LabelPolicy,
    manifest::{decode_strict, split_documents},
    nodeclaim::NodeClaim,
    nodeoverlay::NodeOverlay,
    nodepool::NodePool,
};
use karpenter_e2e::control_plane::{self, ControlPlane};
use serde_json::{Value, json};

fn control_plane() -> &'static ControlPlane {
    match control_plane::shared() {
        Ok(cp) => cp,
        Err(e) => panic!("cannot start the test control plane: {e}"),
    }
}

/// Strict decoding (unknown fields rejected, as `kubectl --validate=strict` does) and `validate()` under the AWS
/// flavour's label rules, which are the rules of `crds/*.yaml`.
fn rust_verdict(object: &Value) -> Result<(), String> {
    fn text(e: impl ToString) -> String {
        e.to_string()
    }
    match object.get("kind").and_then(Value::as_str).unwrap_or_default() {
        "NodePool" => decode_strict::<NodePool>(object)
            .map_err(text)?
            .validate(LabelPolicy::Aws)
            .map_err(text),
        "NodeClaim" => decode_strict::<NodeClaim>(object)
            .map_err(text)?
            .validate(LabelPolicy::Aws)
            .map_err(text),
        "NodeOverlay" => decode_strict::<NodeOverlay>(object)
            .map_err(text)?
            .validate(LabelPolicy::Aws)
            .map_err(text),
        "EC2NodeClass" => decode_strict::<EC2NodeClass>(object)
            .map_err(text)?
            .validate()
            .map_err(text),
        "CapacityBuffer" => decode_strict::<CapacityBuffer>(object)
            .map_err(text)?
            .validate()
            .map_err(text),
        other => Err(format!("no validate() for kind {other:?}")),
    }
}

/// Runs `kubectl args... -f -` with `object` on stdin; Ok(stdout) or Err(stderr).
fn kubectl_stdin(cp: &ControlPlane, args: &[&str], object: &Value) -> Result<String, String> {
    let mut child = cp
        .kubectl()
        .args(args)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run kubectl: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(object.to_string().as_bytes())
            .map_err(|e| format!("cannot write to kubectl: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("kubectl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The real API server's verdict on creating `object`, without persisting it.
fn server_verdict(cp: &ControlPlane, object: &Value) -> Result<(), String> {
    kubectl_stdin(
        cp,
        &["create", "--dry-run=server", "--validate=strict", "-o", "name"],
        object,
    )
    .map(drop)
}

#[test]
fn every_config_example_is_accepted_by_the_real_api_server_and_by_validate() {
    let cp = control_plane();
    let config = control_plane::workspace_root().join("config");
    let mut files: Vec<PathBuf> = fs::read_dir(&config)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", config.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "expected the example manifests in {}",
        config.display()
    );
    let mut failures = Vec::new();
    let mut objects = 0;
    for file in &files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("cannot read {name}: {e}"));
        for doc in split_documents(&text) {
            let doc = match doc {
                Ok(doc) => doc,
                Err(e) => {
                    failures.push(format!("{name}: does not parse: {e}"));
                    continue;
                }
            };
            objects += 1;
            if let Err(e) = kubectl_stdin(
                cp,
                &["apply", "--server-side", "--field-manager=crd-validation-real"],
                &doc,
            ) {
                failures.push(format!("{name}: the API server rejects it: {e}"));
            }
            if let Err(e) = rust_verdict(&doc) {
                failures.push(format!("{name}: validate() rejects it: {e}"));
            }
        }
    }
    assert!(objects >= files.len(), "every file holds an object");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What upstream Karpenter v1.14 does with an object: its CRDs (the API server) accept or reject it, or accept
/// it and its controller refuses it at run time (the NodePool's ValidationSucceeded is False), where the API
/// server must accept it and `validate()` reject it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    Accepts,
    Rejects,
    ControllerRejects,
}
use Upstream::{Accepts, ControllerRejects, Rejects};

/// Merges `patch` into `base` (JSON merge patch: objects merge, anything else replaces, null removes).
fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(k);
                } else {
                    merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (b, p) => *b = p.clone(),
    }
}

fn patched(base: &Value, patch: Value) -> Value {
    let mut object = base.clone();
    merge(&mut object, &patch);
    object
}

fn nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "web"}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"], "minValues": 2},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}
                    ],
                    "taints": [{"key": "example.com/dedicated", "value": "web", "effect": "NoSchedule"}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h"
                }
            },
            "disruption": {"consolidateAfter": "1m", "budgets": [{"nodes": "10%"}]},
            "limits": {"cpu": "1000"},
            "weight": 10
        }
    })
}

/// The NodePool with its template's spec patched.
fn pool_spec(patch: Value) -> Value {
    patched(&nodepool(), json!({"spec": {"template": {"spec": patch}}}))
}

/// The NodePool with one requirement in place of its own.
fn pool_requirement(requirement: Value) -> Value {
    pool_spec(json!({"requirements": [requirement]}))
}

fn pool_label(key: &str, value: &str) -> Value {
    patched(
        &nodepool(),
        json!({"spec": {"template": {"metadata": {"labels": {key: value}}}}}),
    )
}

fn nodeclaim() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "default-abcde"},
        "spec": {
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]}
            ],
            "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}},
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }
    })
}

fn claim_requirement(requirement: Value) -> Value {
    patched(
        &nodeclaim(),
        json!({"spec": {"requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}, requirement]}}),
    )
}

fn ec2nodeclass() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-cluster",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "cluster"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "cluster"}}]
        }
    })
}

fn class_spec(patch: Value) -> Value {
    patched(&ec2nodeclass(), json!({"spec": patch}))
}

/// Rows our CRDs rejected before they were aligned with upstream's (keys in the `kubernetes.io` domain such as
/// `node-role.kubernetes.io/worker`, requirement values with `/`, an AMI alias with `ssmParameter`).
const LOOSENED: &str = "aligned with upstream";

/// (name, object, upstream's verdict, note)
fn rows() -> Vec<(&'static str, Value, Upstream, &'static str)> {
    let req = |key: &str, op: &str, values: Value| json!({"key": key, "operator": op, "values": values});
    vec![
        // NodePool
        ("NodePool: the base object", nodepool(), Accepts, ""),
        (
            "NodePool: operator Foo",
            pool_requirement(req("example.com/team", "Foo", json!(["a"]))),
            Rejects,
            "",
        ),
        (
            "NodePool: requirement key karpenter.sh/nodepool",
            pool_requirement(req("karpenter.sh/nodepool", "In", json!(["a"]))),
            Rejects,
            "",
        ),
        (
            "NodePool: requirement key kubernetes.io/hostname",
            pool_requirement(req("kubernetes.io/hostname", "In", json!(["a"]))),
            Rejects,
            "",
        ),
        (
            "NodePool: requirement key karpenter.sh/custom",
            pool_requirement(req("karpenter.sh/custom", "Exists", json!([]))),
            Rejects,
            "",
        ),
        (
            "NodePool: requirement key karpenter.k8s.aws/made-up",
            pool_requirement(req("karpenter.k8s.aws/made-up", "Exists", json!([]))),
            Rejects,
            "",
        ),
        (
            "NodePool: In without values",
            pool_requirement(req("example.com/team", "In", json!([]))),
            Rejects,
            "",
        ),
        (
            "NodePool: Gt with a non-integer",
            pool_requirement(req("karpenter.k8s.aws/instance-cpu", "Gt", json!(["abc"]))),
            Rejects,
            "",
        ),
        (
            "NodePool: minValues above the values given",
            pool_requirement(
                json!({"key": "example.com/team", "operator": "In", "values": ["a", "b"], "minValues": 3}),
            ),
            Rejects,
            "",
        ),
        (
            "NodePool: template label karpenter.sh/nodepool",
            pool_label("karpenter.sh/nodepool", "x"),
            Rejects,
            "",
        ),
        (
            "NodePool: template label karpenter.sh/registered",
            pool_label("karpenter.sh/registered", "true"),
            Rejects,
            "",
        ),
        (
            "NodePool: template label kubernetes.io/hostname",
            pool_label("kubernetes.io/hostname", "x"),
            Rejects,
            "",
        ),
        (
            "NodePool: template label value with a space",
            pool_label("team", "bad value"),
            Rejects,
            "",
        ),
        (
            "NodePool: taint effect Sometimes",
            pool_spec(json!({"taints": [{"key": "a", "effect": "Sometimes"}]})),
            Rejects,
            "",
        ),
        (
            "NodePool: taint value a b",
            pool_spec(json!({"taints": [{"key": "a", "value": "a b", "effect": "NoSchedule"}]})),
            Rejects,
            "",
        ),
        (
            "NodePool: expireAfter forever",
            pool_spec(json!({"expireAfter": "forever"})),
            Rejects,
            "",
        ),
        (
            "NodePool: nodeClassRef without a name",
            pool_spec(
                json!({"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": ""}}),
            ),
            Rejects,
            "",
        ),
        (
            "NodePool: no nodeClassRef",
            pool_spec(json!({"nodeClassRef": null})),
            Rejects,
            "",
        ),
        (
            "NodePool: unknown field requirment",
            pool_spec(json!({"requirment": []})),
            Rejects,
            "",
        ),
        (
            "NodePool: budget nodes abc",
            patched(
                &nodepool(),
                json!({"spec": {"disruption": {"budgets": [{"nodes": "abc"}]}}}),
            ),
            Rejects,
            "",
        ),
        (
            "NodePool: budget schedule without duration",
            patched(
                &nodepool(),
                json!({"spec": {"disruption": {"budgets": [{"nodes": "0", "schedule": "@daily"}]}}}),
            ),
            Rejects,
            "",
        ),
        (
            "NodePool: consolidateAfter 5x",
            patched(
                &nodepool(),
                json!({"spec": {"disruption": {"consolidateAfter": "5x"}}}),
            ),
            Rejects,
            "",
        ),
        (
            "NodePool: consolidationPolicy Sometimes",
            patched(
                &nodepool(),
                json!({"spec": {"disruption": {"consolidationPolicy": "Sometimes"}}}),
            ),
            Rejects,
            "",
        ),
        (
            "NodePool: weight 101",
            patched(&nodepool(), json!({"spec": {"weight": 101}})),
            Rejects,
            "",
        ),
        (
            "NodePool: limits cpu lots",
            patched(&nodepool(), json!({"spec": {"limits": {"cpu": "lots"}}})),
            Rejects,
            "",
        ),
        (
            "NodePool: template label node-role.kubernetes.io/worker",
            pool_label("node-role.kubernetes.io/worker", ""),
            Accepts,
            LOOSENED,
        ),
        (
            "NodePool: requirement key node-role.kubernetes.io/worker",
            pool_requirement(req("node-role.kubernetes.io/worker", "Exists", json!([]))),
            Accepts,
            LOOSENED,
        ),
        (
            "NodePool: requirement value a/b",
            pool_requirement(req("example.com/team", "In", json!(["a/b"]))),
            ControllerRejects,
            LOOSENED,
        ),
        // NodeClaim
        ("NodeClaim: the base object", nodeclaim(), Accepts, ""),
        (
            "NodeClaim: operator Foo",
            claim_requirement(req("example.com/team", "Foo", json!(["a"]))),
            Rejects,
            "",
        ),
        (
            "NodeClaim: requirement key kubernetes.io/hostname",
            claim_requirement(req("kubernetes.io/hostname", "In", json!(["a"]))),
            Rejects,
            "",
        ),
        (
            "NodeClaim: requests cpu x",
            patched(
                &nodeclaim(),
                json!({"spec": {"resources": {"requests": {"cpu": "x"}}}}),
            ),
            Rejects,
            "",
        ),
        (
            "NodeClaim: no nodeClassRef",
            patched(&nodeclaim(), json!({"spec": {"nodeClassRef": null}})),
            Rejects,
            "",
        ),
        (
            "NodeClaim: expireAfter forever",
            patched(&nodeclaim(), json!({"spec": {"expireAfter": "forever"}})),
            Rejects,
            "",
        ),
        (
            "NodeClaim: requirement key node-role.kubernetes.io/worker",
            claim_requirement(req("node-role.kubernetes.io/worker", "Exists", json!([]))),
            Accepts,
            LOOSENED,
        ),
        // EC2NodeClass
        ("EC2NodeClass: the base object", ec2nodeclass(), Accepts, ""),
        (
            "EC2NodeClass: neither role nor instanceProfile",
            class_spec(json!({"role": null})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: role and instanceProfile",
            class_spec(json!({"instanceProfile": "profile"})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: no subnetSelectorTerms",
            class_spec(json!({"subnetSelectorTerms": []})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: an empty subnet term",
            class_spec(json!({"subnetSelectorTerms": [{}]})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: subnet id bad-id",
            class_spec(json!({"subnetSelectorTerms": [{"id": "bad-id"}]})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: the only subnet term mixes id and tags",
            class_spec(json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: one of two subnet terms mixes id and tags",
            class_spec(
                json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}, {"tags": {"c": "d"}}]}),
            ),
            Accepts,
            "",
        ),
        (
            "EC2NodeClass: alias with name",
            class_spec(json!({"amiSelectorTerms": [{"alias": "al2023@latest", "name": "x"}]})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: alias of an unknown family",
            class_spec(json!({"amiSelectorTerms": [{"alias": "foo@latest"}]})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: AMI ids without amiFamily",
            class_spec(json!({"amiSelectorTerms": [{"id": "ami-123"}]})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: AMI id with ssmParameter",
            class_spec(
                json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-123", "ssmParameter": "/p"}]}),
            ),
            Accepts,
            "",
        ),
        (
            "EC2NodeClass: httpTokens sometimes",
            class_spec(json!({"metadataOptions": {"httpTokens": "sometimes"}})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: two root volumes",
            class_spec(json!({"blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}},
                {"deviceName": "/dev/xvdb", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}
            ]})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: tag kubernetes.io/cluster/x",
            class_spec(json!({"tags": {"kubernetes.io/cluster/x": "owned"}})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: imageGC high below low",
            class_spec(
                json!({"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}}),
            ),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: unknown field rol",
            class_spec(json!({"rol": "x"})),
            Rejects,
            "",
        ),
        (
            "EC2NodeClass: alias with ssmParameter",
            class_spec(json!({"amiSelectorTerms": [{"alias": "al2023@latest", "ssmParameter": "/p"}]})),
            Accepts,
            LOOSENED,
        ),
    ]
}

fn verdict(result: &Result<(), String>) -> &'static str {
    if result.is_ok() { "accepts" } else { "rejects" }
}

#[test]
fn the_real_api_server_and_validate_agree_with_upstream_on_every_row() {
    let cp = control_plane();
    let started = Instant::now();
    let mut failures = Vec::new();
    let rows = rows();
    let count = rows.len();
    for (i, (name, mut object, upstream, note)) in rows.into_iter().enumerate() {
        // Unique names: the config test applies objects named `default` into the same server.
        if let Some(meta) = object.get_mut("metadata") {
            meta["name"] = json!(format!("row-{i}"));
        }
        let server = server_verdict(cp, &object);
        let rust = rust_verdict(&object);
        if server.is_ok() != (upstream != Rejects) || rust.is_ok() != (upstream == Accepts) {
            let note = if note.is_empty() {
                String::new()
            } else {
                format!(" ({note})")
            };
            failures.push(format!(
                "{name}{note}: upstream {upstream:?}; API server {}{}; validate() {}{}",
                verdict(&server),
                server
                    .as_ref()
                    .err()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default(),
                verdict(&rust),
                rust.as_ref().err().map(|e| format!(": {e}")).unwrap_or_default(),
            ));
        }
    }
    eprintln!("{count} rows in {:.1?}", started.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {count} row(s) disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The control plane itself: kube-scheduler binds a pod to a kwok Node and kwok runs it.
#[test]
fn pods_on_a_kwok_node_are_scheduled_and_run() {
    let cp = control_plane();
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": "kwok-node-0",
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": "kwok-node-0", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}
        },
        "status": {
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}
        }
    });
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "on-kwok", "namespace": "default"},
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "containers": [{"name": "app", "image": "example.invalid/app:1", "resources": {"requests": {"cpu": "100m"}}}]
        }
    });
    for object in [&node, &pod] {
        if let Err(e) = kubectl_stdin(cp, &["apply", "--server-side"], object) {
            panic!("cannot create {}: {e}", object["kind"]);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        let out = cp
            .kubectl()
            .args([
                "get",
                "pod",
                "on-kwok",
                "--namespace=default",
                "-o",
                "jsonpath={.spec.nodeName} {.status.phase}",
            ])
            .output();
        if let Ok(out) = out {
            last = String::from_utf8_lossy(&out.stdout).into_owned();
            if last == "kwok-node-0 Running" {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("pod on-kwok is not Running on kwok-node-0 after 60s (node and phase: {last:?})");
}
