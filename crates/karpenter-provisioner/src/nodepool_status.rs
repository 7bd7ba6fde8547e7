//! The NodePool status controller: every 5 seconds (upstream's nodepool.counter period) it writes each
//! NodePool's `status.resources` and `status.nodes` ([`crate::nodepool_resources`]) and its
//! ValidationSucceeded, NodeClassReady and Ready conditions ([`crate::nodepool_conditions`]), through the
//! status subresource with a merge patch, and only when something changed.
//!
//! The same pass keeps the NodePool's hash annotations and re-hashes NodeClaims stamped by another hash
//! version ([`crate::nodepool_hash`]).
//!
//! It also writes NodeRegistrationHealthy and `status.nodeClassObservedGeneration` from the outcomes the
//! lifecycle reported ([`crate::registration_health`]); being the only writer of the conditions, it never races
//! another controller over the list.
//!
//! The NodeClass is read by its reference through karpenter-nodeclass's [`NodeClassLookup`]: a kind the provider
//! does not serve is Unknown; otherwise the API server's discovery resolves the kind (cached, so a pass costs one
//! GET per NodePool) and the object's Ready condition decides.

use std::{sync::Arc, time::Duration};

use jiff::Timestamp;
use karpenter_api::{
    label_policy::LabelPolicy,
    nodepool::{NodePool, NodePoolStatus},
};
use karpenter_core::{clock::Clock, cloudprovider::CloudProvider};
use karpenter_nodeclass::{NodeClassLookup, ObservedNodeClass};
use karpenter_state::api_errors::is_not_found;
use karpenter_state::{ControllerContext, periodic::run_synced_untimed};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::{Map, Value, json};

use crate::{
    ProvisionerError,
    nodepool_conditions::nodepool_conditions,
    nodepool_hash::sync_hashes,
    nodepool_resources::pool_resources,
    registration_health::{Generations, RegistrationHealth},
};

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePoolStatusPass {
    /// NodePools whose status was written.
    pub patched: Vec<String>,
    /// NodeClaims whose hash annotations were rewritten for the current hash version.
    pub rehashed: Vec<String>,
}

/// The NodePool status controller's context.
pub struct NodePoolStatusController {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    /// The label rules validation applies (the provisioner's `BuildOptions::label_policy`).
    label_policy: LabelPolicy,
    /// Finds and reads each NodePool's NodeClass.
    node_classes: NodeClassLookup,
    /// Between passes (tokio time).
    pub interval: Duration,
    /// The registration outcomes the lifecycle reports.
    registration_health: Arc<RegistrationHealth>,
}

impl NodePoolStatusController {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>, label_policy: LabelPolicy) -> Self {
        Self {
            node_classes: NodeClassLookup::new(cx.client.clone()),
            cx,
            cloud,
            label_policy,
            interval: Duration::from_secs(5),
            registration_health: Arc::default(),
        }
    }

    /// Writes NodeRegistrationHealthy from the outcomes reported to `health` (the lifecycle's).
    pub fn with_registration_health(mut self, health: Arc<RegistrationHealth>) -> Self {
        self.registration_health = health;
        self
    }

    /// Runs passes until the future is dropped; a failed pass is logged and the next one retries.
    pub async fn run(&self) {
        run_synced_untimed(&self.cx.state, self.interval, || async {
            if let Err(error) = self.pass().await {
                tracing::warn!(category = error.category(), %error, "NodePool status pass failed");
            }
        })
        .await;
    }

    /// One pass over every NodePool in the cache.
    pub async fn pass(&self) -> Result<NodePoolStatusPass, ProvisionerError> {
        if !self.cx.state.synced() {
            return Err(ProvisionerError::NotSynced);
        }
        let now = self.cx.clock.now();
        let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
        let nodes = self.cx.state.nodes.all();
        let claims = self.cx.state.node_claims.all();
        let mut pass = NodePoolStatusPass::default();
        let mut live = std::collections::HashSet::new();
        for pool in self.cx.state.node_pools.all() {
            let uid = pool.metadata.uid.clone().unwrap_or_default();
            live.insert(uid.clone());
            if pool.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = pool.name_any();
            let hashes = sync_hashes(&self.cx.client, &pool, &claims).await?;
            pass.rehashed.extend(hashes.rehashed);
            let counted = pool_resources(&name, nodes.iter().map(|n| &**n), claims.iter().map(|c| &**c));
            let ObservedNodeClass {
                readiness,
                generation: class_generation,
            } = self
                .node_classes
                .observe(self.cloud.as_ref(), &pool.spec.template.spec.node_class_ref)
                .await?;
            let current = pool.status.clone().unwrap_or_default();
            let mut conditions = nodepool_conditions(
                &current.conditions,
                &pool.validate(self.label_policy),
                &readiness,
                pool.metadata.generation,
                now,
            );
            let mut node_class_observed_generation = current.node_class_observed_generation;
            // As upstream, only a NodePool whose NodeClass exists is judged.
            if let Some(class_generation) = class_generation {
                conditions = self.registration_health.conditions(
                    &uid,
                    &conditions,
                    Generations {
                        node_pool: pool.metadata.generation,
                        node_class: Some(class_generation),
                        observed_node_class: current.node_class_observed_generation,
                    },
                    now,
                );
                node_class_observed_generation = Some(class_generation);
            }
            let wanted = NodePoolStatus {
                resources: Some(counted.resources),
                nodes: Some(counted.nodes),
                conditions,
                node_class_observed_generation,
            };
            if same_status(&current, &wanted) {
                self.registration_health.written(&uid);
                continue;
            }
            let api: Api<NodePool> = Api::all(self.cx.client.clone());
            match api
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(status_patch(&current, &wanted)?),
                )
                .await
            {
                Ok(_) => {
                    self.registration_health.written(&uid);
                    pass.patched.push(name);
                }
                // Deleted since the cache saw it.
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.registration_health.retain(&live);
        Ok(pass)
    }
}

/// Whether writing `wanted` would change nothing.
fn same_status(current: &NodePoolStatus, wanted: &NodePoolStatus) -> bool {
    current.nodes == wanted.nodes
        && current.resources == wanted.resources
        && current.conditions == wanted.conditions
        && current.node_class_observed_generation == wanted.node_class_observed_generation
}

/// The merge patch from `current` to `wanted`: resources gone from the pool are set to null, since a merge
/// patch would otherwise keep them.
fn status_patch(current: &NodePoolStatus, wanted: &NodePoolStatus) -> Result<Value, ProvisionerError> {
    let mut resources = Map::new();
    for name in current.resources.iter().flatten().map(|(k, _)| k) {
        resources.insert(name.clone(), Value::Null);
    }
    for (name, quantity) in wanted.resources.iter().flatten() {
        resources.insert(name.clone(), Value::String(quantity.0.clone()));
    }
    let conditions = serde_json::to_value(&wanted.conditions).map_err(|source| ProvisionerError::Encode {
        what: "NodePool conditions".to_string(),
        source,
    })?;
    Ok(json!({"status": {
        "resources": resources,
        "nodes": wanted.nodes,
        "nodeClassObservedGeneration": wanted.node_class_observed_generation,
        "conditions": conditions,
    }}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_removes_resources_the_pool_no_longer_has() {
        let q = |s: &str| k8s_openapi::apimachinery::pkg::api::resource::Quantity(s.into());
        let current = NodePoolStatus {
            resources: Some([("cpu".to_string(), q("4")), ("nodes".to_string(), q("1"))].into()),
            nodes: Some(1),
            ..NodePoolStatus::default()
        };
        let wanted = NodePoolStatus {
            resources: Some([("nodes".to_string(), q("0"))].into()),
            nodes: Some(0),
            ..NodePoolStatus::default()
        };
        assert!(!same_status(&current, &wanted));
        let patch = status_patch(&current, &wanted).unwrap();
        assert_eq!(patch["status"]["resources"], json!({"cpu": null, "nodes": "0"}));
        assert_eq!(patch["status"]["nodes"], json!(0));
    }
}
