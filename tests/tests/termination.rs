//! Deleting a NodeClaim (as a disruption command or `kubectl delete nodeclaim` does) drains its Node through
//! the Eviction API within the PodDisruptionBudget, the provisioner makes room for the evicted pods, and the
//! instance, the Node and the NodeClaim go, in that order. Deleting the Node instead (`kubectl delete node`)
//! does the same: the Node's finalizer holds it while its NodeClaim is deleted and terminated.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::{labels, nodeclaim::NodeClaim};
use karpenter_e2e::{
    Harness, TestResult, apply_deployment, apply_nodepool, apply_pdb, running_pods, until_running,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams},
};
use serde_json::Value;

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
