//! The instance status poller against moto, signed as the controller (the policies of deploy/cloudformation.yaml,
//! whose conditions the request log checks): its three DescribeInstanceStatus queries run and a healthy running
//! instance is left alone; without ec2:DescribeInstanceStatus the poll fails with UnauthorizedOperation, on which
//! the poller stops.
//!
//! moto 5.2.5 cannot report an impaired instance: every running instance's instance and system checks are `ok`
//! with `reachability` `passed`, it lists no scheduled events, and it ignores the `instance-status.status`,
//! `system-status.status` and `event.code` filters (answering every running instance). Which statuses and events
//! are acted on is tested on DescribeInstanceStatus answers built with the SDK's types (src/instance_status/tests.rs).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{InstanceType, StatusType, SummaryStatus};
use karpenter_aws::instance_status::{InstanceStatusApi, InstanceStatusSource, poll, status_filters};
use karpenter_aws::sdk_metrics::request_count;
use karpenter_core::cloudprovider::InterruptionSource;

use crate::fixtures::al2023_image_id;
use crate::moto;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poll_runs_under_the_controller_policies_and_leaves_a_healthy_instance_alone() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let image_id = al2023_image_id(&admin.ssm).await;
    let run = admin
        .ec2
        .run_instances()
        .image_id(image_id)
        .instance_type(InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .unwrap();
    let instance_id = run.instances()[0].instance_id().unwrap().to_string();

    // Each query answers (moto: with every running instance), and the instance's checks pass.
    for filter in status_filters() {
        let statuses = clients.ec2.statuses(filter).await.unwrap();
        let ours = statuses
            .iter()
            .find(|s| s.instance_id() == Some(instance_id.as_str()))
            .expect("the running instance is reported");
        for summary in [ours.instance_status(), ours.system_status()] {
            let summary = summary.unwrap();
            assert_eq!(summary.status(), Some(&SummaryStatus::Ok));
            assert!(
                summary
                    .details()
                    .iter()
                    .all(|d| d.status() == Some(&StatusType::Passed))
            );
        }
    }
    assert_eq!(
        poll(&clients.ec2, jiff::Timestamp::now()).await.unwrap(),
        [],
        "nothing to act on"
    );

    // The source polls at once and, finding nothing, hands nothing out: it polls on at its interval.
    let polled = || request_count("EC2", "DescribeInstanceStatus", "OK");
    let before = polled();
    let source =
        InstanceStatusSource::with_interval(Arc::new(clients.ec2.clone()), Duration::from_millis(200));
    let received = tokio::time::timeout(Duration::from_secs(2), source.receive()).await;
    assert!(
        received.is_err(),
        "a healthy instance is not handed out: {received:?}"
    );
    assert!(
        polled() >= before + 6,
        "at least two polls of three queries: {} calls",
        polled() - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_permission_the_poll_is_unauthorized_and_the_poller_stops() {
    let moto = crate::support::MotoServer::start_without(&["m5.large"], &["ec2:DescribeInstanceStatus"]);
    let clients = moto.clients("us-west-2").await;
    let err = poll(&clients.ec2, jiff::Timestamp::now()).await.unwrap_err();
    assert_eq!(err.code(), Some("UnauthorizedOperation"), "{err}");

    let refused = || request_count("EC2", "DescribeInstanceStatus", "UnauthorizedOperation");
    let before = refused();
    let source = Arc::new(InstanceStatusSource::with_interval(
        Arc::new(clients.ec2.clone()),
        Duration::from_millis(100),
    ));
    let receiving = tokio::spawn({
        let source = Arc::clone(&source);
        async move { source.receive().await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!receiving.is_finished());
    assert_eq!(refused(), before + 1, "one refused call, then no more polls");
    source.shutdown();
    assert!(receiving.await.unwrap().is_none());
}
