//! How the VPC CNI gives a node's pods their IPv4 addresses, and what follows from it: an instance type's
//! default max pods, and the subnet addresses a launch is counted on to use ([`crate::subnet_ips`]).
//!
//! - Secondary IPs, the CNI's default: each pod takes one secondary address of an ENI. Max pods is core's ENI
//!   formula `(ENIs − reserved) × (IPs per ENI − 1) + 2` (upstream's), and a launch is counted on to use max
//!   pods addresses (upstream's estimate).
//! - IPv4 prefixes, the CNI's `ENABLE_PREFIX_DELEGATION`: each secondary slot of an ENI holds a /28 prefix of
//!   16 addresses. Max pods is the EKS max-pods calculator's for prefix delegation: on Nitro types
//!   `(ENIs − reserved) × (IPs per ENI − 1) × 16 + 2`, elsewhere the ENI formula (EC2 assigns prefixes on Nitro
//!   only), in both cases at most 110 pods up to 30 vCPUs and 250 above. A launch is counted on to use its
//!   node's own address plus whole prefixes: as many as its max pods need, and at least the `ipPrefixCount`
//!   EC2 assigns at launch.
//!
//! Which one a class uses: `ENABLE_PREFIX_DELEGATION` is set on the CNI's DaemonSet, which Karpenter does not
//! read, and upstream Karpenter does not model prefix delegation at all (max pods is always the ENI formula;
//! users set `kubelet.maxPods` themselves). Here a class that asks EC2 for IPv4 prefixes on its nodes
//! (`spec.ipPrefixCount` ≥ 1) is taken to run the CNI in prefix mode. Either way `kubelet.maxPods` wins when
//! set, Windows keeps its 110 pods, and `podsPerCore` still caps (core's maths applies both after this).

use std::borrow::Cow;

use karpenter_api::ec2nodeclass::EC2NodeClassSpec;
use karpenter_aws_catalog::capacity::eni_limited_pods;
use karpenter_aws_catalog::{AwsInstanceTypeData, ResolvedCapacitySettings};

/// Addresses in one IPv4 prefix (a /28).
pub const PREFIX_ADDRESSES: i64 = 16;
/// The calculator's max pods for a type of at most [`SMALL_TYPE_MAX_VCPUS`] vCPUs.
pub const SMALL_TYPE_MAX_PODS: i64 = 110;
/// The calculator's max pods for a larger type.
pub const LARGE_TYPE_MAX_PODS: i64 = 250;
/// The most vCPUs a type may have and still be capped at [`SMALL_TYPE_MAX_PODS`].
pub const SMALL_TYPE_MAX_VCPUS: i64 = 30;
/// The hypervisor of the types EC2 assigns prefixes on.
const NITRO: &str = "nitro";

/// How a class's nodes address their pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PodAddressing {
    /// One secondary IP per pod.
    #[default]
    SecondaryIps,
    /// /28 prefixes; `at_launch` is how many EC2 assigns to the primary interface at launch.
    Ipv4Prefixes { at_launch: i64 },
}

impl PodAddressing {
    /// Prefixes when the class asks EC2 for at least one (see the module documentation).
    pub fn of_class(spec: &EC2NodeClassSpec) -> Self {
        match spec.ip_prefix_count {
            Some(count) if count >= 1 => Self::Ipv4Prefixes {
                at_launch: i64::from(count),
            },
            _ => Self::SecondaryIps,
        }
    }

    /// The settings core computes type `data` under: `settings` as they are, except that in prefix mode, with
    /// no `kubelet.maxPods` and a family whose max pods follows the ENIs, max pods becomes the prefix-limited
    /// count.
    pub fn settings_for<'a>(
        self,
        data: &AwsInstanceTypeData,
        settings: &'a ResolvedCapacitySettings,
    ) -> Cow<'a, ResolvedCapacitySettings> {
        let Self::Ipv4Prefixes { .. } = self else {
            return Cow::Borrowed(settings);
        };
        if settings.max_pods.is_some() || !settings.ami_family.supports_eni_limited_pod_density() {
            return Cow::Borrowed(settings);
        }
        let mut prefixed = settings.clone();
        prefixed.max_pods = Some(prefix_mode_max_pods(data, settings.reserved_enis));
        Cow::Owned(prefixed)
    }

    /// The addresses one instance with `max_pods` pods is counted on to take from its subnet.
    pub fn addresses_per_instance(self, max_pods: i64) -> i64 {
        match self {
            Self::SecondaryIps => max_pods.max(1),
            Self::Ipv4Prefixes { at_launch } => {
                let prefixes = prefixes_for(max_pods).max(at_launch);
                // The node's own (primary) address is not in a prefix.
                1 + prefixes * PREFIX_ADDRESSES
            }
        }
    }
}

/// Whole prefixes that hold `pods` addresses.
pub fn prefixes_for(pods: i64) -> i64 {
    (pods.max(0) + PREFIX_ADDRESSES - 1) / PREFIX_ADDRESSES
}

/// `(ENIs − reserved) × (IPs per ENI − 1) × 16 + 2`, or 0 when no ENI is left: the ENI formula with a prefix in
/// every secondary slot.
pub fn prefix_limited_pods(max_enis: i64, ipv4_per_eni: i64, reserved_enis: i64) -> i64 {
    let usable = (max_enis - reserved_enis).max(0);
    if usable == 0 {
        0
    } else {
        usable * (ipv4_per_eni - 1) * PREFIX_ADDRESSES + 2
    }
}

/// The calculator's cap for a type of `vcpus` vCPUs.
pub fn prefix_mode_pod_cap(vcpus: i64) -> i64 {
    if vcpus > SMALL_TYPE_MAX_VCPUS {
        LARGE_TYPE_MAX_PODS
    } else {
        SMALL_TYPE_MAX_PODS
    }
}

/// Max pods of type `data` with prefix delegation on: prefix-limited on Nitro, ENI-limited elsewhere, capped.
pub fn prefix_mode_max_pods(data: &AwsInstanceTypeData, reserved_enis: i64) -> i64 {
    let limit = if data.hypervisor == NITRO {
        prefix_limited_pods(data.max_enis, data.ipv4_per_eni, reserved_enis)
    } else {
        eni_limited_pods(data.max_enis, data.ipv4_per_eni, reserved_enis)
    };
    limit.min(prefix_mode_pod_cap(data.vcpu))
}

#[cfg(test)]
mod tests;
