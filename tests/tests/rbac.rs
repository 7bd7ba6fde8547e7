//! The chart's RBAC against the controller's real API calls: the controller (an [`Operator`], leader election on,
//! as `karpenter controller` runs) is driven through a CapacityBuffer's status, scale-up, blocked disruption,
//! consolidation, drift, a spot interruption and node repair on the simulated cluster (with a NodeOverlay whose
//! status it writes), and every request it made (the API server's audit log) is checked against the rules of
//! `charts/karpenter/rbac/` (the files the chart's role templates include). The test fails
//! - when the controller made a call no role of the chart allows (the install would break), and
//! - when a role grants a verb on a resource the controller never used (the chart grants more than it needs).
//!
//! Only the controller talks to the API server through its request path here: the test sets the cluster up and
//! reads it through the server's internal methods, which the audit log does not record, and the simulated
//! kubelets, scheduler and workload controllers do the same. So every audit record is one of the controller's.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::rbac::v1::PolicyRule;
use karpenter_api::labels;
use karpenter_e2e::{TestResult, replicas};
use karpenter_operator::{LeaseTimings, Operator, Settings, settings::FeatureGates};
use karpenter_sim::{
    SimCluster,
    apiserver::{AuditRecord, ResourceId},
    cloud::InterruptionKind,
};
use karpenter_state::{ClusterState, Watched};
use serde_json::{Value, json};
use tokio::sync::oneshot;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The chart's release namespace in this test: where the chart's Role lives and the controller keeps its Lease
/// (the chart sets SYSTEM_NAMESPACE and LEADER_ELECTION_NAMESPACE to it).
const RELEASE_NAMESPACE: &str = "karpenter";

/// Where a rules file of `charts/karpenter/rbac/` applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// A ClusterRole bound by a ClusterRoleBinding: every namespace and cluster-scoped resources.
    Cluster,
    /// A Role bound in this namespace.
    Namespace(&'static str),
}

/// Every rules file of `charts/karpenter/rbac/`, its scope, and whether each of its grants must be used here.
/// A file missing from this list fails the test, so a new role is never left unchecked.
const ROLES: &[(&str, Scope, bool)] = &[
    ("clusterrole-core.yaml", Scope::Cluster, true),
    // The AWS provider's EC2NodeClass controller cannot run on the simulated cloud, so its grants cannot all be
    // exercised: calls are checked against this role, but its unused grants are not reported. Its rules follow
    // the Kubernetes API calls of crates/karpenter-aws (nodeclass/controller.rs, node_classes.rs) by hand.
    ("clusterrole-aws.yaml", Scope::Cluster, false),
    ("role.yaml", Scope::Namespace(RELEASE_NAMESPACE), true),
    // The AWS provider reads the kube-dns Service at start-up (clusterDNS for user data): AWS only, as above.
    ("role-dns.yaml", Scope::Namespace("kube-system"), false),
];

struct Role {
    file: &'static str,
    scope: Scope,
    must_be_used: bool,
    rules: Vec<PolicyRule>,
}

fn rbac_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/karpenter/rbac")
}

fn load_roles() -> Result<Vec<Role>, BoxError> {
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(rbac_dir())? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") {
            files.insert(name);
        }
    }
    let known: BTreeSet<String> = ROLES.iter().map(|(f, _, _)| (*f).to_string()).collect();
    let unknown: Vec<&String> = files.difference(&known).collect();
    if !unknown.is_empty() {
        return Err(format!(
            "rules files this test does not know the scope of: {unknown:?} (add them to ROLES)"
        )
        .into());
    }
    let mut roles = Vec::new();
    for &(file, scope, must_be_used) in ROLES {
        let path = rbac_dir().join(file);
        let text = std::fs::read_to_string(&path)?;
        let rules: Vec<PolicyRule> =
            serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        roles.push(Role {
            file,
            scope,
            must_be_used,
            rules,
        });
    }
    Ok(roles)
}

fn contains_or_star(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == value || v == "*")
}

/// Whether `rule` of a role of `scope` allows `record`, as the Kubernetes RBAC authorizer decides.
fn allows(scope: Scope, rule: &PolicyRule, record: &AuditRecord) -> bool {
    if let Scope::Namespace(ns) = scope
        && record.namespace.as_deref() != Some(ns)
    {
        return false;
    }
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let resources = rule.resources.as_deref().unwrap_or_default();
    if !contains_or_star(groups, &record.group)
        || !contains_or_star(&rule.verbs, record.verb)
        || !contains_or_star(resources, &record.rbac_resource())
    {
        return false;
    }
    match rule.resource_names.as_deref() {
        None | Some([]) => true,
        // A create names no object when it is authorized, and a list or watch names one only through a
        // metadata.name field selector, which the controller does not use: resourceNames never match those.
        Some(names) => {
            !matches!(record.verb, "create" | "list" | "watch" | "deletecollection")
                && record.name.as_ref().is_some_and(|n| names.contains(n))
        }
    }
}

fn group_resource(group: &str, resource: &str) -> String {
    format!("{}/{resource}", if group.is_empty() { "core" } else { group })
}

/// The calls no role allows and the grants never used, as readable lines.
fn compare(roles: &[Role], audit: &[AuditRecord]) -> (Vec<String>, Vec<String>) {
    let mut denied = BTreeMap::<String, (usize, Option<String>)>::new();
    for record in audit {
        let allowed = roles
            .iter()
            .any(|role| role.rules.iter().any(|rule| allows(role.scope, rule, record)));
        if !allowed {
            let key = format!(
                "the controller called {} on {}{} which the chart does not grant",
                record.verb,
                group_resource(&record.group, &record.rbac_resource()),
                match &record.namespace {
                    Some(ns) => format!(" in namespace {ns}"),
                    None => String::new(),
                }
            );
            let entry = denied.entry(key).or_insert((0, record.name.clone()));
            entry.0 += 1;
        }
    }
    let denied = denied
        .into_iter()
        .map(|(line, (n, name))| match name {
            Some(name) => format!("{line} ({n} calls, e.g. on {name})"),
            None => format!("{line} ({n} calls)"),
        })
        .collect();

    let mut unused = Vec::new();
    for role in roles.iter().filter(|r| r.must_be_used) {
        for rule in &role.rules {
            for group in rule.api_groups.as_deref().unwrap_or_default() {
                for resource in rule.resources.as_deref().unwrap_or_default() {
                    for verb in &rule.verbs {
                        let used = audit.iter().any(|r| {
                            &r.group == group
                                && &r.rbac_resource() == resource
                                && r.verb == verb
                                && allows(role.scope, rule, r)
                        });
                        if !used {
                            unused.push(format!(
                                "the chart grants {verb} on {}{} which the controller never used (rbac/{})",
                                group_resource(group, resource),
                                match rule.resource_names.as_deref() {
                                    Some(names) if !names.is_empty() => format!(" {names:?}"),
                                    _ => String::new(),
                                },
                                role.file
                            ));
                        }
                    }
                }
            }
        }
    }
    (denied, unused)
}

// ---------------------------------------------------------------------------------------------------------------
// The cluster, set up and read through the API server's internal methods (not audited).

fn resource(group: &str, plural: &str) -> ResourceId {
    if group.is_empty() {
        ResourceId::core(plural)
    } else {
        ResourceId::new(group, plural)
    }
}

fn create(sim: &SimCluster, group: &str, plural: &str, object: Value) -> Result<(), BoxError> {
    sim.api().create_internal(&resource(group, plural), object)?;
    Ok(())
}

fn apply(sim: &SimCluster, group: &str, plural: &str, object: Value) -> Result<(), BoxError> {
    sim.api().apply_internal(&resource(group, plural), object)?;
    Ok(())
}

fn list(sim: &SimCluster, group: &str, plural: &str) -> Vec<Arc<Value>> {
    sim.api().list_internal(&resource(group, plural), None)
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Running pods labelled `app=<app>` that are not being deleted.
fn running(sim: &SimCluster, app: &str) -> usize {
    list(sim, "", "pods")
        .iter()
        .filter(|p| p["metadata"]["labels"]["app"] == app)
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| p["status"]["phase"] == "Running")
        .count()
}

/// The NodeClaims, launched and not being deleted.
fn live_claims(sim: &SimCluster) -> Vec<Arc<Value>> {
    list(sim, "karpenter.sh", "nodeclaims")
        .into_iter()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
        .filter(|c| c["status"]["nodeName"].is_string())
        .collect()
}

/// Waits on virtual time, a second at a time, at most `secs` seconds, until `done` holds.
async fn wait_until(what: &str, secs: u64, mut done: impl FnMut() -> bool) -> TestResult {
    for _ in 0..secs {
        if done() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if done() {
        return Ok(());
    }
    Err(format!("not within {secs}s: {what}").into())
}

/// Deployment `web` in `default`: `replicas` pods of 500m, one per node (required anti-affinity on the host).
fn web(replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 60,
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}},
                         "topologyKey": "kubernetes.io/hostname"}]}},
                    "containers": [{"name": "c", "image": "sim",
                        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}
    })
}

fn set_node_ready(sim: &SimCluster, node: &str, status: &str) -> Result<(), BoxError> {
    let current = sim
        .api()
        .get_internal(&resource("", "nodes"), "", node)
        .ok_or_else(|| format!("no node {node}"))?;
    let now = sim.clock().now();
    let at = jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string();
    let mut node_status = current["status"].clone();
    let mut conditions: Vec<Value> = node_status["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["type"] != "Ready")
        .collect();
    conditions.push(
        json!({"type": "Ready", "status": status, "reason": "Test", "message": "set by the test",
        "lastTransitionTime": at, "lastHeartbeatTime": at}),
    );
    node_status["conditions"] = Value::Array(conditions);
    sim.api()
        .update_status_internal(&resource("", "nodes"), "", node, node_status)?;
    Ok(())
}

/// Drives the controller through its behaviours, returning once each has been seen.
async fn scenario(sim: &SimCluster) -> TestResult {
    // A CapacityBuffer naming a PodTemplate that does not exist: its status says so (and nothing is provisioned
    // for it, so the scale-up below is the Deployment's alone).
    create(
        sim,
        "autoscaling.x-k8s.io",
        "capacitybuffers",
        json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "spare", "namespace": "default"},
            "spec": {"podTemplateRef": {"name": "missing"}, "replicas": 1}}),
    )?;
    wait_until("the CapacityBuffer's status written", 120, || {
        list(sim, "autoscaling.x-k8s.io", "capacitybuffers")
            .iter()
            .any(|b| b["status"]["conditions"].is_array())
    })
    .await?;

    // Scale up: one node per pod.
    create(sim, "apps", "deployments", web(3))?;
    create(
        sim,
        "policy",
        "poddisruptionbudgets",
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
    )?;
    wait_until("3 web pods running", 600, || running(sim, "web") == 3).await?;

    // Disruption blocked: a node annotated do-not-disrupt gets DisruptionBlocked events, again after the
    // recorder's two-minute deduplication (a repeat is a patch of the event's series).
    let claims = live_claims(sim);
    let first_node = claims
        .first()
        .and_then(|c| c["status"]["nodeName"].as_str())
        .ok_or("no node")?
        .to_string();
    apply(
        sim,
        "",
        "nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": first_node,
            "annotations": {(labels::DO_NOT_DISRUPT_ANNOTATION): "true"}}}),
    )?;
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;

    // Consolidation: scale down; the emptied nodes are tainted, drained through the Eviction API and removed.
    apply(
        sim,
        "apps",
        "deployments",
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 2}}),
    )?;
    wait_until("consolidation down to 2 nodes", 1200, || {
        live_claims(sim).len() == 2 && running(sim, "web") == 2
    })
    .await?;

    // Drift: a drifted instance is replaced and its pod moves through the Eviction API.
    let drifted = live_claims(sim)
        .iter()
        .find(|c| c["status"]["nodeName"] != first_node.as_str())
        .ok_or("no claim to drift")?
        .clone();
    let drifted_id = drifted["status"]["providerID"]
        .as_str()
        .ok_or("no provider ID")?
        .to_string();
    sim.cloud().set_drifted(&drifted_id, Some("TestDrift"));
    let drifted_name = name_of(&drifted);
    wait_until("the drifted NodeClaim replaced", 1800, || {
        !list(sim, "karpenter.sh", "nodeclaims")
            .iter()
            .any(|c| name_of(c) == drifted_name)
            && running(sim, "web") == 2
    })
    .await?;

    // A spot interruption: the NodeClaim is deleted at once.
    let spot = live_claims(sim)
        .into_iter()
        .find(|c| c["metadata"]["labels"][labels::CAPACITY_TYPE_LABEL] == "spot")
        .ok_or("no spot NodeClaim")?;
    let spot_id = spot["status"]["providerID"]
        .as_str()
        .ok_or("no provider ID")?
        .to_string();
    let spot_name = name_of(&spot);
    sim.cloud()
        .schedule_interruption(&spot_id, InterruptionKind::SpotInterruption, sim.clock().now());
    wait_until("the interrupted NodeClaim gone", 1800, || {
        !list(sim, "karpenter.sh", "nodeclaims")
            .iter()
            .any(|c| name_of(c) == spot_name)
            && running(sim, "web") == 2
    })
    .await?;

    // Node repair: a node NotReady past the toleration (30 minutes) is force-terminated; its pods are deleted
    // at once (the repair's drain deadline is now), not evicted.
    let sick = live_claims(sim)
        .into_iter()
        .next()
        .ok_or("no NodeClaim to repair")?;
    let sick_name = name_of(&sick);
    let sick_node = sick["status"]["nodeName"].as_str().ok_or("no node")?.to_string();
    set_node_ready(sim, &sick_node, "False")?;
    wait_until("the unhealthy node repaired", 3600, || {
        !list(sim, "karpenter.sh", "nodeclaims")
            .iter()
            .any(|c| name_of(c) == sick_name)
            && running(sim, "web") == 2
    })
    .await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_charts_rbac_allows_every_call_the_controller_makes_and_nothing_more() -> TestResult {
    let roles = load_roles()?;
    let sim = replicas::sim()?;
    create(
        &sim,
        "",
        "namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}}),
    )?;
    // The EC2NodeClass the NodePool references: the simulated cluster starts with `default`, Ready.
    create(
        &sim,
        "karpenter.sh",
        "nodepools",
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {
                "template": {"spec": {
                    "requirements": [{"key": labels::CAPACITY_TYPE_LABEL, "operator": "In",
                        "values": ["spot", "on-demand"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s",
                    "budgets": [{"nodes": "100%"}]}}}),
    )?;
    // A NodeOverlay matching no instance type, so the overlay status controller writes its status
    // (nodeoverlays/status) without changing any decision of the scenario.
    create(
        &sim,
        "karpenter.sh",
        "nodeoverlays",
        json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "none"},
            "spec": {"requirements": [{"key": labels::INSTANCE_TYPE_LABEL, "operator": "In",
                "values": ["no-such-instance-type"]}], "price": "1"}}),
    )?;
    sim.api().clear_audit();

    // As the chart runs it: the Lease in the release namespace, every gate that changes what is watched on.
    let settings = Settings {
        identity: "karpenter-rbac-test".into(),
        system_namespace: RELEASE_NAMESPACE.into(),
        leader_election_namespace: RELEASE_NAMESPACE.into(),
        feature_gates: FeatureGates {
            node_repair: true,
            node_overlay: true,
            capacity_buffer: true,
            ..FeatureGates::default()
        },
        // Default topology spread constraints make the cache read Services and ReplicationControllers. A soft
        // zone spread, so the scenario's placements stay what the simulated kube-scheduler does.
        scheduler_config: karpenter_core::scheduler_config::SchedulerConfig::parse(
            "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]}",
        )?
        .unwrap_or_default(),
        ..Settings::default()
    };
    let mut parts = replicas::parts_on(&sim, sim.cloud_provider(), settings);
    parts.state = ClusterState::new(Watched {
        node_overlays: true,
        capacity_buffers: true,
        workload_selectors: true,
        ..Watched::default()
    });
    let operator = Operator {
        serve_http: false,
        lease_timings: LeaseTimings::default(),
        ..Operator::new(parts)
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(operator.run(async move {
        let _ = stopped.await;
    }));

    let outcome = scenario(&sim).await;
    // A clean shutdown releases the Lease.
    let _ = stop.send(());
    task.await??;
    outcome?;

    let audit = sim.api().audit();
    let (denied, unused) = compare(&roles, &audit);
    let mut used = BTreeMap::<String, BTreeSet<&str>>::new();
    for r in &audit {
        used.entry(group_resource(&r.group, &r.rbac_resource()))
            .or_default()
            .insert(r.verb);
    }
    println!("{} requests by the controller; verbs per resource:", audit.len());
    for (resource, verbs) in &used {
        println!("  {resource}: {verbs:?}");
    }
    let problems: Vec<String> = denied.into_iter().chain(unused).collect();
    assert!(
        problems.is_empty(),
        "charts/karpenter/rbac/ does not match the controller's calls:\n  {}",
        problems.join("\n  ")
    );
    Ok(())
}
