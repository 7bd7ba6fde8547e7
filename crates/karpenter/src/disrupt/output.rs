//! The output of `karpenter disrupt`: the stable JSON contract of architecture.md. Replacements are NodeClaims in
//! the same form `schedule` prints.

use std::collections::BTreeMap;

use karpenter_core::{
    disruption::{consolidation::Decision, pass::PassResult},
    snapshot::DisruptionInputs,
};
use serde::Serialize;

use crate::schedule::output::{NodeClaimOutput, OutputContext, node_claim};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptOutput {
    pub commands: Vec<CommandOutput>,
    /// Expired NodeClaims, deleted whatever the budgets (expiration is forceful).
    pub expirations: Vec<ExpirationOutput>,
    pub blocked: Vec<BlockedOutput>,
    pub node_claims: Vec<NodeClaimConditionsOutput>,
    pub budgets: Vec<BudgetOutput>,
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandOutput {
    pub method: String,
    pub reason: String,
    pub decision: String,
    pub candidates: Vec<CandidateOutput>,
    pub replacements: Vec<NodeClaimOutput>,
    pub savings_per_hour: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateOutput {
    pub node: String,
    pub node_claim: String,
    pub node_pool: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpirationOutput {
    pub node: String,
    pub node_claim: String,
    pub node_pool: String,
    /// RFC 3339.
    pub expired_at: String,
    /// What will hold the drain (a PDB or do-not-disrupt), until the NodeClaim's terminationGracePeriod ends
    /// when it has one; `null` when nothing does.
    pub drain_blocked_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockedOutput {
    pub node: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConditionOutput {
    pub status: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeClaimConditionsOutput {
    pub name: String,
    pub node: String,
    pub conditions: BTreeMap<String, ConditionOutput>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetOutput {
    pub node_pool: String,
    pub reason: String,
    pub allowed: Option<usize>,
}

fn round_price(price: f64) -> f64 {
    (price * 1e6).round() / 1e6
}

impl DisruptOutput {
    pub fn new(
        inputs: &DisruptionInputs,
        result: &PassResult,
        nodepool_hashes: &BTreeMap<String, String>,
    ) -> Self {
        let view = &inputs.view;
        let node_name = |n: usize| {
            view.nodes
                .get(n)
                .map(|node| node.name.clone())
                .unwrap_or_default()
        };
        let ctx = OutputContext {
            input: &inputs.base.input,
            interner: &inputs.base.interner,
            table: &inputs.base.table,
            nodepool_hashes,
        };
        let commands = result
            .commands
            .iter()
            .map(|c| {
                // The re-simulation placed the pending pods first, then the candidates' pods in candidate order:
                // index them the same way.
                let pending = &inputs.base.input.pods;
                let moved: Vec<String> = c
                    .candidates
                    .iter()
                    .flat_map(|&n| inputs.pods_of.get(n).into_iter().flatten())
                    .map(|p| p.id.clone())
                    .collect();
                let pod_id = |p: usize| match pending.get(p) {
                    Some(pod) => pod.id.clone(),
                    None => moved
                        .get(p - pending.len())
                        .cloned()
                        .unwrap_or_else(|| format!("pod #{p}")),
                };
                CommandOutput {
                    method: c.method.as_str().to_string(),
                    reason: c.reason.as_str().to_string(),
                    decision: match c.decision {
                        Decision::Delete => "delete",
                        Decision::Replace => "replace",
                    }
                    .to_string(),
                    candidates: c
                        .candidates
                        .iter()
                        .map(|&n| CandidateOutput {
                            node: node_name(n),
                            node_claim: view.nodes[n].node_claim.clone().unwrap_or_default(),
                            node_pool: view.nodes[n].node_pool.clone().unwrap_or_default(),
                        })
                        .collect(),
                    replacements: c
                        .replacements
                        .iter()
                        .map(|r| node_claim(&ctx, r, &pod_id))
                        .collect(),
                    savings_per_hour: round_price(c.savings_per_hour),
                }
            })
            .collect();
        let expirations = result
            .expirations
            .iter()
            .map(|e| ExpirationOutput {
                node: node_name(e.node),
                node_claim: view.nodes[e.node].node_claim.clone().unwrap_or_default(),
                node_pool: view.nodes[e.node].node_pool.clone().unwrap_or_default(),
                expired_at: e.expired_at.to_string(),
                drain_blocked_by: e.drain_blocked_by.clone(),
            })
            .collect();
        let blocked = result
            .blocked
            .iter()
            .map(|(n, reason)| BlockedOutput {
                node: node_name(*n),
                reason: reason.clone(),
            })
            .collect();
        let node_claims = result
            .node_claims
            .iter()
            .map(|c| {
                let mut conditions = BTreeMap::new();
                let drifted = match &c.drifted {
                    Some(reason) => ConditionOutput {
                        status: "True".into(),
                        reason: reason.as_str().to_string(),
                    },
                    None => ConditionOutput {
                        status: "False".into(),
                        reason: String::new(),
                    },
                };
                conditions.insert("Drifted".to_string(), drifted);
                let consolidatable = ConditionOutput {
                    status: if c.consolidatable { "True" } else { "False" }.to_string(),
                    reason: String::new(),
                };
                conditions.insert("Consolidatable".to_string(), consolidatable);
                NodeClaimConditionsOutput {
                    name: view.nodes[c.node].node_claim.clone().unwrap_or_default(),
                    node: node_name(c.node),
                    conditions,
                }
            })
            .collect();
        let budgets = result
            .budgets
            .iter()
            .map(|b| BudgetOutput {
                node_pool: inputs
                    .pools
                    .get(b.pool)
                    .map(|p| p.name.clone())
                    .unwrap_or_default(),
                reason: b.reason.as_str().to_string(),
                allowed: b.allowed,
            })
            .collect();
        Self {
            commands,
            expirations,
            blocked,
            node_claims,
            budgets,
            errors: result.errors.clone(),
        }
    }
}
