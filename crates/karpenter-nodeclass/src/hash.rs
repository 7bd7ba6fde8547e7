//! A node class's hash annotations: the class carries a hash of its spec under one annotation and the hash
//! function's version under another (EC2NodeClass: `karpenter.k8s.aws/ec2nodeclass-hash` and
//! `-hash-version`); each NodeClaim launched from it is stamped with both, and drift compares hashes of the same
//! version only.
//!
//! When a class does not yet carry the current version (one annotated by another hash function, after a
//! migration from upstream Karpenter), its NodeClaims stamped by another version take the current version and,
//! unless already `Drifted`, the class's current hash (upstream's nodeclass hash controller). Without this a
//! migrated NodeClaim would never be found drifted by a change to its class. The class takes the current version
//! only after its NodeClaims, so a failed re-hash is retried.
//!
//! Deciding is pure ([`HashAnnotations`]); [`rehash_node_claims`] writes the answer.

use std::collections::BTreeMap;

use karpenter_api::nodeclaim::NodeClaim;
use karpenter_core::disruption::drift::rehash_annotations;
use karpenter_state::api_errors::ignore_not_found;
use kube::{
    Api, Resource, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

use crate::{NodeClassError, claims::uses_class};

/// Where a kind keeps its hash and hash version, and the version this project's hash function is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashAnnotations {
    /// The annotation holding the hash (`karpenter.k8s.aws/ec2nodeclass-hash`).
    pub hash_key: &'static str,
    /// The annotation holding the hash function's version (`karpenter.k8s.aws/ec2nodeclass-hash-version`).
    pub version_key: &'static str,
    /// The current version.
    pub version: &'static str,
}

impl HashAnnotations {
    /// Whether a class annotated with `annotations` was last annotated by another hash version (or never), so its
    /// NodeClaims need re-hashing.
    pub fn needs_rehash(&self, annotations: &BTreeMap<String, String>) -> bool {
        annotations.get(self.version_key).map(String::as_str) != Some(self.version)
    }

    /// The annotations that bring a class annotated with `annotations` to `hash` at the current version, or
    /// `None` when it carries both already.
    pub fn class_annotations(
        &self,
        annotations: &BTreeMap<String, String>,
        hash: &str,
    ) -> Option<BTreeMap<String, String>> {
        if annotations.get(self.hash_key).map(String::as_str) == Some(hash) && !self.needs_rehash(annotations)
        {
            return None;
        }
        Some(BTreeMap::from([
            (self.hash_key.to_string(), hash.to_string()),
            (self.version_key.to_string(), self.version.to_string()),
        ]))
    }

    /// The annotations that re-hash `claim` against `class` (whose hash `hash` computes), or `None` when the
    /// claim uses another class, is being deleted or is current.
    pub fn claim_rehash<K: Resource<DynamicType = ()>>(
        &self,
        claim: &NodeClaim,
        class: &K,
        hash: impl FnOnce() -> String,
    ) -> Option<BTreeMap<String, String>> {
        if !uses_class::<K>(claim, &class.name_any()) {
            return None;
        }
        rehash_annotations(claim, self.hash_key, self.version_key, self.version, hash)
    }
}

/// Re-hashes the NodeClaims of `class` stamped by another version; returns how many were written. Each write is
/// conditional on the resourceVersion read; a claim changed meanwhile is an error, so the class keeps its old
/// version annotation and the next reconcile tries again. A claim gone meanwhile needs nothing.
pub async fn rehash_node_claims<K: Resource<DynamicType = ()>>(
    client: &kube::Client,
    class: &K,
    keys: &HashAnnotations,
    hash: impl Fn() -> String,
) -> Result<usize, NodeClassError> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    let mut written = 0;
    for claim in api.list(&ListParams::default()).await?.items {
        let Some(annotations) = keys.claim_rehash(&claim, class, &hash) else {
            continue;
        };
        let patch = json!({"metadata": {
            "resourceVersion": claim.resource_version(),
            "annotations": annotations,
        }});
        let patched = api
            .patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        if ignore_not_found(patched)?.is_some() {
            written += 1;
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use karpenter_api::{
        common::{Condition, ConditionStatus},
        kwoknodeclass::KWOKNodeClass,
        nodeclaim::conditions,
    };
    use serde_json::Value;

    use super::*;

    const KEYS: HashAnnotations = HashAnnotations {
        hash_key: "example.com/class-hash",
        version_key: "example.com/class-hash-version",
        version: "v2",
    };

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn class() -> KWOKNodeClass {
        KWOKNodeClass::from_value(
            json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": "default"}}),
        )
        .unwrap()
    }

    fn claim(class: &str, version: &str) -> NodeClaim {
        let value: Value = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "annotations": {
                "example.com/class-hash": "old", "example.com/class-hash-version": version}},
            "spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": class}}
        });
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_class_takes_the_hash_and_version_it_lacks() {
        let current = annotations(&[
            ("example.com/class-hash", "h1"),
            ("example.com/class-hash-version", "v2"),
        ]);
        assert!(!KEYS.needs_rehash(&current));
        assert_eq!(KEYS.class_annotations(&current, "h1"), None);
        let wanted = Some(annotations(&[
            ("example.com/class-hash", "h2"),
            ("example.com/class-hash-version", "v2"),
        ]));
        assert_eq!(KEYS.class_annotations(&current, "h2"), wanted);
        let old_version = annotations(&[
            ("example.com/class-hash", "h2"),
            ("example.com/class-hash-version", "v1"),
        ]);
        assert!(KEYS.needs_rehash(&old_version));
        assert_eq!(KEYS.class_annotations(&old_version, "h2"), wanted);
        assert!(KEYS.needs_rehash(&BTreeMap::new()));
    }

    #[test]
    fn a_claim_of_another_version_takes_the_current_one_and_the_class_hash_unless_drifted() {
        let class = class();
        let rehashed = KEYS.claim_rehash(&claim("default", "v1"), &class, || "h2".into());
        assert_eq!(
            rehashed,
            Some(annotations(&[
                ("example.com/class-hash", "h2"),
                ("example.com/class-hash-version", "v2")
            ]))
        );
        let mut drifted = claim("default", "v1");
        drifted.status = Some(Default::default());
        if let Some(status) = drifted.status.as_mut() {
            status.conditions.push(Condition {
                type_: conditions::DRIFTED.into(),
                status: ConditionStatus::True,
                observed_generation: None,
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-01-01T00:00:00Z".parse().unwrap(),
                ),
                reason: "NodeClassDrift".into(),
                message: String::new(),
            });
        }
        assert_eq!(
            KEYS.claim_rehash(&drifted, &class, || "h2".into()),
            Some(annotations(&[("example.com/class-hash-version", "v2")]))
        );
        assert_eq!(
            KEYS.claim_rehash(&claim("other", "v1"), &class, || "h2".into()),
            None
        );
        assert_eq!(
            KEYS.claim_rehash(&claim("default", "v2"), &class, || "h2".into()),
            None
        );
    }
}
