use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::ec2nodeclass::{EC2NodeClassSpec, EC2NodeClassStatus, InstanceMatchCriteria};
use karpenter_sim::{ApiServer, VirtualClock};
use kube::api::PostParams;

use super::*;

const NOW: &str = "2026-12-02T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn reservation(id: &str, kind: CapacityReservationType, end: Option<Timestamp>) -> CapacityReservation {
    CapacityReservation {
        availability_zone: "us-west-2a".into(),
        end_time: end.map(Time),
        id: id.into(),
        instance_match_criteria: InstanceMatchCriteria::Targeted,
        instance_type: "p5.48xlarge".into(),
        owner_id: "123456789012".into(),
        reservation_type: kind,
        interruptible: false,
        state: CapacityReservationState::Active,
    }
}

fn class_with(reservations: Vec<CapacityReservation>) -> EC2NodeClass {
    let mut class = EC2NodeClass::new("default", EC2NodeClassSpec::default());
    class.status = Some(EC2NodeClassStatus {
        capacity_reservations: reservations,
        ..EC2NodeClassStatus::default()
    });
    class
}

fn claim(name: &str, capacity_type: &str, reservation: Option<(&str, &str)>) -> NodeClaim {
    let mut labels = json!({"karpenter.sh/nodepool": "default", CAPACITY_TYPE_LABEL: capacity_type});
    if let Some((id, kind)) = reservation {
        labels[AWS_CAPACITY_RESERVATION_ID_LABEL] = json!(id);
        labels[AWS_CAPACITY_RESERVATION_TYPE_LABEL] = json!(kind);
        labels[AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL] = json!("false");
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        },
        "status": {"nodeName": format!("node-{name}")}
    }))
    .unwrap()
}

fn minutes(n: i64) -> jiff::SignedDuration {
    jiff::SignedDuration::from_mins(n)
}

#[test]
fn a_claim_whose_reservation_is_gone_or_expiring_is_demoted() {
    let mut expiring = reservation("cr-expiring", CapacityReservationType::Default, None);
    expiring.state = CapacityReservationState::Expiring;
    let classes = [class_with(vec![
        reservation("cr-active", CapacityReservationType::Default, None),
        expiring,
    ])];
    let claims = [
        claim("gone", "reserved", Some(("cr-gone", "default"))),
        claim("expiring", "reserved", Some(("cr-expiring", "default"))),
        claim("active", "reserved", Some(("cr-active", "default"))),
        claim("on-demand", "on-demand", None),
    ];
    let actions = reservation_actions(&claims, &classes, now());
    assert_eq!(
        actions,
        [
            ReservationAction::Demote {
                node_claim: "gone".into(),
                node: Some("node-gone".into()),
                reservation_id: "cr-gone".into(),
            },
            ReservationAction::Demote {
                node_claim: "expiring".into(),
                node: Some("node-expiring".into()),
                reservation_id: "cr-expiring".into(),
            },
        ]
    );
}

#[test]
fn a_capacity_block_claim_expires_forty_minutes_before_the_block_ends() {
    let ends_soon = now() + minutes(40);
    let ends_later = now() + minutes(41);
    let classes = [class_with(vec![
        reservation("cr-soon", CapacityReservationType::CapacityBlock, Some(ends_soon)),
        reservation(
            "cr-later",
            CapacityReservationType::CapacityBlock,
            Some(ends_later),
        ),
    ])];
    let claims = [
        claim("soon", "reserved", Some(("cr-soon", "capacity-block"))),
        claim("later", "reserved", Some(("cr-later", "capacity-block"))),
    ];
    assert_eq!(
        reservation_actions(&claims, &classes, now()),
        [ReservationAction::Expire {
            node_claim: "soon".into(),
            reservation_id: "cr-soon".into(),
            ends_at: ends_soon,
        }]
    );
    // A minute later the other block is inside the window too.
    let later: Vec<_> = reservation_actions(&claims, &classes, now() + minutes(1))
        .into_iter()
        .filter_map(|action| match action {
            ReservationAction::Expire { node_claim, .. } => Some(node_claim),
            ReservationAction::Demote { .. } => None,
        })
        .collect();
    assert_eq!(later, ["soon", "later"]);
}

#[test]
fn claims_without_a_resolved_class_or_already_deleting_are_left_alone() {
    let mut unresolved = class_with(Vec::new());
    unresolved.status = None;
    let gone = [claim("a", "reserved", Some(("cr-gone", "default")))];
    assert!(reservation_actions(&gone, &[unresolved], now()).is_empty());
    assert!(
        reservation_actions(&gone, &[], now()).is_empty(),
        "no class at all"
    );

    let mut deleting = claim("b", "reserved", Some(("cr-gone", "default")));
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    assert!(reservation_actions(&[deleting], &[class_with(Vec::new())], now()).is_empty());
}

// --- against the in-memory API server -----------------------------------------------------------------------------

async fn cluster(classes: Vec<CapacityReservation>) -> (ApiServer, ReservationLifecycleContext) {
    let clock = VirtualClock::starting_at(now());
    let server = ApiServer::new(clock);
    let client = server.client();
    let class = class_with(classes);
    let classes: Api<EC2NodeClass> = Api::all(client.clone());
    classes.create(&PostParams::default(), &class).await.unwrap();
    let status = json!({"status": class.status});
    classes
        .patch_status("default", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let ctx = ReservationLifecycleContext::new(client, Arc::new(clock));
    (server, ctx)
}

async fn create_claim_and_node(client: &kube::Client, claim: &NodeClaim) {
    let claims: Api<NodeClaim> = Api::all(client.clone());
    claims.create(&PostParams::default(), claim).await.unwrap();
    let status = json!({"status": claim.status});
    claims
        .patch_status(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{}", claim.name_any()), "labels": claim.metadata.labels}
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
}

/// (regarded object's kind and name, type, reason, note) of every Event, sorted.
async fn events(client: &kube::Client) -> Vec<(String, String, String, String, String)> {
    let listed = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut events: Vec<_> = listed
        .items
        .into_iter()
        .map(|e| {
            let regarding = e.regarding.unwrap_or_default();
            (
                regarding.kind.unwrap_or_default(),
                regarding.name.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect();
    events.sort();
    events
}

fn reservation_labels(labels: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
    labels
        .iter()
        .filter(|(key, _)| {
            *key == CAPACITY_TYPE_LABEL || key.starts_with("karpenter.k8s.aws/capacity-reservation")
        })
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect()
}

#[tokio::test]
async fn a_claim_and_node_in_an_ended_reservation_become_on_demand() {
    let (_server, ctx) = cluster(vec![reservation(
        "cr-active",
        CapacityReservationType::Default,
        None,
    )])
    .await;
    create_claim_and_node(
        &ctx.client,
        &claim("ended", "reserved", Some(("cr-ended", "default"))),
    )
    .await;
    create_claim_and_node(
        &ctx.client,
        &claim("kept", "reserved", Some(("cr-active", "default"))),
    )
    .await;

    let outcome = reconcile(&ctx).await.unwrap();
    assert_eq!(outcome.demoted, ["ended"]);
    assert!(outcome.expired.is_empty());

    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let on_demand = [(CAPACITY_TYPE_LABEL, "on-demand")];
    let ended = claims.get("ended").await.unwrap();
    assert_eq!(reservation_labels(ended.labels()), on_demand);
    assert_eq!(
        ended.labels()["karpenter.sh/nodepool"],
        "default",
        "other labels stay"
    );
    let ended_node = nodes.get("node-ended").await.unwrap();
    assert_eq!(reservation_labels(ended_node.labels()), on_demand);

    let kept = claims.get("kept").await.unwrap();
    assert_eq!(kept.labels()[CAPACITY_TYPE_LABEL], "reserved");
    assert_eq!(kept.labels()[AWS_CAPACITY_RESERVATION_ID_LABEL], "cr-active");
    let kept_node = nodes.get("node-kept").await.unwrap();
    assert_eq!(kept_node.labels()[CAPACITY_TYPE_LABEL], "reserved");

    // The relabelled claim, and only it, says why.
    assert_eq!(
        events(&ctx.client).await,
        [(
            "NodeClaim".to_string(),
            "ended".to_string(),
            "Warning".to_string(),
            "CapacityReservationEnded".to_string(),
            "Capacity reservation cr-ended is no longer active; the instance keeps running as on-demand \
             capacity"
                .to_string()
        )]
    );

    // Nothing is left to do on the next pass.
    assert_eq!(reconcile(&ctx).await.unwrap(), LifecycleOutcome::default());
    assert_eq!(events(&ctx.client).await.len(), 1);
}

#[tokio::test]
async fn a_claim_in_a_capacity_block_is_deleted_forty_minutes_before_the_end() {
    let (_server, ctx) = cluster(vec![
        reservation(
            "cr-block",
            CapacityReservationType::CapacityBlock,
            Some(now() + minutes(30)),
        ),
        reservation(
            "cr-later",
            CapacityReservationType::CapacityBlock,
            Some(now() + minutes(90)),
        ),
    ])
    .await;
    create_claim_and_node(
        &ctx.client,
        &claim("block", "reserved", Some(("cr-block", "capacity-block"))),
    )
    .await;
    create_claim_and_node(
        &ctx.client,
        &claim("later", "reserved", Some(("cr-later", "capacity-block"))),
    )
    .await;

    let outcome = reconcile(&ctx).await.unwrap();
    assert_eq!(outcome.expired, ["block"]);
    assert!(outcome.demoted.is_empty());
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    assert!(claims.get_opt("block").await.unwrap().is_none(), "deleted");
    let later = claims.get("later").await.unwrap();
    assert_eq!(later.labels()[CAPACITY_TYPE_LABEL], "reserved", "untouched");
    assert_eq!(
        events(&ctx.client).await,
        [(
            "NodeClaim".to_string(),
            "block".to_string(),
            "Warning".to_string(),
            "CapacityBlockExpiring".to_string(),
            "Capacity block cr-block ends at 2026-12-02T12:30:00Z; deleting the NodeClaim so its pods move \
             before EC2 reclaims the instance"
                .to_string()
        )]
    );
}
