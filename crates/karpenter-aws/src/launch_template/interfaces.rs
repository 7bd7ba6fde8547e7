//! The network interfaces of a launch template: the class's `networkInterfaces`, or EFA interfaces for a claim
//! that requests `vpc.amazonaws.com/efa`, and what each one carries in the request.
//!
//! EC2 refuses a template with both instance-level security groups and network interfaces, so once the
//! template has any interface the groups go onto every interface. Some settings exist only on an interface
//! (the public-IP switch, IPv4 prefixes, connection tracking): a class that sets one of them without
//! `networkInterfaces` gets a single primary interface to carry it.
//!
//! On an IPv6 cluster, as upstream does, every template has interfaces, each one with IP traffic gets an IPv6
//! address marked as its primary IPv6 address, and `ipPrefixCount` delegates IPv6 prefixes there instead of
//! IPv4 ones (the VPC CNI's prefix mode takes pod addresses from them). EFA-only interfaces get none of it,
//! having no IP addresses.

use aws_sdk_ec2::types::{
    ConnectionTrackingSpecificationRequest, LaunchTemplateInstanceNetworkInterfaceSpecificationRequest,
};
use karpenter_api::ec2nodeclass::{ConnectionTracking, NetworkInterface};
use serde::Serialize;

use super::{IpFamily, LaunchTemplateSpec};

/// `interface`: an ENA interface with IP addresses.
pub const INTERFACE: &str = "interface";
/// `efa`: an ENA interface with EFA on top.
pub const EFA: &str = "efa";
/// `efa-only`: EFA without IP addresses.
pub const EFA_ONLY: &str = "efa-only";

/// One network interface of the instances a template launches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkInterfaceSpec {
    pub network_card_index: i32,
    pub device_index: i32,
    /// [`INTERFACE`], [`EFA`] or [`EFA_ONLY`].
    pub interface_type: String,
}

impl NetworkInterfaceSpec {
    /// An entry of the class's `spec.networkInterfaces`.
    pub fn from_class(interface: &NetworkInterface) -> Self {
        Self {
            network_card_index: interface.network_card_index,
            device_index: interface.device_index,
            interface_type: interface.interface_type.clone(),
        }
    }

    /// The interface the instance's primary IP address lives on.
    pub fn is_primary(&self) -> bool {
        self.network_card_index == 0 && self.device_index == 0
    }

    /// Whether the interface has IP addresses (and so takes connection tracking and public IPs).
    pub fn carries_ip_traffic(&self) -> bool {
        self.interface_type != EFA_ONLY
    }
}

/// One EFA interface per network card for an instance type with `efa_count` EFA interfaces: the primary on
/// card 0, device 0, and the others on device 1 of their card (device 0 of a secondary card is left to the VPC
/// CNI's own ENIs, as AWS's EFA guidance for multi-card types does).
pub fn efa_interfaces(efa_count: i32) -> Vec<NetworkInterfaceSpec> {
    (0..efa_count)
        .map(|card| NetworkInterfaceSpec {
            network_card_index: card,
            device_index: if card == 0 { 0 } else { 1 },
            interface_type: EFA.into(),
        })
        .collect()
}

fn connection_tracking(timeouts: &ConnectionTracking) -> ConnectionTrackingSpecificationRequest {
    ConnectionTrackingSpecificationRequest::builder()
        .set_tcp_established_timeout(timeouts.tcp_established_timeout)
        .set_udp_stream_timeout(timeouts.udp_stream_timeout)
        .set_udp_timeout(timeouts.udp_timeout)
        .build()
}

/// The template's network interfaces as EC2 takes them; None when it needs none (the security groups then stay
/// on the instance).
pub fn interface_requests(
    spec: &LaunchTemplateSpec,
) -> Option<Vec<LaunchTemplateInstanceNetworkInterfaceSpecificationRequest>> {
    let explicit = !spec.network_interfaces.is_empty();
    let ipv6 = spec.ip_family == IpFamily::Ipv6;
    let needs_primary = spec.associate_public_ip_address.is_some()
        || spec.ip_prefix_count.is_some()
        || spec.connection_tracking.is_some()
        || ipv6;
    if !explicit && !needs_primary {
        return None;
    }
    let implied_primary = [NetworkInterfaceSpec {
        network_card_index: 0,
        device_index: 0,
        interface_type: INTERFACE.into(),
    }];
    let interfaces = if explicit {
        spec.network_interfaces.as_slice()
    } else {
        &implied_primary
    };
    let requests = interfaces
        .iter()
        .map(|interface| {
            let mut request = LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                .device_index(interface.device_index)
                .set_groups(Some(spec.security_group_ids.clone()));
            // A class without networkInterfaces keeps the request it always had: no card or type.
            if explicit {
                request = request
                    .network_card_index(interface.network_card_index)
                    .interface_type(&interface.interface_type);
            }
            if interface.is_primary() {
                request = request.set_associate_public_ip_address(spec.associate_public_ip_address);
                if !ipv6 {
                    request = request.set_ipv4_prefix_count(spec.ip_prefix_count);
                }
            }
            if ipv6 && interface.carries_ip_traffic() {
                request = request
                    .primary_ipv6(true)
                    .ipv6_address_count(1)
                    .set_ipv6_prefix_count(spec.ip_prefix_count);
            }
            if interface.carries_ip_traffic()
                && let Some(timeouts) = &spec.connection_tracking
            {
                request = request.connection_tracking_specification(connection_tracking(timeouts));
            }
            request.build()
        })
        .collect();
    Some(requests)
}
