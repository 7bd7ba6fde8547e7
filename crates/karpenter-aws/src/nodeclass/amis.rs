//! The AMIs an EC2NodeClass's `amiSelectorTerms` select, in the status form (`status.amis`): an alias through
//! its public SSM parameters ([`crate::ami`]); otherwise DescribeImages per term (id, name, owner, tags; terms
//! ORed) and SSM parameters holding an AMI ID. Images come newest first, deprecated ones last, so a launch
//! taking the first compatible AMI takes the newest usable one, as upstream does.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{ArchitectureValues, Filter, Image};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use karpenter_api::ec2nodeclass::{Ami, AmiSelectorTerm};
use karpenter_core::catalog::CatalogRequirement;

use crate::ami::{AmiAlias, resolve_alias};
use crate::error::AwsError;
use crate::selectors::term_filters;

/// Owners searched when a term names neither an owner nor an ID (upstream's default).
const DEFAULT_OWNERS: [&str; 2] = ["self", "amazon"];

/// A catalog requirement in the status (node selector) form.
pub fn to_node_selector_requirement(requirement: &CatalogRequirement) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: requirement.key.clone(),
        operator: requirement.operator.as_str().to_string(),
        values: (!requirement.values.is_empty()).then(|| requirement.values.clone()),
    }
}

/// One image found by DescribeImages, before sorting.
struct FoundImage {
    ami: Ami,
    created: String,
}

fn image_to_found(image: &Image, now: Timestamp) -> Option<FoundImage> {
    let id = image.image_id()?.to_string();
    let arch = match image.architecture() {
        Some(ArchitectureValues::Arm64) => "arm64",
        // An image without an architecture (moto's RegisterImage drops it) is taken as x86_64, EC2's default.
        _ => "amd64",
    };
    let deprecated = image
        .deprecation_time()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .is_some_and(|t| t <= now);
    Some(FoundImage {
        ami: Ami {
            id,
            deprecated,
            name: image.name().map(str::to_string),
            requirements: vec![to_node_selector_requirement(&CatalogRequirement::is_in(
                "kubernetes.io/arch",
                [arch],
            ))],
        },
        created: image.creation_date().unwrap_or_default().to_string(),
    })
}

async fn describe_images(
    ec2: &aws_sdk_ec2::Client,
    filters: Vec<Filter>,
    owners: Vec<String>,
    image_ids: Vec<String>,
    now: Timestamp,
) -> Result<Vec<FoundImage>, AwsError> {
    let mut pages = ec2
        .describe_images()
        .set_filters((!filters.is_empty()).then_some(filters))
        .set_owners((!owners.is_empty()).then_some(owners))
        .set_image_ids((!image_ids.is_empty()).then_some(image_ids))
        .into_paginator()
        .send();
    let mut found = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsError::from_sdk("DescribeImages", e))?;
        found.extend(page.images().iter().filter_map(|i| image_to_found(i, now)));
    }
    Ok(found)
}

/// The images one non-alias term selects.
async fn term_images(
    clients: (&aws_sdk_ec2::Client, &aws_sdk_ssm::Client),
    term: &AmiSelectorTerm,
    now: Timestamp,
) -> Result<Vec<FoundImage>, AwsError> {
    let (ec2, ssm) = clients;
    if let Some(parameter) = &term.ssm_parameter {
        let output = ssm
            .get_parameter()
            .name(parameter)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("GetParameter", e));
        let id = match output {
            Ok(output) => output.parameter().and_then(|p| p.value()).map(str::to_string),
            // A parameter that does not exist selects nothing; the condition says so.
            Err(AwsError::NotFound { .. }) => None,
            Err(err) => return Err(err),
        };
        return match id {
            Some(id) => describe_images(ec2, Vec::new(), Vec::new(), vec![id], now).await,
            None => Ok(Vec::new()),
        };
    }
    if let Some(id) = &term.id {
        let result = describe_images(ec2, Vec::new(), Vec::new(), vec![id.clone()], now).await;
        return match result {
            Err(AwsError::NotFound { .. }) => Ok(Vec::new()),
            other => other,
        };
    }
    let filters = term_filters(term.tags.as_ref(), &[("name", term.name.as_deref())]);
    let owners = match &term.owner {
        Some(owner) => vec![owner.clone()],
        None => DEFAULT_OWNERS.map(String::from).to_vec(),
    };
    if filters.is_empty() && term.owner.is_none() {
        // An empty term would list every image of the default owners.
        return Ok(Vec::new());
    }
    describe_images(ec2, filters, owners, Vec::new(), now).await
}

/// The AMIs `terms` select for Kubernetes `k8s_version`: non-deprecated first, newest first. An empty answer
/// means nothing matched. Errors: AWS's, and [`AwsError::Config`] for an alias that cannot be resolved here.
pub async fn resolve_amis(
    ec2: &aws_sdk_ec2::Client,
    ssm: &aws_sdk_ssm::Client,
    terms: &[AmiSelectorTerm],
    k8s_version: &str,
    now: Timestamp,
) -> Result<Vec<Ami>, AwsError> {
    if let Some(alias) = terms.iter().find_map(|t| t.alias.as_deref()) {
        let alias = AmiAlias::parse(alias)?;
        return match resolve_alias(ssm, &alias, k8s_version).await {
            Ok(amis) => Ok(amis
                .into_iter()
                .map(|a| Ami {
                    id: a.id,
                    deprecated: false,
                    name: None,
                    requirements: a.requirements.iter().map(to_node_selector_requirement).collect(),
                })
                .collect()),
            Err(AwsError::NotFound { .. }) => Ok(Vec::new()),
            Err(err) => Err(err),
        };
    }
    let mut by_id: BTreeMap<String, FoundImage> = BTreeMap::new();
    for term in terms {
        for image in term_images((ec2, ssm), term, now).await? {
            by_id.insert(image.ami.id.clone(), image);
        }
    }
    let mut found: Vec<FoundImage> = by_id.into_values().collect();
    found.sort_by(|a, b| {
        a.ami
            .deprecated
            .cmp(&b.ami.deprecated)
            .then_with(|| b.created.cmp(&a.created))
            .then_with(|| a.ami.id.cmp(&b.ami.id))
    });
    Ok(found.into_iter().map(|f| f.ami).collect())
}
