//! EC2 instance types as catalog entries: DescribeInstanceTypes and DescribeInstanceTypeOfferings (and the
//! region's zones) turned into core's [`CatalogInstanceType`]s, with upstream's karpenter.k8s.aws/instance-*
//! labels (`computeRequirements` in aws/karpenter-provider-aws pkg/providers/instancetype/types.go), the
//! capacity maths of `karpenter_aws_catalog::capacity`, and offerings priced by [`PricingProvider`] and
//! filtered by [`UnavailableOfferings`].
//!
//! Like upstream, two facts do not come from DescribeInstanceTypes but from generated tables: ENI limits for
//! max pods and pod-eni (upstream's `vpclimits`) and the instance-network-bandwidth label (upstream's
//! `bandwidth` table). Core's embedded catalog carries both tables; a type they lack falls back to its
//! DescribeInstanceTypes network info and gets no bandwidth label, as upstream does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{PoisonError, RwLock};
use std::time::Instant;

use aws_sdk_ec2::types::{
    ArchitectureType, EbsOptimizedSupport, EphemeralNvmeSupport, InstanceTypeInfo, LocationType,
    SupportedAdditionalProcessorFeature, UsageClassType, VirtualizationType,
};
use karpenter_aws_catalog::data::{AwsAccelerator, AwsGpu, AwsRegionData, AwsZone};
use karpenter_aws_catalog::{
    AwsCapacitySettings, AwsInstanceTypeData, ResolvedCapacitySettings, aws_catalog_data, aws_instance_type,
};
use karpenter_core::catalog::{CatalogInstanceType, CatalogOffering};

use crate::error::AwsError;
use crate::pod_addressing::PodAddressing;
use crate::pricing::PricingProvider;
use crate::unavailable_offerings::UnavailableOfferings;

const LABEL_PREFIX: &str = "karpenter.k8s.aws/instance-";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_SPOT: &str = "spot";

/// Lower case with spaces as dashes, as upstream writes GPU and accelerator names (`lowerKabobCase`).
fn lower_kebab(text: &str) -> String {
    text.to_lowercase().replace(' ', "-")
}

/// `karpenter.k8s.aws/instance-category` and `-generation` from the type's name, as upstream's regex
/// `(^[a-z]+)(\-[0-9]+tb)?([0-9]+).*\.` reads it: `m5.large` is (m, 5), `u-6tb1.112xlarge` is (u, 1).
pub fn category_and_generation(name: &str) -> Option<(String, String)> {
    let family = name.split_once('.')?.0;
    let category_len = family.bytes().take_while(u8::is_ascii_lowercase).count();
    if category_len == 0 {
        return None;
    }
    let (category, mut rest) = family.split_at(category_len);
    // The optional "-<digits>tb" of the high-memory families.
    if let Some(after_dash) = rest.strip_prefix('-') {
        let digits = after_dash.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0
            && let Some(after_tb) = after_dash[digits..].strip_prefix("tb")
            && after_tb.bytes().next().is_some_and(|b| b.is_ascii_digit())
        {
            rest = after_tb;
        }
    }
    let generation_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    (generation_len > 0).then(|| (category.to_string(), rest[..generation_len].to_string()))
}

/// kubernetes.io/arch of a type Karpenter can launch: hvm with x86_64 or arm64 (upstream's
/// DescribeInstanceTypes filter); None for anything else (mac, i386, paravirtual-only).
pub fn kubernetes_arch(info: &InstanceTypeInfo) -> Option<&'static str> {
    let virtualization = info.supported_virtualization_types();
    if !virtualization.is_empty() && !virtualization.contains(&VirtualizationType::Hvm) {
        return None;
    }
    let architectures = info.processor_info()?.supported_architectures();
    if architectures.contains(&ArchitectureType::X8664) {
        Some("amd64")
    } else if architectures.contains(&ArchitectureType::Arm64) {
        Some("arm64")
    } else {
        None
    }
}

/// Whether the type's processors support nested virtualization (a processor feature EC2 lists).
pub fn supports_nested_virtualization(info: &InstanceTypeInfo) -> bool {
    info.processor_info().is_some_and(|processor| {
        processor
            .supported_features()
            .contains(&SupportedAdditionalProcessorFeature::NestedVirtualization)
    })
}

/// The facts core's capacity maths and requirements need, from one DescribeInstanceTypes record. `zones`
/// holds the zone names of `region` that offer the type (from DescribeInstanceTypeOfferings). None when the
/// type cannot be launched by Karpenter (see [`kubernetes_arch`]) or the record lacks vCPUs or memory.
pub fn instance_type_data(
    info: &InstanceTypeInfo,
    region: &str,
    zones: &BTreeSet<String>,
) -> Option<AwsInstanceTypeData> {
    let name = info.instance_type()?.as_str().to_string();
    let arch = kubernetes_arch(info)?;
    let vcpu = i64::from(info.v_cpu_info()?.default_v_cpus()?);
    let memory_mib = info.memory_info()?.size_in_mib()?;
    let table = aws_catalog_data().ok().and_then(|data| data.instance_type(&name));

    let mut labels = BTreeMap::new();
    let mut label = |key: &str, value: String| {
        labels.insert(format!("{LABEL_PREFIX}{key}"), value);
    };
    label("cpu", vcpu.to_string());
    label("memory", memory_mib.to_string());
    if let Some(processor) = info.processor_info() {
        if let Some(manufacturer) = processor.manufacturer() {
            label("cpu-manufacturer", manufacturer.to_lowercase());
        }
        if let Some(ghz) = processor.sustained_clock_speed_in_ghz() {
            label(
                "cpu-sustained-clock-speed-mhz",
                ((ghz * 1000.0).round() as i64).to_string(),
            );
        }
    }
    let family = name.split_once('.').map_or(name.as_str(), |(family, _)| family);
    label("family", family.to_string());
    if let Some((_, size)) = name.split_once('.') {
        label("size", size.to_string());
    }
    if let Some((category, generation)) = category_and_generation(&name) {
        label("category", category);
        label("generation", generation);
    }
    label("capability-flex", family.contains("-flex").to_string());
    let hypervisor = info.hypervisor().map_or("", |h| h.as_str()).to_string();
    label("hypervisor", hypervisor.clone());
    if let Some(network) = info.network_info() {
        label(
            "encryption-in-transit-supported",
            network
                .encryption_in_transit_supported()
                .unwrap_or(false)
                .to_string(),
        );
    }
    if let Some(ebs) = info.ebs_info()
        && ebs.ebs_optimized_support() == Some(&EbsOptimizedSupport::Default)
        && let Some(mbps) = ebs
            .ebs_optimized_info()
            .and_then(|o| o.maximum_bandwidth_in_mbps())
    {
        label("ebs-bandwidth", mbps.to_string());
    }
    if let Some(storage) = info.instance_storage_info()
        && storage.nvme_support() != Some(&EphemeralNvmeSupport::Unsupported)
        && let Some(gb) = storage.total_size_in_gb()
    {
        label("local-nvme", gb.to_string());
    }
    // Upstream's bandwidth table, not DescribeInstanceTypes.
    let bandwidth_key = format!("{LABEL_PREFIX}network-bandwidth");
    if let Some(mbps) = table.and_then(|t| t.label(&bandwidth_key)) {
        label("network-bandwidth", mbps.to_string());
    }

    let mut extended_resources = BTreeMap::new();
    let mut gpu = None;
    if let Some(gpu_info) = info.gpu_info() {
        for device in gpu_info.gpus() {
            let resource = match device.manufacturer() {
                Some("NVIDIA") => "nvidia.com/gpu",
                Some("AMD") => "amd.com/gpu",
                Some("Habana") => "habana.ai/gaudi",
                _ => continue,
            };
            *extended_resources.entry(resource.to_string()).or_insert(0) +=
                i64::from(device.count().unwrap_or(0));
        }
        if let [device] = gpu_info.gpus() {
            gpu = Some(AwsGpu {
                name: lower_kebab(device.name().unwrap_or_default()),
                manufacturer: lower_kebab(device.manufacturer().unwrap_or_default()),
                count: i64::from(device.count().unwrap_or(0)),
                memory_mib: i64::from(device.memory_info().and_then(|m| m.size_in_mib()).unwrap_or(0)),
            });
        }
    }
    if let Some(gpu) = &gpu {
        label("gpu-name", gpu.name.clone());
        label("gpu-manufacturer", gpu.manufacturer.clone());
        label("gpu-count", gpu.count.to_string());
        label("gpu-memory", gpu.memory_mib.to_string());
    }
    let mut accelerator = None;
    if let Some(neuron) = info.neuron_info() {
        let devices = neuron.neuron_devices();
        let count: i64 = devices.iter().map(|d| i64::from(d.count().unwrap_or(0))).sum();
        let cores: i64 = devices
            .iter()
            .map(|d| {
                i64::from(d.count().unwrap_or(0))
                    * i64::from(d.core_info().and_then(|c| c.count()).unwrap_or(0))
            })
            .sum();
        extended_resources.insert("aws.amazon.com/neuron".to_string(), count);
        extended_resources.insert("aws.amazon.com/neuroncore".to_string(), cores);
        if let [device] = devices {
            accelerator = Some(AwsAccelerator {
                name: lower_kebab(device.name().unwrap_or_default()),
                manufacturer: "aws".to_string(),
                count: i64::from(device.count().unwrap_or(0)),
            });
        }
    } else if let Some(inference) = info.inference_accelerator_info()
        && let [device] = inference.accelerators()
    {
        accelerator = Some(AwsAccelerator {
            name: lower_kebab(device.name().unwrap_or_default()),
            manufacturer: lower_kebab(device.manufacturer().unwrap_or_default()),
            count: i64::from(device.count().unwrap_or(0)),
        });
    }
    if let Some(accelerator) = &accelerator {
        label("accelerator-name", accelerator.name.clone());
        label("accelerator-manufacturer", accelerator.manufacturer.clone());
        label("accelerator-count", accelerator.count.to_string());
    }
    if let Some(network) = info.network_info()
        && network.efa_supported() == Some(true)
        && let Some(efa) = network.efa_info().and_then(|e| e.maximum_efa_interfaces())
    {
        extended_resources.insert("vpc.amazonaws.com/efa".to_string(), i64::from(efa));
    }
    // ENI limits and branch ENIs: upstream's vpclimits table, else the default network card.
    let (max_enis, ipv4_per_eni, in_vpc_limits) = match table {
        Some(t) => {
            if let Some(branch) = t.extended_resources.get("vpc.amazonaws.com/pod-eni") {
                extended_resources.insert("vpc.amazonaws.com/pod-eni".to_string(), *branch);
            }
            (t.max_enis, t.ipv4_per_eni, t.in_vpc_limits)
        }
        None => {
            let network = info.network_info();
            let default_card = network.and_then(|n| {
                let index = n.default_network_card_index().unwrap_or(0);
                n.network_cards()
                    .iter()
                    .find(|card| card.network_card_index().unwrap_or(0) == index)
            });
            let enis = default_card
                .and_then(|card| card.maximum_network_interfaces())
                .or_else(|| network.and_then(|n| n.maximum_network_interfaces()))
                .unwrap_or(0);
            let ips = network
                .and_then(|n| n.ipv4_addresses_per_interface())
                .unwrap_or(0);
            (i64::from(enis), i64::from(ips), false)
        }
    };
    extended_resources.retain(|_, count| *count > 0);

    labels.insert("node.kubernetes.io/instance-type".into(), name.clone());
    labels.insert("kubernetes.io/arch".into(), arch.into());
    labels.insert("kubernetes.io/os".into(), "linux".into());

    let usage = info.supported_usage_classes();
    let capacity_types = [
        (UsageClassType::OnDemand, CAPACITY_TYPE_ON_DEMAND),
        (UsageClassType::Spot, CAPACITY_TYPE_SPOT),
    ]
    .into_iter()
    .filter(|(class, _)| usage.contains(class))
    .map(|(_, name)| name.to_string())
    .collect();
    let letters: String = zones
        .iter()
        .filter_map(|zone| zone.strip_prefix(region))
        .filter(|letter| letter.len() == 1)
        .collect();
    Some(AwsInstanceTypeData {
        name,
        arch: arch.into(),
        vcpu,
        memory_mib,
        hypervisor,
        bare_metal: info.bare_metal().unwrap_or(false),
        max_enis,
        ipv4_per_eni,
        in_vpc_limits,
        capacity_types,
        gpu,
        accelerator,
        extended_resources,
        labels,
        on_demand_price: None,
        zones: BTreeMap::from([(region.to_string(), letters)]),
    })
}

/// One instance type as a catalog entry: core's requirements and capacity, and one offering per zone of the
/// region and capacity type the type supports. An offering is available when EC2 offers the type in that zone,
/// it has a price, and no recent launch found it out of capacity.
pub fn catalog_instance_type(
    data: &AwsInstanceTypeData,
    region: &str,
    region_data: &AwsRegionData,
    settings: &ResolvedCapacitySettings,
    pricing: &PricingProvider,
    unavailable: &UnavailableOfferings,
    now: Instant,
) -> CatalogInstanceType {
    let mut entry = aws_instance_type(data, region, region_data, settings);
    let offered = data.zones_in(region_data, region);
    entry.offerings = region_data
        .zones
        .iter()
        .flat_map(|zone| {
            data.capacity_types
                .iter()
                .map(move |capacity_type| (zone, capacity_type))
        })
        .map(|(zone, capacity_type)| {
            let price = if capacity_type == CAPACITY_TYPE_SPOT {
                pricing.spot_price(&data.name, &zone.name)
            } else {
                pricing.on_demand_price(&data.name)
            };
            let available = price.is_some()
                && offered.iter().any(|z| z.name == zone.name)
                && !unavailable.is_unavailable(&data.name, &zone.name, capacity_type, now);
            CatalogOffering {
                zone: zone.name.clone(),
                capacity_type: capacity_type.clone(),
                price: price.unwrap_or(0.0),
                available,
                reservation_id: None,
                reservation_capacity: None,
            }
        })
        .collect();
    entry
}

/// Every instance type record, paginated.
pub async fn describe_instance_types(ec2: &aws_sdk_ec2::Client) -> Result<Vec<InstanceTypeInfo>, AwsError> {
    let mut pages = ec2.describe_instance_types().into_paginator().send();
    let mut types = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsError::from_sdk("DescribeInstanceTypes", e))?;
        types.extend(page.instance_types().iter().cloned());
    }
    Ok(types)
}

/// The region's availability zones (not local or wavelength zones), in name order.
pub async fn describe_zones(ec2: &aws_sdk_ec2::Client, region: &str) -> Result<Vec<AwsZone>, AwsError> {
    let output = ec2
        .describe_availability_zones()
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("DescribeAvailabilityZones", e))?;
    let mut zones: Vec<AwsZone> = output
        .availability_zones()
        .iter()
        .filter(|zone| zone.zone_type().is_none_or(|t| t == "availability-zone"))
        .filter_map(|zone| {
            let name = zone.zone_name()?;
            let letter = name.strip_prefix(region).filter(|l| l.len() == 1)?;
            Some(AwsZone {
                letter: letter.to_string(),
                name: name.to_string(),
                zone_id: zone.zone_id().unwrap_or_default().to_string(),
            })
        })
        .collect();
    zones.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(zones)
}

/// Instance type name to the zones offering it.
pub async fn describe_offerings(
    ec2: &aws_sdk_ec2::Client,
) -> Result<HashMap<String, BTreeSet<String>>, AwsError> {
    let mut pages = ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .into_paginator()
        .send();
    let mut offerings: HashMap<String, BTreeSet<String>> = HashMap::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsError::from_sdk("DescribeInstanceTypeOfferings", e))?;
        for offering in page.instance_type_offerings() {
            if let (Some(instance_type), Some(zone)) = (offering.instance_type(), offering.location()) {
                offerings
                    .entry(instance_type.as_str().to_string())
                    .or_default()
                    .insert(zone.to_string());
            }
        }
    }
    Ok(offerings)
}

/// What EC2 said about the region's instance types at the last refresh.
#[derive(Debug, Clone, Default)]
struct Discovered {
    region_data: Option<AwsRegionData>,
    types: Vec<AwsInstanceTypeData>,
    /// The types whose processors support nested virtualization (`cpuOptions.nestedVirtualization: enabled`).
    nested_virtualization: BTreeSet<String>,
}

/// Lists the region's instance types as catalog entries. `refresh` asks EC2 (upstream: every 12 hours, and
/// offerings every 12 hours too); `list` is answered from what was discovered, with current prices and
/// unavailable offerings, so it never waits on AWS.
#[derive(Debug)]
pub struct InstanceTypeProvider {
    region: String,
    discovered: RwLock<Discovered>,
}

impl InstanceTypeProvider {
    pub fn new(region: impl Into<String>) -> Self {
        Self {
            region: region.into(),
            discovered: RwLock::new(Discovered::default()),
        }
    }

    /// Describes instance types, zones and offerings. On error the previous discovery stays in use.
    /// Returns how many launchable types were found.
    pub async fn refresh(&self, ec2: &aws_sdk_ec2::Client) -> Result<usize, AwsError> {
        let zones = describe_zones(ec2, &self.region).await?;
        let infos = describe_instance_types(ec2).await?;
        let offerings = describe_offerings(ec2).await?;
        let none = BTreeSet::new();
        let mut types: Vec<AwsInstanceTypeData> = infos
            .iter()
            .filter_map(|info| {
                let name = info.instance_type()?.as_str();
                instance_type_data(info, &self.region, offerings.get(name).unwrap_or(&none))
            })
            .collect();
        types.sort_by(|a, b| a.name.cmp(&b.name));
        let nested_virtualization = infos
            .iter()
            .filter(|info| supports_nested_virtualization(info))
            .filter_map(|info| Some(info.instance_type()?.as_str().to_string()))
            .collect();
        let count = types.len();
        *self.discovered.write().unwrap_or_else(PoisonError::into_inner) = Discovered {
            region_data: Some(AwsRegionData {
                zones,
                on_demand_prices: "AWS Pricing API, or the static table until it answers".into(),
            }),
            types,
            nested_virtualization,
        };
        Ok(count)
    }

    /// Whether EC2 said type `name` supports nested virtualization (false before the first refresh).
    pub fn supports_nested_virtualization(&self, name: &str) -> bool {
        let discovered = self.discovered.read().unwrap_or_else(PoisonError::into_inner);
        discovered.nested_virtualization.contains(name)
    }

    /// The catalog under `settings` (the EC2NodeClass's AMI family, kubelet and block devices, and the
    /// controller's VM memory overhead and reserved ENIs), with max pods as `addressing` has it. Empty until
    /// the first successful refresh.
    pub fn list(
        &self,
        settings: &AwsCapacitySettings,
        addressing: PodAddressing,
        pricing: &PricingProvider,
        unavailable: &UnavailableOfferings,
        now: Instant,
    ) -> Result<Vec<CatalogInstanceType>, AwsError> {
        let settings = settings.resolve().map_err(|e| AwsError::Config(e.to_string()))?;
        let discovered = self.discovered.read().unwrap_or_else(PoisonError::into_inner);
        let Some(region_data) = &discovered.region_data else {
            return Ok(Vec::new());
        };
        Ok(discovered
            .types
            .iter()
            .map(|t| {
                let settings = addressing.settings_for(t, &settings);
                catalog_instance_type(t, &self.region, region_data, &settings, pricing, unavailable, now)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::types::{
        EbsInfo, EbsOptimizedInfo, GpuDeviceInfo, GpuDeviceMemoryInfo, GpuInfo, InstanceStorageInfo,
        InstanceType, InstanceTypeHypervisor, MemoryInfo, NetworkCardInfo, NetworkInfo, ProcessorInfo,
        VCpuInfo,
    };

    use super::*;

    fn g5_xlarge() -> InstanceTypeInfo {
        g5_xlarge_builder().build()
    }

    /// g5.xlarge as DescribeInstanceTypes describes it (the fields Karpenter reads).
    fn g5_xlarge_builder() -> aws_sdk_ec2::types::builders::InstanceTypeInfoBuilder {
        InstanceTypeInfo::builder()
            .instance_type(InstanceType::G5Xlarge)
            .supported_usage_classes(UsageClassType::OnDemand)
            .supported_usage_classes(UsageClassType::Spot)
            .supported_virtualization_types(VirtualizationType::Hvm)
            .bare_metal(false)
            .hypervisor(InstanceTypeHypervisor::Nitro)
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(ArchitectureType::X8664)
                    .sustained_clock_speed_in_ghz(3.3)
                    .manufacturer("AMD")
                    .build(),
            )
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(4).build())
            .memory_info(MemoryInfo::builder().size_in_mib(16384).build())
            .instance_storage_info(
                InstanceStorageInfo::builder()
                    .total_size_in_gb(250)
                    .nvme_support(EphemeralNvmeSupport::Required)
                    .build(),
            )
            .ebs_info(
                EbsInfo::builder()
                    .ebs_optimized_support(EbsOptimizedSupport::Default)
                    .ebs_optimized_info(
                        EbsOptimizedInfo::builder()
                            .maximum_bandwidth_in_mbps(3500)
                            .build(),
                    )
                    .build(),
            )
            .network_info(
                NetworkInfo::builder()
                    .maximum_network_interfaces(4)
                    .default_network_card_index(0)
                    .network_cards(
                        NetworkCardInfo::builder()
                            .network_card_index(0)
                            .maximum_network_interfaces(4)
                            .build(),
                    )
                    .ipv4_addresses_per_interface(15)
                    .encryption_in_transit_supported(true)
                    .efa_supported(false)
                    .build(),
            )
            .gpu_info(
                GpuInfo::builder()
                    .gpus(
                        GpuDeviceInfo::builder()
                            .name("A10G")
                            .manufacturer("NVIDIA")
                            .count(1)
                            .memory_info(GpuDeviceMemoryInfo::builder().size_in_mib(22888).build())
                            .build(),
                    )
                    .build(),
            )
    }

    #[test]
    fn describe_instance_types_records_become_karpenters_facts() {
        let zones = BTreeSet::from(["us-west-2a".to_string(), "us-west-2c".to_string()]);
        let t = instance_type_data(&g5_xlarge(), "us-west-2", &zones).unwrap();
        let label = |key: &str| t.label(&format!("{LABEL_PREFIX}{key}")).map(str::to_string);
        assert_eq!(label("gpu-name").as_deref(), Some("a10g"));
        assert_eq!(label("gpu-manufacturer").as_deref(), Some("nvidia"));
        assert_eq!(label("gpu-memory").as_deref(), Some("22888"));
        assert_eq!(label("cpu-manufacturer").as_deref(), Some("amd"));
        assert_eq!(label("cpu-sustained-clock-speed-mhz").as_deref(), Some("3300"));
        assert_eq!(label("local-nvme").as_deref(), Some("250"));
        assert_eq!(label("ebs-bandwidth").as_deref(), Some("3500"));
        assert_eq!(label("category").as_deref(), Some("g"));
        assert_eq!(label("generation").as_deref(), Some("5"));
        assert_eq!(label("capability-flex").as_deref(), Some("false"));
        assert_eq!(label("encryption-in-transit-supported").as_deref(), Some("true"));
        // From the generated tables core embeds, not from the record.
        assert_eq!(label("network-bandwidth").as_deref(), Some("2500"));
        assert_eq!(t.extended_resources["vpc.amazonaws.com/pod-eni"], 4);
        assert_eq!(t.extended_resources["nvidia.com/gpu"], 1);
        assert_eq!((t.max_enis, t.ipv4_per_eni), (4, 15));
        assert_eq!(t.capacity_types, ["on-demand", "spot"]);
        assert_eq!(t.zones["us-west-2"], "ac");

        // Everything the embedded data says about g5.xlarge, the record says too.
        let embedded = aws_catalog_data().unwrap().instance_type("g5.xlarge").unwrap();
        assert_eq!(t.labels, embedded.labels);
        assert_eq!(t.extended_resources, embedded.extended_resources);
        assert_eq!(t.gpu, embedded.gpu);

        // Mac and 32-bit types are not Karpenter's.
        let mac = g5_xlarge_builder()
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(ArchitectureType::X8664Mac)
                    .build(),
            )
            .build();
        assert_eq!(instance_type_data(&mac, "us-west-2", &zones), None);
    }

    #[test]
    fn catalog_entries_price_and_gate_their_offerings() {
        let zones = vec![
            AwsZone {
                letter: "a".into(),
                name: "us-west-2a".into(),
                zone_id: "usw2-az1".into(),
            },
            AwsZone {
                letter: "b".into(),
                name: "us-west-2b".into(),
                zone_id: "usw2-az2".into(),
            },
        ];
        let region = AwsRegionData {
            zones,
            on_demand_prices: "test".into(),
        };
        let offered = BTreeSet::from(["us-west-2a".to_string()]);
        let t = instance_type_data(&g5_xlarge(), "us-west-2", &offered).unwrap();
        let pricing = PricingProvider::new("us-west-2", false).unwrap();
        let unavailable = UnavailableOfferings::default();
        let now = Instant::now();
        unavailable.mark_unavailable("g5.xlarge", "us-west-2a", CAPACITY_TYPE_SPOT, now);
        let settings = AwsCapacitySettings::default().resolve().unwrap();
        let entry = catalog_instance_type(&t, "us-west-2", &region, &settings, &pricing, &unavailable, now);
        let offerings: Vec<(&str, &str, bool)> = entry
            .offerings
            .iter()
            .map(|o| (o.zone.as_str(), o.capacity_type.as_str(), o.available))
            .collect();
        assert_eq!(
            offerings,
            [
                ("us-west-2a", "on-demand", true),
                ("us-west-2a", "spot", false),
                ("us-west-2b", "on-demand", false),
                ("us-west-2b", "spot", false),
            ]
        );
        let on_demand = pricing.on_demand_price("g5.xlarge").unwrap();
        assert!(
            entry.offerings.iter().all(|o| o.price == on_demand),
            "spot stands in with on-demand"
        );
        // Karpenter's documented allocatable for g5.xlarge.
        let allocatable = entry.allocatable();
        assert_eq!(allocatable["cpu"], 3920);
        assert_eq!(allocatable["memory"], 14162 * 1024 * 1024 * 1000);
        assert_eq!(allocatable["pods"], 58_000);
    }

    #[test]
    fn nested_virtualization_support_is_the_processor_feature_ec2_lists() {
        assert!(!supports_nested_virtualization(&g5_xlarge()));
        let supporting = g5_xlarge_builder()
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(ArchitectureType::X8664)
                    .supported_features(SupportedAdditionalProcessorFeature::AmdSevSnp)
                    .supported_features(SupportedAdditionalProcessorFeature::NestedVirtualization)
                    .build(),
            )
            .build();
        assert!(supports_nested_virtualization(&supporting));
        let provider = InstanceTypeProvider::new("us-west-2");
        assert!(
            !provider.supports_nested_virtualization("g5.xlarge"),
            "nothing is known before the first refresh"
        );
    }

    #[test]
    fn category_and_generation_follow_upstreams_pattern() {
        let split = |name: &str| category_and_generation(name);
        assert_eq!(split("m5.large"), Some(("m".into(), "5".into())));
        assert_eq!(split("u-6tb1.112xlarge"), Some(("u".into(), "1".into())));
        assert_eq!(split("u7i-12tb.224xlarge"), Some(("u".into(), "7".into())));
        assert_eq!(split("c7i-flex.large"), Some(("c".into(), "7".into())));
        assert_eq!(split("trn2u.48xlarge"), Some(("trn".into(), "2".into())));
        assert_eq!(split("inf2.xlarge"), Some(("inf".into(), "2".into())));
        assert_eq!(split("nogeneration.large"), None);
        assert_eq!(split("noperiod"), None);
    }
}
