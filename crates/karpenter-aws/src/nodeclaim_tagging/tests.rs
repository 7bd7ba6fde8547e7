use super::*;

fn instance(id: &str, tags: &[(&str, &str)]) -> Ec2Instance {
    Ec2Instance {
        id: id.into(),
        instance_type: "m5.large".into(),
        zone: "us-west-2a".into(),
        capacity_type: "on-demand".into(),
        capacity_reservation_id: None,
        state: "running".into(),
        image_id: None,
        launch_time: None,
        private_dns_name: None,
        subnet_id: None,
        security_group_ids: Vec::new(),
        placement_group: None,
        tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    }
}

fn claim_tag(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(AWS_TAG_NODECLAIM.to_string(), name.to_string())])
}

#[test]
fn the_default_retry_waits_200_then_800_milliseconds() {
    let waits: Vec<Duration> = TagRetry::default().backoffs().collect();
    assert_eq!(waits, [Duration::from_millis(200), Duration::from_millis(800)]);
    let once = TagRetry {
        attempts: 1,
        ..TagRetry::default()
    };
    assert_eq!(once.backoffs().count(), 0);
    let never = TagRetry {
        attempts: 0,
        ..TagRetry::default()
    };
    assert_eq!(never.backoffs().count(), 0, "one call at least, and no retry");
}

#[test]
fn a_waiting_instance_is_shown_with_its_tag_until_ec2_describes_it_so() {
    let now = Instant::now();
    let ledger = InstanceTagLedger::default();
    ledger.record_waiting("i-waiting", claim_tag("claim-1"), now);
    ledger.record_waiting("i-tagged-since", claim_tag("claim-2"), now);
    ledger.record_applied("i-applied", now);
    let mut instances = [
        instance("i-waiting", &[("karpenter.sh/nodepool", "default")]),
        instance(
            "i-tagged-since",
            &[
                ("karpenter.sh/nodepool", "default"),
                (AWS_TAG_NODECLAIM, "claim-2"),
            ],
        ),
        instance("i-applied", &[]),
        instance("i-unknown", &[]),
    ];
    ledger.overlay(&mut instances);

    assert_eq!(instances[0].tags[AWS_TAG_NODECLAIM], "claim-1");
    assert_eq!(
        instances[0].tags["karpenter.sh/nodepool"], "default",
        "EC2's tags stay"
    );
    assert!(!ledger.is_applied("i-waiting"), "still waiting on EC2");
    assert!(ledger.is_applied("i-tagged-since"), "EC2 has the tag now");
    assert_eq!(ledger.waiting("i-tagged-since"), None);
    assert!(
        instances[2].tags.is_empty(),
        "nothing is added to an applied instance"
    );
    assert!(
        instances[3].tags.is_empty(),
        "nor to one the ledger does not know"
    );
}

#[test]
fn instances_no_claim_records_are_forgotten_after_the_grace() {
    let start = Instant::now();
    let grace = Duration::from_secs(60);
    let ledger = InstanceTagLedger::default();
    ledger.record_waiting("i-owned", claim_tag("a"), start);
    ledger.record_applied("i-orphan", start);
    ledger.record_waiting("i-young", claim_tag("c"), start + Duration::from_secs(30));
    let owned = HashSet::from(["i-owned"]);

    ledger.forget_unowned(&owned, start + Duration::from_secs(60), grace);
    assert_eq!(ledger.len(), 3, "within the grace everything stays");
    ledger.forget_unowned(&owned, start + Duration::from_secs(61), grace);
    assert!(!ledger.is_applied("i-orphan"));
    assert_eq!(ledger.len(), 2);
    assert!(ledger.waiting("i-owned").is_some(), "a claim records it");
    assert!(
        ledger.waiting("i-young").is_some(),
        "its claim may not have recorded it yet"
    );
    ledger.forget("i-owned");
    ledger.forget_unowned(&HashSet::new(), start + Duration::from_secs(91), grace);
    assert!(ledger.is_empty());
}
