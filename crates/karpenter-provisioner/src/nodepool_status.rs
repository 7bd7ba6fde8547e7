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
//! The NodeClass is read by its reference: a kind the provider does not serve is Unknown; otherwise the API
//! server's discovery resolves the kind (cached, so a pass costs one GET per NodePool) and the object's Ready
//! condition decides.

use std::{collections::HashMap, sync::Arc, time::Duration};

use jiff::Timestamp;
use karpenter_api::{
    common::NodeClassReference,
    label_policy::LabelPolicy,
    nodepool::{NodePool, NodePoolStatus},
};
use karpenter_core::{clock::Clock, cloudprovider::CloudProvider};
use karpenter_state::api_errors::is_not_found;
use karpenter_state::{ControllerContext, periodic::run_synced_untimed};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
    discovery,
};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;

use crate::{
    ProvisionerError,
    nodepool_conditions::{NodeClassReadiness, nodepool_conditions},
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
    /// (group, kind) to how the API server serves it; `None` when it does not.
    kinds: Mutex<HashMap<(String, String), Option<ApiResource>>>,
    /// Between passes (tokio time).
    pub interval: Duration,
    /// The registration outcomes the lifecycle reports.
    registration_health: Arc<RegistrationHealth>,
}

impl NodePoolStatusController {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>, label_policy: LabelPolicy) -> Self {
        Self {
            cx,
            cloud,
            label_policy,
            kinds: Mutex::new(HashMap::new()),
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
            let (readiness, class_generation) = self
                .node_class_readiness(&pool.spec.template.spec.node_class_ref)
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

    /// The NodeClass's readiness, and its generation when it was found.
    async fn node_class_readiness(
        &self,
        reference: &NodeClassReference,
    ) -> Result<(NodeClassReadiness, Option<i64>), ProvisionerError> {
        let served = self
            .cloud
            .supported_node_classes()
            .into_iter()
            .find(|k| k.group == reference.group && k.kind == reference.kind);
        let Some(kind) = served else {
            let message = format!(
                "{}/{} is not a NodeClass kind the {} provider serves",
                reference.group,
                reference.kind,
                self.cloud.name()
            );
            return Ok((NodeClassReadiness::UnknownKind { message }, None));
        };
        let Some(resource) = self.resolve(&reference.group, &reference.kind).await else {
            let message = format!(
                "the API server does not serve {}/{} (is its CRD installed?)",
                reference.group, reference.kind
            );
            return Ok((NodeClassReadiness::UnknownKind { message }, None));
        };
        let api: Api<DynamicObject> = Api::all_with(self.cx.client.clone(), &resource);
        let Some(object) = api.get_opt(&reference.name).await? else {
            return Ok((NodeClassReadiness::NotFound, None));
        };
        let readiness = readiness_of(&object, self.cloud.node_class_reports_readiness(&kind));
        Ok((readiness, Some(object.metadata.generation.unwrap_or_default())))
    }

    /// How the API server serves `group`/`kind`, from discovery once per kind. A failed discovery is not cached,
    /// so a CRD installed later is found.
    async fn resolve(&self, group: &str, kind: &str) -> Option<ApiResource> {
        let key = (group.to_string(), kind.to_string());
        if let Some(found) = self.kinds.lock().await.get(&key) {
            return found.clone();
        }
        match discovery::group(&self.cx.client, group).await {
            Ok(g) => {
                let found = g.recommended_kind(kind).map(|(resource, _)| resource);
                self.kinds.lock().await.insert(key, found.clone());
                found
            }
            Err(error) => {
                tracing::debug!(group, %error, "discovering a NodeClass group failed");
                None
            }
        }
    }
}

/// A NodeClass's readiness from its object; one of a provider that writes no Ready condition
/// (`reports_readiness` false) is ready while it exists.
fn readiness_of(object: &DynamicObject, reports_readiness: bool) -> NodeClassReadiness {
    if object.metadata.deletion_timestamp.is_some() {
        return NodeClassReadiness::Terminating;
    }
    if !reports_readiness {
        return NodeClassReadiness::Ready;
    }
    let ready = object.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
    let Some(ready) = ready else {
        return NodeClassReadiness::ReadinessUnknown;
    };
    let text = |field: &str| ready[field].as_str().unwrap_or_default().to_string();
    match ready["status"].as_str() {
        Some("True") => NodeClassReadiness::Ready,
        Some("False") => NodeClassReadiness::NotReady {
            reason: text("reason"),
            message: text("message"),
        },
        _ => NodeClassReadiness::ReadinessUnknown,
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

    fn object(status: Value, deleting: bool) -> DynamicObject {
        let mut o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"}, "status": status
        }))
        .unwrap();
        if deleting {
            o.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().unwrap(),
            ));
        }
        o
    }

    #[test]
    fn node_class_readiness_follows_its_ready_condition() {
        let ready = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        assert_eq!(
            readiness_of(&object(ready.clone(), false), true),
            NodeClassReadiness::Ready
        );
        assert_eq!(
            readiness_of(&object(ready, true), true),
            NodeClassReadiness::Terminating
        );
        assert_eq!(
            readiness_of(
                &object(
                    json!({"conditions": [{"type": "Ready", "status": "False", "reason": "AMINotFound", "message": "no AMI"}]}),
                    false
                ),
                true
            ),
            NodeClassReadiness::NotReady {
                reason: "AMINotFound".into(),
                message: "no AMI".into()
            }
        );
        assert_eq!(
            readiness_of(&object(json!({}), false), true),
            NodeClassReadiness::ReadinessUnknown
        );
    }

    #[test]
    fn a_node_class_of_a_provider_that_writes_no_readiness_is_ready_while_it_exists() {
        // kwok: the EC2NodeClass has no status at all, and its NodePools must still launch.
        assert_eq!(
            readiness_of(&object(json!({}), false), false),
            NodeClassReadiness::Ready
        );
        assert_eq!(
            readiness_of(&object(json!({}), true), false),
            NodeClassReadiness::Terminating
        );
    }

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
