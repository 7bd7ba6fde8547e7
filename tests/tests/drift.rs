//! Drift after a NodePool change, rolled out under a budget of one node: every node launched from the old
//! template is replaced, one at a time (never more than one node cordoned for disruption at once), the pods move
//! to the replacements through the Eviction API within their PodDisruptionBudget, and all of them run at the
//! end.

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Node};
use karpenter_api::{nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_e2e::{
    Controllers, Harness, TestResult, apply_pdb, drift_nodepool, replicas::invariants, running_pods,
    until_running,
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
};
use serde_json::json;

const PODS: usize = 4;

/// NodePool `default`: on-demand, template label `team=<team>`, drift rolled out one node at a time, no
/// consolidation.
fn pool(team: &str) -> Result<NodePool, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": team}},
                "spec": {
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In",
                        "values": ["on-demand"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never",
                "budgets": [{"nodes": "1"}]}}
    }))
}

/// Deployment `web`: one pod per node (required anti-affinity on the hostname), so the pool has `PODS` nodes.
async fn one_pod_per_node(client: &kube::Client) -> TestResult {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": PODS, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}},
                         "topologyKey": "kubernetes.io/hostname"}]}},
                    "containers": [{"name": "c", "image": "sim",
                        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}
    }))?;
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_nodepool_change_replaces_every_node_one_at_a_time_within_the_pdb() -> TestResult {
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    let pools: Api<NodePool> = Api::all(client.clone());
    pools.create(&PostParams::default(), &pool("a")?).await?;
    one_pod_per_node(&client).await?;
    apply_pdb(&client, "web", 1).await?;
    until_running(&client, "app=web", PODS, 600).await?;

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let old: BTreeSet<String> = claims
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(old.len(), PODS, "one node per pod");
    // Time passing alone disrupts nothing.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(invariants::disrupted_nodes(&client).await?.is_empty());

    // The template changes: every node now has a different NodePool hash than its NodePool.
    drift_nodepool(&client, "default").await?;

    let (mut most_disrupted, mut fewest_running, mut replaced_at) = (0, usize::MAX, Vec::new());
    let mut remaining = old.len();
    for step in 0..1800 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        most_disrupted = most_disrupted.max(invariants::disrupted_nodes(&client).await?.len());
        fewest_running = fewest_running.min(running_pods(&client, "app=web").await?.len());
        let now: BTreeSet<String> = claims
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        let left = old.intersection(&now).count();
        if left < remaining {
            replaced_at.push(step * 2);
            remaining = left;
        }
        if left == 0 && running_pods(&client, "app=web").await?.len() == PODS {
            break;
        }
    }
    assert_eq!(remaining, 0, "{remaining} drifted nodes left");
    // Sampled every 2 s: one node cordoned at a time, and the sampling did see the rollout.
    assert_eq!(
        most_disrupted, 1,
        "{most_disrupted} nodes were disrupted at once under a budget of one"
    );
    assert_eq!(
        replaced_at.len(),
        PODS,
        "the old nodes went one at a time (seconds after the change: {replaced_at:?})"
    );
    assert!(
        fewest_running >= PODS - 1,
        "the PodDisruptionBudget was violated: {fewest_running} pods ran at one point"
    );
    assert_eq!(
        invariants::pod_deletes_bypassing_eviction(&h.sim),
        0,
        "a pod was deleted rather than evicted"
    );

    // The end state: every node from the new template, every pod running, nothing orphaned.
    until_running(&client, "app=web", PODS, 300).await?;
    invariants::settle(60, Duration::from_secs(5), || {
        invariants::instance_problems(&h.sim)
    })
    .await?;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert_eq!(nodes.items.len(), PODS);
    for node in &nodes.items {
        assert_eq!(
            node.labels().get("team").map(String::as_str),
            Some("b"),
            "{} is from the old template",
            node.name_any()
        );
    }
    assert!(invariants::disrupted_nodes(&client).await?.is_empty());
    Ok(())
}

/// With the TerminateFirstDrift gate, a drifted node is deleted before its replacement is up (capacity pinned
/// by a reservation could not hold both), where by default the replacement is initialized first.
#[tokio::test(start_paused = true)]
async fn terminate_first_drift_deletes_the_drifted_node_before_its_replacement_is_up() -> TestResult {
    use karpenter_api::nodeclaim::conditions;
    use karpenter_operator::Settings;

    let mut settings = Settings::default();
    settings.feature_gates.terminate_first_drift = true;
    let h = Harness::start_with_settings(Controllers { disruption: true }, settings)?;
    let client = h.client();
    let pools: Api<NodePool> = Api::all(client.clone());
    pools.create(&PostParams::default(), &pool("a")?).await?;
    one_pod_per_node(&client).await?;
    until_running(&client, "app=web", PODS, 600).await?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let old: BTreeSet<String> = claims
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    drift_nodepool(&client, "default").await?;
    let initialized = |c: &NodeClaim| {
        c.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == conditions::INITIALIZED && c.status == karpenter_api::common::ConditionStatus::True
            })
        })
    };
    let mut first_deletion = None;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let all = claims.list(&ListParams::default()).await?.items;
        if all
            .iter()
            .any(|c| old.contains(&c.name_any()) && c.metadata.deletion_timestamp.is_some())
        {
            let new_initialized = all
                .iter()
                .filter(|c| !old.contains(&c.name_any()) && initialized(c))
                .count();
            first_deletion = Some(new_initialized);
            break;
        }
    }
    assert_eq!(
        first_deletion,
        Some(0),
        "the first drifted node was deleted before any replacement had initialized"
    );
    until_running(&client, "app=web", PODS, 900).await?;
    Ok(())
}

/// Upstream's e2e "Drift Budgets should respect budgets for empty drift": three nodes, a budget of 50% (two at
/// once), each Node held by a finalizer of the test's own so none can go away; the nodes are emptied, then the
/// NodePool changes so all three drift. Sampled as upstream's monitor does (tainted Nodes, leaving out those
/// whose NodeClaim's instance is terminating), never more than two nodes are disrupting, and the drift finishes:
/// all three claims' instances terminating, no tainted node left uncounted.
#[tokio::test(start_paused = true)]
async fn empty_drift_held_by_node_finalizers_stays_within_a_budget_of_half() -> TestResult {
    use karpenter_api::{common::ConditionStatus, labels, nodeclaim::conditions};
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    let mut nodepool = pool("a")?;
    nodepool.spec.disruption.budgets = Some(vec![serde_json::from_value(json!({"nodes": "50%"}))?]);
    Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &nodepool)
        .await?;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"},
                    "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}},
                         "topologyKey": "kubernetes.io/hostname"}]}},
                    "containers": [{"name": "c", "image": "sim",
                        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}
    }))?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment).await?;
    until_running(&client, "app=web", 3, 600).await?;

    let nodes: Api<Node> = Api::all(client.clone());
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let held = nodes.list(&ListParams::default()).await?.items;
    assert_eq!(held.len(), 3, "one node per pod");
    for node in &held {
        let mut finalizers = node.finalizers().to_vec();
        finalizers.push("karpenter.sh/test-finalizer".into());
        nodes
            .patch(
                &node.name_any(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {
                    "finalizers": finalizers, "resourceVersion": node.resource_version()}})),
            )
            .await?;
    }
    deployments
        .delete("web", &kube::api::DeleteParams::default())
        .await?;
    drift_nodepool(&client, "default").await?;

    let instance_terminating = |c: &NodeClaim| {
        c.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == conditions::INSTANCE_TERMINATING && c.status == ConditionStatus::True)
        })
    };
    let (mut most, mut finished) = (0, false);
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let all_claims = claims.list(&ListParams::default()).await?.items;
        let terminated: BTreeSet<String> = all_claims
            .iter()
            .filter(|c| instance_terminating(c))
            .filter_map(|c| c.status.as_ref()?.provider_id.clone())
            .collect();
        let disrupting = nodes
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| {
                !n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_ref())
                    .is_some_and(|id| terminated.contains(id))
            })
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY))
            })
            .count();
        most = most.max(disrupting);
        assert!(
            disrupting <= 2,
            "{disrupting} nodes disrupting at once under a budget of 50% of 3"
        );
        if terminated.len() == 3 && disrupting == 0 {
            finished = true;
            break;
        }
    }
    assert!(
        finished,
        "the drift did not finish: most disrupting at once {most}"
    );
    assert!(most >= 1, "the sampling did not see the drift");
    Ok(())
}
