//! The NodePool hash (upstream's nodepool.hash controller), run in the NodePool status pass:
//! - each NodePool carries `karpenter.sh/nodepool-hash` and `karpenter.sh/nodepool-hash-version` annotations
//!   with its current hash, so a person can compare them with a NodeClaim's;
//! - a NodeClaim stamped by another hash version (upstream's `v3`, after a migration, or an older version of
//!   this project) is re-hashed: its version annotation becomes the current one and, unless it already has a
//!   `Drifted` condition (which the old hash can no longer re-judge), its hash becomes the NodePool's. Static
//!   drift is then judged on it again. Without this a claim from another version would never be found
//!   drifted by a NodePool change.
//!
//! Deciding is pure ([`nodepool_annotations`], [`claim_rehash`]); [`sync_hashes`] writes the answer with merge
//! patches conditional on the resourceVersion read, so an annotation written meanwhile is not lost.

use std::{collections::BTreeMap, sync::Arc};

use futures::{StreamExt, stream};
use karpenter_api::{
    labels::{NODEPOOL_HASH_ANNOTATION, NODEPOOL_HASH_VERSION_ANNOTATION},
    nodeclaim::NodeClaim,
    nodepool::{NODEPOOL_HASH_VERSION, NodePool},
};
use karpenter_core::disruption::drift::{needs_rehash, rehash_annotations};
use karpenter_state::api_errors::{is_conflict, is_not_found};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::ProvisionerError;

/// NodeClaim re-hash writes in flight at once.
const REHASH_CONCURRENCY: usize = 16;

/// The annotations to write on `pool` (its hash and the hash version), or `None` when they are current.
pub fn nodepool_annotations(pool: &NodePool) -> Option<BTreeMap<String, String>> {
    let hash = pool.hash();
    let annotations = pool.metadata.annotations.as_ref();
    let current = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    if current(NODEPOOL_HASH_ANNOTATION) == Some(hash.as_str())
        && current(NODEPOOL_HASH_VERSION_ANNOTATION) == Some(NODEPOOL_HASH_VERSION)
    {
        return None;
    }
    Some(BTreeMap::from([
        (NODEPOOL_HASH_ANNOTATION.to_string(), hash),
        (
            NODEPOOL_HASH_VERSION_ANNOTATION.to_string(),
            NODEPOOL_HASH_VERSION.to_string(),
        ),
    ]))
}

/// The annotations that re-hash `claim` against `pool`, or `None` when the claim belongs to another NodePool,
/// is being deleted, or already carries the current hash version.
pub fn claim_rehash(claim: &NodeClaim, pool: &NodePool) -> Option<BTreeMap<String, String>> {
    if !needs_rehash(claim, pool) {
        return None;
    }
    rehash_annotations(
        claim,
        NODEPOOL_HASH_ANNOTATION,
        NODEPOOL_HASH_VERSION_ANNOTATION,
        NODEPOOL_HASH_VERSION,
        || pool.hash(),
    )
}

/// What [`sync_hashes`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HashSync {
    /// Whether the NodePool's own annotations were written.
    pub pool_annotated: bool,
    /// NodeClaims re-hashed.
    pub rehashed: Vec<String>,
}

/// Writes `pool`'s hash annotations and re-hashes its NodeClaims among `claims`. A NodeClaim or NodePool that
/// changed or went since the cache read it (409, 404) is left to the next pass.
pub async fn sync_hashes(
    client: &Client,
    pool: &NodePool,
    claims: &[Arc<NodeClaim>],
) -> Result<HashSync, ProvisionerError> {
    let mut done = HashSync::default();
    if let Some(annotations) = nodepool_annotations(pool) {
        let api: Api<NodePool> = Api::all(client.clone());
        let patch = json!({"metadata": {
            "resourceVersion": pool.resource_version(),
            "annotations": annotations,
        }});
        done.pool_annotated = written(
            api.patch(&pool.name_any(), &PatchParams::default(), &Patch::Merge(patch))
                .await,
        )?;
    }
    // Concurrently: after a migration every NodeClaim of the cluster is re-hashed in the first pass.
    let mut patches = Vec::new();
    for claim in claims {
        if let Some(annotations) = claim_rehash(claim, pool) {
            let patch = json!({"metadata": {
                "resourceVersion": claim.resource_version(),
                "annotations": annotations,
            }});
            patches.push((claim.name_any(), Patch::Merge(patch)));
        }
    }
    let api: Api<NodeClaim> = Api::all(client.clone());
    let params = PatchParams::default();
    let writes: Vec<_> = patches
        .iter()
        .map(|(name, patch)| {
            let (api, params) = (&api, &params);
            async move { (name, api.patch(name, params, patch).await) }
        })
        .collect();
    let mut outcomes = stream::iter(writes).buffer_unordered(REHASH_CONCURRENCY);
    while let Some((name, outcome)) = outcomes.next().await {
        if written(outcome)? {
            done.rehashed.push(name.clone());
        }
    }
    Ok(done)
}

/// Whether a conditional write landed; a conflict or a deleted object is not an error, only a retry later.
fn written<T>(result: Result<T, kube::Error>) -> Result<bool, ProvisionerError> {
    match result {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::{
        common::{Condition, ConditionStatus},
        nodeclaim::conditions,
    };

    fn pool() -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
        }))
        .unwrap()
    }

    fn claim(pool: &str, annotations: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "labels": {"karpenter.sh/nodepool": pool},
                "annotations": annotations},
            "spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
        }))
        .unwrap()
    }

    fn drifted(mut claim: NodeClaim) -> NodeClaim {
        let mut status = claim.status.take().unwrap_or_default();
        status.conditions.push(Condition {
            type_: conditions::DRIFTED.into(),
            status: ConditionStatus::True,
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().unwrap(),
            ),
            reason: "NodePoolDrifted".into(),
            message: String::new(),
        });
        claim.status = Some(status);
        claim
    }

    #[test]
    fn a_claim_from_upstreams_hash_version_takes_the_current_version_and_hash() {
        let pool = pool();
        let upstream = claim(
            "default",
            json!({"karpenter.sh/nodepool-hash": "12345", "karpenter.sh/nodepool-hash-version": "v3"}),
        );
        let annotations = claim_rehash(&upstream, &pool).expect("re-hashed");
        assert_eq!(
            annotations[NODEPOOL_HASH_VERSION_ANNOTATION],
            NODEPOOL_HASH_VERSION
        );
        assert_eq!(annotations[NODEPOOL_HASH_ANNOTATION], pool.hash());
    }

    #[test]
    fn a_claim_without_any_hash_version_is_rehashed_too() {
        let annotations = claim_rehash(&claim("default", json!({})), &pool()).expect("re-hashed");
        assert_eq!(annotations.len(), 2);
    }

    #[test]
    fn a_drifted_claim_keeps_its_hash_and_only_takes_the_version() {
        let upstream = drifted(claim(
            "default",
            json!({"karpenter.sh/nodepool-hash": "12345", "karpenter.sh/nodepool-hash-version": "v3"}),
        ));
        let annotations = claim_rehash(&upstream, &pool()).expect("version rewritten");
        assert_eq!(
            annotations,
            BTreeMap::from([(
                NODEPOOL_HASH_VERSION_ANNOTATION.to_string(),
                NODEPOOL_HASH_VERSION.to_string()
            )])
        );
    }

    #[test]
    fn current_claims_and_other_pools_claims_are_left_alone() {
        let pool = pool();
        let current = claim(
            "default",
            json!({"karpenter.sh/nodepool-hash": "stale", "karpenter.sh/nodepool-hash-version": NODEPOOL_HASH_VERSION}),
        );
        assert_eq!(
            claim_rehash(&current, &pool),
            None,
            "a current claim with another hash is drifted, not re-hashed"
        );
        assert_eq!(claim_rehash(&claim("other", json!({})), &pool), None);
    }

    #[test]
    fn the_nodepool_is_annotated_once_with_its_hash() {
        let mut pool = pool();
        let annotations = nodepool_annotations(&pool).expect("not annotated yet");
        assert_eq!(annotations[NODEPOOL_HASH_ANNOTATION], pool.hash());
        pool.metadata.annotations = Some(annotations);
        assert_eq!(nodepool_annotations(&pool), None);
        pool.spec.template.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
        assert!(
            nodepool_annotations(&pool).is_some(),
            "a changed NodePool is annotated with its new hash"
        );
    }
}
