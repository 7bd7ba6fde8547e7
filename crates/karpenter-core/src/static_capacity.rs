//! Static NodePools (`spec.replicas`, behind the StaticCapacity feature gate): a NodePool that keeps a fixed number
//! of NodeClaims whatever the pods ask for, as upstream's static provisioning and deprovisioning controllers do.
//!
//! - how many NodeClaims a static NodePool has: those not being deleted ("active") and those being deleted,
//!   from the snapshot, with what the controller knows that the snapshot may not show yet (NodeClaims it just
//!   created or deleted);
//! - how many to create ([`StaticPool::to_create`]): replicas minus every NodeClaim the NodePool has, deleting
//!   ones included (as upstream: a NodeClaim on its way out is replaced once it is gone, so the NodePool never
//!   holds more than `replicas` instances), capped by `limits.nodes`;
//! - how many to delete ([`StaticPool::surplus`]): active NodeClaims beyond replicas (deleting ones are already
//!   leaving), and which ([`choose_surplus`]): NodeClaims not launched yet first, then empty nodes, then the
//!   rest with nodes whose pods carry `karpenter.sh/do-not-disrupt` last, a higher
//!   `karpenter.sh/deprovisioning-priority` annotation first, and the lowest disruption cost first.
//!
//! The NodeClaim objects themselves come from [`crate::snapshot::static_node_claims`].

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;
use karpenter_api::{labels, nodepool::NodePool};

use crate::{
    disruption::cost::{disruption_cost, lifetime_remaining, pod_eviction_cost},
    requirements::LabelInterner,
    snapshot::{Snapshot, build_cluster_view, nodepool_not_ready},
};

/// A NodeClaim annotation: among surplus NodeClaims of the same kind, higher values are deleted first.
pub const DEPROVISIONING_PRIORITY_ANNOTATION: &str = "karpenter.sh/deprovisioning-priority";

/// A static NodePool and what it has.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticPool {
    pub name: String,
    pub replicas: i64,
    /// NodeClaims not being deleted.
    pub active: i64,
    /// NodeClaims being deleted (a deletionTimestamp, or deleted by the controller and not yet seen so).
    pub deleting: i64,
    /// `spec.limits.nodes`.
    pub node_limit: Option<i64>,
    /// Why it may not launch (see [`nodepool_not_ready`]); it may still shed surplus NodeClaims.
    pub not_ready: Option<String>,
}

impl StaticPool {
    /// NodeClaims to create now, `in_flight` being NodeClaims created for it that the snapshot does not show
    /// yet: what replicas want beyond every NodeClaim it has, no more than `limits.nodes` leaves, none while
    /// not ready.
    pub fn to_create(&self, in_flight: i64) -> i64 {
        if self.not_ready.is_some() {
            return 0;
        }
        let total = self.active + self.deleting + in_flight;
        let wanted = (self.replicas - total).max(0);
        match self.node_limit {
            Some(limit) => wanted.min((limit - total).max(0)),
            None => wanted,
        }
    }

    /// Whether `limits.nodes` keeps it below replicas.
    pub fn limited(&self, in_flight: i64) -> bool {
        self.not_ready.is_none()
            && self.to_create(in_flight) < (self.replicas - self.active - self.deleting - in_flight).max(0)
    }

    /// Active NodeClaims beyond replicas.
    pub fn surplus(&self) -> i64 {
        (self.active - self.replicas).max(0)
    }
}

/// `limits.nodes` of a NodePool, when set and readable.
fn node_limit(pool: &NodePool) -> Option<i64> {
    let q = pool.spec.limits.as_ref()?.get(labels::RESOURCE_NODES)?;
    karpenter_api::quantity::parse_milli(&q.0).ok().map(|m| m / 1000)
}

/// The NodePool label of a NodeClaim.
fn pool_of(claim: &karpenter_api::nodeclaim::NodeClaim) -> Option<&str> {
    claim
        .metadata
        .labels
        .as_ref()?
        .get(labels::NODEPOOL_LABEL)
        .map(String::as_str)
}

fn is_deleting(claim: &karpenter_api::nodeclaim::NodeClaim, recently_deleted: &HashSet<String>) -> bool {
    claim.metadata.deletion_timestamp.is_some()
        || claim
            .metadata
            .name
            .as_ref()
            .is_some_and(|n| recently_deleted.contains(n))
}

/// Every static NodePool of the snapshot that is not being deleted, with its counts. `recently_deleted` names
/// NodeClaims deleted lately that the snapshot may still show as active; `unevaluated` is
/// [`crate::snapshot::BuildOptions::unevaluated_nodepools`].
pub fn static_pools(
    snapshot: &Snapshot,
    recently_deleted: &HashSet<String>,
    unevaluated: bool,
) -> Vec<StaticPool> {
    let mut pools: Vec<StaticPool> = snapshot
        .node_pools
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            Some(StaticPool {
                name: p.metadata.name.clone()?,
                replicas: p.spec.replicas?,
                active: 0,
                deleting: 0,
                node_limit: node_limit(p),
                not_ready: nodepool_not_ready(p, unevaluated),
            })
        })
        .collect();
    let index: HashMap<String, usize> = pools
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.clone(), i))
        .collect();
    for claim in &snapshot.node_claims {
        let Some(&i) = pool_of(claim).and_then(|p| index.get(p)) else {
            continue;
        };
        if is_deleting(claim, recently_deleted) {
            pools[i].deleting += 1;
        } else {
            pools[i].active += 1;
        }
    }
    pools
}

/// A NodeClaim a static NodePool might shed.
#[derive(Debug, Clone, PartialEq)]
pub struct SurplusCandidate {
    pub node_claim: String,
    /// It has a provider id: an instance was launched.
    pub launched: bool,
    /// No pod would have to move, and nothing on it is protected by `karpenter.sh/do-not-disrupt`.
    pub empty: bool,
    /// The node or one of its pods carries an active `karpenter.sh/do-not-disrupt`.
    pub do_not_disrupt: bool,
    /// [`DEPROVISIONING_PRIORITY_ANNOTATION`], 0 when absent or unreadable.
    pub priority: i64,
    /// Upstream's disruption cost: the eviction cost of its pods scaled by the lifetime it has left.
    pub disruption_cost: f64,
}

/// The active NodeClaims of static NodePool `pool` as surplus candidates at `now`.
pub fn surplus_candidates(
    snapshot: &Snapshot,
    pool: &str,
    recently_deleted: &HashSet<String>,
    now: Timestamp,
) -> Vec<SurplusCandidate> {
    let claims: Vec<_> = snapshot
        .node_claims
        .iter()
        .filter(|c| pool_of(c) == Some(pool) && !is_deleting(c, recently_deleted))
        .collect();
    if claims.is_empty() {
        return Vec::new();
    }
    let mut interner = LabelInterner::new();
    let view = build_cluster_view(snapshot, &mut interner);
    let node_of: HashMap<&str, usize> = view
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| Some((n.node_claim.as_deref()?, i)))
        .collect();
    claims
        .into_iter()
        .filter_map(|claim| {
            let name = claim.metadata.name.clone()?;
            let launched = claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|id| !id.is_empty());
            let priority = claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEPROVISIONING_PRIORITY_ANNOTATION))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(0);
            let (mut do_not_disrupt, mut moving, mut costs) = (false, 0usize, Vec::new());
            if let Some(&n) = node_of.get(name.as_str()) {
                let node = &view.nodes[n];
                do_not_disrupt = node.do_not_disrupt;
                for pod in node.pods.iter().map(|&p| &view.pods[p]) {
                    if pod.is_active() && pod.do_not_disrupt.blocks(now) {
                        do_not_disrupt = true;
                    }
                    if pod.is_reschedulable() {
                        moving += 1;
                        let deletion_cost = pod
                            .pod
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(labels::POD_DELETION_COST_ANNOTATION))
                            .map(String::as_str);
                        let priority = pod.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
                        costs.push(pod_eviction_cost(deletion_cost, priority));
                    }
                }
            }
            let lifetime = claim
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(1.0, |t| lifetime_remaining(t.0, claim.spec.expire_after(), now));
            Some(SurplusCandidate {
                node_claim: name,
                launched,
                empty: moving == 0 && !do_not_disrupt,
                do_not_disrupt,
                priority,
                disruption_cost: disruption_cost(costs, lifetime),
            })
        })
        .collect()
}

/// Positions in `candidates` of the (at most) `count` to delete, in the order they are chosen.
pub fn choose_surplus(candidates: &[SurplusCandidate], count: usize) -> Vec<usize> {
    let class = |c: &SurplusCandidate| match (c.launched, c.empty) {
        (false, _) => 0,
        (true, true) => 1,
        (true, false) => 2,
    };
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&candidates[a], &candidates[b]);
        class(a)
            .cmp(&class(b))
            .then(a.do_not_disrupt.cmp(&b.do_not_disrupt))
            .then(b.priority.cmp(&a.priority))
            .then(a.disruption_cost.total_cmp(&b.disruption_cost))
            .then_with(|| a.node_claim.cmp(&b.node_claim))
    });
    order.truncate(count);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(replicas: i64, active: i64, deleting: i64, node_limit: Option<i64>) -> StaticPool {
        StaticPool {
            name: "fixed".into(),
            replicas,
            active,
            deleting,
            node_limit,
            not_ready: None,
        }
    }

    #[test]
    fn creates_what_replicas_want_beyond_every_nodeclaim_it_has() {
        assert_eq!(pool(3, 0, 0, None).to_create(0), 3);
        assert_eq!(pool(3, 1, 0, None).to_create(0), 2);
        assert_eq!(pool(3, 1, 0, None).to_create(2), 0, "created but not seen yet");
        assert_eq!(
            pool(3, 2, 1, None).to_create(0),
            0,
            "a deleting NodeClaim is replaced once gone"
        );
        assert_eq!(pool(3, 2, 0, None).to_create(0), 1);
        assert_eq!(pool(1, 3, 0, None).to_create(0), 0, "scale-down creates nothing");
    }

    #[test]
    fn limits_nodes_caps_what_is_created() {
        let p = pool(5, 1, 0, Some(3));
        assert_eq!(p.to_create(0), 2);
        assert!(p.limited(0));
        assert_eq!(pool(5, 2, 1, Some(3)).to_create(0), 0);
        assert_eq!(pool(5, 4, 0, Some(3)).to_create(0), 0, "already over the limit");
        assert!(!pool(3, 0, 0, Some(3)).limited(0));
    }

    #[test]
    fn a_nodepool_that_is_not_ready_launches_nothing_but_may_shed() {
        let mut p = pool(1, 3, 0, None);
        p.not_ready = Some("Ready=False".into());
        assert_eq!(p.to_create(0), 0);
        assert_eq!(p.surplus(), 2);
        p.replicas = 5;
        assert_eq!(p.to_create(0), 0);
        assert!(!p.limited(0));
    }

    #[test]
    fn surplus_counts_active_nodeclaims_only() {
        assert_eq!(pool(1, 3, 0, None).surplus(), 2);
        assert_eq!(
            pool(1, 1, 2, None).surplus(),
            0,
            "deleting ones are already going"
        );
        assert_eq!(pool(3, 1, 0, None).surplus(), 0);
    }

    fn candidate(
        name: &str,
        launched: bool,
        empty: bool,
        dnd: bool,
        priority: i64,
        cost: f64,
    ) -> SurplusCandidate {
        SurplusCandidate {
            node_claim: name.into(),
            launched,
            empty,
            do_not_disrupt: dnd,
            priority,
            disruption_cost: cost,
        }
    }

    #[test]
    fn surplus_goes_unlaunched_first_then_empty_then_cheapest_to_disrupt() {
        let c = vec![
            candidate("busy-dear", true, false, false, 0, 5.0),
            candidate("protected", true, false, true, 0, 0.5),
            candidate("empty", true, true, false, 0, 0.0),
            candidate("busy-cheap", true, false, false, 0, 1.0),
            candidate("pending", false, true, false, 0, 0.0),
            candidate("busy-marked", true, false, false, 10, 9.0),
        ];
        let names =
            |order: Vec<usize>| -> Vec<&str> { order.iter().map(|&i| c[i].node_claim.as_str()).collect() };
        assert_eq!(names(choose_surplus(&c, 1)), ["pending"]);
        assert_eq!(names(choose_surplus(&c, 2)), ["pending", "empty"]);
        assert_eq!(
            names(choose_surplus(&c, 6)),
            [
                "pending",
                "empty",
                "busy-marked",
                "busy-cheap",
                "busy-dear",
                "protected"
            ]
        );
        assert_eq!(choose_surplus(&c, 0), Vec::<usize>::new());
        assert_eq!(choose_surplus(&c, 10).len(), 6, "never more than there are");
    }

    mod from_a_snapshot {
        use super::super::*;
        use crate::snapshot::Snapshot;

        const POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: fixed}\nspec:\n  replicas: 2\n  limits: {nodes: \"4\"}\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\nstatus:\n  conditions:\n  - {type: Ready, status: \"True\", reason: Ready, message: \"\", lastTransitionTime: \"2026-01-01T00:00:00Z\"}\n";
        const DYNAMIC: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: dynamic}\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";

        fn claim(name: &str, pool: &str, provider_id: Option<&str>, extra_meta: &str) -> String {
            let status = provider_id.map_or(String::new(), |id| {
                format!("status:\n  providerID: {id}\n  nodeName: {name}\n")
            });
            format!(
                "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: {name}\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\n  labels: {{karpenter.sh/nodepool: {pool}}}\n{extra_meta}spec:\n  requirements: []\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n{status}"
            )
        }

        fn node(name: &str) -> String {
            format!(
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{karpenter.sh/nodepool: fixed}}\nspec: {{providerID: \"sim://{name}\"}}\nstatus:\n  allocatable: {{cpu: \"4\", memory: 8Gi, pods: \"10\"}}\n"
            )
        }

        fn pod(name: &str, node: &str, annotations: &str) -> String {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default{annotations}}}\nspec:\n  nodeName: {node}\n  containers: [{{name: c}}]\nstatus: {{phase: Running}}\n"
            )
        }

        fn snap(objects: &[String]) -> Snapshot {
            let mut snap = Snapshot::default();
            let refs: Vec<&str> = objects.iter().map(String::as_str).collect();
            let notes = snap.add_text(&refs.join("\n---\n"), "test.yaml");
            assert!(notes.is_empty(), "{notes:?}");
            snap
        }

        fn now() -> Timestamp {
            "2026-01-01T01:00:00Z".parse().unwrap()
        }

        #[test]
        fn counts_each_static_pools_nodeclaims_by_state() {
            let s = snap(&[
                POOL.to_string(),
                DYNAMIC.to_string(),
                claim("a", "fixed", Some("sim://a"), ""),
                claim("b", "fixed", None, ""),
                claim(
                    "c",
                    "fixed",
                    Some("sim://c"),
                    "  deletionTimestamp: \"2026-01-01T00:30:00Z\"\n  finalizers: [karpenter.sh/termination]\n",
                ),
                claim("d", "dynamic", Some("sim://d"), ""),
            ]);
            let pools = static_pools(&s, &HashSet::new(), false);
            assert_eq!(
                pools,
                vec![StaticPool {
                    name: "fixed".into(),
                    replicas: 2,
                    active: 2,
                    deleting: 1,
                    node_limit: Some(4),
                    not_ready: None,
                }]
            );
            let deleted: HashSet<String> = ["a".to_string()].into();
            let pools = static_pools(&s, &deleted, false);
            assert_eq!((pools[0].active, pools[0].deleting), (1, 2));
        }

        #[test]
        fn a_static_pool_without_a_ready_condition_waits_for_one() {
            let unevaluated = POOL.split("status:").next().unwrap_or_default().to_string();
            let pools = static_pools(&snap(&[unevaluated]), &HashSet::new(), false);
            assert!(pools[0].not_ready.is_some());
            assert_eq!(pools[0].to_create(0), 0);
        }

        #[test]
        fn candidates_say_which_are_unlaunched_empty_busy_or_protected() {
            let s = snap(&[
                POOL.to_string(),
                claim("unlaunched", "fixed", None, ""),
                claim("empty", "fixed", Some("sim://empty"), ""),
                node("empty"),
                claim("busy", "fixed", Some("sim://busy"), ""),
                node("busy"),
                pod("web", "busy", ""),
                claim(
                    "protected",
                    "fixed",
                    Some("sim://protected"),
                    "  annotations: {karpenter.sh/deprovisioning-priority: \"7\"}\n",
                ),
                node("protected"),
                pod(
                    "db",
                    "protected",
                    ", annotations: {karpenter.sh/do-not-disrupt: \"true\"}",
                ),
            ]);
            let c = surplus_candidates(&s, "fixed", &HashSet::new(), now());
            let by_name = |n: &str| c.iter().find(|c| c.node_claim == n).cloned().unwrap();
            assert!(!by_name("unlaunched").launched);
            assert!(by_name("empty").launched && by_name("empty").empty);
            let busy = by_name("busy");
            assert!(!busy.empty && !busy.do_not_disrupt && busy.disruption_cost > 0.0);
            let protected = by_name("protected");
            assert!(!protected.empty && protected.do_not_disrupt);
            assert_eq!(protected.priority, 7);
            let order: Vec<&str> = choose_surplus(&c, 4)
                .into_iter()
                .map(|i| c[i].node_claim.as_str())
                .collect();
            assert_eq!(order, ["unlaunched", "empty", "busy", "protected"]);
        }
    }
}
