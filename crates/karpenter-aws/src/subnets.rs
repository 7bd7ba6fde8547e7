//! Subnets an EC2NodeClass selects (DescribeSubnets per selector term), with their free IP addresses, and the
//! roomiest per zone as EC2 counted them. Launches choose with [`crate::subnet_ips`], which also subtracts the
//! addresses of launches in flight.

use std::collections::BTreeMap;

use karpenter_api::ec2nodeclass::{Subnet, SubnetSelectorTerm};

use crate::error::AwsError;
use crate::selectors::term_filters;

/// A subnet with what choosing between subnets needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredSubnet {
    pub id: String,
    pub zone: String,
    pub zone_id: Option<String>,
    pub available_ip_count: i32,
}

impl DiscoveredSubnet {
    /// The EC2NodeClass status form.
    pub fn to_status(&self) -> Subnet {
        Subnet {
            id: self.id.clone(),
            zone: self.zone.clone(),
            zone_id: self.zone_id.clone(),
        }
    }
}

/// Every subnet any term selects, most free addresses first (then by ID). A term that selects nothing adds
/// nothing; an empty answer is not an error here (the EC2NodeClass controller reports it as not ready).
pub async fn discover_subnets(
    ec2: &aws_sdk_ec2::Client,
    terms: &[SubnetSelectorTerm],
) -> Result<Vec<DiscoveredSubnet>, AwsError> {
    let mut found: BTreeMap<String, DiscoveredSubnet> = BTreeMap::new();
    for term in terms {
        let filters = term_filters(term.tags.as_ref(), &[("subnet-id", term.id.as_deref())]);
        if filters.is_empty() {
            continue;
        }
        let mut pages = ec2
            .describe_subnets()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::from_sdk("DescribeSubnets", e))?;
            for subnet in page.subnets() {
                let (Some(id), Some(zone)) = (subnet.subnet_id(), subnet.availability_zone()) else {
                    continue;
                };
                found.insert(
                    id.to_string(),
                    DiscoveredSubnet {
                        id: id.to_string(),
                        zone: zone.to_string(),
                        zone_id: subnet.availability_zone_id().map(str::to_string),
                        available_ip_count: subnet.available_ip_address_count().unwrap_or(0),
                    },
                );
            }
        }
    }
    let mut subnets: Vec<DiscoveredSubnet> = found.into_values().collect();
    subnets.sort_by(|a, b| {
        b.available_ip_count
            .cmp(&a.available_ip_count)
            .then_with(|| a.id.cmp(&b.id))
    });
    Ok(subnets)
}

/// Per zone, the subnet with the most free addresses (ties: the lowest ID).
pub fn subnets_for_launch(subnets: &[DiscoveredSubnet]) -> BTreeMap<String, DiscoveredSubnet> {
    let mut by_zone: BTreeMap<String, DiscoveredSubnet> = BTreeMap::new();
    for subnet in subnets {
        let better = by_zone.get(&subnet.zone).is_none_or(|best| {
            (subnet.available_ip_count, std::cmp::Reverse(&subnet.id))
                > (best.available_ip_count, std::cmp::Reverse(&best.id))
        });
        if better {
            by_zone.insert(subnet.zone.clone(), subnet.clone());
        }
    }
    by_zone
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(id: &str, zone: &str, ips: i32) -> DiscoveredSubnet {
        DiscoveredSubnet {
            id: id.into(),
            zone: zone.into(),
            zone_id: None,
            available_ip_count: ips,
        }
    }

    #[test]
    fn launches_use_the_roomiest_subnet_of_each_zone() {
        let subnets = [
            subnet("subnet-a1", "us-west-2a", 10),
            subnet("subnet-a2", "us-west-2a", 200),
            subnet("subnet-b2", "us-west-2b", 50),
            subnet("subnet-b1", "us-west-2b", 50),
        ];
        let chosen = subnets_for_launch(&subnets);
        assert_eq!(chosen["us-west-2a"].id, "subnet-a2");
        assert_eq!(chosen["us-west-2b"].id, "subnet-b1", "ties go to the lowest ID");
        assert_eq!(
            subnets[0].to_status(),
            Subnet {
                id: "subnet-a1".into(),
                zone: "us-west-2a".into(),
                zone_id: None
            }
        );
    }
}
