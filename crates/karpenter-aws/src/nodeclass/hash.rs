//! Re-hashing after a hash-version change (upstream's nodeclass hash controller): when an EC2NodeClass does
//! not yet carry this project's `karpenter.k8s.aws/ec2nodeclass-hash-version` (a class upstream Karpenter
//! annotated with `v6`, after a migration), its NodeClaims stamped by another version take the current version
//! and, unless already `Drifted`, the class's current hash. Without this a migrated NodeClaim would never be
//! found drifted by a change to its class (drift compares hashes of the same version only). The kind-neutral
//! rules and writes are karpenter-nodeclass's ([`karpenter_nodeclass::hash`]); this module names the EC2NodeClass's
//! annotations and hash.

use std::collections::BTreeMap;

use karpenter_api::ec2nodeclass::{EC2NODECLASS_HASH_VERSION, EC2NodeClass};
use karpenter_api::labels::{AWS_EC2NODECLASS_HASH_ANNOTATION, AWS_EC2NODECLASS_HASH_VERSION_ANNOTATION};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_nodeclass::HashAnnotations;
use kube::ResourceExt;

use crate::error::AwsError;

/// Where an EC2NodeClass and its NodeClaims keep the class's hash, and the current hash version.
pub const EC2NODECLASS_HASH: HashAnnotations = HashAnnotations {
    hash_key: AWS_EC2NODECLASS_HASH_ANNOTATION,
    version_key: AWS_EC2NODECLASS_HASH_VERSION_ANNOTATION,
    version: EC2NODECLASS_HASH_VERSION,
};

/// Whether `class` was last annotated by another hash version (or never), so its NodeClaims need re-hashing.
pub fn class_needs_rehash(class: &EC2NodeClass) -> bool {
    EC2NODECLASS_HASH.needs_rehash(class.annotations())
}

/// The annotations that re-hash `claim` against `class`, or `None` when it uses another class or is current.
pub fn claim_rehash(claim: &NodeClaim, class: &EC2NodeClass) -> Option<BTreeMap<String, String>> {
    EC2NODECLASS_HASH.claim_rehash(claim, class, || class.hash())
}

/// Re-hashes the NodeClaims of `class` stamped by another version; returns how many were written. Each write is
/// conditional on the resourceVersion read; a claim changed meanwhile is an error, so the class keeps its old
/// version annotation and the next reconcile tries again (one gone meanwhile needs nothing).
pub async fn rehash_node_claims(client: &kube::Client, class: &EC2NodeClass) -> Result<usize, AwsError> {
    Ok(
        karpenter_nodeclass::hash::rehash_node_claims(client, class, &EC2NODECLASS_HASH, || class.hash())
            .await?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::common::{Condition, ConditionStatus};
    use karpenter_api::nodeclaim::conditions;
    use serde_json::json;

    fn class(annotations: serde_json::Value) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default", "annotations": annotations},
            "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"k": "v"}}], "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]}
        }))
        .unwrap()
    }

    fn claim(class: &str, version: &str) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "annotations": {
                "karpenter.k8s.aws/ec2nodeclass-hash": "upstream",
                "karpenter.k8s.aws/ec2nodeclass-hash-version": version}},
            "spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class}}
        }))
        .unwrap()
    }

    #[test]
    fn a_class_upstream_annotated_needs_its_claims_rehashed_once() {
        assert!(class_needs_rehash(&class(
            json!({"karpenter.k8s.aws/ec2nodeclass-hash-version": "v6"})
        )));
        assert!(class_needs_rehash(&class(json!({}))));
        assert!(!class_needs_rehash(&class(
            json!({"karpenter.k8s.aws/ec2nodeclass-hash-version": EC2NODECLASS_HASH_VERSION})
        )));
    }

    #[test]
    fn an_upstream_claim_takes_the_current_version_and_the_class_hash() {
        let class = class(json!({}));
        let annotations = claim_rehash(&claim("default", "v6"), &class).expect("re-hashed");
        assert_eq!(
            annotations[AWS_EC2NODECLASS_HASH_VERSION_ANNOTATION],
            EC2NODECLASS_HASH_VERSION
        );
        assert_eq!(annotations[AWS_EC2NODECLASS_HASH_ANNOTATION], class.hash());
    }

    #[test]
    fn a_drifted_claim_keeps_its_hash_and_other_classes_claims_are_left_alone() {
        let class = class(json!({}));
        let mut drifted = claim("default", "v6");
        drifted.status = Some(Default::default());
        if let Some(status) = drifted.status.as_mut() {
            status.conditions.push(Condition {
                type_: conditions::DRIFTED.into(),
                status: ConditionStatus::True,
                observed_generation: None,
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-01-01T00:00:00Z".parse().unwrap(),
                ),
                reason: "AMIDrift".into(),
                message: String::new(),
            });
        }
        let annotations = claim_rehash(&drifted, &class).expect("version rewritten");
        assert!(!annotations.contains_key(AWS_EC2NODECLASS_HASH_ANNOTATION));
        assert_eq!(claim_rehash(&claim("other", "v6"), &class), None);
        assert_eq!(
            claim_rehash(&claim("default", EC2NODECLASS_HASH_VERSION), &class),
            None
        );
    }
}
