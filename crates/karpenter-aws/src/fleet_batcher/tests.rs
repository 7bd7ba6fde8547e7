use karpenter_api::ec2nodeclass::CapacityReservationType;
use karpenter_core::cloudprovider::UnavailableOffering;
use tokio::task::JoinHandle;

use super::*;
use crate::capacity_reservations::ReservationTarget;
use crate::launch::LaunchOverride;

/// A fleet that launches up to `capacity` instances per call (all asked for without it), reporting the rest
/// out of capacity, or fails every call with `fail`. Its first `failing_tag_calls` CreateTags fail.
#[derive(Default)]
struct FakeFleet {
    capacity: Option<usize>,
    fail: Option<&'static str>,
    failing_tag_calls: usize,
    calls: Mutex<Vec<(LaunchRequest, i32)>>,
    /// Every CreateTags call, failed ones included.
    tag_calls: Mutex<Vec<String>>,
    tagged: Mutex<Vec<(String, BTreeMap<String, String>)>>,
}

impl FakeFleet {
    fn calls(&self) -> Vec<(LaunchRequest, i32)> {
        self.calls.lock().unwrap().clone()
    }

    fn counts(&self) -> Vec<i32> {
        self.calls().into_iter().map(|(_, count)| count).collect()
    }
}

#[async_trait]
impl FleetApi for Arc<FakeFleet> {
    async fn launch(&self, request: &LaunchRequest, count: i32) -> Result<FleetResult, CloudProviderError> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            calls.push((request.clone(), count));
            calls.len()
        };
        if let Some(message) = self.fail {
            return Err(CloudProviderError::Transient(message.into()));
        }
        let asked = usize::try_from(count).unwrap();
        let launched = self.capacity.map_or(asked, |c| c.min(asked));
        let offering = &request.overrides[0];
        Ok(FleetResult {
            instances: (0..launched)
                .map(|n| LaunchedInstance {
                    instance_id: format!("i-{call}-{n}"),
                    instance_type: offering.instance_type.clone(),
                    zone: offering.zone.clone(),
                    capacity_type: request.capacity_type.clone(),
                })
                .collect(),
            unavailable: (launched < asked)
                .then(|| UnavailableOffering {
                    instance_type: offering.instance_type.clone(),
                    zone: offering.zone.clone(),
                    capacity_type: request.capacity_type.clone(),
                })
                .into_iter()
                .collect(),
            errors: Vec::new(),
        })
    }
}

#[async_trait]
impl InstanceTagger for Arc<FakeFleet> {
    async fn tag_instance(&self, instance_id: &str, tags: &BTreeMap<String, String>) -> Result<(), AwsError> {
        let call = {
            let mut calls = self.tag_calls.lock().unwrap();
            calls.push(instance_id.to_string());
            calls.len()
        };
        if call <= self.failing_tag_calls {
            return Err(AwsError::NotFound {
                operation: "CreateTags",
                code: "InvalidInstanceID.NotFound".into(),
                message: format!("The instance ID '{instance_id}' does not exist"),
            });
        }
        self.tagged
            .lock()
            .unwrap()
            .push((instance_id.to_string(), tags.clone()));
        Ok(())
    }
}

fn request(claim: &str, instance_type: &str) -> LaunchRequest {
    LaunchRequest {
        launch_template_name: "karpenter.k8s.aws/template".into(),
        capacity_type: "spot".into(),
        reservation: None,
        overrides: vec![LaunchOverride {
            instance_type: instance_type.into(),
            zone: "zone-a".into(),
            subnet_id: "subnet-a".into(),
            price: 0.05,
            image_id: None,
            launch_template_name: None,
        }],
        tags: BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            (AWS_TAG_NODECLAIM.to_string(), claim.to_string()),
        ]),
        zone_ids: BTreeMap::new(),
        context: None,
        prioritized: false,
    }
}

type Batcher = Arc<FleetBatcher<Arc<FakeFleet>>>;

fn new_batcher(fleet: &Arc<FakeFleet>, options: FleetBatchOptions) -> Batcher {
    Arc::new(FleetBatcher::new(Arc::clone(fleet), options))
}

fn spawn_launch(
    batcher: &Batcher,
    request: LaunchRequest,
) -> JoinHandle<Result<LaunchedInstance, CloudProviderError>> {
    let batcher = Arc::clone(batcher);
    tokio::spawn(async move { batcher.launch(&request).await })
}

#[tokio::test(start_paused = true)]
async fn launches_arriving_together_share_one_create_fleet_and_each_gets_its_own_instance() {
    let fleet = Arc::new(FakeFleet::default());
    let batcher = new_batcher(&fleet, FleetBatchOptions::default());
    let launches: Vec<_> = ["claim-1", "claim-2", "claim-3"]
        .into_iter()
        .map(|claim| spawn_launch(&batcher, request(claim, "m5.large")))
        .collect();
    let mut ids = Vec::new();
    for launch in launches {
        ids.push(launch.await.unwrap().unwrap().instance_id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "one instance each: {ids:?}");

    let calls = fleet.calls();
    assert_eq!(calls.len(), 1, "one CreateFleet");
    let (sent, count) = &calls[0];
    assert_eq!(*count, 3, "TotalTargetCapacity is the number of launches");
    assert!(
        !sent.tags.contains_key(AWS_TAG_NODECLAIM),
        "one fleet cannot name three NodeClaims"
    );
    assert_eq!(sent.tags["karpenter.sh/nodepool"], "default");
    let mut tagged: Vec<String> = fleet
        .tagged
        .lock()
        .unwrap()
        .iter()
        .map(|(_, tags)| tags[AWS_TAG_NODECLAIM].clone())
        .collect();
    tagged.sort();
    assert_eq!(
        tagged,
        ["claim-1", "claim-2", "claim-3"],
        "each instance tagged with its NodeClaim"
    );
}

/// The `_count` or `_sum` sample of histogram `name` for batcher `batcher` in the exported metrics.
fn batcher_sample(name: &str, batcher: &str) -> Option<f64> {
    let prefix = format!("{name}{{batcher=\"{batcher}\"}} ");
    karpenter_metrics::metrics()
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
}

#[tokio::test(start_paused = true)]
async fn each_batch_records_its_size_and_how_long_it_was_open() {
    let fleet = Arc::new(FakeFleet::default());
    // A label of its own: other tests' batches count under the default one.
    let options = FleetBatchOptions {
        batcher: "test_three_launches",
        ..FleetBatchOptions::default()
    };
    let batcher = new_batcher(&fleet, options);
    let launches: Vec<_> = ["claim-1", "claim-2", "claim-3"]
        .into_iter()
        .map(|claim| spawn_launch(&batcher, request(claim, "m5.large")))
        .collect();
    for launch in launches {
        launch.await.unwrap().unwrap();
    }
    let size = "karpenter_cloudprovider_batcher_batch_size";
    let time = "karpenter_cloudprovider_batcher_batch_time_seconds";
    assert_eq!(
        batcher_sample(&format!("{size}_count"), "test_three_launches"),
        Some(1.0)
    );
    assert_eq!(
        batcher_sample(&format!("{size}_sum"), "test_three_launches"),
        Some(3.0)
    );
    assert_eq!(
        batcher_sample(&format!("{time}_count"), "test_three_launches"),
        Some(1.0)
    );
    // The three arrived together, so the batch closed after the idle time.
    let open_for = batcher_sample(&format!("{time}_sum"), "test_three_launches").unwrap();
    assert!((0.035..0.1).contains(&open_for), "{open_for}");
}

#[tokio::test(start_paused = true)]
async fn a_launch_alone_is_sent_as_it_came_and_different_inputs_are_not_merged() {
    let fleet = Arc::new(FakeFleet::default());
    let batcher = new_batcher(&fleet, FleetBatchOptions::default());
    let alone = batcher.launch(&request("claim-1", "m5.large")).await.unwrap();
    assert_eq!(alone.instance_type, "m5.large");
    assert_eq!(fleet.calls(), [(request("claim-1", "m5.large"), 1)]);
    assert!(
        fleet.tagged.lock().unwrap().is_empty(),
        "tagged at launch already"
    );
    assert!(batcher.tag_ledger().is_applied(&alone.instance_id));

    let m5 = spawn_launch(&batcher, request("claim-2", "m5.large"));
    let c5 = spawn_launch(&batcher, request("claim-3", "c5.large"));
    assert_eq!(m5.await.unwrap().unwrap().instance_type, "m5.large");
    assert_eq!(c5.await.unwrap().unwrap().instance_type, "c5.large");
    assert_eq!(fleet.counts(), [1, 1, 1]);
}

#[tokio::test(start_paused = true)]
async fn launches_the_fleet_could_not_fill_get_its_capacity_error() {
    let fleet = Arc::new(FakeFleet {
        capacity: Some(1),
        ..FakeFleet::default()
    });
    let batcher = new_batcher(&fleet, FleetBatchOptions::default());
    let first = spawn_launch(&batcher, request("claim-1", "m5.large"));
    let second = spawn_launch(&batcher, request("claim-2", "m5.large"));
    let results = [first.await.unwrap(), second.await.unwrap()];
    assert_eq!(fleet.counts(), [2]);
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    let err = results.into_iter().find_map(Result::err).unwrap();
    let CloudProviderError::InsufficientCapacity { offerings, .. } = &err else {
        panic!("expected InsufficientCapacity, got {err:?}");
    };
    assert_eq!(offerings[0].instance_type, "m5.large");
}

#[tokio::test(start_paused = true)]
async fn a_failed_create_fleet_fails_every_launch_of_its_batch() {
    let fleet = Arc::new(FakeFleet {
        fail: Some("RequestLimitExceeded"),
        ..FakeFleet::default()
    });
    let batcher = new_batcher(&fleet, FleetBatchOptions::default());
    let first = spawn_launch(&batcher, request("claim-1", "m5.large"));
    let second = spawn_launch(&batcher, request("claim-2", "m5.large"));
    for launch in [first, second] {
        let err = launch.await.unwrap().unwrap_err();
        assert_eq!(err.category(), "Transient");
        assert_eq!(err.to_string(), "RequestLimitExceeded");
    }
    assert_eq!(fleet.counts(), [2]);
}

#[tokio::test(start_paused = true)]
async fn reservation_launches_are_sent_alone() {
    let fleet = Arc::new(FakeFleet::default());
    let batcher = new_batcher(&fleet, FleetBatchOptions::default());
    let reserved = |claim| LaunchRequest {
        capacity_type: "reserved".into(),
        reservation: Some(ReservationTarget {
            id: "cr-1".into(),
            reservation_type: CapacityReservationType::Default,
        }),
        ..request(claim, "m5.large")
    };
    let first = spawn_launch(&batcher, reserved("claim-1"));
    let second = spawn_launch(&batcher, reserved("claim-2"));
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(fleet.counts(), [1, 1]);
    assert!(
        fleet
            .calls()
            .iter()
            .all(|(sent, _)| sent.tags.contains_key(AWS_TAG_NODECLAIM))
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_closes_at_its_longest_wait_and_at_its_most_launches() {
    // Launches 30 ms apart never leave the batch idle for 35 ms: it closes after 100 ms open.
    let fleet = Arc::new(FakeFleet::default());
    let options = FleetBatchOptions {
        max_wait: Duration::from_millis(100),
        ..FleetBatchOptions::default()
    };
    let batcher = new_batcher(&fleet, options);
    let mut launches = Vec::new();
    for n in 0..6 {
        launches.push(spawn_launch(&batcher, request(&format!("claim-{n}"), "m5.large")));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    for launch in launches {
        launch.await.unwrap().unwrap();
    }
    assert_eq!(fleet.counts(), [4, 2], "arrivals at 0-90 ms, then 120 and 150 ms");

    let fleet = Arc::new(FakeFleet::default());
    let options = FleetBatchOptions {
        max_launches: 2,
        ..FleetBatchOptions::default()
    };
    let small_batches = new_batcher(&fleet, options);
    let launches: Vec<_> = (0..5)
        .map(|n| spawn_launch(&small_batches, request(&format!("claim-{n}"), "m5.large")))
        .collect();
    for launch in launches {
        launch.await.unwrap().unwrap();
    }
    let mut counts = fleet.counts();
    counts.sort_unstable();
    assert_eq!(counts, [1, 2, 2]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_tagging_is_tried_again_after_a_backoff() {
    // Right after the launch EC2 does not know the instances yet: each one's first CreateTags fails.
    let fleet = Arc::new(FakeFleet {
        failing_tag_calls: 2,
        ..FakeFleet::default()
    });
    let batcher = new_batcher(&fleet, FleetBatchOptions::default());
    let started = tokio::time::Instant::now();
    let first = spawn_launch(&batcher, request("claim-1", "m5.large"));
    let second = spawn_launch(&batcher, request("claim-2", "m5.large"));
    let ids = [
        first.await.unwrap().unwrap().instance_id,
        second.await.unwrap().unwrap().instance_id,
    ];
    assert_eq!(fleet.tag_calls.lock().unwrap().len(), 4, "two calls each");
    assert_eq!(fleet.tagged.lock().unwrap().len(), 2);
    for id in &ids {
        assert!(batcher.tag_ledger().is_applied(id), "{id}");
    }
    // The batch window (35 ms), then the first backoff (200 ms) before the second calls.
    assert_eq!(started.elapsed(), Duration::from_millis(235));
}

#[tokio::test(start_paused = true)]
async fn an_instance_whose_tagging_keeps_failing_launches_and_waits_for_its_tag() {
    let fleet = Arc::new(FakeFleet {
        failing_tag_calls: usize::MAX,
        ..FakeFleet::default()
    });
    let batcher = new_batcher(&fleet, FleetBatchOptions::default());
    let started = tokio::time::Instant::now();
    let first = spawn_launch(&batcher, request("claim-1", "m5.large"));
    let second = spawn_launch(&batcher, request("claim-2", "m5.large"));
    let first = first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    // Three calls each, 200 ms and 800 ms apart, and no more.
    assert_eq!(fleet.tag_calls.lock().unwrap().len(), 6);
    assert_eq!(started.elapsed(), Duration::from_millis(35 + 200 + 800));
    assert!(fleet.tagged.lock().unwrap().is_empty());
    let ledger = batcher.tag_ledger();
    assert!(!ledger.is_applied(&first.instance_id));
    assert_eq!(
        ledger.waiting(&first.instance_id),
        Some(BTreeMap::from([(
            AWS_TAG_NODECLAIM.to_string(),
            "claim-1".to_string()
        )])),
        "the tags the instance should carry"
    );
}
