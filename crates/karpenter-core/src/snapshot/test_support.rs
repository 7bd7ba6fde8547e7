//! Small builders for the snapshot tests: objects as YAML text (the way users hand them over) and a small catalog.

use crate::catalog::CatalogFile;

use super::Snapshot;

/// A NodePool `default` with no requirements of its own.
pub const DEFAULT_POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";

/// Reads objects, failing the test on any note.
pub fn snapshot(objects: &[&str]) -> Snapshot {
    let mut snap = Snapshot::default();
    let notes = snap.add_text(&objects.join("\n---\n"), "test.yaml");
    assert!(notes.is_empty(), "{notes:?}");
    snap
}

/// An unbound pod requesting `cpu`; `extra` is more `spec` fields, each line indented by two spaces.
pub fn pending_pod(namespace: &str, name: &str, cpu: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, labels: {{app: {name}}}}}\nspec:\n  containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]\n{extra}"
    )
}

/// A pod bound to `node`.
pub fn bound_pod(namespace: &str, name: &str, node: &str, cpu: &str, extra: &str) -> String {
    pending_pod(namespace, name, cpu, &format!("  nodeName: {node}\n{extra}"))
}

/// A Node with 4 cpu allocatable, 10 pods, labels `labels` (YAML flow map entries) and `extra` spec lines.
pub fn node(name: &str, labels: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: test-zone-1{labels}}}\nspec: {{{spec}}}\nstatus:\n  allocatable: {{cpu: \"4\", memory: 8Gi, pods: \"10\"}}\n  capacity: {{cpu: \"4\", memory: 8Gi, pods: \"10\"}}\n"
    )
}

/// Three instance types: `small` (2 cpu, spot and on-demand in three zones), `large` (8 cpu, on-demand only) and
/// `arm` (4 cpu, arm64), with the catalog key `size`.
pub fn catalog() -> CatalogFile {
    let offering = |zone: &str, ct: &str, price: f64| {
        format!(
            r#"{{"zone": "{zone}", "capacityType": "{ct}", "price": {price}, "available": true, "reservationId": null, "reservationCapacity": null}}"#
        )
    };
    let zones = ["test-zone-1", "test-zone-2", "test-zone-3"];
    let small: Vec<String> = zones
        .iter()
        .flat_map(|z| [offering(z, "spot", 0.05), offering(z, "on-demand", 0.1)])
        .collect();
    let large: Vec<String> = zones.iter().map(|z| offering(z, "on-demand", 0.4)).collect();
    let arm: Vec<String> = zones.iter().map(|z| offering(z, "on-demand", 0.15)).collect();
    let it = |name: &str, arch: &str, size: &str, cpu: &str, offerings: &[String]| {
        format!(
            r#"{{"name": "{name}", "requirements": [{{"key": "kubernetes.io/arch", "operator": "In", "values": ["{arch}"]}}, {{"key": "size", "operator": "In", "values": ["{size}"]}}],
                "capacity": {{"cpu": "{cpu}", "memory": "16Gi", "pods": "20"}},
                "overhead": {{"kubeReserved": {{"cpu": "100m"}}, "systemReserved": {{}}, "evictionThreshold": {{}}}},
                "offerings": [{}]}}"#,
            offerings.join(",")
        )
    };
    let text = format!(
        r#"{{"wellKnownLabels": ["size"], "instanceTypes": [{}, {}, {}]}}"#,
        it("small", "amd64", "small", "2", &small),
        it("large", "amd64", "large", "8", &large),
        it("arm", "arm64", "medium", "4", &arm),
    );
    match CatalogFile::from_json_str(&text) {
        Ok(c) => c,
        Err(e) => panic!("test catalog: {e}"),
    }
}
