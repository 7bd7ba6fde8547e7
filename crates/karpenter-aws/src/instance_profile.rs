//! Instance profiles for EC2NodeClasses that name a `spec.role`: Karpenter creates one profile per class,
//! named `<cluster>_<hash of region and class name>` under the path `/karpenter/<region>/<cluster>/`, tagged
//! as upstream tags them (the class's `spec.tags`, then `kubernetes.io/cluster/<cluster>=owned`,
//! `eks:eks-cluster-name`, `karpenter.k8s.aws/ec2nodeclass` and `topology.kubernetes.io/region`: every
//! instance-profile statement of deploy/cloudformation.yaml's IAMIntegrationPolicy requires them in the request
//! or on the profile), and holding exactly the class's role (a different role is replaced). The
//! profile goes when its class is finalized, and [`InstanceProfiles::garbage_collect`] deletes the cluster's
//! profiles whose class no longer exists (a class deleted while Karpenter was down).
//!
//! moto implements every call used here except ListInstanceProfileTags, so tags are read from
//! GetInstanceProfile.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_iam::types::{InstanceProfile, Tag};
use karpenter_api::ec2nodeclass::fnv1a64;
use karpenter_api::labels::{
    AWS_EC2NODECLASS_LABEL, AWS_TAG_CLUSTER_PREFIX, AWS_TAG_EKS_CLUSTER_NAME, REGION_LABEL,
};

use crate::error::AwsError;

/// The role name of `role`, which may be an ARN (`arn:aws:iam::123456789012:role/path/name`).
pub fn role_name(role: &str) -> &str {
    if role.starts_with("arn:") {
        role.rsplit('/').next().unwrap_or(role)
    } else {
        role
    }
}

/// The instance profile Karpenter manages for one cluster's EC2NodeClasses.
#[derive(Debug, Clone)]
pub struct InstanceProfiles {
    iam: aws_sdk_iam::Client,
    cluster: String,
    region: String,
}

impl InstanceProfiles {
    pub fn new(iam: aws_sdk_iam::Client, cluster: impl Into<String>, region: impl Into<String>) -> Self {
        Self {
            iam,
            cluster: cluster.into(),
            region: region.into(),
        }
    }

    /// The profile name of class `node_class`: stable across restarts, distinct per cluster, region and class.
    pub fn name(&self, node_class: &str) -> String {
        let hash = fnv1a64(format!("{}/{}", self.region, node_class).as_bytes());
        format!("{}_{hash}", self.cluster)
    }

    /// The path every profile of the cluster is created under.
    pub fn path(&self) -> String {
        format!("/karpenter/{}/{}/", self.region, self.cluster)
    }

    /// The tags of class `node_class`'s profile: the class's own `class_tags`, then the identifying tags (which
    /// win: the CRD reserves their keys, and the policies' conditions depend on them).
    pub fn tags(
        &self,
        node_class: &str,
        class_tags: Option<&BTreeMap<String, String>>,
    ) -> BTreeMap<String, String> {
        let mut tags = class_tags.cloned().unwrap_or_default();
        tags.insert(AWS_EC2NODECLASS_LABEL.to_string(), node_class.to_string());
        tags.insert(
            format!("{AWS_TAG_CLUSTER_PREFIX}{}", self.cluster),
            "owned".to_string(),
        );
        tags.insert(AWS_TAG_EKS_CLUSTER_NAME.to_string(), self.cluster.clone());
        tags.insert(REGION_LABEL.to_string(), self.region.clone());
        tags
    }

    fn iam_tags(&self, tags: BTreeMap<String, String>) -> Result<Vec<Tag>, AwsError> {
        tags.into_iter()
            .map(|(key, value)| {
                Tag::builder()
                    .key(key)
                    .value(value)
                    .build()
                    .map_err(|e| AwsError::Config(e.to_string()))
            })
            .collect()
    }

    async fn get(&self, name: &str) -> Result<Option<InstanceProfile>, AwsError> {
        match self
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(output) => Ok(output.instance_profile),
            Err(err) => match AwsError::from_sdk("GetInstanceProfile", err) {
                AwsError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    /// Creates (or adopts) class `node_class`'s profile, tagged with the class's `class_tags` and the
    /// identifying tags, and puts `role` in it. Returns the profile's name.
    pub async fn ensure(
        &self,
        node_class: &str,
        class_tags: Option<&BTreeMap<String, String>>,
        role: &str,
    ) -> Result<String, AwsError> {
        let name = self.name(node_class);
        let tags = self.tags(node_class, class_tags);
        let profile = match self.get(&name).await? {
            Some(profile) => {
                let have: BTreeMap<&str, &str> =
                    profile.tags().iter().map(|t| (t.key(), t.value())).collect();
                let missing = tags
                    .iter()
                    .any(|(k, v)| have.get(k.as_str()) != Some(&v.as_str()));
                if missing {
                    self.iam
                        .tag_instance_profile()
                        .instance_profile_name(&name)
                        .set_tags(Some(self.iam_tags(tags)?))
                        .send()
                        .await
                        .map_err(|e| AwsError::from_sdk("TagInstanceProfile", e))?;
                }
                profile
            }
            None => {
                let created = self
                    .iam
                    .create_instance_profile()
                    .instance_profile_name(&name)
                    .path(self.path())
                    .set_tags(Some(self.iam_tags(tags)?))
                    .send()
                    .await;
                match created {
                    Ok(output) => output.instance_profile,
                    Err(err) => match AwsError::from_sdk("CreateInstanceProfile", err) {
                        // Created concurrently: use that one.
                        exists if exists.code() == Some("EntityAlreadyExists") => self.get(&name).await?,
                        other => return Err(other),
                    },
                }
                .ok_or_else(|| AwsError::Config(format!("instance profile {name} vanished after creation")))?
            }
        };
        let wanted = role_name(role);
        let mut has_role = false;
        for existing in profile.roles() {
            if existing.role_name() == wanted {
                has_role = true;
                continue;
            }
            self.iam
                .remove_role_from_instance_profile()
                .instance_profile_name(&name)
                .role_name(existing.role_name())
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("RemoveRoleFromInstanceProfile", e))?;
        }
        if !has_role {
            self.iam
                .add_role_to_instance_profile()
                .instance_profile_name(&name)
                .role_name(wanted)
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("AddRoleToInstanceProfile", e))?;
        }
        Ok(name)
    }

    /// Deletes profile `name` (its roles first); a missing profile is fine.
    async fn delete_profile(&self, name: &str) -> Result<(), AwsError> {
        let Some(profile) = self.get(name).await? else {
            return Ok(());
        };
        for role in profile.roles() {
            let removed = self
                .iam
                .remove_role_from_instance_profile()
                .instance_profile_name(name)
                .role_name(role.role_name())
                .send()
                .await;
            if let Err(err) = removed {
                match AwsError::from_sdk("RemoveRoleFromInstanceProfile", err) {
                    AwsError::NotFound { .. } => {}
                    other => return Err(other),
                }
            }
        }
        match self
            .iam
            .delete_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(err) => match AwsError::from_sdk("DeleteInstanceProfile", err) {
                AwsError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Deletes class `node_class`'s profile, if Karpenter made one.
    pub async fn delete(&self, node_class: &str) -> Result<(), AwsError> {
        self.delete_profile(&self.name(node_class)).await
    }

    /// Deletes the cluster's profiles whose EC2NodeClass is not in `existing`. Returns their names.
    pub async fn garbage_collect(&self, existing: &BTreeSet<String>) -> Result<Vec<String>, AwsError> {
        let mut names = Vec::new();
        let mut pages = self
            .iam
            .list_instance_profiles()
            .path_prefix(self.path())
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::from_sdk("ListInstanceProfiles", e))?;
            names.extend(
                page.instance_profiles()
                    .iter()
                    .map(|p| p.instance_profile_name().to_string()),
            );
        }
        let cluster_tag = format!("{AWS_TAG_CLUSTER_PREFIX}{}", self.cluster);
        let mut deleted = Vec::new();
        for name in names {
            let Some(profile) = self.get(&name).await? else {
                continue;
            };
            let tags: BTreeMap<&str, &str> = profile.tags().iter().map(|t| (t.key(), t.value())).collect();
            let Some(class) = tags.get(AWS_EC2NODECLASS_LABEL) else {
                continue;
            };
            if !tags.contains_key(cluster_tag.as_str()) || existing.contains(*class) {
                continue;
            }
            self.delete_profile(&name).await?;
            tracing::info!(instance_profile = %name, ec2nodeclass = %class, "deleted the instance profile of a deleted EC2NodeClass");
            deleted.push(name);
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profiles() -> InstanceProfiles {
        let config = aws_sdk_iam::Config::builder()
            .behavior_version(aws_sdk_iam::config::BehaviorVersion::latest())
            .region(aws_sdk_iam::config::Region::new("us-west-2"))
            .build();
        InstanceProfiles::new(aws_sdk_iam::Client::from_conf(config), "prod", "us-west-2")
    }

    #[test]
    fn names_are_stable_and_distinct_per_class_and_region() {
        let profiles = profiles();
        let name = profiles.name("default");
        assert!(name.starts_with("prod_"), "{name}");
        assert!(
            name["prod_".len()..].bytes().all(|b| b.is_ascii_digit()),
            "{name}"
        );
        assert_eq!(name, profiles.name("default"));
        assert_ne!(name, profiles.name("gpu"));
        let other_region = InstanceProfiles::new(profiles.iam.clone(), "prod", "eu-west-1");
        assert_ne!(name, other_region.name("default"));
        assert_eq!(profiles.path(), "/karpenter/us-west-2/prod/");
        let class_tags = BTreeMap::from([
            ("team".to_string(), "ml".to_string()),
            ("topology.kubernetes.io/region".to_string(), "spoofed".to_string()),
        ]);
        assert_eq!(
            profiles.tags("default", Some(&class_tags)),
            BTreeMap::from([
                ("eks:eks-cluster-name".to_string(), "prod".to_string()),
                (
                    "karpenter.k8s.aws/ec2nodeclass".to_string(),
                    "default".to_string()
                ),
                ("kubernetes.io/cluster/prod".to_string(), "owned".to_string()),
                ("team".to_string(), "ml".to_string()),
                (
                    "topology.kubernetes.io/region".to_string(),
                    "us-west-2".to_string()
                ),
            ])
        );
    }

    #[test]
    fn role_arns_are_reduced_to_the_role_name() {
        assert_eq!(role_name("KarpenterNodeRole"), "KarpenterNodeRole");
        assert_eq!(
            role_name("arn:aws:iam::123456789012:role/nodes/KarpenterNodeRole"),
            "KarpenterNodeRole"
        );
    }
}
