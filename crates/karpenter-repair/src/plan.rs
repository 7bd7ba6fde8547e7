//! Which nodes to repair now, and which NodePools the circuit breaker holds back. Pure: the controller carries
//! the plan out.
//!
//! The circuit breaker: when many nodes go unhealthy together the cause is rarely the nodes (a bad AMI, a
//! network or control-plane outage), and replacing them all would only add churn, or take down every node at
//! once. So, as upstream, repair stops in a NodePool where more than 20% of the nodes (rounded up, so a pool of
//! one to five nodes may repair one) are unhealthy; nodes without a NodePool are counted against every node of
//! the cluster. Unhealthy here means a condition matches a policy, whether or not its toleration has run out:
//! a node that has only just gone NotReady is still a sign of trouble.
//!
//! Within the breaker, the NodePool's disruption budgets for reason `Unhealthy` (and budgets without reasons, the
//! default 10% among them) cap how many of its nodes are replaced at once, counting the nodes already being
//! deleted or rebooted; the earliest-due repairs go first, the others wait for a later pass. Repair does not
//! honour `karpenter.sh/do-not-disrupt`, which guards only voluntary disruption.
//!
//! A node may be due under a replace policy ([`RepairPolicy`]) and a reboot policy ([`RebootPolicy`]); when both
//! are due the replacement wins (the more disruptive action, as upstream). A reboot is escalated to a
//! replacement once the NodeClaim has had [`crate::history::REBOOTS_BEFORE_REPLACEMENT`] reboots within a day,
//! and after a reboot ends, a condition still there is tolerated anew from that moment.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use karpenter_api::{
    labels,
    nodeclaim::NodeClaim,
    nodepool::{Budget, DisruptionReason},
};
use karpenter_core::snapshot::CompactNode;
use karpenter_core::{
    cloudprovider::{RebootPolicy, RepairAction, RepairPolicy},
    disruption::budgets::allowed_disruptions,
};
use kube::ResourceExt;

use crate::{
    health::{Unhealthy, unhealthy_since},
    history::escalate,
};

/// The largest share of a NodePool's nodes that may be unhealthy while repair goes on, in percent.
pub const UNHEALTHY_PERCENT_LIMIT: usize = 20;

/// A node to replace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub node: String,
    pub node_claim: String,
    /// `None` for a node without the `karpenter.sh/nodepool` label.
    pub node_pool: Option<String>,
    pub why: Unhealthy,
    /// Replace, or reboot in place.
    pub action: RepairAction,
    /// A due reboot became this replacement: the claim was rebooted too often recently.
    pub escalated: bool,
    /// For a reboot: the due reboot policy's bound on the drain.
    pub termination_grace_period: Option<std::time::Duration>,
    /// The NodeClaim's UID (the reboot history's key).
    pub node_claim_uid: String,
}

/// The provider's policies, by action.
#[derive(Debug, Clone, Default)]
pub struct Policies {
    pub replace: Vec<RepairPolicy>,
    pub reboot: Vec<RebootPolicy>,
}

/// When the claim's last reboot ended (its `Rebooting` condition False): conditions are tolerated anew from then.
pub fn reboot_ended_at(claim: &NodeClaim) -> Option<Timestamp> {
    let status = claim.status.as_ref()?;
    karpenter_api::common::find_condition(
        &status.conditions,
        karpenter_api::nodeclaim::conditions::REBOOTING,
    )
    .filter(|c| c.status == karpenter_api::common::ConditionStatus::False)
    .map(|c| c.last_transition_time.0)
}

/// What holds a group's repairs back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBy {
    /// More than 20% of the nodes are unhealthy.
    CircuitBreaker,
    /// The NodePool's budgets for reason Unhealthy allow no more now.
    Budget,
}

/// A NodePool (or, for `node_pool: None`, the cluster) whose repairs are held back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedGroup {
    pub node_pool: Option<String>,
    pub unhealthy: usize,
    pub total: usize,
    /// Repairs that are due but held back.
    pub held: Vec<Repair>,
    pub by: HeldBy,
}

impl BlockedGroup {
    /// The NodeRepairBlocked event's message.
    pub fn message(&self) -> String {
        let scope = match &self.node_pool {
            Some(pool) => format!("NodePool {pool}"),
            None => "the cluster".to_string(),
        };
        match self.by {
            HeldBy::CircuitBreaker => format!(
                "{} of {} nodes in {scope} are unhealthy, more than {UNHEALTHY_PERCENT_LIMIT}%: node repair is paused",
                self.unhealthy, self.total
            ),
            HeldBy::Budget => format!(
                "the disruption budgets of {scope} allow no more repairs now ({} unhealthy of {} nodes)",
                self.unhealthy, self.total
            ),
        }
    }
}

/// What a repair pass does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairPlan {
    pub repairs: Vec<Repair>,
    pub blocked: Vec<BlockedGroup>,
    /// The earliest moment an unhealthy node's toleration runs out after now, so a caller can wake then.
    pub next_due: Option<Timestamp>,
}

/// How many of `total` nodes may be unhealthy while repair goes on: 20%, rounded up.
pub fn unhealthy_allowed(total: usize) -> usize {
    (total * UNHEALTHY_PERCENT_LIMIT).div_ceil(100)
}

#[derive(Default)]
struct Group {
    total: usize,
    unhealthy: usize,
    /// Nodes being deleted (their NodeClaim or the Node) or rebooted, which use up the budget.
    deleting: usize,
    due: Vec<Repair>,
}

/// Decides the repairs at `now` for replace policies only (see [`plan_repairs_with`]).
pub fn plan_repairs<'a>(
    nodes: impl IntoIterator<Item = &'a CompactNode>,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    budgets: &HashMap<String, Option<Vec<Budget>>>,
    policies: &[RepairPolicy],
    now: Timestamp,
) -> RepairPlan {
    let policies = Policies {
        replace: policies.to_vec(),
        reboot: Vec::new(),
    };
    plan_repairs_with(nodes, claims, budgets, &policies, &|_| 0, now)
}

/// Decides the repairs at `now`. Only nodes with a NodeClaim (found by `status.nodeName` or provider ID) are
/// repaired; a NodeClaim already being deleted is left to its termination, one being rebooted to its reboot.
/// `recent_reboots` says how many reboots a NodeClaim (by UID) has had within the reboot history's window.
pub fn plan_repairs_with<'a>(
    nodes: impl IntoIterator<Item = &'a CompactNode>,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    budgets: &HashMap<String, Option<Vec<Budget>>>,
    policies: &Policies,
    recent_reboots: &dyn Fn(&str) -> usize,
    now: Timestamp,
) -> RepairPlan {
    let reboot_policies: Vec<RepairPolicy> = policies.reboot.iter().map(|p| p.policy.clone()).collect();
    let mut claim_by_node: HashMap<&str, &NodeClaim> = HashMap::new();
    let mut claim_by_provider_id: HashMap<&str, &NodeClaim> = HashMap::new();
    for claim in claims {
        let Some(status) = claim.status.as_ref() else {
            continue;
        };
        if let Some(node) = status.node_name.as_deref() {
            claim_by_node.insert(node, claim);
        }
        if let Some(id) = status.provider_id.as_deref() {
            claim_by_provider_id.insert(id, claim);
        }
    }
    let mut plan = RepairPlan::default();
    // By NodePool; `None` collects the nodes without one, counted against the whole cluster below.
    let mut groups: BTreeMap<Option<String>, Group> = BTreeMap::new();
    let mut cluster_total = 0;
    for node in nodes {
        cluster_total += 1;
        let pool = node.labels().get(labels::NODEPOOL_LABEL).cloned();
        let group = groups.entry(pool.clone()).or_default();
        group.total += 1;
        let claim = claim_by_node.get(node.name_any().as_str()).copied().or_else(|| {
            let id = node.spec.as_ref()?.provider_id.as_deref()?;
            claim_by_provider_id.get(id).copied()
        });
        let deleting = node.metadata.deletion_timestamp.is_some()
            || claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        let rebooting = claim.is_some_and(karpenter_api::nodeclaim::is_rebooting);
        if deleting || rebooting {
            group.deleting += 1;
        }
        let not_before = claim.and_then(reboot_ended_at);
        let replace = unhealthy_since(node, &policies.replace, not_before, now);
        let reboot = unhealthy_since(node, &reboot_policies, not_before, now);
        if replace.is_none() && reboot.is_none() {
            continue;
        }
        group.unhealthy += 1;
        let Some((action, why)) = due_action(replace, reboot, now, &mut plan.next_due) else {
            continue;
        };
        let Some(claim) = claim else { continue };
        if deleting || rebooting {
            continue;
        }
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let reboot_grace = policies
            .reboot
            .get(why.policy)
            .and_then(|p| p.termination_grace_period);
        let (action, escalated) = escalate(action, recent_reboots(&uid));
        group.due.push(Repair {
            node: node.name_any(),
            node_claim: claim.name_any(),
            node_pool: pool,
            why,
            action,
            escalated,
            termination_grace_period: reboot_grace.filter(|_| action == RepairAction::RebootNode),
            node_claim_uid: uid,
        });
    }
    let cluster_unhealthy: usize = groups.values().map(|g| g.unhealthy).sum();
    for (pool, group) in groups {
        let (unhealthy, total) = match pool {
            Some(_) => (group.unhealthy, group.total),
            None => (cluster_unhealthy, cluster_total),
        };
        if group.due.is_empty() {
            continue;
        }
        if unhealthy > unhealthy_allowed(total) {
            plan.blocked.push(BlockedGroup {
                node_pool: pool,
                unhealthy,
                total,
                held: group.due,
                by: HeldBy::CircuitBreaker,
            });
            continue;
        }
        let mut due = group.due;
        let allowed = match &pool {
            Some(name) => {
                let pool_budgets = budgets.get(name).and_then(|b| b.as_deref());
                allowed_disruptions(
                    pool_budgets,
                    DisruptionReason::Unhealthy,
                    total,
                    group.deleting,
                    now,
                )
                .0
            }
            // Nodes without a NodePool have no budgets.
            None => due.len(),
        };
        if due.len() > allowed {
            due.sort_by(|a, b| {
                a.why
                    .repair_at
                    .cmp(&b.why.repair_at)
                    .then_with(|| a.node.cmp(&b.node))
            });
            let held = due.split_off(allowed);
            plan.blocked.push(BlockedGroup {
                node_pool: pool,
                unhealthy,
                total,
                held,
                by: HeldBy::Budget,
            });
        }
        plan.repairs.extend(due);
    }
    plan
}

/// The action due at `now` and why: a due replacement wins over a due reboot. When neither is due, `next_due`
/// is brought forward to the earlier of their due times.
fn due_action(
    replace: Option<Unhealthy>,
    reboot: Option<Unhealthy>,
    now: Timestamp,
    next_due: &mut Option<Timestamp>,
) -> Option<(RepairAction, Unhealthy)> {
    match (replace, reboot) {
        (Some(why), _) if now >= why.repair_at => Some((RepairAction::ReplaceNode, why)),
        (_, Some(why)) if now >= why.repair_at => Some((RepairAction::RebootNode, why)),
        (replace, reboot) => {
            if let Some(next) = [replace, reboot].into_iter().flatten().map(|u| u.repair_at).min() {
                *next_due = Some(next_due.map_or(next, |d| d.min(next)));
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    const T0: &str = "2026-01-01T00:00:00Z";

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn policies() -> Vec<RepairPolicy> {
        vec![RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: "False".into(),
            toleration: Duration::from_secs(30 * 60),
        }]
    }

    fn node(name: &str, pool: Option<&str>, ready: &str) -> CompactNode {
        let mut labels = json!({});
        if let Some(pool) = pool {
            labels[labels::NODEPOOL_LABEL] = json!(pool);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": format!("sim:///{name}")},
            "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": T0}]}
        }))
        .map(|n: k8s_openapi::api::core::v1::Node| n.into())
        .unwrap()
    }

    fn claim(name: &str, node: &str) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"providerID": format!("sim:///{node}")}
        }))
        .unwrap()
    }

    /// `n` nodes in pool `p`, the first `bad` of them NotReady since T0, each with a claim.
    fn pool(p: &str, n: usize, bad: usize) -> (Vec<CompactNode>, Vec<NodeClaim>) {
        (0..n)
            .map(|i| {
                let name = format!("{p}-{i}");
                let ready = if i < bad { "False" } else { "True" };
                (
                    node(&name, Some(p), ready),
                    claim(&format!("{name}-claim"), &name),
                )
            })
            .unzip()
    }

    #[test]
    fn budgets_for_unhealthy_cap_repairs_at_once_and_count_nodes_already_deleting() {
        let budget = |nodes: &str, reasons: Option<Vec<DisruptionReason>>| Budget {
            nodes: Some(nodes.into()),
            reasons,
            ..Budget::default()
        };
        let (nodes, mut claims) = pool("a", 10, 2);
        let late = at("2026-01-01T01:00:00Z");
        let one = HashMap::from([(
            "a".to_string(),
            Some(vec![budget("1", Some(vec![DisruptionReason::Unhealthy]))]),
        )]);
        let plan = plan_repairs(&nodes, &claims, &one, &policies(), late);
        assert_eq!(plan.repairs.len(), 1, "{plan:?}");
        assert_eq!(plan.blocked.len(), 1);
        assert_eq!(plan.blocked[0].by, HeldBy::Budget);
        assert_eq!(plan.blocked[0].held.len(), 1);
        assert!(plan.blocked[0].message().contains("budgets"));

        // A budget for other reasons only leaves repair unlimited (within the breaker).
        let drift_only = HashMap::from([(
            "a".to_string(),
            Some(vec![budget("0", Some(vec![DisruptionReason::Drifted]))]),
        )]);
        assert_eq!(
            plan_repairs(&nodes, &claims, &drift_only, &policies(), late)
                .repairs
                .len(),
            2
        );

        // A healthy node being deleted uses the budget up.
        claims[9].metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(late));
        let plan = plan_repairs(&nodes, &claims, &one, &policies(), late);
        assert!(plan.repairs.is_empty(), "{plan:?}");
        assert_eq!(plan.blocked[0].held.len(), 2);
    }

    #[test]
    fn a_reboot_policy_reboots_unless_a_replacement_is_due_or_reboots_ran_out() {
        let reboot = |condition: &str| RebootPolicy {
            policy: RepairPolicy {
                condition_type: condition.into(),
                condition_status: "False".into(),
                toleration: Duration::from_secs(60),
            },
            termination_grace_period: Some(Duration::from_secs(60)),
        };
        let (nodes, mut claims) = pool("a", 10, 1);
        claims[0].metadata.uid = Some("uid-0".into());
        let mut policies = Policies {
            replace: policies(),
            reboot: vec![reboot("Ready")],
        };
        let early = at("2026-01-01T00:05:00Z");
        let plan = plan_repairs_with(&nodes, &claims, &HashMap::new(), &policies, &|_| 0, early);
        let r = &plan.repairs[0];
        assert_eq!((r.action, r.escalated), (RepairAction::RebootNode, false));
        assert_eq!(r.termination_grace_period, Some(Duration::from_secs(60)));
        assert_eq!(plan.next_due, None);
        // Rebooted twice recently: replaced instead.
        let plan = plan_repairs_with(
            &nodes,
            &claims,
            &HashMap::new(),
            &policies,
            &|u| usize::from(u == "uid-0") * 2,
            early,
        );
        assert_eq!(
            (plan.repairs[0].action, plan.repairs[0].escalated),
            (RepairAction::ReplaceNode, true)
        );
        assert_eq!(plan.repairs[0].termination_grace_period, None);
        // Once the replace policy is due too, it wins.
        let late = at("2026-01-01T00:30:00Z");
        let plan = plan_repairs_with(&nodes, &claims, &HashMap::new(), &policies, &|_| 0, late);
        assert_eq!(plan.repairs[0].action, RepairAction::ReplaceNode);
        // Reboot policies alone count for the breaker too.
        policies.replace.clear();
        let (nodes, claims) = pool("b", 5, 2);
        let plan = plan_repairs_with(&nodes, &claims, &HashMap::new(), &policies, &|_| 0, early);
        assert!(plan.repairs.is_empty());
        assert_eq!(plan.blocked[0].by, HeldBy::CircuitBreaker);
    }

    #[test]
    fn a_rebooting_node_is_left_to_its_reboot_uses_the_budget_and_is_tolerated_anew_after() {
        let policies = Policies {
            replace: Vec::new(),
            reboot: vec![RebootPolicy {
                policy: policies()[0].clone(),
                termination_grace_period: None,
            }],
        };
        let (nodes, mut claims) = pool("a", 10, 2);
        let rebooting = |status: &str, since: &str| -> Vec<karpenter_api::common::Condition> {
            serde_json::from_value(
                json!([{"type": "Rebooting", "status": status, "reason": "RebootRequested",
                "lastTransitionTime": since}]),
            )
            .unwrap()
        };
        claims[0].status.as_mut().unwrap().conditions = rebooting("True", T0);
        let one = HashMap::from([(
            "a".to_string(),
            Some(vec![Budget {
                nodes: Some("1".into()),
                ..Budget::default()
            }]),
        )]);
        let late = at("2026-01-01T01:00:00Z");
        let plan = plan_repairs_with(&nodes, &claims, &one, &policies, &|_| 0, late);
        assert!(plan.repairs.is_empty(), "{plan:?}");
        assert_eq!(
            plan.blocked[0].held[0].node, "a-1",
            "the budget of 1 is the reboot under way"
        );
        // The reboot ended at 00:50: the condition, still there, is tolerated for 30 minutes from then.
        claims[0].status.as_mut().unwrap().conditions = rebooting("False", "2026-01-01T00:50:00Z");
        let plan = plan_repairs_with(&nodes, &claims, &HashMap::new(), &policies, &|_| 0, late);
        let repaired: Vec<&str> = plan.repairs.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(repaired, vec!["a-1"]);
        assert_eq!(plan.next_due, Some(at("2026-01-01T01:20:00Z")));
    }

    #[test]
    fn twenty_percent_rounds_up() {
        assert_eq!(unhealthy_allowed(0), 0);
        assert_eq!(unhealthy_allowed(1), 1);
        assert_eq!(unhealthy_allowed(5), 1);
        assert_eq!(unhealthy_allowed(6), 2);
        assert_eq!(unhealthy_allowed(10), 2);
    }

    #[test]
    fn a_node_unhealthy_past_its_toleration_is_repaired_through_its_claim() {
        let (nodes, claims) = pool("a", 5, 1);
        let plan = plan_repairs(
            &nodes,
            &claims,
            &HashMap::new(),
            &policies(),
            at("2026-01-01T00:30:00Z"),
        );
        let repaired: Vec<(&str, &str)> = plan
            .repairs
            .iter()
            .map(|r| (r.node.as_str(), r.node_claim.as_str()))
            .collect();
        assert_eq!(repaired, vec![("a-0", "a-0-claim")]);
        assert!(plan.blocked.is_empty());
    }

    #[test]
    fn within_its_toleration_a_node_waits_and_the_plan_says_until_when() {
        let (nodes, claims) = pool("a", 5, 1);
        let plan = plan_repairs(
            &nodes,
            &claims,
            &HashMap::new(),
            &policies(),
            at("2026-01-01T00:29:59Z"),
        );
        assert!(plan.repairs.is_empty());
        assert_eq!(plan.next_due, Some(at("2026-01-01T00:30:00Z")));
    }

    #[test]
    fn more_than_twenty_percent_unhealthy_blocks_the_pool_but_not_another() {
        let (mut nodes, mut claims) = pool("a", 5, 2);
        let (b_nodes, b_claims) = pool("b", 5, 1);
        nodes.extend(b_nodes);
        claims.extend(b_claims);
        let plan = plan_repairs(
            &nodes,
            &claims,
            &HashMap::new(),
            &policies(),
            at("2026-01-01T01:00:00Z"),
        );
        assert_eq!(plan.blocked.len(), 1);
        let blocked = &plan.blocked[0];
        assert_eq!(
            (blocked.node_pool.as_deref(), blocked.unhealthy, blocked.total),
            (Some("a"), 2, 5)
        );
        assert_eq!(blocked.held.len(), 2);
        assert_eq!(
            blocked.message(),
            "2 of 5 nodes in NodePool a are unhealthy, more than 20%: node repair is paused"
        );
        let repaired: Vec<&str> = plan.repairs.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(repaired, vec!["b-0"]);
    }

    #[test]
    fn nodes_without_a_pool_count_against_the_whole_cluster() {
        let (mut nodes, mut claims) = pool("a", 9, 0);
        nodes.push(node("loose-0", None, "False"));
        claims.push(claim("loose-0-claim", "loose-0"));
        let plan = plan_repairs(
            &nodes,
            &claims,
            &HashMap::new(),
            &policies(),
            at("2026-01-01T01:00:00Z"),
        );
        assert_eq!(
            plan.repairs.len(),
            1,
            "1 of 10 nodes in the cluster is within 20%"
        );

        let nodes = vec![
            node("loose-0", None, "False"),
            node("loose-1", None, "False"),
            node("x", Some("a"), "True"),
        ];
        let claims = vec![claim("c0", "loose-0"), claim("c1", "loose-1")];
        let plan = plan_repairs(
            &nodes,
            &claims,
            &HashMap::new(),
            &policies(),
            at("2026-01-01T01:00:00Z"),
        );
        assert!(plan.repairs.is_empty());
        assert_eq!(
            plan.blocked[0].message(),
            "2 of 3 nodes in the cluster are unhealthy, more than 20%: node repair is paused"
        );
    }

    #[test]
    fn nodes_without_a_claim_and_claims_being_deleted_are_left_alone() {
        let (nodes, mut claims) = pool("a", 5, 1);
        claims[0].metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(T0)));
        let plan = plan_repairs(
            &nodes,
            &claims,
            &HashMap::new(),
            &policies(),
            at("2026-01-01T01:00:00Z"),
        );
        assert!(plan.repairs.is_empty() && plan.blocked.is_empty());
        let plan = plan_repairs(
            &nodes,
            &[],
            &HashMap::new(),
            &policies(),
            at("2026-01-01T01:00:00Z"),
        );
        assert!(plan.repairs.is_empty() && plan.blocked.is_empty());
    }
}
