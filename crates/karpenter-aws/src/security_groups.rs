//! Security groups an EC2NodeClass selects (DescribeSecurityGroups per selector term: ID, group name or tags).

use std::collections::BTreeMap;

use karpenter_api::ec2nodeclass::{SecurityGroup, SecurityGroupSelectorTerm};

use crate::error::AwsError;
use crate::selectors::term_filters;

/// Every security group any term selects, by ID, in the EC2NodeClass status form.
pub async fn discover_security_groups(
    ec2: &aws_sdk_ec2::Client,
    terms: &[SecurityGroupSelectorTerm],
) -> Result<Vec<SecurityGroup>, AwsError> {
    let mut found: BTreeMap<String, SecurityGroup> = BTreeMap::new();
    for term in terms {
        let filters = term_filters(
            term.tags.as_ref(),
            &[
                ("group-id", term.id.as_deref()),
                ("group-name", term.name.as_deref()),
            ],
        );
        if filters.is_empty() {
            continue;
        }
        let mut pages = ec2
            .describe_security_groups()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::from_sdk("DescribeSecurityGroups", e))?;
            for group in page.security_groups() {
                let Some(id) = group.group_id() else {
                    continue;
                };
                found.insert(
                    id.to_string(),
                    SecurityGroup {
                        id: id.to_string(),
                        name: group.group_name().map(str::to_string),
                    },
                );
            }
        }
    }
    Ok(found.into_values().collect())
}
