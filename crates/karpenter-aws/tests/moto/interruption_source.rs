//! The SQS InterruptionSource against moto: every message kind becomes core events keyed by the bare instance
//! ID, a spot interruption marks the offering unavailable, a capacity reservation interruption marks its
//! reservation unavailable, and every message ends up deleted (the malformed one counted, not retried).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use aws_sdk_ec2::types::{InstanceMarketOptionsRequest, InstanceType, MarketType};
use aws_sdk_sqs::types::QueueAttributeName;
use karpenter_aws::interruption_source::SqsInterruptionSource;
use karpenter_aws::{InterruptionQueue, UnavailableOfferings};
use karpenter_core::cloudprovider::{InterruptionKind, InterruptionSource};

use crate::fixtures::{event, send_messages};
use crate::moto;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_kind_becomes_events_and_every_message_is_deleted() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    // A real spot instance, so the interruption can find its type and zone.
    let image_id = admin
        .ssm
        .get_parameter()
        .name("/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64")
        .send()
        .await
        .unwrap()
        .parameter()
        .and_then(|p| p.value())
        .unwrap()
        .to_string();
    let run = admin
        .ec2
        .run_instances()
        .image_id(image_id)
        .instance_type(InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .instance_market_options(
            InstanceMarketOptionsRequest::builder()
                .market_type(MarketType::Spot)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let spot = &run.instances()[0];
    let spot_id = spot.instance_id().unwrap().to_string();
    let zone = spot
        .placement()
        .and_then(|p| p.availability_zone())
        .unwrap()
        .to_string();

    admin
        .sqs
        .create_queue()
        .queue_name(crate::fixtures::CLUSTER)
        .send()
        .await
        .unwrap();
    let queue = InterruptionQueue::from_name(clients.sqs.clone(), crate::fixtures::CLUSTER)
        .await
        .unwrap();
    let bodies = [
        event(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            &format!(r#"{{"instance-id": "{spot_id}", "instance-action": "terminate"}}"#),
        ),
        event(
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            r#"{"instance-id": "i-0000000000000000b"}"#,
        ),
        event(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            r#"{"instance-id": "i-0000000000000000c", "state": "stopping"}"#,
        ),
        event(
            "aws.health",
            "AWS Health Event",
            r#"{"service": "EC2", "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED",
                "affectedEntities": [{"entityValue": "i-0000000000000000d"}, {"entityValue": "i-0000000000000000e"}]}"#,
        ),
        event(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            r#"{"instance-id": "i-0000000000000000f", "state": "running"}"#,
        ),
        event(
            "aws.ec2",
            "EC2 Capacity Reservation Instance Interruption Warning",
            r#"{"instance-id": "i-00000000000000010", "instance-action": "terminate",
                "instance-termination-time": "2026-12-02T12:02:00Z", "capacity-reservation-id": "cr-0000000000000000a"}"#,
        ),
        // As documented, without the reservation: an instance EC2 does not know marks nothing but still goes.
        event(
            "aws.ec2",
            "EC2 Capacity Reservation Instance Interruption Warning",
            r#"{"instance-id": "i-00000000000000011", "instance-action": "terminate",
                "instance-termination-time": "2026-12-02T12:02:00Z"}"#,
        ),
        "this is not an event".to_string(),
    ];
    send_messages(&admin.sqs, queue.url().unwrap(), &bodies).await;

    let unavailable = Arc::new(UnavailableOfferings::default());
    let source = SqsInterruptionSource::new(
        queue.clone(),
        clients.ec2.clone(),
        Arc::default(),
        Arc::clone(&unavailable),
    );
    let mut events = Vec::new();
    while events.len() < 7 {
        events.extend(source.receive().await.unwrap());
    }
    let mut seen: Vec<(String, InterruptionKind)> =
        events.iter().map(|e| (e.provider_id.clone(), e.kind)).collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let mut expected = vec![
        ("i-0000000000000000b".to_string(), InterruptionKind::Rebalance),
        (
            "i-0000000000000000c".to_string(),
            InterruptionKind::InstanceStopping,
        ),
        (
            "i-0000000000000000d".to_string(),
            InterruptionKind::ScheduledChange,
        ),
        (
            "i-0000000000000000e".to_string(),
            InterruptionKind::ScheduledChange,
        ),
        (spot_id.clone(), InterruptionKind::SpotInterruption),
        (
            "i-00000000000000010".to_string(),
            InterruptionKind::CapacityReservationInterruption,
        ),
        (
            "i-00000000000000011".to_string(),
            InterruptionKind::CapacityReservationInterruption,
        ),
    ];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(seen, expected);
    assert!(
        events
            .iter()
            .all(|e| e.at == "2026-12-02T12:00:00Z".parse().unwrap())
    );
    assert!(unavailable.is_unavailable("m5.large", &zone, "spot", Instant::now()));
    assert!(!unavailable.is_unavailable("m5.large", &zone, "on-demand", Instant::now()));
    assert!(unavailable.is_reservation_unavailable("cr-0000000000000000a", Instant::now()));
    assert_eq!(source.stats().malformed.load(Ordering::Relaxed), 1);
    assert_eq!(source.stats().ignored.load(Ordering::Relaxed), 1);

    // After shutdown, receive deletes what was handed out and says the source is closed.
    source.shutdown();
    assert!(source.receive().await.is_none());
    let attributes = admin
        .sqs
        .get_queue_attributes()
        .queue_url(queue.url().unwrap())
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    let attributes = attributes.attributes().unwrap();
    for name in [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ] {
        assert_eq!(attributes.get(&name).map(String::as_str), Some("0"), "{name:?}");
    }
    assert_eq!(source.stats().delete_errors.load(Ordering::Relaxed), 0);
}

/// The spot interruption warning of `instance`.
fn spot_warning(instance: &str) -> String {
    event(
        "aws.ec2",
        "EC2 Spot Instance Interruption Warning",
        &format!(r#"{{"instance-id": "{instance}", "instance-action": "terminate"}}"#),
    )
}

/// Messages on the queue, visible or not.
async fn messages_on(sqs: &aws_sdk_sqs::Client, url: &str) -> usize {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    let attributes = attributes.attributes().unwrap();
    [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ]
    .iter()
    .map(|name| {
        attributes
            .get(name)
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
    })
    .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_does_not_exist_yet_is_retried_until_it_does() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    // As the provider starts: the queue is named, not looked up.
    let queue = InterruptionQueue::named(clients.sqs.clone(), crate::fixtures::CLUSTER);
    let source = Arc::new(SqsInterruptionSource::new(
        queue,
        clients.ec2.clone(),
        Arc::default(),
        Arc::new(UnavailableOfferings::default()),
    ));
    let receiving = tokio::spawn({
        let source = Arc::clone(&source);
        async move { source.receive().await }
    });
    // The lookup fails and is retried (1 s, then 2 s, ...) rather than ending the source.
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while source.stats().receive_errors.load(Ordering::Relaxed) < 2 {
        assert!(Instant::now() < deadline, "the missing queue was not retried");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(!receiving.is_finished());

    let created = admin
        .sqs
        .create_queue()
        .queue_name(crate::fixtures::CLUSTER)
        .send()
        .await
        .unwrap();
    let url = created.queue_url().unwrap().to_string();
    send_messages(&admin.sqs, &url, &[spot_warning("i-0000000000000000a")]).await;
    let events = tokio::time::timeout(std::time::Duration::from_secs(120), receiving)
        .await
        .expect("the source reads the queue once it exists")
        .unwrap()
        .unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].provider_id, "i-0000000000000000a");
    source.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_controller_could_not_act_on_is_received_again_and_deleted_once_handled() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let created = admin
        .sqs
        .create_queue()
        .queue_name(crate::fixtures::CLUSTER)
        .send()
        .await
        .unwrap();
    let url = created.queue_url().unwrap().to_string();
    send_messages(
        &admin.sqs,
        &url,
        &[
            spot_warning("i-0000000000000000a"),
            spot_warning("i-0000000000000000b"),
        ],
    )
    .await;
    let source = SqsInterruptionSource::new(
        InterruptionQueue::named(clients.sqs.clone(), crate::fixtures::CLUSTER),
        clients.ec2.clone(),
        Arc::default(),
        Arc::new(UnavailableOfferings::default()),
    );
    let mut events = Vec::new();
    while events.len() < 2 {
        events.extend(source.receive().await.unwrap());
    }
    // The controller acted on b's message but could not on a's (an API error deleting its NodeClaim).
    let failed = events
        .iter()
        .find(|e| e.provider_id == "i-0000000000000000a")
        .unwrap()
        .clone();
    source.not_handled(&failed).await;

    // The next receive deletes b's message only; a's comes back once its visibility timeout has passed.
    let again = tokio::time::timeout(std::time::Duration::from_secs(90), source.receive())
        .await
        .expect("the failed message is delivered again")
        .unwrap();
    assert_eq!(again, vec![failed]);
    assert_eq!(
        messages_on(&admin.sqs, &url).await,
        1,
        "only the failed message is left"
    );

    // Handled this time: the receive after it deletes it.
    source.shutdown();
    assert!(source.receive().await.is_none());
    assert_eq!(messages_on(&admin.sqs, &url).await, 0);
    assert_eq!(source.stats().delete_errors.load(Ordering::Relaxed), 0);
}
