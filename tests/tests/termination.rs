//! Deleting a NodeClaim (as a disruption command or `kubectl delete nodeclaim` does) drains its Node through
//! the Eviction API within the PodDisruptionBudget, the provisioner makes room for the evicted pods, and the
//! instance, the Node and the NodeClaim go, in that order. Deleting the Node instead (`kubectl delete node`)
//! does the same: the Node's finalizer holds it while its NodeClaim is deleted and terminated.
//!
//! The drain as upstream's: pods evicted by group (workloads, then DaemonSet pods, then the critical ones),
//! `karpenter.sh/do-not-disrupt` pods never evicted but deleted in time for the NodeClaim's
//! terminationGracePeriod, pods stuck terminating not waited for; the NodeClaim's Drained, VolumesDetached and
//! InstanceTerminating conditions, and the drain and termination metrics.

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    core::v1::{Node, Pod},
    events::v1::Event,
};
use karpenter_api::{common::ConditionStatus, labels, nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_e2e::{
    Harness, TestResult, apply_deployment, apply_nodepool, apply_pdb, running_pods, until_running,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

#[tokio::test(start_paused = true)]
async fn deleting_a_nodeclaim_drains_within_the_pdb_and_removes_instance_node_and_claim() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 4, "500m").await?;
    apply_pdb(&client, "web", 1).await?;
    until_running(&client, "app=web", 4, 300).await?;

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let before = claims.list(&ListParams::default()).await?;
    assert_eq!(before.items.len(), 1, "four 500m pods fit one node");
    let old = &before.items[0];
    let old_name = old.name_any();
    assert!(
        old.finalizers()
            .iter()
            .any(|f| f == labels::TERMINATION_FINALIZER)
    );
    let status = old.status.clone().unwrap_or_default();
    let (old_node, old_instance) = (
        status.node_name.ok_or("no node")?,
        status.provider_id.ok_or("no instance")?,
    );

    claims.delete(&old_name, &DeleteParams::default()).await?;
    // The PDB allows one pod down at a time: never fewer than three run while the node drains.
    let mut fewest = usize::MAX;
    let mut gone = false;
    for _ in 0..900 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        fewest = fewest.min(running_pods(&client, "app=web").await?.len());
        gone = claims.get_opt(&old_name).await?.is_none();
        if gone && running_pods(&client, "app=web").await?.len() == 4 {
            break;
        }
    }
    assert!(gone, "the NodeClaim is still there");
    assert!(
        fewest >= 3,
        "the PodDisruptionBudget was violated: {fewest} pods ran at one point"
    );
    until_running(&client, "app=web", 4, 300).await?;

    for pod in running_pods(&client, "app=web").await? {
        assert_ne!(
            pod.spec.and_then(|s| s.node_name).as_deref(),
            Some(old_node.as_str())
        );
    }
    assert!(
        Api::<Node>::all(client.clone())
            .get_opt(&old_node)
            .await?
            .is_none(),
        "the Node is deleted"
    );
    assert!(
        h.sim
            .cloud()
            .running_instances()
            .iter()
            .all(|i| i.provider_id != old_instance),
        "the instance is terminated"
    );
    let after = claims.list(&ListParams::default()).await?;
    assert_eq!(after.items.len(), 1, "one replacement NodeClaim");
    Ok(())
}

/// A drained node keeps its instance while a VolumeAttachment still names it (the CSI driver has not detached
/// the volume), so a StatefulSet's volume is free before the instance goes; then the instance, Node and claim go.
#[tokio::test(start_paused = true)]
async fn the_instance_waits_for_volume_attachments_to_go() -> TestResult {
    use k8s_openapi::api::storage::v1::VolumeAttachment;
    use kube::api::PostParams;

    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    until_running(&client, "app=web", 1, 300).await?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let claim = claims
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .next()
        .ok_or("no claim")?;
    let status = claim.status.clone().unwrap_or_default();
    let (node, instance) = (
        status.node_name.ok_or("no node")?,
        status.provider_id.ok_or("no instance")?,
    );
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let va: VolumeAttachment = serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "csi-web-data"},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": {"persistentVolumeName": "pv-web"}}
    }))?;
    attachments.create(&PostParams::default(), &va).await?;

    claims.delete(&claim.name_any(), &DeleteParams::default()).await?;
    let running = |h: &Harness| {
        h.sim
            .cloud()
            .running_instances()
            .iter()
            .any(|i| i.provider_id == instance)
    };
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            running(&h),
            "the instance went while its volume was still attached"
        );
    }
    until_running(&client, "app=web", 1, 300).await?;
    attachments
        .delete("csi-web-data", &DeleteParams::default())
        .await?;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if claims.get_opt(&claim.name_any()).await?.is_none() {
            break;
        }
    }
    assert!(
        claims.get_opt(&claim.name_any()).await?.is_none(),
        "the claim is gone once the volume detached"
    );
    assert!(!running(&h), "the instance is terminated");
    Ok(())
}

/// `kubectl delete node` on a Karpenter node: the `karpenter.sh/termination` finalizer put on the Node at
/// registration keeps it (deletionTimestamp set) while the terminator deletes its NodeClaim, evicts its pods,
/// terminates the instance and only then lets the Node go; the pods run again on a new node.
#[tokio::test(start_paused = true)]
async fn deleting_a_node_terminates_its_nodeclaim_and_instance_before_the_node_goes() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 2, "500m").await?;
    until_running(&client, "app=web", 2, 300).await?;

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = claims.list(&ListParams::default()).await?;
    assert_eq!(listed.items.len(), 1, "two 500m pods fit one node");
    let claim_name = listed.items[0].name_any();
    let status = listed.items[0].status.clone().unwrap_or_default();
    let (node_name, instance) = (
        status.node_name.ok_or("no node")?,
        status.provider_id.ok_or("no instance")?,
    );
    let node = nodes.get(&node_name).await?;
    assert!(
        node.finalizers()
            .iter()
            .any(|f| f == labels::TERMINATION_FINALIZER),
        "the registered Node carries the finalizer: {:?}",
        node.finalizers()
    );
    let on_old_node: Vec<String> = running_pods(&client, "app=web")
        .await?
        .into_iter()
        .map(|p| p.name_any())
        .collect();
    h.sim.api().clear_audit();

    // As kubectl does: a plain DELETE.
    nodes.delete(&node_name, &DeleteParams::default()).await?;
    let held = nodes.get_opt(&node_name).await?.ok_or("the Node went at once")?;
    assert!(held.metadata.deletion_timestamp.is_some());

    let running = |h: &Harness| {
        h.sim
            .cloud()
            .running_instances()
            .iter()
            .any(|i| i.provider_id == instance)
    };
    let mut node_outlived_instance = true;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let node_left = nodes.get_opt(&node_name).await?.is_some();
        // The Node is released only once the instance is gone.
        if !node_left && running(&h) {
            node_outlived_instance = false;
        }
        if !node_left && claims.get_opt(&claim_name).await?.is_none() {
            break;
        }
    }
    assert!(node_outlived_instance, "the Node went while its instance ran");
    assert!(
        nodes.get_opt(&node_name).await?.is_none(),
        "the Node is still there"
    );
    assert!(
        claims.get_opt(&claim_name).await?.is_none(),
        "the NodeClaim is still there"
    );
    assert!(!running(&h), "the instance is terminated");

    let audit = h.sim.api().audit();
    let claim_deleted = audit.iter().any(|r| {
        r.verb == "delete"
            && r.resource == "nodeclaims"
            && r.name.as_deref() == Some(claim_name.as_str())
            && r.code < 300
    });
    assert!(claim_deleted, "the NodeClaim was deleted through the API");
    for pod in &on_old_node {
        let evicted = audit.iter().any(|r| {
            r.subresource.as_deref() == Some("eviction")
                && r.name.as_deref() == Some(pod.as_str())
                && r.code < 300
        });
        assert!(evicted, "{pod} was not evicted");
    }

    until_running(&client, "app=web", 2, 300).await?;
    for pod in running_pods(&client, "app=web").await? {
        assert_ne!(
            pod.spec.and_then(|s| s.node_name).as_deref(),
            Some(node_name.as_str())
        );
    }
    Ok(())
}

/// Creates NodePool `name` for on-demand capacity with `terminationGracePeriod` `grace` when given.
async fn apply_nodepool_with_grace(client: &kube::Client, name: &str, grace: Option<&str>) -> TestResult {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    });
    if let Some(grace) = grace {
        pool["spec"]["template"]["spec"]["terminationGracePeriod"] = json!(grace);
    }
    Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(pool)?)
        .await?;
    Ok(())
}

/// Creates Deployment `name` (pods `app=<name>`, 100m and 64Mi each) with `pod_meta` merged into the pod
/// template's metadata and `pod_spec` into its spec.
async fn apply_workload(
    client: &kube::Client,
    name: &str,
    replicas: i32,
    pod_meta: Value,
    pod_spec: Value,
) -> TestResult {
    let mut template = json!({"metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "sim",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}});
    merge(&mut template["metadata"], pod_meta);
    merge(&mut template["spec"], pod_spec);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template}
    }))?;
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await?;
    Ok(())
}

/// Creates DaemonSet `name` (pods `app=<name>`, 10m each) with `pod_spec` merged into its pod spec.
async fn apply_daemonset(client: &kube::Client, name: &str, pod_spec: Value) -> TestResult {
    let mut spec = json!({"containers": [{"name": "c", "image": "sim",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]});
    merge(&mut spec, pod_spec);
    let daemonset: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    }))?;
    Api::<DaemonSet>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &daemonset)
        .await?;
    Ok(())
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

/// The only NodeClaim, with its Node and instance.
async fn only_claim(
    client: &kube::Client,
) -> Result<(NodeClaim, String, String), Box<dyn std::error::Error + Send + Sync>> {
    let listed = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert_eq!(listed.items.len(), 1, "one node for these pods");
    let claim = listed.items.into_iter().next().ok_or("no claim")?;
    let status = claim.status.clone().unwrap_or_default();
    let node = status.node_name.ok_or("no node")?;
    let instance = status.provider_id.ok_or("no instance")?;
    Ok((claim, node, instance))
}

/// `(status, reason)` of the claim's condition `type_`.
fn condition(claim: &NodeClaim, type_: &str) -> Option<(ConditionStatus, String)> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason.clone()))
}

/// Names of the pods `selector` selects on `node` (terminating ones too).
async fn pods_on(client: &kube::Client, selector: &str, node: &str) -> Result<Vec<Pod>, kube::Error> {
    Ok(Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .collect())
}

/// The positions in the audit log of the successful evictions of pods whose name starts with `prefix`.
fn evictions_of(h: &Harness, prefix: &str) -> Vec<usize> {
    h.sim
        .api()
        .audit()
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.subresource.as_deref() == Some("eviction")
                && r.code < 300
                && r.name.as_deref().is_some_and(|n| n.starts_with(prefix))
        })
        .map(|(i, _)| i)
        .collect()
}

/// Waits, one simulated second at a time, until the NodeClaim `name` is gone.
async fn until_gone(claims: &Api<NodeClaim>, name: &str, within_secs: u64) -> TestResult {
    for _ in 0..within_secs {
        if claims.get_opt(name).await?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(format!("NodeClaim {name} is still there after {within_secs}s").into())
}

/// Workloads first, then DaemonSet pods, then critical workloads, then critical DaemonSet pods; each group
/// only once every pod of the groups before it was evicted, PodDisruptionBudgets holding them included.
#[tokio::test(start_paused = true)]
async fn pods_are_evicted_by_group_daemonset_pods_included() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_workload(&client, "web", 2, json!({}), json!({})).await?;
    apply_pdb(&client, "web", 1).await?;
    apply_workload(
        &client,
        "dns",
        1,
        json!({}),
        json!({"priorityClassName": "system-cluster-critical"}),
    )
    .await?;
    apply_daemonset(&client, "agent", json!({})).await?;
    apply_daemonset(
        &client,
        "cni",
        json!({"priorityClassName": "system-node-critical"}),
    )
    .await?;
    until_running(&client, "app=web", 2, 300).await?;
    until_running(&client, "app=dns", 1, 300).await?;
    let (claim, node, _) = only_claim(&client).await?;
    until_running(&client, "app=agent", 1, 60).await?;
    until_running(&client, "app=cni", 1, 60).await?;
    h.sim.api().clear_audit();

    let claims: Api<NodeClaim> = Api::all(client.clone());
    claims.delete(&claim.name_any(), &DeleteParams::default()).await?;
    until_gone(&claims, &claim.name_any(), 900).await?;

    let (web, agent, dns, cni) = (
        evictions_of(&h, "web-"),
        evictions_of(&h, "agent-"),
        evictions_of(&h, "dns-"),
        evictions_of(&h, "cni-"),
    );
    assert_eq!(web.len(), 2, "both web pods were evicted: {web:?}");
    assert_eq!(agent.len(), 1, "the DaemonSet pod was evicted: {agent:?}");
    assert_eq!(dns.len(), 1, "the critical pod was evicted: {dns:?}");
    assert_eq!(cni.len(), 1, "the critical DaemonSet pod was evicted: {cni:?}");
    let last = |v: &[usize]| v.iter().copied().max().unwrap_or_default();
    let first = |v: &[usize]| v.iter().copied().min().unwrap_or_default();
    assert!(last(&web) < first(&agent), "web {web:?} before agent {agent:?}");
    assert!(last(&agent) < first(&dns), "agent {agent:?} before dns {dns:?}");
    assert!(last(&dns) < first(&cni), "dns {dns:?} before cni {cni:?}");
    assert!(
        pods_on(&client, "app=agent", &node).await?.is_empty(),
        "no DaemonSet pod came back to the tainted node"
    );
    Ok(())
}

/// A pod whose deletion never finishes (a finalizer holds it) holds the node until a minute past its
/// deletionTimestamp, then no longer: the node is terminated without it.
#[tokio::test(start_paused = true)]
async fn a_pod_stuck_terminating_holds_the_node_only_a_minute_past_its_deletion_timestamp() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_workload(
        &client,
        "web",
        1,
        json!({"finalizers": ["example.com/hold"]}),
        json!({}),
    )
    .await?;
    until_running(&client, "app=web", 1, 300).await?;
    let (claim, node, _) = only_claim(&client).await?;
    let stuck = pods_on(&client, "app=web", &node)
        .await?
        .into_iter()
        .next()
        .ok_or("no web pod")?
        .name_any();

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    claims.delete(&claim.name_any(), &DeleteParams::default()).await?;
    let mut deletion_timestamp = None;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = h.sim.clock().now();
        let pod = pods.get(&stuck).await?;
        let Some(t) = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0) else {
            continue;
        };
        deletion_timestamp = Some(t);
        let claim_left = claims.get_opt(&claim.name_any()).await?.is_some();
        let since = now.duration_since(t).as_secs();
        if since <= 55 {
            assert!(
                claim_left,
                "the node went {since}s past the pod's deletionTimestamp"
            );
            let waiting = claims.get(&claim.name_any()).await?;
            assert_eq!(
                condition(&waiting, "Drained"),
                Some((ConditionStatus::Unknown, "Draining".to_string()))
            );
        }
        if !claim_left {
            assert!(
                since >= 60,
                "the node went {since}s past the pod's deletionTimestamp"
            );
            assert!(
                since <= 75,
                "the stuck pod held the node {since}s past its deletionTimestamp"
            );
            break;
        }
    }
    assert!(deletion_timestamp.is_some(), "the pod was never evicted");
    assert!(
        claims.get_opt(&claim.name_any()).await?.is_none(),
        "the stuck pod holds the node for good"
    );
    // Let it go, so the pod garbage collector can remove it.
    pods.patch(
        &stuck,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    Ok(())
}

/// A `karpenter.sh/do-not-disrupt` pod is never evicted: the drain waits for it, and with a
/// terminationGracePeriod of 3 minutes deletes it 60 s (its own grace period) before the deadline, so that it
/// is gone by then; the node then goes.
#[tokio::test(start_paused = true)]
async fn a_do_not_disrupt_pod_is_not_evicted_but_deleted_in_time_for_the_grace_period() -> TestResult {
    const POD_GRACE: i64 = 60;
    const NODE_GRACE: i64 = 180;
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool_with_grace(&client, "default", Some("3m")).await?;
    apply_workload(
        &client,
        "batch",
        1,
        json!({"annotations": {"karpenter.sh/do-not-disrupt": "true"}}),
        json!({"terminationGracePeriodSeconds": POD_GRACE}),
    )
    .await?;
    apply_workload(&client, "web", 1, json!({}), json!({})).await?;
    until_running(&client, "app=batch", 1, 300).await?;
    until_running(&client, "app=web", 1, 300).await?;
    let (claim, node, _) = only_claim(&client).await?;
    let protected = pods_on(&client, "app=batch", &node)
        .await?
        .into_iter()
        .next()
        .ok_or("no batch pod")?
        .name_any();
    h.sim.api().clear_audit();

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    claims.delete(&claim.name_any(), &DeleteParams::default()).await?;
    let deleted_at = claims
        .get(&claim.name_any())
        .await?
        .metadata
        .deletion_timestamp
        .ok_or("not being deleted")?
        .0;
    let delete_from = NODE_GRACE - POD_GRACE;
    let mut deleted_after = None;
    for _ in 0..240 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let since = h.sim.clock().now().duration_since(deleted_at).as_secs();
        let pod = pods.get_opt(&protected).await?;
        let terminating = pod
            .as_ref()
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some());
        if terminating {
            deleted_after = Some(since);
            break;
        }
        if since > 5 && since < delete_from {
            assert!(
                evictions_of(&h, "web-").len() == 1,
                "the other pod is evicted at once"
            );
        }
    }
    let deleted_after = deleted_after.ok_or("the protected pod was never deleted")?;
    assert!(
        deleted_after >= delete_from && deleted_after <= delete_from + 3,
        "deleted {deleted_after}s after the NodeClaim, expected {delete_from}s (deadline minus its grace)"
    );
    assert!(
        evictions_of(&h, "batch-").is_empty(),
        "the protected pod was evicted"
    );
    let deleted = h.sim.api().audit().iter().any(|r| {
        r.verb == "delete"
            && r.resource == "pods"
            && r.name.as_deref() == Some(protected.as_str())
            && r.code < 300
    });
    assert!(deleted, "the protected pod was deleted");
    let events = Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await?;
    let disrupted = events.items.iter().find(|e| {
        e.reason.as_deref() == Some(karpenter_termination::events::DISRUPTED)
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(protected.as_str())
    });
    let note = disrupted
        .and_then(|e| e.note.clone())
        .ok_or("no Disrupted event on the pod")?;
    // Its 60 s cut to what was left before the deadline when it was deleted.
    assert!(
        note.contains("seconds of grace-period of its 60 terminationGracePeriodSeconds"),
        "{note}"
    );
    let waiting = events.items.iter().any(|e| {
        e.reason.as_deref() == Some(karpenter_termination::events::FAILED_DRAINING)
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node.as_str())
    });
    assert!(
        waiting,
        "no FailedDraining event on the Node while the pod held it"
    );
    // The deadline is told on the Node and, as upstream, on its NodeClaim.
    for (kind, name) in [("Node", node.clone()), ("NodeClaim", claim.name_any())] {
        let expiring = events.items.iter().find(|e| {
            e.reason.as_deref() == Some(karpenter_termination::events::TERMINATION_GRACE_PERIOD_EXPIRING)
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name.as_str())
                })
        });
        let expiring = expiring.ok_or(format!("no TerminationGracePeriodExpiring on the {kind}"))?;
        assert_eq!(expiring.type_.as_deref(), Some("Warning"));
        assert!(
            expiring
                .note
                .as_deref()
                .is_some_and(|n| n.starts_with("All pods will be deleted by ")),
            "{expiring:?}"
        );
    }
    until_gone(&claims, &claim.name_any(), 120).await?;
    let gone_after = h.sim.clock().now().duration_since(deleted_at).as_secs();
    assert!(
        gone_after <= NODE_GRACE + 5,
        "the node went {gone_after}s after its deletion"
    );
    Ok(())
}

/// The NodeClaim tells how its termination goes: Drained Unknown while pods are waited for, VolumesDetached
/// Unknown while a VolumeAttachment names the node, then Drained, VolumesDetached and InstanceTerminating
/// True; and the drain shows in `karpenter_nodes_drained_total`, `karpenter_pods_drained_total` and the
/// termination durations.
#[tokio::test(start_paused = true)]
async fn termination_writes_its_conditions_and_metrics() -> TestResult {
    use k8s_openapi::api::storage::v1::VolumeAttachment;

    let h = Harness::start()?;
    let client = h.client();
    // A NodePool of this test's own, so the metric series checked below are this test's.
    apply_nodepool(&client, "metered", &["on-demand"], Value::Null).await?;
    apply_workload(&client, "web", 2, json!({}), json!({})).await?;
    apply_pdb(&client, "web", 1).await?;
    until_running(&client, "app=web", 2, 300).await?;
    let (claim, node, _) = only_claim(&client).await?;
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let va: VolumeAttachment = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "csi-metered"},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": {"persistentVolumeName": "pv-m"}}
    }))?;
    attachments.create(&PostParams::default(), &va).await?;

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let name = claim.name_any();
    claims.delete(&name, &DeleteParams::default()).await?;
    let mut seen = Vec::new();
    let mut detached = false;
    for _ in 0..(600 * 10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(c) = claims.get_opt(&name).await? else {
            break;
        };
        for type_ in ["Drained", "VolumesDetached", "InstanceTerminating"] {
            if let Some((status, reason)) = condition(&c, type_) {
                let entry = (type_.to_string(), status, reason);
                if !seen.contains(&entry) {
                    seen.push(entry);
                }
            }
        }
        let awaiting = condition(&c, "VolumesDetached").is_some_and(|(s, _)| s == ConditionStatus::Unknown);
        if awaiting && !detached {
            attachments
                .delete("csi-metered", &DeleteParams::default())
                .await?;
            detached = true;
        }
    }
    assert!(
        claims.get_opt(&name).await?.is_none(),
        "the NodeClaim is still there"
    );
    let expected = [
        ("Drained", ConditionStatus::Unknown, "Draining"),
        ("Drained", ConditionStatus::True, "Drained"),
        (
            "VolumesDetached",
            ConditionStatus::Unknown,
            "AwaitingVolumeDetachment",
        ),
        ("VolumesDetached", ConditionStatus::True, "VolumesDetached"),
        (
            "InstanceTerminating",
            ConditionStatus::True,
            "InstanceTerminating",
        ),
    ];
    let expected: Vec<(String, ConditionStatus, String)> = expected
        .iter()
        .map(|(t, s, r)| (t.to_string(), *s, r.to_string()))
        .collect();
    assert_eq!(seen, expected, "the conditions in the order they were written");

    let text = karpenter_metrics::metrics().encode();
    for series in [
        r#"karpenter_nodes_drained_total{nodepool="metered"} 1"#,
        r#"karpenter_pods_drained_total{reason="Forceful Termination"}"#,
        r#"karpenter_nodes_termination_duration_seconds_count{nodepool="metered"} 1"#,
        r#"karpenter_nodes_termination_duration_seconds{nodepool="metered",quantile="0.5"}"#,
        r#"karpenter_nodeclaims_termination_duration_seconds_count{nodepool="metered"} 1"#,
        r#"karpenter_nodeclaims_terminated_total{nodepool="metered""#,
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
    Ok(())
}

/// The instance does not wait for the volume of a pod the drain leaves on the node (here one tolerating the
/// disrupted taint), nor for an attachment of an inline volume: nothing would detach them before it goes.
#[tokio::test(start_paused = true)]
async fn the_instance_does_not_wait_for_volumes_of_pods_left_on_the_node() -> TestResult {
    use k8s_openapi::api::{core::v1::PersistentVolumeClaim, storage::v1::VolumeAttachment};

    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    until_running(&client, "app=web", 1, 300).await?;
    let (claim, node, _) = only_claim(&client).await?;

    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "logs-data", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-logs",
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pvc)
        .await?;
    let logs: Pod = serde_json::from_value(json!({
        "metadata": {"name": "logs", "namespace": "default", "labels": {"app": "logs"}},
        "spec": {"nodeName": node,
            "tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists"}],
            "containers": [{"name": "c", "image": "sim", "resources": {"requests": {"cpu": "10m"}}}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "logs-data"}}]}
    }))?;
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &logs)
        .await?;
    until_running(&client, "app=logs", 1, 60).await?;
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    for (name, source) in [
        ("csi-logs", json!({"persistentVolumeName": "pv-logs"})),
        (
            "csi-inline",
            json!({"inlineVolumeSpec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}}),
        ),
    ] {
        let va: VolumeAttachment = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": source}
        }))?;
        attachments.create(&PostParams::default(), &va).await?;
    }

    let claims: Api<NodeClaim> = Api::all(client.clone());
    claims.delete(&claim.name_any(), &DeleteParams::default()).await?;
    until_gone(&claims, &claim.name_any(), 120).await?;
    assert!(
        attachments.get_opt("csi-logs").await?.is_some(),
        "the attachment was still there when the instance went"
    );
    Ok(())
}
