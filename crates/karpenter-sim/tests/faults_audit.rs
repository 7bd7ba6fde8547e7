//! Fault injection and the audit log.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use karpenter_sim::apiserver::{FaultRule, Verb};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use support::{TestResult, server};

fn cm(name: &str) -> Result<ConfigMap, serde_json::Error> {
    serde_json::from_value(json!({"metadata": {"name": name}}))
}

fn code(result: Result<impl std::fmt::Debug, kube::Error>) -> Option<u16> {
    match result {
        Err(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

#[tokio::test]
async fn injected_errors_fire_for_matching_requests_only() -> TestResult {
    let server = server();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let faults = server.faults();
    faults.inject(
        FaultRule::error(500)
            .verb(Verb::Create)
            .resource("", "configmaps")
            .times(1),
    );
    faults.inject(FaultRule::error(409).verb(Verb::Patch).times(1));
    faults.inject(FaultRule::error(429).verb(Verb::List).resource("", "pods"));

    assert_eq!(
        code(cms.create(&PostParams::default(), &cm("a")?).await),
        Some(500)
    );
    cms.create(&PostParams::default(), &cm("a")?).await?;
    assert_eq!(
        code(
            cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({})))
                .await
        ),
        Some(409)
    );
    cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({})))
        .await?;
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    assert_eq!(code(pods.list(&ListParams::default()).await), Some(429));
    cms.list(&ListParams::default()).await?;
    faults.clear();
    pods.list(&ListParams::default()).await?;
    Ok(())
}

#[tokio::test]
async fn probabilistic_faults_are_reproducible_with_the_seed() -> TestResult {
    let run = || async {
        let server = server();
        server
            .faults()
            .inject(FaultRule::error(503).verb(Verb::Get).probability(0.5));
        let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
        let mut codes = Vec::new();
        for _ in 0..32 {
            codes.push(code(cms.get("missing").await));
        }
        codes
    };
    let first = run().await;
    assert_eq!(first, run().await);
    assert!(first.contains(&Some(503)) && first.contains(&Some(404)));
    Ok(())
}

// A delay runs on tokio time, so under a paused runtime it costs no wall-clock time.
#[tokio::test(start_paused = true)]
async fn delays_slow_every_request_on_virtual_time() -> TestResult {
    let server = server();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    server.faults().set_delay(Some(Duration::from_secs(5)));
    let before = server.now();
    cms.create(&PostParams::default(), &cm("slow")?).await?;
    assert!(server.now().duration_since(before).as_secs() >= 5);
    server.faults().set_delay(None);
    Ok(())
}

// Every resource request is recorded with its RBAC verb, group, resource, subresource and namespace.
#[tokio::test]
async fn audit_records_rbac_verbs() -> TestResult {
    let server = server();
    server.clear_audit();
    let client = server.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("a")?).await?;
    let got = cms.get("a").await?;
    cms.list(&ListParams::default()).await?;
    cms.replace("a", &PostParams::default(), &got).await?;
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await?;
    cms.delete("a", &DeleteParams::default()).await?;
    cms.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let _ = pods.evict("missing", &Default::default()).await;
    let _ = pods.watch(&Default::default(), "0").await?;

    let records = server.audit();
    let verbs: Vec<(&str, String)> = records.iter().map(|r| (r.verb, r.rbac_resource())).collect();
    let expected = [
        ("create", "configmaps"),
        ("get", "configmaps"),
        ("list", "configmaps"),
        ("update", "configmaps"),
        ("patch", "configmaps"),
        ("delete", "configmaps"),
        ("deletecollection", "configmaps"),
        ("create", "pods/eviction"),
        ("watch", "pods"),
    ];
    assert_eq!(verbs, expected.map(|(v, r)| (v, r.to_string())));
    assert!(
        records
            .iter()
            .all(|r| r.group.is_empty() && r.namespace.as_deref() == Some("default"))
    );
    assert_eq!(records[7].code, 404);
    Ok(())
}
