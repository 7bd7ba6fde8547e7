//! Drift: a NodeClaim no longer matches what its NodePool (or the provider's node class) would launch today,
//! and is replaced through the budgeted Drift disruption method. This module decides the `Drifted` condition's
//! reason; the controller sets the condition, re-checks every 5 minutes and clears it when this says `None`.
//!
//! Upstream's checks (`nodeclaim.disruption` drift), in order, the first that fires giving the reason:
//! 1. only a Launched claim can drift;
//! 2. static drift (`NodePoolDrifted`): the claim's `karpenter.sh/nodepool-hash` differs from the NodePool's
//!    [`NodePool::hash`], judged only when the claim's `karpenter.sh/nodepool-hash-version` is the current
//!    [`NODEPOOL_HASH_VERSION`] — a claim hashed by another version is re-hashed ([`needs_rehash`]) instead of
//!    drifted, so changing the hash function does not replace every node at once;
//! 3. requirements drift (`RequirementsDrifted`): the NodePool's requirements are no longer compatible with the
//!    claim's labels;
//! 4. `InstanceTypeNotFound`: the claim's instance type is gone from the NodePool's instance types, or has no
//!    offering (available or not) in the claim's zone and capacity type; checked only once the claim is older
//!    than an hour, since the catalog is the provider's, not the user's, and may be briefly incomplete;
//! 5. the provider's reason ([`DriftProvider`]): AMI, subnets, security groups, node class, ... Where the
//!    provider cannot be asked (`karpenter disrupt` on a snapshot), [`NoProviderDrift`] takes the reason the
//!    controller recorded in the claim's `Drifted` condition instead.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use jiff::Timestamp;
use karpenter_api::{
    common::{ConditionStatus, find_condition},
    labels,
    nodeclaim::{NodeClaim, conditions},
    nodepool::{NODEPOOL_HASH_VERSION, NodePool},
};

use super::expiration::add_saturating;
use crate::{
    instance_type::InstanceType,
    requirements::{LabelInterner, Requirements, Symbol, WellKnownKeys},
};

/// How old a claim must be before a missing instance type or offering drifts it.
pub const INSTANCE_TYPE_NOT_FOUND_AFTER: Duration = Duration::from_secs(3600);

/// Why a NodeClaim drifted: the `Drifted` condition's reason.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DriftReason {
    /// The NodePool's template changed (hash mismatch).
    NodePoolDrifted,
    /// The NodePool's requirements no longer allow the node's labels.
    RequirementsDrifted,
    /// The node's instance type, or its zone and capacity type offering, is no longer offered.
    InstanceTypeNotFound,
    /// The provider's reason, such as AWS's `AMIDrift`, `SubnetDrift`, `SecurityGroupDrift`,
    /// `CapacityReservationDrift`, `PlacementGroupDrift` or `NodeClassDrift`.
    Provider(String),
}

impl DriftReason {
    /// The condition reason upstream writes.
    pub fn as_str(&self) -> &str {
        match self {
            Self::NodePoolDrifted => "NodePoolDrifted",
            Self::RequirementsDrifted => "RequirementsDrifted",
            Self::InstanceTypeNotFound => "InstanceTypeNotFound",
            Self::Provider(reason) => reason,
        }
    }
}

impl std::fmt::Display for DriftReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The provider's part of drift (upstream `CloudProvider.IsDrifted`): whether the instance behind a claim
/// differs from what the claim's node class would launch now. AWS implements it for the AMI (`AMIDrift`: the
/// claim's `status.imageID` is no longer among the node class's resolved AMIs), subnets (`SubnetDrift`),
/// security groups (`SecurityGroupDrift`), capacity reservations, placement groups and the node class's own
/// static fields (`NodeClassDrift`: the `karpenter.k8s.aws/ec2nodeclass-hash` annotation, under the same
/// hash-version rule as the NodePool's).
///
/// It is consulted last, only when no NodePool-side reason applies, and must be pure: the controller gathers
/// whatever the provider needs (the node class, the instance) beforehand.
pub trait DriftProvider {
    /// The drift reason in CamelCase, or `None` when not drifted (an empty reason counts as `None`).
    fn is_drifted(&self, claim: &NodeClaim) -> Option<String>;
}

/// The provider's part of drift when there is no provider to ask (`karpenter disrupt` on a snapshot, tests): the
/// reason recorded in the claim's `Drifted` condition, when that condition is True and its reason is the
/// provider's ([`recorded_provider_drift`]). A snapshot carries the condition the controller wrote but not the
/// AMIs, subnets or security groups to recompute it, and upstream's Drift method acts on the condition.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProviderDrift;

impl DriftProvider for NoProviderDrift {
    fn is_drifted(&self, claim: &NodeClaim) -> Option<String> {
        recorded_provider_drift(claim)
    }
}

/// The reason of the claim's `Drifted` condition when it is True and is not one of the NodePool-side reasons
/// (`NodePoolDrifted`, `RequirementsDrifted`, `InstanceTypeNotFound`): those are recomputed from the NodePool
/// and catalog at hand, which may no longer drift the claim, while any other reason (`AMIDrift`, `SubnetDrift`,
/// `SecurityGroupDrift`, `NodeClassDrift`, ...) only the provider can judge.
pub fn recorded_provider_drift(claim: &NodeClaim) -> Option<String> {
    let status = claim.status.as_ref()?;
    let drifted = find_condition(&status.conditions, conditions::DRIFTED)?;
    let nodepool_side = [
        DriftReason::NodePoolDrifted,
        DriftReason::RequirementsDrifted,
        DriftReason::InstanceTypeNotFound,
    ];
    (drifted.status == ConditionStatus::True
        && !drifted.reason.is_empty()
        && nodepool_side.iter().all(|r| r.as_str() != drifted.reason))
    .then(|| drifted.reason.clone())
}

/// Why `claim` has drifted from `pool`, or `None`. `instance_types` is the NodePool's current catalog (every
/// instance type the provider offers it, available or not); `now` decides whether the claim is old enough for
/// the instance-type check. See the module docs for the order of the checks.
pub fn drift_reason(
    claim: &NodeClaim,
    pool: &NodePool,
    instance_types: &[Arc<InstanceType>],
    interner: &mut LabelInterner,
    provider: &dyn DriftProvider,
    now: Timestamp,
) -> Option<DriftReason> {
    let launched = claim
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, conditions::LAUNCHED))
        .is_some_and(|c| c.status == ConditionStatus::True);
    if !launched {
        return None;
    }
    if is_hash_drifted(claim, pool) {
        return Some(DriftReason::NodePoolDrifted);
    }
    if are_requirements_drifted(claim, pool, interner) {
        return Some(DriftReason::RequirementsDrifted);
    }
    let old_enough = claim
        .metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|created| now > add_saturating(created.0, INSTANCE_TYPE_NOT_FOUND_AFTER));
    if old_enough && instance_type_not_found(claim, instance_types, interner) {
        return Some(DriftReason::InstanceTypeNotFound);
    }
    provider
        .is_drifted(claim)
        .filter(|reason| !reason.is_empty())
        .map(DriftReason::Provider)
}

/// Whether the NodePool hash controller must re-write the claim's `karpenter.sh/nodepool-hash` (and its
/// version) instead of judging static drift: the claim belongs to `pool` (its `karpenter.sh/nodepool` label)
/// and its `karpenter.sh/nodepool-hash-version` is missing or not [`NODEPOOL_HASH_VERSION`]. Upstream then sets
/// the version and, unless the claim already has a `Drifted` condition (which the old hash cannot re-judge),
/// the hash to [`NodePool::hash`].
pub fn needs_rehash(claim: &NodeClaim, pool: &NodePool) -> bool {
    let belongs = label(&claim.metadata.labels, labels::NODEPOOL_LABEL).is_some_and(|name| {
        pool.metadata
            .name
            .as_deref()
            .is_some_and(|pool_name| pool_name == name)
    });
    belongs
        && label(
            &claim.metadata.annotations,
            labels::NODEPOOL_HASH_VERSION_ANNOTATION,
        ) != Some(NODEPOOL_HASH_VERSION)
}

/// The annotations that re-hash `claim` under a hash kept in `hash_key` with its version in `version_key` (the
/// NodePool's or the node class's), or `None` when the claim is being deleted or already carries
/// `current_version`. The version always becomes the current one; the hash becomes `hash()` only when the claim
/// has no `Drifted` condition, since a drift found by the old hash cannot be re-judged by the new one and must
/// stay (upstream's rule when it changes a hash function).
pub fn rehash_annotations(
    claim: &NodeClaim,
    hash_key: &str,
    version_key: &str,
    current_version: &str,
    hash: impl FnOnce() -> String,
) -> Option<BTreeMap<String, String>> {
    if claim.metadata.deletion_timestamp.is_some()
        || label(&claim.metadata.annotations, version_key) == Some(current_version)
    {
        return None;
    }
    let mut annotations = BTreeMap::from([(version_key.to_string(), current_version.to_string())]);
    let drifted = claim
        .status
        .as_ref()
        .is_some_and(|s| find_condition(&s.conditions, conditions::DRIFTED).is_some());
    if !drifted {
        annotations.insert(hash_key.to_string(), hash());
    }
    Some(annotations)
}

fn label<'a>(map: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    map.as_ref()?.get(key).map(String::as_str)
}

/// Static drift: the claim carries both hash annotations, its version is the current one, and its hash is not
/// the NodePool's.
fn is_hash_drifted(claim: &NodeClaim, pool: &NodePool) -> bool {
    let annotations = &claim.metadata.annotations;
    let (Some(hash), Some(version)) = (
        label(annotations, labels::NODEPOOL_HASH_ANNOTATION),
        label(annotations, labels::NODEPOOL_HASH_VERSION_ANNOTATION),
    ) else {
        return false;
    };
    version == NODEPOOL_HASH_VERSION && hash != pool.hash()
}

/// Requirements drift: the NodePool's requirements (and template labels, as `In`) against the claim's labels
/// (single values), with no key allowed undefined — upstream's `NewLabelRequirements(claim).Compatible(pool)`.
/// A NodePool whose requirements do not parse fails validation and launches nothing; it drifts nothing either.
fn are_requirements_drifted(claim: &NodeClaim, pool: &NodePool, interner: &mut LabelInterner) -> bool {
    let template = &pool.spec.template;
    let Ok(mut pool_requirements) = Requirements::from_api(&template.spec.requirements, interner) else {
        return false;
    };
    if let Some(template_labels) = &template.metadata.labels {
        let as_requirements = Requirements::from_labels(
            template_labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            interner,
        );
        pool_requirements.intersect_with(&as_requirements);
    }
    let claim_labels = Requirements::from_labels(
        claim
            .metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str())),
        interner,
    );
    !claim_labels.is_compatible(&pool_requirements, &WellKnownKeys::none())
}

/// The claim's instance type is not among `instance_types`, or none of its offerings (available or not) is in
/// the claim's zone with the claim's capacity type. A claim without the instance-type label counts as not
/// found; a claim without a zone or capacity-type label accepts any (those keys are well-known). A reserved
/// claim also accepts on-demand offerings (it may have been demoted after its reservation ended and its label
/// not yet updated); requirements drift catches a NodePool that no longer allows on-demand.
fn instance_type_not_found(
    claim: &NodeClaim,
    instance_types: &[Arc<InstanceType>],
    interner: &LabelInterner,
) -> bool {
    let claim_labels = &claim.metadata.labels;
    let Some(name) = label(claim_labels, labels::INSTANCE_TYPE_LABEL) else {
        return true;
    };
    let Some(it) = instance_types.iter().find(|it| it.name == name) else {
        return true;
    };
    // `None`: the claim has no such label and any value matches; `Some(set)`: one of these symbols (an empty
    // set when the value was never interned, so no offering can carry it).
    let zone: Option<Vec<Symbol>> =
        label(claim_labels, labels::ZONE_LABEL).map(|z| interner.lookup(z).into_iter().collect());
    let capacity_type: Option<Vec<Symbol>> = label(claim_labels, labels::CAPACITY_TYPE_LABEL).map(|ct| {
        let mut allowed: Vec<Symbol> = interner.lookup(ct).into_iter().collect();
        if ct == labels::CAPACITY_TYPE_RESERVED {
            allowed.extend(interner.lookup(labels::CAPACITY_TYPE_ON_DEMAND));
        }
        allowed
    });
    let allows = |allowed: &Option<Vec<Symbol>>, value: Symbol| {
        allowed.as_ref().is_none_or(|set| set.contains(&value))
    };
    !it.offerings
        .iter()
        .any(|o| allows(&zone, o.zone) && allows(&capacity_type, o.capacity_type))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{instance_type::Offering, requirements::Requirement, resources::Resources};
    use serde_json::{Value, json};

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const CREATED: &str = "2026-01-01T00:00:00Z";
    /// More than an hour after [`CREATED`].
    const LATER: &str = "2026-01-01T02:00:00Z";

    fn pool(requirements: Value, labels: Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "requirements": requirements,
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    },
                },
            },
        }))
        .unwrap()
    }

    fn default_pool() -> NodePool {
        pool(
            json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]}]),
            json!({"team": "a"}),
        )
    }

    /// A launched claim of `pool`, of type m5.large in zone-a, on-demand, hashed with the current version.
    fn claim(pool: &NodePool) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": "default-abcde",
                "creationTimestamp": CREATED,
                "labels": {
                    "karpenter.sh/nodepool": "default",
                    "karpenter.sh/capacity-type": "on-demand",
                    "node.kubernetes.io/instance-type": "m5.large",
                    "topology.kubernetes.io/zone": "zone-a",
                    "team": "a",
                },
                "annotations": {
                    "karpenter.sh/nodepool-hash": pool.hash(),
                    "karpenter.sh/nodepool-hash-version": NODEPOOL_HASH_VERSION,
                },
            },
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
            "status": {"conditions": [
                {"type": "Launched", "status": "True", "lastTransitionTime": CREATED, "reason": "Launched"},
            ]},
        }))
        .unwrap()
    }

    fn set_label(c: &mut NodeClaim, key: &str, value: Option<&str>) {
        let labels = c.metadata.labels.get_or_insert_default();
        match value {
            Some(v) => labels.insert(key.to_string(), v.to_string()),
            None => labels.remove(key),
        };
    }

    fn set_annotation(c: &mut NodeClaim, key: &str, value: Option<&str>) {
        let annotations = c.metadata.annotations.get_or_insert_default();
        match value {
            Some(v) => annotations.insert(key.to_string(), v.to_string()),
            None => annotations.remove(key),
        };
    }

    fn instance_type(i: &mut LabelInterner, name: &str, offerings: &[(&str, &str)]) -> Arc<InstanceType> {
        let it_key = i.intern_key(labels::INSTANCE_TYPE_LABEL);
        let name_symbol = i.intern(name);
        let offerings = offerings
            .iter()
            .map(|(zone, ct)| Offering {
                zone: i.intern(zone),
                capacity_type: i.intern(ct),
                price: 0.1,
                available: false,
                reservation_id: None,
                reservation_capacity: None,
            })
            .collect();
        Arc::new(InstanceType {
            name: name.to_string(),
            name_symbol,
            requirements: Requirement::in_values(it_key, [name_symbol]).into(),
            capacity: Resources::default(),
            overhead: Resources::default(),
            allocatable: Resources::default(),
            offerings,
            overlays_applied: Default::default(),
        })
    }

    fn catalog(i: &mut LabelInterner) -> Vec<Arc<InstanceType>> {
        vec![instance_type(
            i,
            "m5.large",
            &[("zone-a", "on-demand"), ("zone-b", "spot")],
        )]
    }

    struct Provider(&'static str);

    impl DriftProvider for Provider {
        fn is_drifted(&self, _claim: &NodeClaim) -> Option<String> {
            Some(self.0.to_string())
        }
    }

    fn reason(claim: &NodeClaim, pool: &NodePool, now: &str) -> Option<DriftReason> {
        reason_with(claim, pool, now, &NoProviderDrift)
    }

    fn reason_with(
        claim: &NodeClaim,
        pool: &NodePool,
        now: &str,
        provider: &dyn DriftProvider,
    ) -> Option<DriftReason> {
        let mut i = LabelInterner::new();
        let its = catalog(&mut i);
        drift_reason(claim, pool, &its, &mut i, provider, at(now))
    }

    #[test]
    fn reasons_read_as_upstream_writes_them() {
        assert_eq!(DriftReason::NodePoolDrifted.as_str(), "NodePoolDrifted");
        assert_eq!(DriftReason::RequirementsDrifted.as_str(), "RequirementsDrifted");
        assert_eq!(DriftReason::InstanceTypeNotFound.as_str(), "InstanceTypeNotFound");
        assert_eq!(DriftReason::Provider("AMIDrift".into()).to_string(), "AMIDrift");
    }

    /// `c` with a `Drifted` condition of `status` and `reason`, as the controller records it.
    fn record_drift(c: &mut NodeClaim, status: &str, reason: &str) {
        let condition = serde_json::from_value(json!({
            "type": "Drifted", "status": status, "reason": reason, "lastTransitionTime": CREATED,
        }))
        .unwrap();
        c.status.get_or_insert_default().conditions.push(condition);
    }

    #[test]
    fn without_a_provider_the_recorded_provider_drift_stands() {
        let p = default_pool();
        let mut c = claim(&p);
        record_drift(&mut c, "True", "AMIDrift");
        assert_eq!(
            reason(&c, &p, LATER),
            Some(DriftReason::Provider("AMIDrift".into()))
        );
        // NodePool-side reasons are judged against the NodePool at hand, which no longer drifts the claim.
        let mut c = claim(&p);
        record_drift(&mut c, "True", "NodePoolDrifted");
        assert_eq!(reason(&c, &p, LATER), None);
        let mut c = claim(&p);
        record_drift(&mut c, "False", "AMIDrift");
        assert_eq!(reason(&c, &p, LATER), None);
        // A NodePool-side reason found now comes first, as it would for the controller.
        let mut c = claim(&p);
        record_drift(&mut c, "True", "SubnetDrift");
        set_annotation(&mut c, labels::NODEPOOL_HASH_ANNOTATION, Some("stale"));
        assert_eq!(reason(&c, &p, LATER), Some(DriftReason::NodePoolDrifted));
    }

    #[test]
    fn a_provider_that_can_be_asked_has_the_last_word_over_a_recorded_condition() {
        let p = default_pool();
        let mut c = claim(&p);
        record_drift(&mut c, "True", "AMIDrift");
        // The controller's provider finds the AMI current again: the stale condition is not acted on (and the
        // controller clears it).
        assert_eq!(reason_with(&c, &p, LATER, &Provider("")), None);
    }

    #[test]
    fn a_matching_claim_is_not_drifted() {
        let p = default_pool();
        assert_eq!(reason(&claim(&p), &p, LATER), None);
    }

    #[test]
    fn only_launched_claims_drift() {
        let p = default_pool();
        let mut c = claim(&p);
        set_annotation(&mut c, labels::NODEPOOL_HASH_ANNOTATION, Some("stale"));
        c.status = None;
        assert_eq!(reason(&c, &p, LATER), None);
    }

    #[test]
    fn hash_drift_when_the_template_changes() {
        let p = default_pool();
        let c = claim(&p);
        let mut changed = p.clone();
        changed.spec.template.spec.expire_after =
            Some(karpenter_api::duration::NillableDuration::parse("24h").unwrap());
        assert_eq!(reason(&c, &changed, LATER), Some(DriftReason::NodePoolDrifted));
    }

    #[test]
    fn hash_drift_needs_the_same_hash_version() {
        let p = default_pool();
        let mut c = claim(&p);
        set_annotation(&mut c, labels::NODEPOOL_HASH_ANNOTATION, Some("stale"));
        assert_eq!(reason(&c, &p, LATER), Some(DriftReason::NodePoolDrifted));
        set_annotation(&mut c, labels::NODEPOOL_HASH_VERSION_ANNOTATION, Some("v3"));
        assert_eq!(
            reason(&c, &p, LATER),
            None,
            "another version is re-hashed, not drifted"
        );
        assert!(needs_rehash(&c, &p));
    }

    #[test]
    fn hash_drift_needs_both_annotations() {
        let p = default_pool();
        let mut c = claim(&p);
        set_annotation(&mut c, labels::NODEPOOL_HASH_ANNOTATION, None);
        assert_eq!(reason(&c, &p, LATER), None);
        let mut c = claim(&p);
        set_annotation(&mut c, labels::NODEPOOL_HASH_ANNOTATION, Some("stale"));
        set_annotation(&mut c, labels::NODEPOOL_HASH_VERSION_ANNOTATION, None);
        assert_eq!(reason(&c, &p, LATER), None);
    }

    #[test]
    fn rehash_when_the_hash_version_differs() {
        let p = default_pool();
        let mut c = claim(&p);
        assert!(!needs_rehash(&c, &p), "current version");
        set_annotation(&mut c, labels::NODEPOOL_HASH_VERSION_ANNOTATION, Some("v3"));
        assert!(needs_rehash(&c, &p));
        set_annotation(&mut c, labels::NODEPOOL_HASH_VERSION_ANNOTATION, None);
        assert!(needs_rehash(&c, &p), "no version at all");
        set_label(&mut c, labels::NODEPOOL_LABEL, Some("other"));
        assert!(!needs_rehash(&c, &p), "another NodePool's claim");
    }

    #[test]
    fn requirements_drift_when_the_nodepool_no_longer_allows_the_node() {
        let p = default_pool();
        let c = claim(&p);
        let spot_only = pool(
            json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]),
            json!({"team": "a"}),
        );
        // Requirements are not hashed, so the hash still matches.
        assert_eq!(p.hash(), spot_only.hash());
        assert_eq!(
            reason(&c, &spot_only, LATER),
            Some(DriftReason::RequirementsDrifted)
        );
    }

    #[test]
    fn requirements_drift_when_the_node_lacks_a_required_label() {
        let p = default_pool();
        let c = claim(&p);
        let needs_label = pool(
            json!([{"key": "example.com/gpu", "operator": "Exists"}]),
            json!({"team": "a"}),
        );
        assert_eq!(
            reason(&c, &needs_label, LATER),
            Some(DriftReason::RequirementsDrifted),
            "no key is allowed undefined, not even well-known ones"
        );
        let excludes = pool(
            json!([{"key": "example.com/gpu", "operator": "DoesNotExist"}]),
            json!({"team": "a"}),
        );
        assert_eq!(
            reason(&c, &excludes, LATER),
            None,
            "an absent label satisfies DoesNotExist"
        );
    }

    #[test]
    fn requirements_drift_counts_template_labels() {
        let p = default_pool();
        let mut c = claim(&p);
        set_label(&mut c, "team", Some("b"));
        assert_eq!(reason(&c, &p, LATER), Some(DriftReason::RequirementsDrifted));
    }

    #[test]
    fn instance_type_not_found_waits_an_hour() {
        let p = default_pool();
        let mut c = claim(&p);
        set_label(&mut c, labels::INSTANCE_TYPE_LABEL, Some("m5.xlarge"));
        assert_eq!(reason(&c, &p, "2026-01-01T00:59:00Z"), None);
        assert_eq!(
            reason(&c, &p, "2026-01-01T01:00:00Z"),
            None,
            "strictly older than an hour"
        );
        assert_eq!(
            reason(&c, &p, "2026-01-01T01:00:01Z"),
            Some(DriftReason::InstanceTypeNotFound)
        );
        set_label(&mut c, labels::INSTANCE_TYPE_LABEL, None);
        assert_eq!(
            reason(&c, &p, LATER),
            Some(DriftReason::InstanceTypeNotFound),
            "no instance-type label"
        );
    }

    #[test]
    fn instance_type_not_found_when_the_offering_is_gone() {
        let p = default_pool();
        let mut c = claim(&p);
        // m5.large is offered as spot in zone-b, on-demand only in zone-a; unavailable offerings still count.
        set_label(&mut c, labels::ZONE_LABEL, Some("zone-b"));
        assert_eq!(reason(&c, &p, LATER), Some(DriftReason::InstanceTypeNotFound));
        set_label(&mut c, labels::CAPACITY_TYPE_LABEL, Some("spot"));
        assert_eq!(reason(&c, &p, LATER), None);
        set_label(&mut c, labels::ZONE_LABEL, Some("zone-z"));
        assert_eq!(reason(&c, &p, LATER), Some(DriftReason::InstanceTypeNotFound));
        set_label(&mut c, labels::ZONE_LABEL, None);
        assert_eq!(reason(&c, &p, LATER), None, "no zone label: any zone");
    }

    #[test]
    fn instance_type_not_found_lets_reserved_claims_fall_back_to_on_demand() {
        let p = pool(json!([]), json!({"team": "a"}));
        let mut c = claim(&p);
        set_label(&mut c, labels::CAPACITY_TYPE_LABEL, Some("reserved"));
        assert_eq!(reason(&c, &p, LATER), None, "zone-a has on-demand");
        set_label(&mut c, labels::ZONE_LABEL, Some("zone-b"));
        assert_eq!(reason(&c, &p, LATER), Some(DriftReason::InstanceTypeNotFound));
    }

    #[test]
    fn provider_drift_comes_last() {
        let p = default_pool();
        let mut c = claim(&p);
        assert_eq!(
            reason_with(&c, &p, LATER, &Provider("AMIDrift")),
            Some(DriftReason::Provider("AMIDrift".into()))
        );
        assert_eq!(
            reason_with(&c, &p, LATER, &Provider("")),
            None,
            "an empty reason is no drift"
        );
        set_annotation(&mut c, labels::NODEPOOL_HASH_ANNOTATION, Some("stale"));
        assert_eq!(
            reason_with(&c, &p, LATER, &Provider("AMIDrift")),
            Some(DriftReason::NodePoolDrifted)
        );
    }

    #[test]
    fn static_drift_comes_before_requirements_drift() {
        let p = default_pool();
        let mut c = claim(&p);
        set_annotation(&mut c, labels::NODEPOOL_HASH_ANNOTATION, Some("stale"));
        set_label(&mut c, "team", Some("b"));
        assert_eq!(reason(&c, &p, LATER), Some(DriftReason::NodePoolDrifted));
    }
}
