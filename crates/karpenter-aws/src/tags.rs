//! The tags Karpenter puts on what it launches: the EC2NodeClass's `tags`, then the tags that identify the
//! cluster, NodePool and EC2NodeClass (which win over the class's own, as upstream's `getTags` has it), and, once
//! the NodeClaim has a node, its name tags (upstream's tagging controller).

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Tag;
use karpenter_api::labels::{
    AWS_EC2NODECLASS_LABEL, AWS_TAG_CLUSTER_PREFIX, AWS_TAG_EKS_CLUSTER_NAME, AWS_TAG_NODECLAIM,
    NODEPOOL_LABEL,
};

use crate::error::AwsError;

/// Tags for a launch template, the instance, volumes and network interfaces it launches, and the fleet.
pub fn launch_tags(
    cluster_name: &str,
    node_pool: &str,
    node_class: &str,
    node_class_tags: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut tags = node_class_tags.cloned().unwrap_or_default();
    tags.insert(format!("{AWS_TAG_CLUSTER_PREFIX}{cluster_name}"), "owned".into());
    tags.insert(AWS_TAG_EKS_CLUSTER_NAME.into(), cluster_name.into());
    tags.insert(NODEPOOL_LABEL.into(), node_pool.into());
    tags.insert(AWS_EC2NODECLASS_LABEL.into(), node_class.into());
    tags
}

/// Tags added once the NodeClaim is known to EC2's instance: the NodeClaim's name, and `Name` as the node's name
/// when it has registered.
pub fn node_claim_tags(node_claim: &str, node_name: Option<&str>) -> BTreeMap<String, String> {
    let mut tags = BTreeMap::from([(AWS_TAG_NODECLAIM.to_string(), node_claim.to_string())]);
    if let Some(node) = node_name {
        tags.insert("Name".into(), node.into());
    }
    tags
}

/// Adds `tags` to a resource (instance, volume, launch template).
pub async fn create_tags(
    ec2: &aws_sdk_ec2::Client,
    resource_id: &str,
    tags: &BTreeMap<String, String>,
) -> Result<(), AwsError> {
    ec2.create_tags()
        .resources(resource_id)
        .set_tags(Some(
            tags.iter()
                .map(|(key, value)| Tag::builder().key(key).value(value).build())
                .collect(),
        ))
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("CreateTags", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifying_tags_win_over_the_node_class_tags() {
        let class_tags = BTreeMap::from([
            ("team".to_string(), "platform".to_string()),
            ("karpenter.sh/nodepool".to_string(), "spoofed".to_string()),
        ]);
        let tags = launch_tags("prod", "default", "al2023", Some(&class_tags));
        assert_eq!(
            tags,
            BTreeMap::from([
                ("eks:eks-cluster-name".to_string(), "prod".to_string()),
                ("karpenter.k8s.aws/ec2nodeclass".to_string(), "al2023".to_string()),
                ("karpenter.sh/nodepool".to_string(), "default".to_string()),
                ("kubernetes.io/cluster/prod".to_string(), "owned".to_string()),
                ("team".to_string(), "platform".to_string()),
            ])
        );
        assert_eq!(
            node_claim_tags("default-abcde", Some("ip-10-0-1-2.ec2.internal")),
            BTreeMap::from([
                ("Name".to_string(), "ip-10-0-1-2.ec2.internal".to_string()),
                ("karpenter.sh/nodeclaim".to_string(), "default-abcde".to_string()),
            ])
        );
        assert_eq!(node_claim_tags("c", None).len(), 1);
    }
}
