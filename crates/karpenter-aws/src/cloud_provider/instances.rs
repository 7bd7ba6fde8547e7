//! `get`, `list`, `list_instances` and `delete`: the cluster's instances, and the NodeClaims they answer as.

use std::collections::HashMap;

use jiff::Timestamp;
use karpenter_api::labels::AWS_EC2NODECLASS_LABEL;
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_core::catalog::CatalogInstanceType;
use karpenter_core::cloudprovider::{CloudProviderError, InstanceSummary};

use crate::error::AwsError;
use crate::instance::{Ec2Instance, get_instance, list_instances, parse_provider_id, terminate_instance};
use crate::node_claim::{instance_summary, instance_to_node_claim};

use super::AwsCloudProvider;

impl AwsCloudProvider {
    /// `delete`: terminates the claim's instance; NodeClaimNotFound once it is gone.
    pub(super) async fn terminate(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .ok_or_else(|| {
                CloudProviderError::NodeClaimNotFound(claim.metadata.name.clone().unwrap_or_default())
            })?;
        let id = parse_provider_id(provider_id)?;
        let result = terminate_instance(&self.clients.ec2, id).await;
        if matches!(result, Err(AwsError::NotFound { .. })) {
            self.instances.remove(id);
        }
        Ok(result?)
    }

    /// `get`: the instance behind `provider_id` as a NodeClaim.
    pub(super) async fn node_claim_of(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        let id = parse_provider_id(provider_id)?;
        match get_instance(&self.clients.ec2, id).await {
            Ok(mut instance) => {
                self.fleet
                    .tag_ledger()
                    .overlay(std::slice::from_mut(&mut instance));
                self.instances.insert(instance.clone());
                let catalog = self.catalog_of_class(instance.tags.get(AWS_EC2NODECLASS_LABEL));
                let entry = catalog.iter().find(|t| t.name == instance.instance_type);
                Ok(instance_to_node_claim(&instance, entry, Timestamp::now()))
            }
            Err(err) => {
                if matches!(err, AwsError::NotFound { .. }) {
                    self.instances.remove(id);
                }
                Err(err.into())
            }
        }
    }

    /// `list`: every instance of the cluster as a NodeClaim.
    pub(super) async fn node_claims(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let instances = self.cluster_instances().await?;
        Ok(self.to_node_claims(&instances))
    }

    /// `list_instances`: every instance of the cluster, summarized.
    pub(super) async fn instance_summaries(&self) -> Result<Vec<InstanceSummary>, CloudProviderError> {
        let instances = self.cluster_instances().await?;
        Ok(instances.iter().map(instance_summary).collect())
    }

    /// Every instance of this cluster, refreshing the instance cache drift reads.
    async fn cluster_instances(&self) -> Result<Vec<Ec2Instance>, CloudProviderError> {
        let mut instances = list_instances(&self.clients.ec2, &self.settings.cluster_name).await?;
        // An instance still waiting for its NodeClaim tag is its claim's all the same: garbage collection
        // must see it named.
        self.fleet.tag_ledger().overlay(&mut instances);
        self.instances.replace_all(&instances);
        Ok(instances)
    }

    /// Instances as NodeClaims; each class's catalog is computed once, not once per instance.
    fn to_node_claims(&self, instances: &[Ec2Instance]) -> Vec<NodeClaim> {
        let mut catalogs: HashMap<Option<&String>, Vec<CatalogInstanceType>> = HashMap::new();
        let now = Timestamp::now();
        instances
            .iter()
            .map(|instance| {
                let class_name = instance.tags.get(AWS_EC2NODECLASS_LABEL);
                let catalog = catalogs
                    .entry(class_name)
                    .or_insert_with(|| self.catalog_of_class(class_name));
                let entry = catalog.iter().find(|t| t.name == instance.instance_type);
                instance_to_node_claim(instance, entry, now)
            })
            .collect()
    }
}
