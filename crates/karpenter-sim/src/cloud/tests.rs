use super::*;
use crate::clock::VirtualClock;
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const CATALOG: &str = include_str!("../../tests/fixtures/catalog.json");

fn start() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn cloud_with(catalog: &str) -> Result<SimCloudProvider, Box<dyn std::error::Error + Send + Sync>> {
    let catalog = CatalogFile::from_json_str(catalog)?;
    Ok(SimCloudProvider::new(
        catalog,
        Arc::new(VirtualClock::starting_at(start())),
        SimCloudOptions::default(),
    ))
}

fn cloud() -> Result<SimCloudProvider, Box<dyn std::error::Error + Send + Sync>> {
    cloud_with(CATALOG)
}

fn claim(
    name: &str,
    requirements: serde_json::Value,
    requests: serde_json::Value,
) -> Result<NodeClaim, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": requirements,
            "resources": {"requests": requests},
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }
    }))
}

fn launched(claim: &NodeClaim) -> (String, String, String, String) {
    let l = claim.metadata.labels.clone().unwrap_or_default();
    let get = |k: &str| l.get(k).cloned().unwrap_or_default();
    (
        get(labels::INSTANCE_TYPE_LABEL),
        get(labels::ZONE_LABEL),
        get(labels::CAPACITY_TYPE_LABEL),
        claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default(),
    )
}

#[tokio::test(start_paused = true)]
async fn create_picks_the_cheapest_compatible_offering_and_hydrates_the_claim() -> TestResult {
    let cloud = cloud()?;
    let any = cloud.create(&claim("a", json!([]), json!({}))?).await?;
    let (it, zone, ct, pid) = launched(&any);
    assert_eq!(
        (it.as_str(), zone.as_str(), ct.as_str()),
        ("small-instance-type", "test-zone-1", "spot")
    );
    assert!(pid.starts_with("sim:///test-zone-1/i-"), "{pid}");
    let status = any.status.clone().unwrap_or_default();
    assert_eq!(status.image_id.as_deref(), Some(SIM_IMAGE_ID));
    let capacity = status.capacity.unwrap_or_default();
    let allocatable = status.allocatable.unwrap_or_default();
    assert_eq!(capacity.get("cpu").map(|q| q.0.as_str()), Some("2"));
    assert_eq!(allocatable.get("cpu").map(|q| q.0.as_str()), Some("1900m"));
    let labels = any.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("kubernetes.io/arch").map(String::as_str),
        Some("amd64")
    );
    assert_eq!(labels.get("kubernetes.io/os").map(String::as_str), Some("linux"));
    assert_eq!(labels.get("size").map(String::as_str), Some("small"));
    assert_eq!(
        labels.get("karpenter.sh/nodepool").map(String::as_str),
        Some("default")
    );

    // On-demand only: the cheapest on-demand offering; zone ties go by name.
    let od = cloud
        .create(&claim(
            "b",
            json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]),
            json!({}),
        )?)
        .await?;
    assert_eq!(launched(&od).0, "small-instance-type");
    assert_eq!(launched(&od).1, "test-zone-1");
    assert_eq!(launched(&od).2, "on-demand");

    // Requests rule out the small type; NotIn and DoesNotExist constrain like any requirement.
    let big = cloud
        .create(&claim(
            "c",
            json!([
                {"key": "size", "operator": "NotIn", "values": ["medium"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-2"]},
                {"key": "example.com/absent", "operator": "DoesNotExist"}
            ]),
            json!({"cpu": "3"}),
        )?)
        .await?;
    let (it, zone, ct, _) = launched(&big);
    assert_eq!(
        (it.as_str(), zone.as_str(), ct.as_str()),
        ("large-instance-type", "test-zone-2", "on-demand")
    );
    assert_eq!(cloud.launch_log().len(), 3);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn numeric_operators_select_instance_types() -> TestResult {
    let catalog = json!({"wellKnownLabels": ["cpus"], "instanceTypes": [
        {"name": "two", "requirements": [{"key": "cpus", "operator": "In", "values": ["2"]}],
         "capacity": {"cpu": "2", "memory": "4Gi", "pods": "10"}, "overhead": {},
         "offerings": [{"zone": "z", "capacityType": "on-demand", "price": 0.1, "available": true}]},
        {"name": "eight", "requirements": [{"key": "cpus", "operator": "In", "values": ["8"]}],
         "capacity": {"cpu": "8", "memory": "16Gi", "pods": "10"}, "overhead": {},
         "offerings": [{"zone": "z", "capacityType": "on-demand", "price": 0.4, "available": true}]}
    ]});
    let cloud = cloud_with(&catalog.to_string())?;
    let gt = cloud
        .create(&claim(
            "gt",
            json!([{"key": "cpus", "operator": "Gt", "values": ["4"]}]),
            json!({}),
        )?)
        .await?;
    assert_eq!(launched(&gt).0, "eight");
    let lt = cloud
        .create(&claim(
            "lt",
            json!([{"key": "cpus", "operator": "Lt", "values": ["4"]}]),
            json!({}),
        )?)
        .await?;
    assert_eq!(launched(&lt).0, "two");
    let none = cloud
        .create(&claim(
            "none",
            json!([{"key": "cpus", "operator": "Gt", "values": ["8"]}]),
            json!({}),
        )?)
        .await;
    assert!(matches!(
        none,
        Err(CloudProviderError::InsufficientCapacity { .. })
    ));
    assert_eq!(
        cloud.launch_log().last().map(|r| r.outcome.clone()),
        Some(LaunchOutcome::NoCompatibleOffering)
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn insufficient_capacity_fails_then_falls_back_and_expires_after_three_minutes() -> TestResult {
    let cloud = cloud()?;
    let spot = OfferingKey::new("small-instance-type", "test-zone-1", "spot");
    cloud.set_insufficient_capacity(spot.clone(), true);
    let first = cloud.create(&claim("a", json!([]), json!({}))?).await;
    match first {
        Err(CloudProviderError::InsufficientCapacity { offerings, .. }) => {
            assert_eq!(offerings, vec![spot.unavailable()]);
        }
        other => return Err(format!("expected InsufficientCapacity, got {other:?}").into()),
    }
    // The offering is out of the catalog's available offerings for a while.
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    }))?;
    let types = cloud.instance_types(&pool).await?;
    let small = types
        .iter()
        .find(|t| t.name == "small-instance-type")
        .ok_or("small type")?;
    assert!(
        !small
            .offerings
            .iter()
            .any(|o| o.capacity_type == "spot" && o.available)
    );

    // The next create falls back to the next cheapest offering.
    let second = cloud.create(&claim("b", json!([]), json!({}))?).await?;
    assert_eq!(launched(&second).0, "medium-instance-type");
    assert_eq!(launched(&second).2, "spot");

    // Three minutes later the cache forgets it; the capacity is back, so it launches again.
    cloud.set_insufficient_capacity(spot.clone(), false);
    tokio::time::sleep(Duration::from_secs(181)).await;
    let third = cloud.create(&claim("c", json!([]), json!({}))?).await?;
    assert_eq!(launched(&third).0, "small-instance-type");
    assert_eq!(launched(&third).2, "spot");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn delete_terminates_and_then_answers_not_found() -> TestResult {
    let cloud = cloud()?;
    let c = cloud.create(&claim("a", json!([]), json!({}))?).await?;
    let pid = launched(&c).3;
    assert_eq!(cloud.get(&pid).await?.metadata.name.as_deref(), Some("a"));
    assert_eq!(cloud.list().await?.len(), 1);
    cloud.delete(&c).await?;
    assert!(matches!(
        cloud.get(&pid).await,
        Err(CloudProviderError::NodeClaimNotFound(_))
    ));
    assert!(matches!(
        cloud.delete(&c).await,
        Err(CloudProviderError::NodeClaimNotFound(_))
    ));
    assert!(cloud.list().await?.is_empty());
    assert_eq!(cloud.instances().len(), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn overlapping_creates_are_counted() -> TestResult {
    let cloud = cloud()?;
    cloud.create(&claim("a", json!([]), json!({}))?).await?;
    cloud.create(&claim("b", json!([]), json!({}))?).await?;
    assert_eq!(cloud.peak_concurrent_creates(), 1);
    let (c, d, e) = (
        claim("c", json!([]), json!({}))?,
        claim("d", json!([]), json!({}))?,
        claim("e", json!([]), json!({}))?,
    );
    let (c, d, e) = tokio::join!(cloud.create(&c), cloud.create(&d), cloud.create(&e));
    c?;
    d?;
    e?;
    assert_eq!(cloud.peak_concurrent_creates(), 3);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn cost_accrues_over_virtual_time_while_instances_run() -> TestResult {
    let cloud = cloud()?;
    let a = cloud.create(&claim("a", json!([]), json!({}))?).await?; // 0.04/h
    let _b = cloud
        .create(&claim(
            "b",
            json!([{"key": "size", "operator": "In", "values": ["large"]}]),
            json!({}),
        )?)
        .await?; // 0.16/h
    assert!((cloud.cost_per_hour_now() - 0.20).abs() < 1e-9);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    cloud.delete(&a).await?;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    // a ran 1h (plus b's 1 s launch latency), b ran 2h.
    let expected = 0.04 * (3601.0 / 3600.0) + 0.16 * 2.0;
    assert!(
        (cloud.cost_so_far() - expected).abs() < 1e-6,
        "{}",
        cloud.cost_so_far()
    );
    assert!((cloud.cost_per_hour_now() - 0.16).abs() < 1e-9);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn interruptions_arrive_at_their_virtual_time() -> TestResult {
    let cloud = cloud()?;
    let c = cloud.create(&claim("a", json!([]), json!({}))?).await?;
    let pid = launched(&c).3;
    let mut events = cloud.interruptions();
    let t0 = cloud.now();
    cloud.schedule_interruption(
        &pid,
        InterruptionKind::Rebalance,
        t0 + SignedDuration::from_mins(5),
    );
    cloud.schedule_interruption(
        &pid,
        InterruptionKind::SpotInterruption,
        t0 + SignedDuration::from_mins(10),
    );
    let rebalance = events.recv().await?;
    assert_eq!(rebalance.kind, InterruptionKind::Rebalance);
    assert_eq!(rebalance.at, t0 + SignedDuration::from_mins(5));
    let spot = events.recv().await?;
    assert_eq!(
        (spot.kind, spot.at),
        (
            InterruptionKind::SpotInterruption,
            t0 + SignedDuration::from_mins(10)
        )
    );
    assert!(cloud.get(&pid).await.is_ok(), "running during the notice");
    let gone = events.recv().await?;
    assert_eq!(
        (gone.kind, gone.at),
        (
            InterruptionKind::InstanceTerminating,
            t0 + SignedDuration::from_mins(12)
        )
    );
    assert_eq!(gone.provider_id, pid);
    assert!(cloud.get(&pid).await.is_err());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn drift_and_never_register_faults() -> TestResult {
    let cloud = cloud()?;
    cloud.set_never_register(true);
    let c = cloud.create(&claim("a", json!([]), json!({}))?).await?;
    let pid = launched(&c).3;
    assert_eq!(cloud.instance(&pid).map(|i| i.registers), Some(false));
    assert_eq!(cloud.is_drifted(&c), None);
    cloud.set_drifted(&pid, Some("AMIDrift"));
    assert_eq!(cloud.is_drifted(&c).as_deref(), Some("AMIDrift"));
    assert_eq!(cloud.name(), "sim");
    assert_eq!(cloud.supported_node_classes()[0].kind, "EC2NodeClass");
    Ok(())
}
