//! Upstream's AWS capacity maths as pure functions: how much cpu, memory, ephemeral-storage and pods an EC2
//! instance type offers, and what the kubelet holds back, before any node of it exists.
//!
//! Mirrors aws/karpenter-provider-aws v1.14.1 `pkg/providers/instancetype/types.go` (`computeCapacity`,
//! `memory`, `ephemeralStorage`, `ENILimitedPods`, `pods`, `kubeReservedResources`, `evictionThreshold`) and
//! the AMI-family feature flags of `pkg/providers/amifamily`, including their floating-point rounding, so the
//! results equal the allocatable values of Karpenter's generated instance-type reference for every documented
//! type (see the golden test in catalog.rs). Written from the formulas, not translated line by line.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use karpenter_api::quantity::parse_milli;

use karpenter_core::catalog::{CatalogOverhead, Quantities};

use crate::AwsCatalogError;

/// One mebibyte in bytes.
pub const MIB: i64 = 1 << 20;
/// One gibibyte in bytes.
pub const GIB: i64 = 1 << 30;
/// `VM_MEMORY_OVERHEAD_PERCENT`'s default: the share of memory the hypervisor keeps (a fraction, 0.075 =
/// 7.5%).
pub const DEFAULT_VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
/// Size of the default EBS root volume Karpenter gives Linux AMI families (`amifamily.DefaultEBS`).
pub const DEFAULT_ROOT_VOLUME_BYTES: i64 = 20 * GIB;
/// Size of the Windows families' default root volume.
pub const WINDOWS_ROOT_VOLUME_BYTES: i64 = 50 * GIB;
/// Graviton (arm64) kernels reserve this much contiguous (CMA) memory that pods cannot use.
pub const ARM64_CMA_RESERVED_MIB: i64 = 64;
/// Pods per node when the AMI family does not support ENI-limited pod density (Windows).
pub const DEFAULT_MAX_PODS: i64 = 110;

/// An EC2NodeClass AMI family, as far as capacity maths is concerned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum AmiFamily {
    AL2,
    #[default]
    AL2023,
    Bottlerocket,
    Windows2019,
    Windows2022,
    Windows2025,
    Custom,
}

impl AmiFamily {
    pub const ALL: [Self; 7] = [
        Self::AL2,
        Self::AL2023,
        Self::Bottlerocket,
        Self::Windows2019,
        Self::Windows2022,
        Self::Windows2025,
        Self::Custom,
    ];

    /// The name as EC2NodeClass `amiFamily` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AL2 => "AL2",
            Self::AL2023 => "AL2023",
            Self::Bottlerocket => "Bottlerocket",
            Self::Windows2019 => "Windows2019",
            Self::Windows2022 => "Windows2022",
            Self::Windows2025 => "Windows2025",
            Self::Custom => "Custom",
        }
    }

    /// The `node.kubernetes.io/windows-build` value of a Windows family.
    pub fn windows_build(self) -> Option<&'static str> {
        match self {
            Self::Windows2019 => Some("10.0.17763"),
            Self::Windows2022 => Some("10.0.20348"),
            Self::Windows2025 => Some("10.0.26100"),
            _ => None,
        }
    }

    pub fn is_windows(self) -> bool {
        self.windows_build().is_some()
    }

    /// Whether max pods defaults to the ENI limit (everything but Windows, which defaults to 110).
    pub fn supports_eni_limited_pod_density(self) -> bool {
        !self.is_windows()
    }

    /// Whether kubelet podsPerCore is honoured (Bottlerocket ignores it).
    pub fn pods_per_core_enabled(self) -> bool {
        self != Self::Bottlerocket
    }

    /// Whether kube-reserved memory is sized from the ENI-limited pod count (with no reserved ENIs) whatever
    /// maxPods says, as the EKS-optimised AL2/AL2023 bootstrap does; Bottlerocket and Windows size it from
    /// the node's actual max pods.
    pub fn uses_eni_limited_memory_overhead(self) -> bool {
        !matches!(self, Self::Bottlerocket) && !self.is_windows()
    }

    /// The size of the volume that holds ephemeral storage when no block device mapping says otherwise.
    pub fn default_ephemeral_volume_bytes(self) -> i64 {
        if self.is_windows() {
            WINDOWS_ROOT_VOLUME_BYTES
        } else {
            DEFAULT_ROOT_VOLUME_BYTES
        }
    }
}

impl fmt::Display for AmiFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AmiFamily {
    type Err = AwsCatalogError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|family| family.as_str() == s)
            .ok_or_else(|| AwsCatalogError::InvalidSetting {
                field: "amiFamily".into(),
                message: format!("{s:?} is not one of {}", Self::ALL.map(Self::as_str).join(", ")),
            })
    }
}

/// The settings that shape capacity and overhead: the controller's `VM_MEMORY_OVERHEAD_PERCENT` and
/// `RESERVED_ENIS`, and the EC2NodeClass's AMI family, kubelet configuration and root volume.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsCapacitySettings {
    pub ami_family: AmiFamily,
    /// A fraction of memory (0.075 = 7.5%), as `VM_MEMORY_OVERHEAD_PERCENT` is.
    pub vm_memory_overhead_percent: f64,
    /// ENIs kept away from the VPC CNI, lowering ENI-limited max pods.
    pub reserved_enis: u32,
    /// kubelet `maxPods`: replaces the ENI-limited default.
    pub max_pods: Option<u32>,
    /// kubelet `podsPerCore`: caps pods at podsPerCore x vCPUs (0 = off; ignored on Bottlerocket).
    pub pods_per_core: Option<u32>,
    /// kubelet `kubeReserved`, resource name to quantity; each entry replaces the computed default.
    pub kube_reserved: BTreeMap<String, String>,
    /// kubelet `systemReserved`, resource name to quantity.
    pub system_reserved: BTreeMap<String, String>,
    /// kubelet `evictionHard`, signal to quantity or percentage; `memory.available` and `nodefs.available`
    /// replace the defaults (100Mi and 10%). evictionSoft does not reduce allocatable (upstream ignores it
    /// too).
    pub eviction_hard: BTreeMap<String, String>,
    /// Size in bytes of the volume holding ephemeral storage (the root volume block device mapping); None
    /// takes the AMI family's default (20Gi, 50Gi on Windows).
    pub root_volume_bytes: Option<i64>,
    /// EC2NodeClass `instanceStorePolicy: RAID0`: ephemeral storage is the instance store (decimal GB) where
    /// the type has one.
    pub instance_store_raid0: bool,
}

impl Default for AwsCapacitySettings {
    fn default() -> Self {
        Self {
            ami_family: AmiFamily::AL2023,
            vm_memory_overhead_percent: DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
            reserved_enis: 0,
            max_pods: None,
            pods_per_core: None,
            kube_reserved: BTreeMap::new(),
            system_reserved: BTreeMap::new(),
            eviction_hard: BTreeMap::new(),
            root_volume_bytes: None,
            instance_store_raid0: false,
        }
    }
}

/// An eviction-hard threshold: an absolute amount or a percentage of the resource's capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EvictionSignal {
    /// Milli-units of the resource.
    Amount(i64),
    /// Percent (0-100) of capacity; "100%" means the threshold is off, as the kubelet reads it.
    Percent(f64),
}

/// Settings checked and parsed once, so computing each instance type cannot fail.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedCapacitySettings {
    pub ami_family: AmiFamily,
    pub vm_memory_overhead_percent: f64,
    pub reserved_enis: i64,
    pub max_pods: Option<i64>,
    pub pods_per_core: Option<i64>,
    pub kube_reserved: Quantities,
    pub system_reserved: Quantities,
    pub eviction_memory: Option<EvictionSignal>,
    pub eviction_nodefs: Option<EvictionSignal>,
    pub root_volume_bytes: Option<i64>,
    pub instance_store_raid0: bool,
}

impl AwsCapacitySettings {
    /// Checks the settings and parses their quantities; errors name the setting.
    pub fn resolve(&self) -> Result<ResolvedCapacitySettings, AwsCatalogError> {
        let setting = |field: String, message: String| AwsCatalogError::InvalidSetting { field, message };
        let pct = self.vm_memory_overhead_percent;
        if !(pct.is_finite() && (0.0..1.0).contains(&pct)) {
            return Err(setting(
                "vmMemoryOverheadPercent".into(),
                format!("{pct} is not a fraction in [0, 1)"),
            ));
        }
        let quantities =
            |name: &str, map: &BTreeMap<String, String>| -> Result<Quantities, AwsCatalogError> {
                map.iter()
                    .map(|(resource, text)| {
                        let field = format!("{name}.{resource}");
                        let milli = parse_milli(text).map_err(|e| setting(field.clone(), e.to_string()))?;
                        if milli < 0 {
                            return Err(setting(field, format!("quantity {text:?} must not be negative")));
                        }
                        Ok((resource.clone(), milli))
                    })
                    .collect()
            };
        let signal = |key: &str| -> Result<Option<EvictionSignal>, AwsCatalogError> {
            let Some(text) = self.eviction_hard.get(key) else {
                return Ok(None);
            };
            let field = format!("evictionHard.{key}");
            parse_eviction_signal(text)
                .map(Some)
                .map_err(|message| setting(field, message))
        };
        if let Some(bytes) = self.root_volume_bytes.filter(|b| *b <= 0) {
            return Err(setting(
                "rootVolumeBytes".into(),
                format!("{bytes} is not a positive size"),
            ));
        }
        Ok(ResolvedCapacitySettings {
            ami_family: self.ami_family,
            vm_memory_overhead_percent: pct,
            reserved_enis: i64::from(self.reserved_enis),
            max_pods: self.max_pods.map(i64::from),
            pods_per_core: self.pods_per_core.map(i64::from),
            kube_reserved: quantities("kubeReserved", &self.kube_reserved)?,
            system_reserved: quantities("systemReserved", &self.system_reserved)?,
            eviction_memory: signal("memory.available")?,
            eviction_nodefs: signal("nodefs.available")?,
            root_volume_bytes: self.root_volume_bytes,
            instance_store_raid0: self.instance_store_raid0,
        })
    }
}

/// Reads an eviction threshold: "500Mi" or "10%".
pub fn parse_eviction_signal(text: &str) -> Result<EvictionSignal, String> {
    if let Some(number) = text.strip_suffix('%') {
        let pct: f64 = number
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a percentage"))?;
        if !(0.0..=100.0).contains(&pct) {
            return Err(format!("{text:?} is not a percentage between 0% and 100%"));
        }
        // The kubelet reads 100% as "threshold off".
        return Ok(EvictionSignal::Percent(if pct == 100.0 { 0.0 } else { pct }));
    }
    let milli = parse_milli(text).map_err(|e| e.to_string())?;
    if milli < 0 {
        return Err(format!("quantity {text:?} must not be negative"));
    }
    Ok(EvictionSignal::Amount(milli))
}

/// What the capacity maths needs to know about an instance type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstanceFacts<'a> {
    pub vcpu: i64,
    pub memory_mib: i64,
    pub arm64: bool,
    /// Network interfaces of the default network card.
    pub max_enis: i64,
    pub ipv4_per_eni: i64,
    /// Total instance-store size in decimal GB, for instanceStorePolicy RAID0.
    pub instance_store_gb: Option<i64>,
    /// Device counts (GPUs, Neuron devices, EFA, pod ENIs), zero counts left out.
    pub extended_resources: &'a BTreeMap<String, i64>,
    /// Secondary private IPv4 addresses per ENI (`vpc.amazonaws.com/PrivateIPv4Address`), which only Windows
    /// nodes advertise; None when upstream's VPC limits table lacks the type (upstream then reports 0).
    pub private_ipv4_per_eni: Option<i64>,
}

/// Capacity and overhead of one instance type under some settings, in milli-units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityAndOverhead {
    pub capacity: Quantities,
    pub overhead: CatalogOverhead,
}

/// Memory capacity in MiB: total memory, less 64 MiB CMA on arm64, less the VM overhead share rounded up to a
/// whole MiB.
pub fn memory_capacity_mib(memory_mib: i64, arm64: bool, vm_memory_overhead_percent: f64) -> i64 {
    let mib = if arm64 {
        memory_mib - ARM64_CMA_RESERVED_MIB
    } else {
        memory_mib
    };
    // Same float operations as upstream (bytes * percent / 1024 / 1024, then ceil) so the rounding agrees.
    let overhead = ((mib * MIB) as f64 * vm_memory_overhead_percent / 1024.0 / 1024.0).ceil() as i64;
    mib - overhead
}

/// Pods the VPC CNI can address: `usable ENIs x (IPv4 per ENI - 1) + 2`, with usable = ENIs - reserved, or 0
/// when no ENI is left.
pub fn eni_limited_pods(max_enis: i64, ipv4_per_eni: i64, reserved_enis: i64) -> i64 {
    let usable = (max_enis - reserved_enis).max(0);
    if usable == 0 {
        0
    } else {
        usable * (ipv4_per_eni - 1) + 2
    }
}

/// Max pods: kubelet maxPods if set, else the ENI limit (110 for Windows), then capped at podsPerCore x vCPUs
/// when podsPerCore is positive and the family honours it.
pub fn max_pods(facts: &InstanceFacts<'_>, settings: &ResolvedCapacitySettings) -> i64 {
    let family = settings.ami_family;
    let mut pods = match settings.max_pods {
        Some(max_pods) => max_pods,
        None if family.supports_eni_limited_pod_density() => {
            eni_limited_pods(facts.max_enis, facts.ipv4_per_eni, settings.reserved_enis)
        }
        None => DEFAULT_MAX_PODS,
    };
    if let Some(per_core) = settings.pods_per_core.filter(|p| *p > 0)
        && family.pods_per_core_enabled()
    {
        pods = pods.min(per_core * facts.vcpu);
    }
    pods
}

/// kube-reserved cpu in millicores for a node of `cpu_milli` millicores: 6% of the first core, 1% of the
/// second, 0.5% of the third and fourth, 0.25% of the rest, each tier truncated to whole millicores.
pub fn kube_reserved_cpu_milli(cpu_milli: i64) -> i64 {
    const TIERS: [(i64, i64, f64); 4] = [
        (0, 1000, 0.06),
        (1000, 2000, 0.01),
        (2000, 4000, 0.005),
        (4000, 1 << 31, 0.0025),
    ];
    TIERS
        .iter()
        .filter(|(start, _, _)| cpu_milli >= *start)
        .map(|&(start, end, share)| {
            let span = if cpu_milli < end {
                cpu_milli - start
            } else {
                end - start
            };
            (span as f64 * share) as i64
        })
        .sum()
}

/// kube-reserved memory in MiB for a node sized for `pods` pods: 11 MiB per pod plus 255 MiB.
pub fn kube_reserved_memory_mib(pods: i64) -> i64 {
    11 * pods + 255
}

/// kube-reserved ephemeral-storage default.
pub const KUBE_RESERVED_EPHEMERAL_BYTES: i64 = GIB;
/// eviction-hard memory.available default.
pub const EVICTION_MEMORY_BYTES: i64 = 100 * MIB;
/// eviction-hard nodefs.available default, in percent of the ephemeral volume.
pub const EVICTION_NODEFS_PERCENT: f64 = 10.0;

/// `ceil(capacity / 100 * percent)` in whole base units, the float operations upstream uses.
pub fn percent_of_ceil(capacity_units: i64, percent: f64) -> i64 {
    (capacity_units as f64 / 100.0 * percent).ceil() as i64
}

/// Ephemeral storage in bytes: the instance store under RAID0 when the type has one, else the root volume
/// from the settings, else the AMI family's default volume.
pub fn ephemeral_storage_bytes(facts: &InstanceFacts<'_>, settings: &ResolvedCapacitySettings) -> i64 {
    if settings.instance_store_raid0
        && let Some(gb) = facts.instance_store_gb
    {
        return gb * 1_000_000_000;
    }
    settings
        .root_volume_bytes
        .unwrap_or_else(|| settings.ami_family.default_ephemeral_volume_bytes())
}

fn eviction_amount_milli(signal: EvictionSignal, capacity_units: i64) -> i64 {
    match signal {
        EvictionSignal::Amount(milli) => milli,
        EvictionSignal::Percent(pct) => percent_of_ceil(capacity_units, pct).saturating_mul(1000),
    }
}

/// Capacity and overhead of an instance type, as upstream's NewInstanceType computes them. Upstream also lists
/// device resources the type lacks with a zero count; they are left out here (no capacity either way).
pub fn capacity_and_overhead(
    facts: &InstanceFacts<'_>,
    settings: &ResolvedCapacitySettings,
) -> CapacityAndOverhead {
    let family = settings.ami_family;
    let cpu_milli = facts.vcpu * 1000;
    let memory_bytes =
        memory_capacity_mib(facts.memory_mib, facts.arm64, settings.vm_memory_overhead_percent) * MIB;
    let storage_bytes = ephemeral_storage_bytes(facts, settings);
    let pods = max_pods(facts, settings);

    let mut capacity = Quantities::new();
    capacity.insert("cpu".into(), cpu_milli);
    capacity.insert("memory".into(), memory_bytes * 1000);
    capacity.insert("ephemeral-storage".into(), storage_bytes * 1000);
    capacity.insert("pods".into(), pods * 1000);
    for (resource, count) in facts.extended_resources {
        if *count > 0 {
            capacity.insert(resource.clone(), count * 1000);
        }
    }
    if family.is_windows() && !facts.arm64 {
        capacity.insert(
            "vpc.amazonaws.com/PrivateIPv4Address".into(),
            facts.private_ipv4_per_eni.map_or(0, |ips| (ips - 1).max(0)) * 1000,
        );
    }

    let overhead_pods = if family.uses_eni_limited_memory_overhead() {
        eni_limited_pods(facts.max_enis, facts.ipv4_per_eni, 0)
    } else {
        pods
    };
    let mut kube_reserved = Quantities::new();
    kube_reserved.insert("cpu".into(), kube_reserved_cpu_milli(cpu_milli));
    kube_reserved.insert(
        "memory".into(),
        kube_reserved_memory_mib(overhead_pods) * MIB * 1000,
    );
    kube_reserved.insert("ephemeral-storage".into(), KUBE_RESERVED_EPHEMERAL_BYTES * 1000);
    for (resource, milli) in &settings.kube_reserved {
        kube_reserved.insert(resource.clone(), *milli);
    }

    let mut eviction_threshold = Quantities::new();
    let memory_eviction = settings
        .eviction_memory
        .map_or(EVICTION_MEMORY_BYTES * 1000, |signal| {
            eviction_amount_milli(signal, memory_bytes)
        });
    let nodefs_eviction = eviction_amount_milli(
        settings
            .eviction_nodefs
            .unwrap_or(EvictionSignal::Percent(EVICTION_NODEFS_PERCENT)),
        storage_bytes,
    );
    eviction_threshold.insert("memory".into(), memory_eviction);
    eviction_threshold.insert("ephemeral-storage".into(), nodefs_eviction);

    CapacityAndOverhead {
        capacity,
        overhead: CatalogOverhead {
            kube_reserved,
            system_reserved: settings.system_reserved.clone(),
            eviction_threshold,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(
        vcpu: i64,
        memory_mib: i64,
        arm64: bool,
        max_enis: i64,
        ipv4_per_eni: i64,
    ) -> InstanceFacts<'static> {
        static NONE: BTreeMap<String, i64> = BTreeMap::new();
        InstanceFacts {
            vcpu,
            memory_mib,
            arm64,
            max_enis,
            ipv4_per_eni,
            instance_store_gb: None,
            extended_resources: &NONE,
            private_ipv4_per_eni: Some(ipv4_per_eni),
        }
    }

    fn resolved(settings: AwsCapacitySettings) -> ResolvedCapacitySettings {
        settings.resolve().unwrap()
    }

    #[test]
    fn memory_capacity_takes_vm_overhead_rounded_up_and_cma_on_graviton() {
        // m5.large: 8192 MiB - ceil(614.4) = 7577.
        assert_eq!(memory_capacity_mib(8192, false, 0.075), 7577);
        // a1.medium: 2048 - 64 = 1984, - ceil(148.8) = 1835.
        assert_eq!(memory_capacity_mib(2048, true, 0.075), 1835);
        assert_eq!(memory_capacity_mib(8192, false, 0.0), 8192);
    }

    #[test]
    fn eni_limited_pods_follow_the_vpc_cni_formula() {
        assert_eq!(eni_limited_pods(3, 10, 0), 29); // m5.large
        assert_eq!(eni_limited_pods(3, 10, 1), 20);
        assert_eq!(eni_limited_pods(3, 10, 3), 0);
        assert_eq!(eni_limited_pods(3, 10, 5), 0);
    }

    #[test]
    fn kube_reserved_cpu_is_tiered() {
        assert_eq!(kube_reserved_cpu_milli(1000), 60);
        assert_eq!(kube_reserved_cpu_milli(2000), 70);
        assert_eq!(kube_reserved_cpu_milli(4000), 80);
        assert_eq!(kube_reserved_cpu_milli(8000), 90);
        assert_eq!(kube_reserved_cpu_milli(192_000), 550); // p5.48xlarge: 191450m allocatable
        assert_eq!(kube_reserved_cpu_milli(500), 30);
    }

    #[test]
    fn max_pods_prefers_kubelet_max_pods_and_caps_by_pods_per_core() {
        let m5_large = facts(2, 8192, false, 3, 10);
        assert_eq!(max_pods(&m5_large, &resolved(AwsCapacitySettings::default())), 29);
        let max = AwsCapacitySettings {
            max_pods: Some(110),
            ..Default::default()
        };
        assert_eq!(max_pods(&m5_large, &resolved(max)), 110);
        let per_core = AwsCapacitySettings {
            pods_per_core: Some(4),
            ..Default::default()
        };
        assert_eq!(max_pods(&m5_large, &resolved(per_core.clone())), 8);
        let bottlerocket = AwsCapacitySettings {
            ami_family: AmiFamily::Bottlerocket,
            ..per_core
        };
        assert_eq!(
            max_pods(&m5_large, &resolved(bottlerocket)),
            29,
            "Bottlerocket ignores podsPerCore"
        );
        let windows = AwsCapacitySettings {
            ami_family: AmiFamily::Windows2022,
            ..Default::default()
        };
        assert_eq!(max_pods(&m5_large, &resolved(windows)), 110);
        let reserved = AwsCapacitySettings {
            reserved_enis: 1,
            ..Default::default()
        };
        assert_eq!(max_pods(&m5_large, &resolved(reserved)), 20);
    }

    #[test]
    fn al2023_sizes_kube_reserved_memory_from_eni_pods_even_with_max_pods() {
        let m5_large = facts(2, 8192, false, 3, 10);
        let settings = resolved(AwsCapacitySettings {
            max_pods: Some(110),
            ..Default::default()
        });
        let result = capacity_and_overhead(&m5_large, &settings);
        assert_eq!(result.capacity["pods"], 110_000);
        assert_eq!(
            result.overhead.kube_reserved["memory"],
            (11 * 29 + 255) * MIB * 1000
        );
        let bottlerocket = resolved(AwsCapacitySettings {
            max_pods: Some(110),
            ami_family: AmiFamily::Bottlerocket,
            ..Default::default()
        });
        let result = capacity_and_overhead(&m5_large, &bottlerocket);
        assert_eq!(
            result.overhead.kube_reserved["memory"],
            (11 * 110 + 255) * MIB * 1000
        );
    }

    #[test]
    fn default_overhead_matches_the_documented_m5_large() {
        let result = capacity_and_overhead(
            &facts(2, 8192, false, 3, 10),
            &resolved(AwsCapacitySettings::default()),
        );
        let mut allocatable = result.capacity.clone();
        for (resource, amount) in result
            .overhead
            .kube_reserved
            .iter()
            .chain(&result.overhead.eviction_threshold)
        {
            if let Some(left) = allocatable.get_mut(resource) {
                *left -= amount;
            }
        }
        assert_eq!(allocatable["cpu"], 1930);
        assert_eq!(allocatable["memory"], 6903 * MIB * 1000); // "6903Mi" in the doc
        assert_eq!(allocatable["ephemeral-storage"], 17 * GIB * 1000);
        assert_eq!(allocatable["pods"], 29_000);
    }

    #[test]
    fn overrides_replace_defaults() {
        let settings = AwsCapacitySettings {
            kube_reserved: BTreeMap::from([("cpu".into(), "250m".into())]),
            system_reserved: BTreeMap::from([("memory".into(), "1Gi".into())]),
            eviction_hard: BTreeMap::from([
                ("memory.available".into(), "5%".into()),
                ("nodefs.available".into(), "1Gi".into()),
            ]),
            root_volume_bytes: Some(100 * GIB),
            ..Default::default()
        };
        let result = capacity_and_overhead(&facts(2, 8192, false, 3, 10), &resolved(settings));
        assert_eq!(result.overhead.kube_reserved["cpu"], 250);
        assert_eq!(
            result.overhead.kube_reserved["memory"],
            (11 * 29 + 255) * MIB * 1000,
            "other keys kept"
        );
        assert_eq!(result.overhead.system_reserved["memory"], GIB * 1000);
        assert_eq!(
            result.overhead.eviction_threshold["memory"],
            percent_of_ceil(7577 * MIB, 5.0) * 1000
        );
        assert_eq!(
            result.overhead.eviction_threshold["ephemeral-storage"],
            GIB * 1000
        );
        assert_eq!(result.capacity["ephemeral-storage"], 100 * GIB * 1000);
    }

    #[test]
    fn raid0_uses_the_instance_store_and_windows_has_its_own_volume_and_ips() {
        let mut m5d = facts(2, 8192, false, 3, 10);
        m5d.instance_store_gb = Some(75);
        let raid0 = resolved(AwsCapacitySettings {
            instance_store_raid0: true,
            ..Default::default()
        });
        assert_eq!(ephemeral_storage_bytes(&m5d, &raid0), 75_000_000_000);
        let windows = resolved(AwsCapacitySettings {
            ami_family: AmiFamily::Windows2019,
            ..Default::default()
        });
        let result = capacity_and_overhead(&m5d, &windows);
        assert_eq!(result.capacity["ephemeral-storage"], 50 * GIB * 1000);
        assert_eq!(result.capacity["vpc.amazonaws.com/PrivateIPv4Address"], 9000);
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = |settings: AwsCapacitySettings| settings.resolve().unwrap_err().to_string();
        assert_eq!(
            bad(AwsCapacitySettings {
                kube_reserved: BTreeMap::from([("memory".into(), "1Gx".into())]),
                ..Default::default()
            }),
            r#"settings.kubeReserved.memory: quantity "1Gx" has an unknown suffix"#
        );
        assert_eq!(
            bad(AwsCapacitySettings {
                eviction_hard: BTreeMap::from([("memory.available".into(), "120%".into())]),
                ..Default::default()
            }),
            r#"settings.evictionHard.memory.available: "120%" is not a percentage between 0% and 100%"#
        );
        assert!(
            bad(AwsCapacitySettings {
                vm_memory_overhead_percent: 7.5,
                ..Default::default()
            })
            .starts_with("settings.vmMemoryOverheadPercent")
        );
        assert_eq!("AL2023".parse::<AmiFamily>().unwrap(), AmiFamily::AL2023);
        assert!("Ubuntu".parse::<AmiFamily>().is_err());
        assert_eq!(
            parse_eviction_signal("100%").unwrap(),
            EvictionSignal::Percent(0.0)
        );
    }
}
