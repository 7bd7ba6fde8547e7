//! The finalizer that holds a node class while NodeClaims use it (EC2NodeClass: `karpenter.k8s.aws/termination`).
//! A class controller adds it to every class it reconciles; when the class is deleted, it waits until no
//! NodeClaim uses the class ([`crate::claims`]), then cleans up what the class owns (the provider's part: for an
//! EC2NodeClass its launch templates and instance profile) and removes the finalizer, letting the API server
//! delete the class. NodeClaims launched from a class so never outlive it.
//!
//! The decisions are pure ([`TerminationFinalizer`]); [`set_finalizers`] writes them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;

use crate::NodeClassError;

/// What to do about a class that is being deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deletion {
    /// NodeClaims (named) still use the class: look again when they change or after a while.
    WaitForNodeClaims(Vec<String>),
    /// None does and the class holds the finalizer: clean up what it owns, then remove the finalizer.
    Finalize,
    /// None does and the finalizer is not (or no longer) there: nothing holds the class.
    Released,
}

/// A class kind's termination finalizer, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminationFinalizer(pub &'static str);

impl TerminationFinalizer {
    /// Whether the class holds this finalizer.
    pub fn is_held(&self, meta: &ObjectMeta) -> bool {
        meta.finalizers.iter().flatten().any(|f| f == self.0)
    }

    /// The class's finalizers with this one added at the end, or `None` when it holds it already.
    pub fn added(&self, meta: &ObjectMeta) -> Option<Vec<String>> {
        if self.is_held(meta) {
            return None;
        }
        let mut finalizers = meta.finalizers.clone().unwrap_or_default();
        finalizers.push(self.0.to_string());
        Some(finalizers)
    }

    /// The class's finalizers without this one.
    pub fn removed(&self, meta: &ObjectMeta) -> Vec<String> {
        meta.finalizers
            .iter()
            .flatten()
            .filter(|f| *f != self.0)
            .cloned()
            .collect()
    }

    /// What to do about a deleted class that `node_claims` (by name) still use.
    pub fn on_deletion(&self, meta: &ObjectMeta, node_claims: Vec<String>) -> Deletion {
        if !node_claims.is_empty() {
            Deletion::WaitForNodeClaims(node_claims)
        } else if self.is_held(meta) {
            Deletion::Finalize
        } else {
            Deletion::Released
        }
    }
}

/// Sets `class`'s finalizers, failing on a concurrent change (the resourceVersion precondition): a list written
/// whole by a merge patch must not drop a finalizer another controller added meanwhile.
pub async fn set_finalizers<K>(api: &Api<K>, class: &K, finalizers: Vec<String>) -> Result<(), NodeClassError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": class.resource_version(),
    }});
    api.patch(&class.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FINALIZER: TerminationFinalizer = TerminationFinalizer("example.com/termination");

    fn meta(finalizers: &[&str]) -> ObjectMeta {
        ObjectMeta {
            name: Some("default".into()),
            finalizers: (!finalizers.is_empty()).then(|| finalizers.iter().map(|f| f.to_string()).collect()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_finalizer_is_added_once_after_the_others() {
        assert_eq!(
            FINALIZER.added(&meta(&[])),
            Some(vec!["example.com/termination".to_string()])
        );
        assert_eq!(
            FINALIZER.added(&meta(&["other/finalizer"])),
            Some(vec![
                "other/finalizer".to_string(),
                "example.com/termination".to_string()
            ])
        );
        assert_eq!(FINALIZER.added(&meta(&["example.com/termination"])), None);
    }

    #[test]
    fn a_deleted_class_is_held_while_node_claims_use_it() {
        let held = meta(&["other/finalizer", "example.com/termination"]);
        assert_eq!(
            FINALIZER.on_deletion(&held, vec!["claim-a".into()]),
            Deletion::WaitForNodeClaims(vec!["claim-a".into()])
        );
        assert_eq!(FINALIZER.on_deletion(&held, Vec::new()), Deletion::Finalize);
        assert_eq!(FINALIZER.removed(&held), ["other/finalizer"]);
        // Without the finalizer it still waits for its NodeClaims, then has nothing to remove.
        let released = meta(&["other/finalizer"]);
        assert_eq!(
            FINALIZER.on_deletion(&released, vec!["claim-a".into()]),
            Deletion::WaitForNodeClaims(vec!["claim-a".into()])
        );
        assert_eq!(FINALIZER.on_deletion(&released, Vec::new()), Deletion::Released);
        assert_eq!(FINALIZER.on_deletion(&meta(&[]), Vec::new()), Deletion::Released);
    }

    #[tokio::test]
    async fn a_class_is_held_until_its_last_node_claim_goes_and_writes_keep_concurrent_changes()
    -> Result<(), Box<dyn std::error::Error>> {
        use karpenter_api::{ec2nodeclass::EC2NodeClass, nodeclaim::NodeClaim};
        use karpenter_sim::{ApiServer, SystemClock};
        use kube::api::{DeleteParams, PostParams};

        use crate::claims::node_claims_using;

        const EC2: TerminationFinalizer = TerminationFinalizer("karpenter.k8s.aws/termination");
        let server = ApiServer::new(SystemClock);
        let client = server.client();
        let classes: Api<EC2NodeClass> = Api::all(client.clone());
        let class: EC2NodeClass = serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"k": "v"}}], "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]}
        }))?;
        let class = classes.create(&PostParams::default(), &class).await?;
        let finalizers = EC2.added(&class.metadata).ok_or("not held yet")?;
        set_finalizers(&classes, &class, finalizers.clone()).await?;
        // The class read before that write is stale now: writing from it fails rather than dropping a finalizer.
        assert!(set_finalizers(&classes, &class, Vec::new()).await.is_err());
        let class = classes.get("default").await?;
        assert!(EC2.is_held(&class.metadata));

        let claims: Api<NodeClaim> = Api::all(client.clone());
        for (name, group, kind) in [
            ("uses-it", "karpenter.k8s.aws", "EC2NodeClass"),
            ("uses-another-kind", "karpenter.kwok.sh", "KWOKNodeClass"),
        ] {
            let claim: NodeClaim = serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
                "spec": {"requirements": [], "nodeClassRef": {"group": group, "kind": kind, "name": "default"}}
            }))?;
            claims.create(&PostParams::default(), &claim).await?;
        }
        classes.delete("default", &DeleteParams::default()).await?;
        let class = classes.get("default").await?;
        let using = node_claims_using::<EC2NodeClass>(&client, "default").await?;
        assert_eq!(
            EC2.on_deletion(&class.metadata, using),
            Deletion::WaitForNodeClaims(vec!["uses-it".into()])
        );
        claims.delete("uses-it", &DeleteParams::default()).await?;
        let using = node_claims_using::<EC2NodeClass>(&client, "default").await?;
        assert_eq!(EC2.on_deletion(&class.metadata, using), Deletion::Finalize);
        set_finalizers(&classes, &class, EC2.removed(&class.metadata)).await?;
        assert!(
            classes.get_opt("default").await?.is_none(),
            "deleted once released"
        );
        Ok(())
    }
}
