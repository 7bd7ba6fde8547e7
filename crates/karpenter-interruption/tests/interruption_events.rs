//! The interruption controller against the in-memory API server: the Kubernetes Events it raises on the
//! NodeClaim and its Node for each kind of message (spot and capacity reservation interruptions, rebalance
//! recommendations, instances stopping or terminating), and when it deletes the NodeClaim.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_core::cloudprovider::{InterruptionEvent, InterruptionKind};
use karpenter_interruption::{Handled, InterruptionController};
use std::sync::Arc;
use std::time::Duration;

use karpenter_sim::{ApiServer, SystemClock, VirtualClock};
use karpenter_state::{ClusterState, ControllerContext};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The controller's context on the wall clock.
fn context(client: &kube::Client, state: &ClusterState) -> ControllerContext {
    ControllerContext::new(client.clone(), state.clone(), Arc::new(SystemClock))
}

/// A launched and registered NodeClaim `name` (instance `i-<name>`, Node `node-<name>`), in the API server and
/// in the controller's cache. `finalizer` keeps it in the API server once deleted.
async fn registered_claim(
    client: &kube::Client,
    state: &ClusterState,
    name: &str,
    finalizer: bool,
) -> Result<(NodeClaim, Node), Box<dyn std::error::Error>> {
    let finalizers: Vec<&str> = if finalizer {
        vec!["karpenter.sh/termination"]
    } else {
        Vec::new()
    };
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "finalizers": finalizers,
                     "labels": {"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "reserved"}},
        "spec": {"requirements": [],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))?;
    let mut claim = Api::<NodeClaim>::all(client.clone())
        .create(&PostParams::default(), &claim)
        .await?;
    // The status as the lifecycle controller writes it; the cache is what the controller reads.
    claim.status = Some(serde_json::from_value(json!({
        "providerID": format!("aws:///us-west-2a/i-{name}"),
        "nodeName": format!("node-{name}")
    }))?);
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{name}")}
    }))?;
    let node = Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await?;
    state.node_claims.apply(claim.clone());
    state.nodes.apply(node.clone().into());
    Ok((claim, node))
}

fn message(instance: &str, kind: InterruptionKind) -> InterruptionEvent {
    InterruptionEvent {
        provider_id: instance.to_string(),
        kind,
        at: jiff::Timestamp::now(),
    }
}

/// (kind, name, uid, type, reason, note) of every event, sorted.
async fn events(client: &kube::Client) -> Result<Vec<[String; 6]>, kube::Error> {
    let listed = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let mut events: Vec<[String; 6]> = listed
        .items
        .into_iter()
        .map(|e| {
            let regarding = e.regarding.unwrap_or_default();
            [
                regarding.kind.unwrap_or_default(),
                regarding.name.unwrap_or_default(),
                regarding.uid.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            ]
        })
        .collect();
    events.sort();
    Ok(events)
}

fn event(object: (&str, &str, &str), reason: &str, note: &str) -> [String; 6] {
    [
        object.0.to_string(),
        object.1.to_string(),
        object.2.to_string(),
        "Warning".to_string(),
        reason.to_string(),
        note.to_string(),
    ]
}

#[tokio::test]
async fn a_capacity_reservation_interruption_raises_its_event_on_the_node_claim_and_node() -> TestResult {
    let server = ApiServer::new(SystemClock);
    let client = server.client();
    let state = ClusterState::default();
    let (claim, node) = registered_claim(&client, &state, "reserved-a", false).await?;
    let controller = InterruptionController::new(&context(&client, &state));

    let handled = controller
        .handle(&message(
            "i-reserved-a",
            InterruptionKind::CapacityReservationInterruption,
        ))
        .await?;
    assert_eq!(handled, Handled::Deleted("reserved-a".into()));

    let (claim_uid, node_uid) = (claim.uid().unwrap_or_default(), node.uid().unwrap_or_default());
    assert!(!claim_uid.is_empty() && !node_uid.is_empty());
    let claim_ref = ("NodeClaim", "reserved-a", claim_uid.as_str());
    let node_ref = ("Node", "node-reserved-a", node_uid.as_str());
    let interrupted = "Capacity reservation interruption warning was triggered";
    let mut expected = vec![
        event(claim_ref, "CapacityReservationInstanceInterrupted", interrupted),
        event(node_ref, "CapacityReservationInstanceInterrupted", interrupted),
        event(
            claim_ref,
            "TerminatingOnInterruption",
            "Interruption triggered termination for the NodeClaim",
        ),
        event(
            node_ref,
            "TerminatingOnInterruption",
            "Interruption triggered termination for the Node",
        ),
    ];
    expected.sort();
    assert_eq!(events(&client).await?, expected);
    Ok(())
}

#[tokio::test]
async fn a_spot_interruption_raises_spot_interrupted_and_a_deleting_claim_still_gets_it() -> TestResult {
    let server = ApiServer::new(SystemClock);
    let client = server.client();
    let state = ClusterState::default();
    let (claim, _) = registered_claim(&client, &state, "spot-a", true).await?;
    let controller = InterruptionController::new(&context(&client, &state));

    let first = controller
        .handle(&message("i-spot-a", InterruptionKind::SpotInterruption))
        .await?;
    assert_eq!(first, Handled::Deleted("spot-a".into()));
    let reasons = |events: &[[String; 6]]| -> Vec<(String, String)> {
        events.iter().map(|e| (e[0].clone(), e[4].clone())).collect()
    };
    let spot_interrupted = [
        ("Node".to_string(), "SpotInterrupted".to_string()),
        ("Node".to_string(), "TerminatingOnInterruption".to_string()),
        ("NodeClaim".to_string(), "SpotInterrupted".to_string()),
        ("NodeClaim".to_string(), "TerminatingOnInterruption".to_string()),
    ];
    assert_eq!(reasons(&events(&client).await?), spot_interrupted);

    // The claim is now being deleted (its finalizer holds it): a capacity reservation interruption for it
    // still raises its event, and deletes nothing.
    let deleting = Api::<NodeClaim>::all(client.clone()).get("spot-a").await?;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let mut cached = deleting;
    cached.status = claim.status.clone();
    state.node_claims.apply(cached);
    let second = controller
        .handle(&message(
            "i-spot-a",
            InterruptionKind::CapacityReservationInterruption,
        ))
        .await?;
    assert_eq!(second, Handled::Noted);
    let after = reasons(&events(&client).await?);
    assert_eq!(after.len(), 6, "{after:?}");
    for object in ["Node", "NodeClaim"] {
        assert!(after.contains(&(
            object.to_string(),
            "CapacityReservationInstanceInterrupted".to_string()
        )));
    }

    // A rebalance recommendation raises a Normal event on both; an instance no claim owns, nothing at all.
    assert_eq!(
        controller
            .handle(&message("i-spot-a", InterruptionKind::Rebalance))
            .await?,
        Handled::Noted
    );
    assert_eq!(
        controller
            .handle(&message("i-unknown", InterruptionKind::SpotInterruption))
            .await?,
        Handled::NotOurs
    );
    let all = events(&client).await?;
    assert_eq!(all.len(), 8, "{all:?}");
    let rebalance: Vec<(String, String, String)> = all
        .iter()
        .filter(|e| e[4] == "SpotRebalanceRecommendation")
        .map(|e| (e[0].clone(), e[3].clone(), e[5].clone()))
        .collect();
    let note = "Spot rebalance recommendation was triggered".to_string();
    assert_eq!(
        rebalance,
        [
            ("Node".to_string(), "Normal".to_string(), note.clone()),
            ("NodeClaim".to_string(), "Normal".to_string(), note),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_stopping_or_terminating_instance_raises_its_own_event_and_its_claim_is_deleted() -> TestResult {
    let server = ApiServer::new(SystemClock);
    let client = server.client();
    let state = ClusterState::default();
    let (stopping, _) = registered_claim(&client, &state, "stop-a", false).await?;
    let (terminating, _) = registered_claim(&client, &state, "term-a", false).await?;
    let controller = InterruptionController::new(&context(&client, &state));

    for (instance, kind, claim) in [
        ("i-stop-a", InterruptionKind::InstanceStopping, "stop-a"),
        ("i-term-a", InterruptionKind::InstanceTerminating, "term-a"),
    ] {
        let handled = controller.handle(&message(instance, kind)).await?;
        assert_eq!(handled, Handled::Deleted(claim.into()), "{kind:?}");
    }

    let on_claims: Vec<(String, String, String)> = events(&client)
        .await?
        .into_iter()
        .filter(|e| e[0] == "NodeClaim" && e[4] != "TerminatingOnInterruption")
        .map(|e| (e[1].clone(), e[4].clone(), e[5].clone()))
        .collect();
    assert_eq!(
        on_claims,
        [
            (
                stopping.name_any(),
                "InstanceStopping".to_string(),
                "Instance is stopping".to_string()
            ),
            (
                terminating.name_any(),
                "InstanceTerminating".to_string(),
                "Instance is terminating".to_string()
            ),
        ]
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_dedupe_window_is_measured_on_the_controller_s_clock() -> TestResult {
    // On a virtual clock (karpenter simulate, the e2e tests) a rebalance recommendation three virtual minutes
    // after the first is told again (a second occurrence in the Event's series): the two-minute window has
    // passed on the clock the controller was given, though hardly any wall time has.
    let clock = VirtualClock::starting_at("2026-01-01T00:00:00Z".parse()?);
    let server = ApiServer::new(clock);
    let client = server.client();
    let state = ClusterState::default();
    registered_claim(&client, &state, "rebalance-a", false).await?;
    let controller =
        InterruptionController::new(&ControllerContext::new(client.clone(), state, Arc::new(clock)));
    // How often the NodeClaim's rebalance recommendation has been told: its Event and the series' count.
    let told = || async {
        let listed = Api::<Event>::all(client.clone())
            .list(&ListParams::default())
            .await?;
        Ok::<_, kube::Error>(
            listed
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("SpotRebalanceRecommendation"))
                .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("NodeClaim"))
                .map(|e| e.series.as_ref().map_or(1, |s| s.count))
                .sum::<i32>(),
        )
    };

    for _ in 0..2 {
        controller
            .handle(&message("i-rebalance-a", InterruptionKind::Rebalance))
            .await?;
    }
    assert_eq!(told().await?, 1, "deduped within the window");

    tokio::time::advance(Duration::from_secs(180)).await;
    controller
        .handle(&message("i-rebalance-a", InterruptionKind::Rebalance))
        .await?;
    assert_eq!(told().await?, 2, "the window has passed on the virtual clock");
    Ok(())
}

#[tokio::test]
async fn failed_status_checks_terminate_forcefully_and_a_scheduled_event_drains_within_budgets() -> TestResult
{
    let server = ApiServer::new(SystemClock);
    let client = server.client();
    let state = ClusterState::default();
    let (impaired, _) = registered_claim(&client, &state, "impaired-a", true).await?;
    let (host, _) = registered_claim(&client, &state, "host-a", true).await?;
    let (retiring, _) = registered_claim(&client, &state, "retiring-a", true).await?;
    let controller = InterruptionController::new(&context(&client, &state));
    let received = |kind: &str| {
        karpenter_metrics::metrics()
            .interruption_received_messages
            .get_or_create(&karpenter_metrics::MessageTypeLabels {
                message_type: kind.into(),
            })
            .get()
    };
    let before = ["instance_status", "system_status", "event_status"].map(received);

    for (instance, kind, claim) in [
        (
            "i-impaired-a",
            InterruptionKind::InstanceStatusImpaired,
            &impaired,
        ),
        ("i-host-a", InterruptionKind::SystemStatusImpaired, &host),
        ("i-retiring-a", InterruptionKind::ScheduledEvent, &retiring),
    ] {
        let handled = controller.handle(&message(instance, kind)).await?;
        assert_eq!(handled, Handled::Deleted(claim.name_any()), "{kind:?}");
    }
    let termination_timestamp = |name: &'static str| {
        let client = client.clone();
        async move {
            let claim = Api::<NodeClaim>::all(client).get(name).await?;
            assert!(
                claim.metadata.deletion_timestamp.is_some(),
                "{name} is being deleted"
            );
            Ok::<_, kube::Error>(
                claim
                    .annotations()
                    .get("karpenter.sh/nodeclaim-termination-timestamp")
                    .cloned(),
            )
        }
    };
    // Failed instance and system checks: drained at once (the termination timestamp is now).
    for name in ["impaired-a", "host-a"] {
        let stamp = termination_timestamp(name)
            .await?
            .expect("a termination timestamp");
        let stamp: jiff::Timestamp = stamp.parse()?;
        assert!(jiff::Timestamp::now().duration_since(stamp) < jiff::SignedDuration::from_secs(60));
    }
    // A scheduled event: drained as a scheduled change is, within budgets.
    assert_eq!(termination_timestamp("retiring-a").await?, None);

    // Each raises InstanceUnhealthy on the NodeClaim and its Node, then TerminatingOnInterruption.
    let all = events(&client).await?;
    for name in ["impaired-a", "host-a", "retiring-a"] {
        let reasons: Vec<(&str, &str)> = all
            .iter()
            .filter(|e| e[1] == name || e[1] == format!("node-{name}"))
            .map(|e| (e[0].as_str(), e[4].as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                ("Node", "InstanceUnhealthy"),
                ("Node", "TerminatingOnInterruption"),
                ("NodeClaim", "InstanceUnhealthy"),
                ("NodeClaim", "TerminatingOnInterruption"),
            ],
            "{name}"
        );
    }
    assert!(
        all.iter()
            .any(|e| e[5] == "An unhealthy warning was triggered for the instance")
    );
    // Polled, not received from a queue: not counted as received messages.
    assert_eq!(
        ["instance_status", "system_status", "event_status"].map(received),
        before
    );

    // A claim already being deleted still gets its termination timestamp, so its drain stops waiting.
    let (slow, _) = registered_claim(&client, &state, "slow-a", true).await?;
    Api::<NodeClaim>::all(client.clone())
        .delete("slow-a", &Default::default())
        .await?;
    let mut deleting = Api::<NodeClaim>::all(client.clone()).get("slow-a").await?;
    deleting.status = slow.status.clone();
    state.node_claims.apply(deleting);
    let handled = controller
        .handle(&message("i-slow-a", InterruptionKind::InstanceStatusImpaired))
        .await?;
    assert_eq!(handled, Handled::Noted);
    assert!(termination_timestamp("slow-a").await?.is_some());
    Ok(())
}
