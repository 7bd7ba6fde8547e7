use std::sync::Mutex;

use async_trait::async_trait;
use karpenter_sim::{ApiServer, SystemClock};
use kube::api::PostParams;

use super::*;
use crate::nodeclaim_tagging::InstanceTagger;

const CLUSTER: &str = "test-cluster";

/// Records CreateTags calls; fails those for the instances in `failing`.
#[derive(Default)]
struct FakeTagger {
    failing: Vec<String>,
    calls: Mutex<Vec<(String, BTreeMap<String, String>)>>,
}

#[async_trait]
impl InstanceTagger for FakeTagger {
    async fn tag_instance(&self, instance_id: &str, tags: &BTreeMap<String, String>) -> Result<(), AwsError> {
        self.calls
            .lock()
            .unwrap()
            .push((instance_id.to_string(), tags.clone()));
        if self.failing.iter().any(|id| id == instance_id) {
            return Err(AwsError::Throttled {
                operation: "CreateTags",
                code: "RequestLimitExceeded".into(),
                message: "Request limit exceeded.".into(),
            });
        }
        Ok(())
    }
}

/// A NodeClaim launched as instance `i-<name>`, with a Node when `node` is given.
fn claim(name: &str, node: Option<&str>) -> NodeClaim {
    let mut status = json!({"providerID": format!("aws:///us-west-2a/i-{name}")});
    if let Some(node) = node {
        status["nodeName"] = json!(node);
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name},
        "spec": {"requirements": [],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        "status": status
    }))
    .unwrap()
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn registered_claims_get_every_tag_and_registering_ones_their_claims_tag_unless_known() {
    let mut annotated = claim("annotated", Some("node-annotated"));
    annotated
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(AWS_TAGGED_ANNOTATION.into(), "true".into());
    let mut deleting = claim("deleting", Some("node-deleting"));
    deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    let mut other_provider = claim("kwok", Some("node-kwok"));
    other_provider.spec.node_class_ref.group = "karpenter.kwok.sh".into();
    let mut not_launched = claim("pending", None);
    not_launched.status = None;
    let claims = [
        claim("registered", Some("ip-10-0-0-1.us-west-2.compute.internal")),
        claim("registering", None),
        claim("registering-tagged", None),
        annotated,
        deleting,
        other_provider,
        not_launched,
    ];
    let actions = tagging_actions(&claims, |id| id == "i-registering-tagged", CLUSTER);
    assert_eq!(
        actions,
        [
            TagAction {
                node_claim: "registered".into(),
                instance_id: "i-registered".into(),
                tags: tags(&[
                    ("Name", "ip-10-0-0-1.us-west-2.compute.internal"),
                    ("eks:eks-cluster-name", CLUSTER),
                    ("karpenter.sh/nodeclaim", "registered"),
                ]),
                registered: true,
            },
            TagAction {
                node_claim: "registering".into(),
                instance_id: "i-registering".into(),
                tags: tags(&[("karpenter.sh/nodeclaim", "registering")]),
                registered: false,
            },
        ]
    );
}

async fn create(client: &kube::Client, claim: &NodeClaim) {
    let api: Api<NodeClaim> = Api::all(client.clone());
    api.create(&PostParams::default(), claim).await.unwrap();
    let status = json!({"status": claim.status});
    api.patch_status(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_pass_tags_the_instances_marks_registered_claims_and_retries_failures_next_time() {
    let server = ApiServer::new(SystemClock);
    let client = server.client();
    create(&client, &claim("registered", Some("node-registered"))).await;
    create(&client, &claim("waiting", None)).await;
    create(&client, &claim("throttled", Some("node-throttled"))).await;
    let now = Instant::now();
    let ledger = Arc::new(InstanceTagLedger::default());
    // A batched launch whose tagging failed, and an instance no claim records.
    ledger.record_waiting("i-waiting", tags(&[("karpenter.sh/nodeclaim", "waiting")]), now);
    ledger.record_applied("i-orphan", now);
    let tagger = Arc::new(FakeTagger {
        failing: vec!["i-throttled".into()],
        ..FakeTagger::default()
    });
    let ctx = TaggingContext {
        client: client.clone(),
        tagger: Arc::clone(&tagger) as Arc<dyn InstanceTagger>,
        ledger: Arc::clone(&ledger),
        cluster_name: CLUSTER.into(),
        create_tags_interval: Duration::ZERO,
        // No grace: what no claim records is forgotten at once.
        unowned_grace: Duration::ZERO,
    };

    let outcome = reconcile(&ctx).await.unwrap();
    assert_eq!(outcome.tagged, ["registered"]);
    assert_eq!(outcome.named, ["waiting"]);
    assert_eq!(outcome.failed, ["throttled"]);
    let called: Vec<String> = tagger
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(called, ["i-registered", "i-throttled", "i-waiting"]);
    assert!(ledger.is_applied("i-waiting"), "its tag is on EC2 now");
    assert!(!ledger.is_applied("i-orphan"), "no claim records it: forgotten");

    let api: Api<NodeClaim> = Api::all(client.clone());
    let annotation = |claim: &NodeClaim| claim.annotations().get(AWS_TAGGED_ANNOTATION).cloned();
    assert_eq!(
        annotation(&api.get("registered").await.unwrap()).as_deref(),
        Some("true")
    );
    assert_eq!(annotation(&api.get("throttled").await.unwrap()), None);

    // The next pass only tries the failed claim again.
    tagger.calls.lock().unwrap().clear();
    let outcome = reconcile(&ctx).await.unwrap();
    assert_eq!(outcome.failed, ["throttled"]);
    assert!(outcome.tagged.is_empty() && outcome.named.is_empty());
    let called: Vec<String> = tagger
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(called, ["i-throttled"]);
}
