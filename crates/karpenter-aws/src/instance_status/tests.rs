use std::sync::Mutex as StdMutex;

use aws_sdk_ec2::types::{
    EbsStatusDetails, EbsStatusSummary, InstanceStatusDetails, InstanceStatusEvent, InstanceStatusSummary,
    StatusName,
};
use aws_smithy_types::DateTime;

use super::*;

fn at(time: &str) -> Timestamp {
    time.parse().unwrap()
}

fn sdk_time(time: Timestamp) -> DateTime {
    DateTime::from_secs(time.as_second())
}

fn detail(status: StatusType, since: Option<Timestamp>) -> InstanceStatusDetails {
    InstanceStatusDetails::builder()
        .name(StatusName::Reachability)
        .status(status)
        .set_impaired_since(since.map(sdk_time))
        .build()
}

fn summary(status: SummaryStatus, details: Vec<InstanceStatusDetails>) -> InstanceStatusSummary {
    InstanceStatusSummary::builder()
        .status(status)
        .set_details(Some(details))
        .build()
}

fn impaired(since: Option<Timestamp>) -> InstanceStatusSummary {
    summary(SummaryStatus::Impaired, vec![detail(StatusType::Failed, since)])
}

fn ok() -> InstanceStatusSummary {
    summary(SummaryStatus::Ok, vec![detail(StatusType::Passed, None)])
}

fn ebs_impaired(since: Timestamp) -> EbsStatusSummary {
    EbsStatusSummary::builder()
        .status(SummaryStatus::Impaired)
        .details(
            EbsStatusDetails::builder()
                .name(StatusName::Reachability)
                .status(StatusType::Failed)
                .impaired_since(sdk_time(since))
                .build(),
        )
        .build()
}

fn retirement() -> InstanceStatusEvent {
    InstanceStatusEvent::builder()
        .code(EventCode::InstanceRetirement)
        .description("The instance is running on degraded hardware")
        .build()
}

fn status(
    id: &str,
    instance: InstanceStatusSummary,
    system: InstanceStatusSummary,
    events: Vec<InstanceStatusEvent>,
) -> InstanceStatus {
    InstanceStatus::builder()
        .instance_id(id)
        .instance_status(instance)
        .system_status(system)
        .set_events(Some(events))
        .build()
}

const T0: &str = "2026-03-01T12:00:00Z";

#[test]
fn every_failed_check_past_the_threshold_and_every_scheduled_event_is_reported() {
    // Upstream's "should return all impairment details": instance, system and EBS checks failed an hour ago, and
    // a retirement is scheduled.
    let since = at(T0);
    let now = at("2026-03-01T13:00:00Z");
    let mut all = status(
        "i-0123456789",
        impaired(Some(since)),
        impaired(Some(since)),
        vec![retirement()],
    );
    all.attached_ebs_status = Some(ebs_impaired(since));
    let unhealthy = unhealthy_instances(&[all], now);
    assert_eq!(unhealthy.len(), 1);
    let instance = &unhealthy[0];
    assert_eq!(instance.instance_id, "i-0123456789");
    assert_eq!(instance.impaired_since, since, "the earliest impairment");
    let checks: Vec<(StatusCategory, &str, Option<Timestamp>)> = instance
        .checks
        .iter()
        .map(|c| (c.category, c.name.as_str(), c.impaired_since))
        .collect();
    assert_eq!(
        checks,
        [
            (StatusCategory::InstanceStatus, "reachability", Some(since)),
            (StatusCategory::SystemStatus, "reachability", Some(since)),
            (StatusCategory::EbsStatus, "reachability", Some(since)),
            (StatusCategory::EventStatus, "instance-retirement", Some(now)),
        ]
    );
    // One event per category acted on: EBS is not.
    let event = |kind| InterruptionEvent {
        provider_id: "i-0123456789".into(),
        kind,
        at: since,
    };
    assert_eq!(
        instance.events(),
        [
            event(InterruptionKind::InstanceStatusImpaired),
            event(InterruptionKind::SystemStatusImpaired),
            event(InterruptionKind::ScheduledEvent),
        ]
    );
}

#[test]
fn healthy_and_undecided_statuses_are_left_alone() {
    // Upstream's "should not return healthy statuses": initializing and insufficient-data are not failures,
    // nor is a passed check.
    let initializing = summary(
        SummaryStatus::Initializing,
        vec![detail(StatusType::Initializing, None)],
    );
    let no_data = summary(
        SummaryStatus::InsufficientData,
        vec![detail(StatusType::InsufficientData, None)],
    );
    let statuses = [
        status("i-initializing", initializing, no_data, vec![]),
        status("i-ok", ok(), ok(), vec![]),
    ];
    assert_eq!(unhealthy_instances(&statuses, at(T0)), []);
}

#[test]
fn a_scheduled_event_is_reported_at_once_even_when_the_checks_pass() {
    let now = at(T0);
    let statuses = [status("i-retiring", ok(), ok(), vec![retirement()])];
    let unhealthy = unhealthy_instances(&statuses, now);
    assert_eq!(unhealthy.len(), 1);
    assert_eq!(
        unhealthy[0].categories(),
        BTreeSet::from([StatusCategory::EventStatus])
    );
    assert_eq!(
        unhealthy[0].events(),
        [InterruptionEvent {
            provider_id: "i-retiring".into(),
            kind: InterruptionKind::ScheduledEvent,
            at: now,
        }]
    );
}

#[test]
fn a_failed_check_counts_once_it_has_failed_for_two_minutes() {
    let since = at(T0);
    let statuses = [status("i-a", impaired(Some(since)), ok(), vec![])];
    let just_before = since + jiff::SignedDuration::from_secs(119);
    assert_eq!(unhealthy_instances(&statuses, just_before), []);
    let threshold = since + jiff::SignedDuration::from_secs(120);
    let unhealthy = unhealthy_instances(&statuses, threshold);
    assert_eq!(unhealthy.len(), 1);
    assert_eq!(
        unhealthy[0].events()[0].kind,
        InterruptionKind::InstanceStatusImpaired
    );
    // A failure EC2 does not date has failed for long enough (upstream's zero time).
    let undated = [status("i-b", ok(), impaired(None), vec![])];
    let unhealthy = unhealthy_instances(&undated, at(T0));
    assert_eq!(unhealthy.len(), 1);
    assert_eq!(unhealthy[0].impaired_since, at(T0), "the poll's time");
    assert_eq!(
        unhealthy[0].events()[0].kind,
        InterruptionKind::SystemStatusImpaired
    );
}

#[test]
fn only_failed_ebs_checks_are_reported_but_not_acted_on() {
    let since = at(T0);
    let mut recent_instance_failure = status(
        "i-ebs",
        impaired(Some(since + jiff::SignedDuration::from_secs(3590))),
        ok(),
        vec![],
    );
    recent_instance_failure.attached_ebs_status = Some(ebs_impaired(since));
    let unhealthy = unhealthy_instances(&[recent_instance_failure], at("2026-03-01T13:00:00Z"));
    assert_eq!(unhealthy.len(), 1);
    assert_eq!(
        unhealthy[0].categories(),
        BTreeSet::from([StatusCategory::EbsStatus])
    );
    assert_eq!(unhealthy[0].events(), []);
}

#[test]
fn an_instance_several_queries_return_is_reported_once() {
    let since = at(T0);
    let both = status("i-both", impaired(Some(since)), impaired(Some(since)), vec![]);
    let statuses = [both.clone(), both, status("i-a", ok(), ok(), vec![retirement()])];
    let unhealthy = unhealthy_instances(&statuses, at("2026-03-01T13:00:00Z"));
    let ids: Vec<&str> = unhealthy.iter().map(|u| u.instance_id.as_str()).collect();
    assert_eq!(ids, ["i-a", "i-both"]);
    assert_eq!(unhealthy[1].checks.len(), 2);
}

#[test]
fn the_queries_or_the_two_impaired_statuses_and_the_scheduled_events() {
    let filters: Vec<(String, Vec<String>)> = status_filters()
        .iter()
        .map(|f| (f.name().unwrap().to_string(), f.values().to_vec()))
        .collect();
    assert_eq!(
        filters,
        [
            ("instance-status.status".to_string(), vec!["impaired".to_string()]),
            ("system-status.status".to_string(), vec!["impaired".to_string()]),
            (
                "event.code".to_string(),
                [
                    "instance-reboot",
                    "system-reboot",
                    "system-maintenance",
                    "instance-retirement",
                    "instance-stop"
                ]
                .map(String::from)
                .to_vec()
            ),
        ]
    );
}

/// Answers every query with the statuses set, or with the next error queued, or refuses every call; counts the
/// calls.
#[derive(Default)]
struct FakeEc2 {
    statuses: StdMutex<Vec<InstanceStatus>>,
    errors: StdMutex<Vec<AwsError>>,
    refuse: std::sync::atomic::AtomicBool,
    calls: std::sync::atomic::AtomicUsize,
}

impl FakeEc2 {
    fn set(&self, statuses: Vec<InstanceStatus>) {
        *self.statuses.lock().unwrap() = statuses;
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl InstanceStatusApi for FakeEc2 {
    async fn statuses(&self, _filter: Filter) -> Result<Vec<InstanceStatus>, AwsError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.refuse.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(AwsError::from_code(
                "DescribeInstanceStatus",
                UNAUTHORIZED.into(),
                "You are not authorized to perform this operation.".into(),
            ));
        }
        if let Some(err) = self.errors.lock().unwrap().pop() {
            return Err(err);
        }
        Ok(self.statuses.lock().unwrap().clone())
    }
}

fn unhealthy_count(category: &str) -> u64 {
    karpenter_metrics::metrics()
        .interruption_instance_status_unhealthy
        .get_or_create(&karpenter_metrics::StatusCategoryLabels {
            category: category.into(),
        })
        .get()
}

#[tokio::test(start_paused = true)]
async fn an_instance_of_the_cluster_is_counted_once_while_it_stays_unhealthy() {
    let ec2 = Arc::new(FakeEc2::default());
    let long_ago = at("2020-01-01T00:00:00Z");
    let broken = status("i-ours", impaired(Some(long_ago)), ok(), vec![]);
    let not_ours = status("i-theirs", ok(), impaired(Some(long_ago)), vec![]);
    ec2.set(vec![broken.clone(), not_ours]);
    let source = InstanceStatusSource::with_interval(ec2.clone(), Duration::from_secs(60));
    let before = unhealthy_count("InstanceStatus");
    let before_system = unhealthy_count("SystemStatus");

    // The first poll is at once, with the three queries.
    let started = tokio::time::Instant::now();
    let events = source.receive().await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(ec2.calls(), 3);
    let kinds: Vec<(&str, InterruptionKind)> =
        events.iter().map(|e| (e.provider_id.as_str(), e.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("i-ours", InterruptionKind::InstanceStatusImpaired),
            ("i-theirs", InterruptionKind::SystemStatusImpaired),
        ]
    );
    // The controller finds a NodeClaim for ours only.
    source.claimed(&events[0]).await;
    assert_eq!(unhealthy_count("InstanceStatus"), before + 1);
    assert_eq!(
        unhealthy_count("SystemStatus"),
        before_system,
        "not the cluster's"
    );

    // Still unhealthy a minute after the controller handled it: handed out again, not counted again.
    ec2.set(vec![broken.clone()]);
    let events = source.receive().await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(60));
    assert_eq!(ec2.calls(), 6);
    source.claimed(&events[0]).await;
    assert_eq!(unhealthy_count("InstanceStatus"), before + 1);

    // Healthy at the next poll (nothing to hand out, so it polls on), then unhealthy again: counted again.
    ec2.set(Vec::new());
    let (events, ()) = tokio::join!(source.receive(), async {
        tokio::time::sleep(Duration::from_secs(90)).await;
        ec2.set(vec![broken.clone()]);
    });
    let events = events.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(180));
    assert_eq!(ec2.calls(), 12);
    source.claimed(&events[0]).await;
    assert_eq!(unhealthy_count("InstanceStatus"), before + 2);

    // A poll whose event no NodeClaim claims (its claim is gone) forgets the pair: counted again after.
    assert_eq!(source.receive().await.unwrap().len(), 1);
    let events = source.receive().await.unwrap();
    source.claimed(&events[0]).await;
    assert_eq!(unhealthy_count("InstanceStatus"), before + 3);

    source.shutdown();
    assert!(source.receive().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn without_the_permission_the_poller_stops_and_other_errors_are_retried() {
    let ec2 = Arc::new(FakeEc2::default());
    let long_ago = at("2020-01-01T00:00:00Z");
    ec2.set(vec![status("i-a", impaired(Some(long_ago)), ok(), vec![])]);
    ec2.errors.lock().unwrap().push(AwsError::from_code(
        "DescribeInstanceStatus",
        "InternalError".into(),
        "try again".into(),
    ));
    let source = Arc::new(InstanceStatusSource::with_interval(
        ec2.clone(),
        Duration::from_secs(60),
    ));
    let started = tokio::time::Instant::now();
    let events = source.receive().await.unwrap();
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(60),
        "a failed poll is tried again at the next interval"
    );
    assert_eq!(events.len(), 1);

    ec2.refuse.store(true, std::sync::atomic::Ordering::SeqCst);
    let receiving = tokio::spawn({
        let source = Arc::clone(&source);
        async move { source.receive().await }
    });
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!receiving.is_finished(), "stopped, not returning");
    let calls = ec2.calls();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(ec2.calls(), calls, "no poll after the refusal");
    source.shutdown();
    assert!(receiving.await.unwrap().is_none());
}
