//! The eviction subresource against PodDisruptionBudgets (concepts "API-initiated Eviction": 200/201 when
//! allowed, 429 Too Many Requests when a budget blocks, 500 when more than one budget selects the pod).

mod support;

use k8s_openapi::api::{core::v1::Pod, policy::v1::PodDisruptionBudget};
use kube::{
    Api,
    api::{EvictParams, PostParams},
};
use serde_json::{Value, json};
use support::{TestResult, server};

async fn ready_pod(pods: &Api<Pod>, name: &str, app: &str, ready: bool) -> TestResult {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}))?;
    pods.create(&PostParams::default(), &pod).await?;
    let status = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    pods.patch_status(name, &Default::default(), &kube::api::Patch::Merge(status))
        .await?;
    Ok(())
}

async fn pdb(client: &kube::Client, name: &str, app: &str, spec: Value) -> TestResult {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": app}});
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))?;
    Api::<PodDisruptionBudget>::default_namespaced(client.clone())
        .create(&PostParams::default(), &pdb)
        .await?;
    Ok(())
}

fn too_many_requests(result: Result<kube::core::Status, kube::Error>) -> Result<kube::core::Status, String> {
    match result {
        Err(kube::Error::Api(status)) if status.code == 429 => Ok(*status),
        other => Err(format!("expected 429, got {other:?}")),
    }
}

#[tokio::test]
async fn eviction_blocked_by_budget_answers_429_with_cause() -> TestResult {
    let server = server();
    let client = server.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for name in ["a", "b", "c"] {
        ready_pod(&pods, name, "web", true).await?;
    }
    pdb(&client, "web", "web", json!({"minAvailable": 2})).await?;

    // Three healthy, two needed: one eviction is allowed; the evicted (bound) pod is now terminating.
    let status = pods.evict("a", &EvictParams::default()).await?;
    assert_eq!(status.status, Some(kube::core::response::StatusSummary::Success));
    let evicted = pods.get("a").await?;
    assert!(evicted.metadata.deletion_timestamp.is_some());

    let status = too_many_requests(pods.evict("b", &EvictParams::default()).await)?;
    assert_eq!(status.reason, "TooManyRequests");
    assert_eq!(
        status.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert_eq!(causes[0].reason, "DisruptionBudget");
    assert_eq!(
        causes[0].message,
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    );
    assert!(pods.get("b").await?.metadata.deletion_timestamp.is_none());
    let evictions = server
        .audit()
        .iter()
        .filter(|r| r.rbac_resource() == "pods/eviction" && r.verb == "create")
        .count();
    assert_eq!(evictions, 2);
    Ok(())
}

#[tokio::test]
async fn percentages_and_max_unavailable() -> TestResult {
    let server = server();
    let client = server.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for name in ["a", "b", "c", "d"] {
        ready_pod(&pods, name, "db", true).await?;
    }
    // maxUnavailable 25% of 4 = 1: one eviction, then blocked.
    pdb(&client, "db", "db", json!({"maxUnavailable": "25%"})).await?;
    pods.evict("a", &EvictParams::default()).await?;
    too_many_requests(pods.evict("b", &EvictParams::default()).await)?;
    Ok(())
}

#[tokio::test]
async fn pods_without_budget_pending_or_unhealthy_evict_freely() -> TestResult {
    let server = server();
    let client = server.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    ready_pod(&pods, "free", "none", true).await?;
    pods.evict("free", &EvictParams::default()).await?;

    ready_pod(&pods, "w1", "web", true).await?;
    ready_pod(&pods, "w2", "web", false).await?;
    pdb(&client, "web", "web", json!({"minAvailable": 1})).await?;
    // w2 is not Ready and the budget is healthy (1 of 1): IfHealthyBudget lets it go.
    pods.evict("w2", &EvictParams::default()).await?;
    too_many_requests(pods.evict("w1", &EvictParams::default()).await)?;

    // A pending pod is deleted without looking at budgets (and, unbound, at once).
    let pending: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}))?;
    pods.create(&PostParams::default(), &pending).await?;
    pods.evict("p", &EvictParams::default()).await?;
    assert!(pods.get_opt("p").await?.is_none());

    match pods.evict("missing", &EvictParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
        other => return Err(format!("expected 404, got {other:?}").into()),
    }
    Ok(())
}

#[tokio::test]
async fn two_budgets_for_one_pod_is_a_500() -> TestResult {
    let server = server();
    let client = server.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    ready_pod(&pods, "a", "web", true).await?;
    pdb(&client, "one", "web", json!({"maxUnavailable": 1})).await?;
    pdb(&client, "two", "web", json!({"maxUnavailable": 1})).await?;
    match pods.evict("a", &EvictParams::default()).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (500, "InternalError"));
            assert!(
                status.message.contains("more than one PodDisruptionBudget"),
                "{}",
                status.message
            );
        }
        other => return Err(format!("expected 500, got {other:?}").into()),
    }
    Ok(())
}
