//! The NodeClaims of a class: those whose `spec.nodeClassRef` names its group, kind and name (upstream's
//! `nodeclaimutils.ForNodeClass`). The finalizer waits for them, re-hashing rewrites them, and a class
//! controller watching NodeClaims is woken for the class each one names.

use karpenter_api::nodeclaim::NodeClaim;
use kube::{Api, Resource, ResourceExt, api::ListParams, runtime::reflector::ObjectRef};

use crate::NodeClassError;

/// Whether `claim` uses the class of kind `K` named `class_name`.
pub fn uses_class<K: Resource<DynamicType = ()>>(claim: &NodeClaim, class_name: &str) -> bool {
    let reference = &claim.spec.node_class_ref;
    reference.name == class_name && reference.group == K::group(&()) && reference.kind == K::kind(&())
}

/// The class of kind `K` that `claim` uses, when its reference names that kind: where a class controller
/// watching NodeClaims sends the claim's events.
pub fn class_of<K: Resource<DynamicType = ()>>(claim: &NodeClaim) -> Option<ObjectRef<K>> {
    let reference = &claim.spec.node_class_ref;
    (reference.group == K::group(&()) && reference.kind == K::kind(&()))
        .then(|| ObjectRef::new(&reference.name))
}

/// The names of the NodeClaims that use the class of kind `K` named `class_name`.
pub async fn node_claims_using<K: Resource<DynamicType = ()>>(
    client: &kube::Client,
    class_name: &str,
) -> Result<Vec<String>, NodeClassError> {
    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Ok(claims
        .items
        .into_iter()
        .filter(|c| uses_class::<K>(c, class_name))
        .map(|c| c.name_any())
        .collect())
}

#[cfg(test)]
mod tests {
    use karpenter_api::{ec2nodeclass::EC2NodeClass, kwoknodeclass::KWOKNodeClass};
    use serde_json::json;

    use super::*;

    fn claim(group: &str, kind: &str, class: &str) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "claim"},
            "spec": {"requirements": [], "nodeClassRef": {"group": group, "kind": kind, "name": class}}
        }))
        .unwrap()
    }

    #[test]
    fn a_claim_uses_the_class_its_reference_names_by_group_kind_and_name() {
        let ec2 = claim("karpenter.k8s.aws", "EC2NodeClass", "default");
        assert!(uses_class::<EC2NodeClass>(&ec2, "default"));
        assert!(!uses_class::<EC2NodeClass>(&ec2, "other"));
        assert!(!uses_class::<KWOKNodeClass>(&ec2, "default"));
        let kwok = claim("karpenter.kwok.sh", "KWOKNodeClass", "default");
        assert!(uses_class::<KWOKNodeClass>(&kwok, "default"));
        assert!(!uses_class::<EC2NodeClass>(&kwok, "default"));
        let other_kind = claim("karpenter.k8s.aws", "OtherNodeClass", "default");
        assert!(!uses_class::<EC2NodeClass>(&other_kind, "default"));

        assert_eq!(class_of::<EC2NodeClass>(&ec2), Some(ObjectRef::new("default")));
        assert_eq!(class_of::<EC2NodeClass>(&kwok), None);
        assert_eq!(class_of::<KWOKNodeClass>(&kwok), Some(ObjectRef::new("default")));
    }
}
