//! Finalizers, graceful pod deletion, garbage collection and namespace deletion (concepts "Finalizers",
//! "Garbage Collection" / "Cascading deletion", "Pod Lifecycle" / "Termination of Pods"; api-conventions
//! "Finalizers").

mod support;

use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::{ConfigMap, Namespace, Pod},
};
use karpenter_sim::apiserver::ResourceId;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use support::{TestResult, server};

fn owner_ref(kind: &str, name: &str, uid: &str, block: bool) -> Value {
    json!({"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": block})
}

/// Deployment -> ReplicaSet -> two unbound pods, all linked by ownerReferences.
async fn workload(
    client: &kube::Client,
    block: bool,
) -> Result<(Deployment, ReplicaSet), Box<dyn std::error::Error + Send + Sync>> {
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let replicasets: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let deployment = deployments.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))?).await?;
    let rs = replicasets.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "web-1", "ownerReferences": [owner_ref("Deployment", "web", &deployment.uid().unwrap_or_default(), block)]},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))?).await?;
    for name in ["web-1-a", "web-1-b"] {
        pods.create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "web"},
                         "ownerReferences": [owner_ref("ReplicaSet", "web-1", &rs.uid().unwrap_or_default(), block)]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}))?).await?;
    }
    Ok((deployment, rs))
}

// Garbage collection, background propagation (the default): the owner goes first, then its dependents.
#[tokio::test]
async fn background_deletion_removes_owner_then_dependents() -> TestResult {
    let server = server();
    let client = server.client();
    workload(&client, false).await?;
    let before = server.resource_version();
    Api::<Deployment>::default_namespaced(client.clone())
        .delete("web", &DeleteParams::background())
        .await?;
    assert!(
        Api::<ReplicaSet>::default_namespaced(client.clone())
            .get_opt("web-1")
            .await?
            .is_none()
    );
    assert!(
        Api::<Pod>::default_namespaced(client.clone())
            .list(&Default::default())
            .await?
            .items
            .is_empty()
    );
    // Order of the DELETED events (replayed from history): deployment, then replicaset, then pods.
    let deployment_rv = deleted_rvs(Api::<Deployment>::default_namespaced(client.clone()), before, 1).await?;
    let rs_rv = deleted_rvs(Api::<ReplicaSet>::default_namespaced(client.clone()), before, 1).await?;
    let pod_rvs = deleted_rvs(Api::<Pod>::default_namespaced(client.clone()), before, 2).await?;
    assert!(
        deployment_rv[0] < rs_rv[0] && rs_rv[0] < pod_rvs[0],
        "{deployment_rv:?} {rs_rv:?} {pod_rvs:?}"
    );
    Ok(())
}

/// The resourceVersions of the first `count` DELETED events after `from`.
async fn deleted_rvs<K>(
    api: Api<K>,
    from: u64,
    count: usize,
) -> Result<Vec<u64>, Box<dyn std::error::Error + Send + Sync>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use futures::TryStreamExt;
    let mut stream = Box::pin(api.watch(&Default::default(), &from.to_string()).await?);
    let mut rvs = Vec::new();
    while rvs.len() < count {
        match stream.try_next().await? {
            Some(kube::api::WatchEvent::Deleted(object)) => {
                rvs.push(
                    object
                        .resource_version()
                        .and_then(|rv| rv.parse().ok())
                        .unwrap_or(0),
                );
            }
            Some(_) => {}
            None => return Err("watch ended".into()),
        }
    }
    Ok(rvs)
}

// Foreground propagation: the owner carries the foregroundDeletion finalizer until no dependent with
// blockOwnerDeletion is left; a dependent's own finalizer therefore holds the owner.
#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() -> TestResult {
    let server = server();
    let client = server.client();
    workload(&client, true).await?;
    let replicasets: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    replicasets
        .patch(
            "web-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["test/hold"]}})),
        )
        .await?;

    deployments.delete("web", &DeleteParams::foreground()).await?;
    let owner = deployments.get("web").await?;
    assert!(owner.metadata.deletion_timestamp.is_some());
    assert_eq!(owner.finalizers(), ["foregroundDeletion"]);
    let rs = replicasets.get("web-1").await?;
    assert!(
        rs.metadata.deletion_timestamp.is_some(),
        "the dependent is being deleted"
    );
    assert!(
        Api::<Pod>::default_namespaced(client.clone())
            .list(&Default::default())
            .await?
            .items
            .is_empty(),
        "the replicaset's own dependents went first"
    );

    replicasets
        .patch(
            "web-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    assert!(replicasets.get_opt("web-1").await?.is_none());
    assert!(
        deployments.get_opt("web").await?.is_none(),
        "the owner goes once its blocking dependents are gone"
    );
    Ok(())
}

// Orphan propagation: dependents stay, without the reference to the deleted owner.
#[tokio::test]
async fn orphan_deletion_keeps_dependents() -> TestResult {
    let server = server();
    let client = server.client();
    workload(&client, false).await?;
    Api::<Deployment>::default_namespaced(client.clone())
        .delete("web", &DeleteParams::orphan())
        .await?;
    let rs = Api::<ReplicaSet>::default_namespaced(client.clone())
        .get("web-1")
        .await?;
    assert!(rs.metadata.owner_references.is_none());
    assert_eq!(
        Api::<Pod>::default_namespaced(client.clone())
            .list(&Default::default())
            .await?
            .items
            .len(),
        2
    );
    Ok(())
}

// A dependent with another living owner only loses the reference to the deleted one.
#[tokio::test]
async fn dependent_with_a_living_owner_survives() -> TestResult {
    let server = server();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let a = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "a"}}))?,
        )
        .await?;
    let b = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "b"}}))?,
        )
        .await?;
    let refs = |cm: &ConfigMap, name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": cm.uid()});
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "child",
        "ownerReferences": [refs(&a, "a"), refs(&b, "b")]}}))?,
    )
    .await?;
    cms.delete("a", &DeleteParams::default()).await?;
    let child = cms.get("child").await?;
    assert_eq!(child.owner_references().len(), 1);
    cms.delete("b", &DeleteParams::default()).await?;
    assert!(cms.get_opt("child").await?.is_none());
    Ok(())
}

// api-conventions "Finalizers": delete sets deletionTimestamp; the object goes when the last finalizer is
// removed; no finalizer may be added meanwhile.
#[tokio::test]
async fn finalizers_hold_deletion_until_removed() -> TestResult {
    let server = server();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "f", "finalizers": ["a/x", "a/y"]}}))?,
    )
    .await?;
    let pending = cms.delete("f", &DeleteParams::default()).await?;
    let object = pending
        .left()
        .ok_or("expected the object back while finalizers remain")?;
    assert!(object.metadata.deletion_timestamp.is_some());
    assert_eq!(object.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(
        object.metadata.generation,
        Some(2),
        "marking for deletion bumps generation"
    );

    match cms
        .patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["a/x", "a/y", "a/z"]}})),
        )
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 422),
        other => return Err(format!("adding a finalizer while deleting should fail, got {other:?}").into()),
    }
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["a/y"]}})),
    )
    .await?;
    assert!(cms.get_opt("f").await?.is_some());
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": ["a/y"]},
        {"op": "remove", "path": "/metadata/finalizers/0"}]))?),
    )
    .await?;
    assert!(cms.get_opt("f").await?.is_none());
    Ok(())
}

// Pods: unbound pods are deleted at once; a bound pod gets deletionTimestamp = now + grace period and waits for
// its kubelet, which finishes it with grace period 0.
#[tokio::test(start_paused = true)]
async fn pod_deletion_grace_period_rules() -> TestResult {
    let server = server();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let pod = |name: &str, node: Option<&str>| -> Result<Pod, serde_json::Error> {
        serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 45, "containers": [{"name": "c", "image": "i"}]}}))
    };
    pods.create(&PostParams::default(), &pod("unbound", None)?)
        .await?;
    assert!(
        pods.delete("unbound", &DeleteParams::default()).await?.is_right(),
        "unbound pods go at once"
    );

    pods.create(&PostParams::default(), &pod("bound", Some("n1"))?)
        .await?;
    let terminating = pods
        .delete("bound", &DeleteParams::default())
        .await?
        .left()
        .ok_or("bound pod went away")?;
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(45));
    let expected = server.now().checked_add(jiff::SignedDuration::from_secs(45))?;
    assert_eq!(
        terminating.metadata.deletion_timestamp.map(|t| t.0.as_second()),
        Some(expected.as_second())
    );
    // Status updates from the kubelet do not finish the deletion.
    server.update_status_internal(
        &ResourceId::core("pods"),
        "default",
        "bound",
        json!({"phase": "Running"}),
    )?;
    assert!(pods.get_opt("bound").await?.is_some());
    server.delete_internal(&ResourceId::core("pods"), "default", "bound", Some(0))?;
    assert!(pods.get_opt("bound").await?.is_none());

    pods.create(&PostParams::default(), &pod("forced", Some("n1"))?)
        .await?;
    assert!(
        pods.delete(
            "forced",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            }
        )
        .await?
        .is_right()
    );
    Ok(())
}

// Deleting a namespace deletes its contents and removes it when empty (a terminating pod holds it).
#[tokio::test]
async fn namespace_deletion_empties_then_removes_it() -> TestResult {
    let server = server();
    let client = server.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}}))?,
        )
        .await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "c"}}))?,
    )
    .await?;
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}))?,
    )
    .await?;

    namespaces.delete("team", &DeleteParams::default()).await?;
    let ns = namespaces.get("team").await?;
    assert_eq!(ns.status.and_then(|s| s.phase).as_deref(), Some("Terminating"));
    assert!(cms.get_opt("c").await?.is_none());
    match cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "late"}}))?,
        )
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403),
        other => {
            return Err(
                format!("creating in a terminating namespace should be forbidden, got {other:?}").into(),
            );
        }
    }
    server.delete_internal(&ResourceId::core("pods"), "team", "p", Some(0))?;
    assert!(namespaces.get_opt("team").await?.is_none());
    Ok(())
}
