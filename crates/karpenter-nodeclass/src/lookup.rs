//! Finding the class a NodePool's `nodeClassRef` names and reading its readiness (upstream's
//! `nodepoolutils.GetNodeClass` with the readiness controller's switch). A kind the provider does not serve is
//! [`NodeClassReadiness::UnknownKind`]; otherwise the API server's discovery resolves the kind (cached per kind,
//! so a lookup costs one GET), a class that does not exist is [`NodeClassReadiness::NotFound`], and one that
//! does is judged by [`crate::readiness::readiness`].

use std::collections::HashMap;

use karpenter_api::common::NodeClassReference;
use karpenter_core::cloudprovider::CloudProvider;
use kube::{
    Api, Resource,
    api::{ApiResource, DynamicObject},
    discovery,
};
use tokio::sync::Mutex;

use crate::{NodeClassError, readiness::NodeClassReadiness, readiness::readiness};

/// What a lookup found of a class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedNodeClass {
    pub readiness: NodeClassReadiness,
    /// The class's `metadata.generation` when it was found (0 when the API server gave none).
    pub generation: Option<i64>,
}

impl ObservedNodeClass {
    fn missing(readiness: NodeClassReadiness) -> Self {
        Self {
            readiness,
            generation: None,
        }
    }
}

/// Reads node classes by reference, of any kind the provider serves.
pub struct NodeClassLookup {
    client: kube::Client,
    /// (group, kind) to how the API server serves it; `None` when it does not.
    kinds: Mutex<HashMap<(String, String), Option<ApiResource>>>,
}

impl NodeClassLookup {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// The readiness of the class `reference` names, and its generation when it exists.
    pub async fn observe(
        &self,
        cloud: &dyn CloudProvider,
        reference: &NodeClassReference,
    ) -> Result<ObservedNodeClass, NodeClassError> {
        let served = cloud
            .supported_node_classes()
            .into_iter()
            .find(|k| k.group == reference.group && k.kind == reference.kind);
        let Some(kind) = served else {
            let message = format!(
                "{}/{} is not a NodeClass kind the {} provider serves",
                reference.group,
                reference.kind,
                cloud.name()
            );
            return Ok(ObservedNodeClass::missing(NodeClassReadiness::UnknownKind {
                message,
            }));
        };
        let Some(resource) = self.resolve(&reference.group, &reference.kind).await else {
            let message = format!(
                "the API server does not serve {}/{} (is its CRD installed?)",
                reference.group, reference.kind
            );
            return Ok(ObservedNodeClass::missing(NodeClassReadiness::UnknownKind {
                message,
            }));
        };
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let Some(object) = api.get_opt(&reference.name).await? else {
            return Ok(ObservedNodeClass::missing(NodeClassReadiness::NotFound));
        };
        Ok(ObservedNodeClass {
            readiness: readiness(&object, cloud.node_class_reports_readiness(&kind)),
            generation: Some(object.meta().generation.unwrap_or_default()),
        })
    }

    /// How the API server serves `group`/`kind`, from discovery once per kind. A failed discovery is not cached,
    /// so a CRD installed later is found.
    async fn resolve(&self, group: &str, kind: &str) -> Option<ApiResource> {
        let key = (group.to_string(), kind.to_string());
        if let Some(found) = self.kinds.lock().await.get(&key) {
            return found.clone();
        }
        match discovery::group(&self.client, group).await {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use karpenter_api::{ec2nodeclass::EC2NodeClass, labels};
    use karpenter_core::{catalog::CatalogFile, clock::Clock};
    use karpenter_sim::{ApiServer, SimCloudOptions, SimCloudProvider, SystemClock};
    use kube::api::{Patch, PatchParams, PostParams};
    use serde_json::json;

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const CATALOG: &str = include_str!("../../karpenter-sim/tests/fixtures/catalog.json");

    fn reference(group: &str, kind: &str, name: &str) -> NodeClassReference {
        NodeClassReference {
            group: group.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    fn cloud() -> Result<Arc<dyn CloudProvider>, Box<dyn std::error::Error>> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let cloud = SimCloudProvider::new(
            CatalogFile::from_json_str(CATALOG)?,
            clock,
            SimCloudOptions::default(),
        );
        Ok(cloud.as_dyn())
    }

    #[tokio::test]
    async fn a_referenced_class_is_found_and_read_or_said_missing() -> TestResult {
        let server = ApiServer::new(SystemClock);
        let client = server.client();
        let cloud = cloud()?;
        let lookup = NodeClassLookup::new(client.clone());
        let ec2 = |name: &str| reference(labels::AWS_GROUP, "EC2NodeClass", name);

        let missing = lookup.observe(cloud.as_ref(), &ec2("absent")).await?;
        assert_eq!(missing, ObservedNodeClass::missing(NodeClassReadiness::NotFound));

        let class: EC2NodeClass = serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "present", "finalizers": ["karpenter.k8s.aws/termination"]},
            "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"k": "v"}}], "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]}
        }))?;
        let api: Api<EC2NodeClass> = Api::all(client.clone());
        api.create(&PostParams::default(), &class).await?;
        let found = lookup.observe(cloud.as_ref(), &ec2("present")).await?;
        assert_eq!(found.readiness, NodeClassReadiness::ReadinessUnknown);
        assert!(found.generation.is_some());

        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "AMINotFound",
            "message": "no AMI", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        api.patch_status("present", &PatchParams::default(), &Patch::Merge(status))
            .await?;
        let not_ready = lookup.observe(cloud.as_ref(), &ec2("present")).await?;
        assert_eq!(
            not_ready.readiness,
            NodeClassReadiness::NotReady {
                reason: "AMINotFound".into(),
                message: "no AMI".into()
            }
        );

        // The finalizer keeps it while it is being deleted.
        api.delete("present", &Default::default()).await?;
        let terminating = lookup.observe(cloud.as_ref(), &ec2("present")).await?;
        assert_eq!(terminating.readiness, NodeClassReadiness::Terminating);
        Ok(())
    }

    #[tokio::test]
    async fn a_kind_the_provider_or_the_api_server_does_not_serve_is_unknown() -> TestResult {
        let server = ApiServer::new(SystemClock);
        let lookup = NodeClassLookup::new(server.client());
        let cloud = cloud()?;
        let unserved = lookup
            .observe(cloud.as_ref(), &reference("example.com", "OtherNodeClass", "x"))
            .await?;
        assert_eq!(
            unserved.readiness,
            NodeClassReadiness::UnknownKind {
                message: "example.com/OtherNodeClass is not a NodeClass kind the sim provider serves".into()
            }
        );
        assert_eq!(unserved.generation, None);
        Ok(())
    }
}
