//! Launch templates: what an EC2NodeClass (with its resolved status) and one AMI and user data make of an
//! instance, as a [`LaunchTemplateSpec`], and the CreateLaunchTemplate request for it ([`request`]).
//!
//! The template carries the image, security groups, instance profile, user data, block devices (the class's,
//! or the AMI family's defaults: [`block_devices`]), every metadata option with upstream's defaults, detailed
//! monitoring, tags for the instances, volumes and network interfaces it launches, the network interfaces
//! ([`interfaces`]: the class's `networkInterfaces`, or EFA interfaces for a claim that requests
//! `vpc.amazonaws.com/efa`, with `ipPrefixCount` and `connectionTracking`, and on an IPv6 cluster an IPv6
//! address on each interface that carries IP traffic, as upstream gives them), the nested virtualization CPU
//! option, and for a launch into a capacity reservation the reservation it targets (a capacity block also with
//! market type `capacity-block`), so each reservation has its own template, and for a class with a placement
//! group the group (by id) and, when a launch needs a particular one, the partition. Its name is a hash of all of that
//! ([`LaunchTemplateSpec::name`]): a changed class or AMI yields a new template and an unchanged one
//! reuses its template, so templates are never updated in place.
//!
//! Every template is tagged as what it launches is, as upstream tags them: the class's tags, then the cluster
//! (`kubernetes.io/cluster/<cluster>=owned`, `eks:eks-cluster-name`), the NodePool (`karpenter.sh/nodepool`, so
//! each NodePool has its own templates) and the class (`karpenter.k8s.aws/ec2nodeclass`, which is how the
//! templates of a deleted class are found). The controller policies of deploy/cloudformation.yaml depend on
//! these: CreateLaunchTemplate is allowed only with the cluster's and a NodePool's tags in the request, and
//! DeleteLaunchTemplate (and launching from a template) only on a template that carries them.
//! [`LaunchTemplates`] creates them at most once per [`cache`] TTL, deletes a class's templates with the class
//! and garbage-collects unused ones ([`store`]).

pub mod block_devices;
pub mod cache;
pub mod interfaces;
pub mod request;
pub mod store;

use std::collections::BTreeMap;

use karpenter_api::ec2nodeclass::{ConnectionTracking, EC2NodeClass, fnv1a64};
use karpenter_api::labels::AWS_EC2NODECLASS_LABEL;
use karpenter_core::cloudprovider::CloudProviderError;
use serde::Serialize;

use crate::capacity_reservations::ReservationTarget;
pub use crate::settings::IpFamily;

pub use block_devices::{BlockDeviceSpec, default_block_devices};
pub use cache::LaunchTemplateCache;
pub use interfaces::NetworkInterfaceSpec;
pub use request::{create_launch_template_request, ensure_launch_template, launch_template_data};
pub use store::{ClusterTemplate, LaunchTemplates};

/// Every launch template Karpenter creates is named `<prefix><hash>`.
pub const NAME_PREFIX: &str = "karpenter.k8s.aws/";

/// The instance metadata service options of a template, with the EC2NodeClass defaults applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetadataOptionsSpec {
    /// `enabled` or `disabled`.
    pub http_endpoint: String,
    /// The IPv6 endpoint: `enabled` or `disabled`.
    pub http_protocol_ipv6: String,
    pub http_put_response_hop_limit: i32,
    /// `required` (IMDSv2 only) or `optional`.
    pub http_tokens: String,
}

/// What a launch template holds: the part of an EC2NodeClass (and its resolved status) an instance needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LaunchTemplateSpec {
    pub image_id: String,
    pub security_group_ids: Vec<String>,
    pub instance_profile: Option<String>,
    /// Base64, as EC2 takes it.
    pub user_data: Option<String>,
    /// On the template and on the instances, volumes and network interfaces it launches: the class's tags,
    /// then the cluster, NodePool and class tags ([`crate::tags::launch_tags`]).
    pub tags: BTreeMap<String, String>,
    pub metadata_options: MetadataOptionsSpec,
    /// Empty leaves the AMI's own block devices (the Custom family without mappings).
    pub block_devices: Vec<BlockDeviceSpec>,
    pub detailed_monitoring: bool,
    /// Set: the primary network interface gets this public-IP switch (EC2 takes it only there).
    pub associate_public_ip_address: Option<bool>,
    // The fields below are left out of the name's hash when unset, so templates without them keep the names
    // they had before these fields were supported (a new name would replace every node through drift).
    /// The instances' network interfaces; empty: one primary interface, and only when a field below or the
    /// public-IP switch needs one (the security groups then move onto the interfaces).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterfaceSpec>,
    /// `spec.ipPrefixCount`: IPv4 prefixes (`/28`) assigned to the primary interface, or on an IPv6 cluster
    /// IPv6 prefixes (`/80`) to every interface with IP traffic, as upstream assigns them. Serialized under
    /// its old name so the names of templates that set it do not change.
    #[serde(rename = "ipv4_prefix_count", skip_serializing_if = "Option::is_none")]
    pub ip_prefix_count: Option<i32>,
    /// Connection tracking timeouts of the interfaces that carry IP traffic: `spec.connectionTracking`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// `enabled` or `disabled`: `spec.cpuOptions.nestedVirtualization`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<String>,
    /// The capacity reservation instances launch into. Left out of the name's hash when unset, so templates
    /// without one keep the names they had before reservations existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<ReservationTarget>,
    /// The placement group instances launch into. Left out of the name's hash when unset, like the fields above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<TemplatePlacement>,
    /// `dedicated` for claims that require dedicated instances ([`crate::tenancy`]); unset (shared hardware)
    /// otherwise, and then left out of the name's hash like the fields above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenancy: Option<String>,
    /// The cluster's IP family ([`IpFamily::of_dns_ip`]); IPv4 is left out of the name's hash like the fields
    /// above, so only an IPv6 cluster's templates differ by it.
    #[serde(skip_serializing_if = "IpFamily::is_ipv4")]
    pub ip_family: IpFamily,
}

/// A template's placement: the group by id (unambiguous, and the only way to name a group shared from
/// another account) and the partition of a partition group when the launch needs one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplatePlacement {
    pub group_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
}

impl LaunchTemplateSpec {
    /// The template for `node_class` of IPv4 cluster `cluster_name` (see [`Self::with_ip_family`]) launching
    /// `image_id` for NodePool `node_pool`, with the class's own `spec.userData` (the CloudProvider replaces it
    /// with the generated document). The security groups and instance profile come from the status the
    /// EC2NodeClass controller resolved; without security groups the class is not ready to launch.
    pub fn from_node_class(
        node_class: &EC2NodeClass,
        image_id: impl Into<String>,
        cluster_name: &str,
        node_pool: &str,
    ) -> Result<Self, CloudProviderError> {
        let class_name = node_class.metadata.name.clone().unwrap_or_default();
        let not_ready = |reason: String| CloudProviderError::NodeClassNotReady {
            name: class_name.clone(),
            reason,
        };
        let status = node_class
            .status
            .as_ref()
            .ok_or_else(|| not_ready("no status yet".into()))?;
        if status.security_groups.is_empty() {
            return Err(not_ready("no security groups resolved".into()));
        }
        let spec = &node_class.spec;
        let metadata = spec.metadata_options();
        let hop_limit = metadata.http_put_response_hop_limit();
        let metadata_options = MetadataOptionsSpec {
            http_endpoint: metadata.http_endpoint().to_string(),
            http_protocol_ipv6: metadata.http_protocol_ipv6().to_string(),
            http_put_response_hop_limit: i32::try_from(hop_limit).map_err(|_| {
                not_ready(format!(
                    "spec.metadataOptions.httpPutResponseHopLimit {hop_limit} is out of range"
                ))
            })?,
            http_tokens: metadata.http_tokens().to_string(),
        };
        let block_devices = if spec.block_device_mappings().is_empty() {
            default_block_devices(spec.ami_family())
        } else {
            block_devices::from_mappings(spec.block_device_mappings()).map_err(not_ready)?
        };
        Ok(Self {
            image_id: image_id.into(),
            security_group_ids: status.security_groups.iter().map(|g| g.id.clone()).collect(),
            instance_profile: status.instance_profile.clone(),
            user_data: spec
                .user_data
                .as_deref()
                .map(|data| crate::userdata::base64_encode(data.as_bytes())),
            tags: crate::tags::launch_tags(cluster_name, node_pool, &class_name, spec.tags.as_ref()),
            metadata_options,
            block_devices,
            detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
            associate_public_ip_address: spec.associate_public_ip_address,
            network_interfaces: spec
                .network_interfaces
                .iter()
                .flatten()
                .map(NetworkInterfaceSpec::from_class)
                .collect(),
            ip_prefix_count: spec.ip_prefix_count,
            connection_tracking: spec.connection_tracking.clone(),
            nested_virtualization: spec
                .cpu_options
                .as_ref()
                .and_then(|c| c.nested_virtualization.clone()),
            capacity_reservation: None,
            placement: None,
            tenancy: None,
            ip_family: IpFamily::Ipv4,
        })
    }

    /// `karpenter.k8s.aws/<16 hex digits>`: FNV-1a-64 of the whole spec (the cluster is in its tags), so equal
    /// specs share a name and any difference gives a new one.
    pub fn name(&self) -> String {
        // Serializing plain strings, numbers and BTreeMaps cannot fail; an empty key would still hash.
        let content = serde_json::to_vec(self).unwrap_or_default();
        format!("{NAME_PREFIX}{:016x}", fnv1a64(&content))
    }

    /// For a claim that requests EFA on a class without `networkInterfaces`: one EFA interface per network
    /// card the instance type supports EFA on (`efa_count`, its `vpc.amazonaws.com/efa` capacity).
    pub fn with_efa_interfaces(mut self, efa_count: i32) -> Self {
        if self.network_interfaces.is_empty() && efa_count > 0 {
            self.network_interfaces = interfaces::efa_interfaces(efa_count);
        }
        self
    }

    /// The template for a cluster of IP family `family`. The IPv6 metadata endpoint still follows the class
    /// (`spec.metadataOptions.httpProtocolIPv6`, disabled by default), as upstream's does: upstream enables it
    /// by itself only for a class without metadataOptions, which the CRD's default for the whole object rules
    /// out, and [`EC2NodeClassSpec::metadata_options`] reads an unset object as that default.
    ///
    /// [`EC2NodeClassSpec::metadata_options`]: karpenter_api::ec2nodeclass::EC2NodeClassSpec::metadata_options
    pub fn with_ip_family(mut self, family: IpFamily) -> Self {
        self.ip_family = family;
        self
    }

    /// The class this template was made for (from its tags).
    pub fn node_class(&self) -> Option<&str> {
        self.tags.get(AWS_EC2NODECLASS_LABEL).map(String::as_str)
    }
}

#[cfg(test)]
mod tests;
