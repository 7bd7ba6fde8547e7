//! [`LaunchTemplates`]: one cluster's launch templates in EC2 — created at most once per cache TTL, found by
//! the cluster's tag, deleted with their EC2NodeClass, and garbage-collected when unused.
//!
//! Upstream deletes a template when it falls out of its one-minute cache and cleans the cluster's templates at
//! start-up. Here garbage collection runs periodically instead: a template goes when its class is gone, or
//! when nothing launched with it for a cache TTL and it is older than that TTL (a class change leaves the old
//! template unused). Only templates with Karpenter's name prefix and this cluster's tag are ever deleted.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_ec2::types::Filter;
use jiff::Timestamp;
use karpenter_api::labels::{AWS_EC2NODECLASS_LABEL, AWS_TAG_CLUSTER_PREFIX};

use super::cache::LaunchTemplateCache;
use super::{LaunchTemplateSpec, NAME_PREFIX, ensure_launch_template};
use crate::error::AwsError;

/// One of the cluster's templates as DescribeLaunchTemplates lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTemplate {
    pub name: String,
    /// Its `karpenter.k8s.aws/ec2nodeclass` tag.
    pub node_class: Option<String>,
    pub created: Option<Timestamp>,
}

/// The launch templates of one cluster.
#[derive(Debug, Clone)]
pub struct LaunchTemplates {
    ec2: aws_sdk_ec2::Client,
    cluster: String,
    cache: Arc<LaunchTemplateCache>,
}

impl LaunchTemplates {
    pub fn new(
        ec2: aws_sdk_ec2::Client,
        cluster: impl Into<String>,
        cache: Arc<LaunchTemplateCache>,
    ) -> Self {
        Self {
            ec2,
            cluster: cluster.into(),
            cache,
        }
    }

    pub fn cache(&self) -> &Arc<LaunchTemplateCache> {
        &self.cache
    }

    /// The template of `spec`: from the cache when used within its TTL, else created (or found existing).
    pub async fn ensure(&self, spec: &LaunchTemplateSpec, now: Instant) -> Result<String, AwsError> {
        let name = spec.name();
        if self.cache.hit(&name, now) {
            return Ok(name);
        }
        let name = ensure_launch_template(&self.ec2, spec).await?;
        self.cache.insert(&name, now);
        Ok(name)
    }

    /// Forgets `name`, so the next launch creates it again.
    pub fn forget(&self, name: &str) {
        self.cache.forget(name);
    }

    /// The cluster's templates (named with Karpenter's prefix and tagged for the cluster), only those of class
    /// `node_class` when given.
    pub async fn list(&self, node_class: Option<&str>) -> Result<Vec<ClusterTemplate>, AwsError> {
        let mut request = self.ec2.describe_launch_templates().filters(
            Filter::builder()
                .name(format!("tag:{AWS_TAG_CLUSTER_PREFIX}{}", self.cluster))
                .values("owned")
                .build(),
        );
        if let Some(class) = node_class {
            request = request.filters(
                Filter::builder()
                    .name(format!("tag:{AWS_EC2NODECLASS_LABEL}"))
                    .values(class)
                    .build(),
            );
        }
        let mut pages = request.into_paginator().send();
        let mut templates = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::from_sdk("DescribeLaunchTemplates", e))?;
            for template in page.launch_templates() {
                let Some(name) = template
                    .launch_template_name()
                    .filter(|n| n.starts_with(NAME_PREFIX))
                else {
                    continue;
                };
                templates.push(ClusterTemplate {
                    name: name.to_string(),
                    node_class: template
                        .tags()
                        .iter()
                        .find(|t| t.key() == Some(AWS_EC2NODECLASS_LABEL))
                        .and_then(|t| t.value())
                        .map(str::to_string),
                    created: template
                        .create_time()
                        .and_then(|t| Timestamp::from_second(t.secs()).ok()),
                });
            }
        }
        Ok(templates)
    }

    /// Deletes template `name`; one already gone is fine.
    pub async fn delete(&self, name: &str) -> Result<(), AwsError> {
        self.cache.forget(name);
        match self
            .ec2
            .delete_launch_template()
            .launch_template_name(name)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(err) => match AwsError::from_sdk("DeleteLaunchTemplate", err) {
                AwsError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Deletes every template of class `node_class` (the class is being deleted). Returns their names.
    pub async fn delete_class(&self, node_class: &str) -> Result<Vec<String>, AwsError> {
        let mut deleted = Vec::new();
        for template in self.list(Some(node_class)).await? {
            self.delete(&template.name).await?;
            tracing::info!(launch_template = %template.name, ec2nodeclass = node_class, "deleted a launch template of a deleted EC2NodeClass");
            deleted.push(template.name);
        }
        Ok(deleted)
    }

    /// Deletes the cluster's templates that are not in use: those whose class is not in `existing`, and those
    /// older than the cache TTL that nothing launched with within it. A template used within the TTL (by
    /// `now`) stays either way. `wall_now` dates templates by their creation time. Returns the deleted names.
    pub async fn garbage_collect(
        &self,
        existing: &BTreeSet<String>,
        now: Instant,
        wall_now: Timestamp,
    ) -> Result<Vec<String>, AwsError> {
        let in_use = self.cache.recently_used(now);
        let ttl = jiff::SignedDuration::try_from(self.cache.ttl()).unwrap_or(jiff::SignedDuration::MAX);
        let mut deleted = Vec::new();
        for template in self.list(None).await? {
            if in_use.contains(&template.name) {
                continue;
            }
            let class_gone = template
                .node_class
                .as_ref()
                .is_some_and(|class| !existing.contains(class));
            let stale = template
                .created
                .is_some_and(|created| wall_now.duration_since(created) >= ttl);
            if !class_gone && !stale {
                continue;
            }
            self.delete(&template.name).await?;
            tracing::info!(
                launch_template = %template.name,
                ec2nodeclass = template.node_class.as_deref().unwrap_or_default(),
                class_gone,
                "deleted an unused launch template"
            );
            deleted.push(template.name);
        }
        Ok(deleted)
    }
}
