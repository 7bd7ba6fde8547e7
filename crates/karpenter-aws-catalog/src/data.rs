//! The embedded AWS facts (data/aws-catalog.json, written by `cargo xtask catalog` from shared/data/aws):
//! per instance type its labels, size, ENI limits, devices, capacity types, zones per region and us-east-1
//! on-demand price. Parsed once per process on first use.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::AwsCatalogError;
use crate::capacity::InstanceFacts;

/// The data file, compiled in.
pub const AWS_CATALOG_JSON: &str = include_str!("../data/aws-catalog.json");

/// The data file stores labels under this prefix without it.
const LABEL_PREFIX: &str = "karpenter.k8s.aws/instance-";

/// All embedded facts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsCatalogData {
    /// The header (sources, synthetic values, field meanings) is for people; the loader skips it.
    #[serde(rename = "about", default)]
    _about: IgnoredAny,
    /// Region name to its zones.
    pub regions: BTreeMap<String, AwsRegionData>,
    pub instance_types: Vec<AwsInstanceTypeData>,
}

/// A region's zones, in name order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsRegionData {
    pub zones: Vec<AwsZone>,
    /// Where the region's on-demand prices come from (fact or synthetic), as the data file states it.
    pub on_demand_prices: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsZone {
    /// The zone name's last letter, as instance types list their zones.
    pub letter: String,
    pub name: String,
    /// Illustrative only: the name-to-ID mapping differs per AWS account.
    pub zone_id: String,
}

/// One instance type's facts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsInstanceTypeData {
    pub name: String,
    /// kubernetes.io/arch: amd64 or arm64.
    pub arch: String,
    pub vcpu: i64,
    /// Total memory before any overhead.
    pub memory_mib: i64,
    /// nitro, xen or "" (bare metal).
    pub hypervisor: String,
    pub bare_metal: bool,
    /// Network interfaces of the default network card.
    pub max_enis: i64,
    pub ipv4_per_eni: i64,
    /// Whether upstream's VPC limits table has the type.
    pub in_vpc_limits: bool,
    /// karpenter.sh/capacity-type values: on-demand and/or spot.
    pub capacity_types: Vec<String>,
    #[serde(default)]
    pub gpu: Option<AwsGpu>,
    #[serde(default)]
    pub accelerator: Option<AwsAccelerator>,
    /// Device counts: nvidia.com/gpu, amd.com/gpu, aws.amazon.com/neuron(core), vpc.amazonaws.com/efa,
    /// pod-eni.
    pub extended_resources: BTreeMap<String, i64>,
    /// Karpenter's single-valued labels with full keys, including node.kubernetes.io/instance-type,
    /// kubernetes.io/arch and kubernetes.io/os (the data file stores them in short form; see `load`).
    pub labels: BTreeMap<String, String>,
    /// USD per hour in us-east-1; None when the data has no price.
    pub on_demand_price: Option<f64>,
    /// Region to the letters of the zones offering the type there; a region without an entry lacks the type.
    pub zones: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsGpu {
    pub name: String,
    pub manufacturer: String,
    pub count: i64,
    /// Memory of one GPU.
    pub memory_mib: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsAccelerator {
    pub name: String,
    pub manufacturer: String,
    pub count: i64,
}

impl AwsInstanceTypeData {
    /// A label's value, by full key.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// What the capacity maths needs.
    pub fn facts(&self) -> InstanceFacts<'_> {
        InstanceFacts {
            vcpu: self.vcpu,
            memory_mib: self.memory_mib,
            arm64: self.arch == "arm64",
            max_enis: self.max_enis,
            ipv4_per_eni: self.ipv4_per_eni,
            instance_store_gb: self
                .label("karpenter.k8s.aws/instance-local-nvme")
                .and_then(|gb| gb.parse().ok()),
            extended_resources: &self.extended_resources,
            private_ipv4_per_eni: self.in_vpc_limits.then_some(self.ipv4_per_eni),
        }
    }

    /// The zones of `region` that offer this type, in the region's zone order.
    pub fn zones_in<'a>(&self, region: &'a AwsRegionData, region_name: &str) -> Vec<&'a AwsZone> {
        let Some(letters) = self.zones.get(region_name) else {
            return Vec::new();
        };
        region
            .zones
            .iter()
            .filter(|zone| letters.contains(zone.letter.as_str()))
            .collect()
    }
}

impl AwsCatalogData {
    /// Parses a data file in the embedded format and restores the full label keys.
    pub fn parse(text: &str) -> Result<Self, AwsCatalogError> {
        let mut data: Self =
            serde_json::from_str(text).map_err(|e| AwsCatalogError::EmbeddedData(e.to_string()))?;
        for t in &mut data.instance_types {
            let short = std::mem::take(&mut t.labels);
            t.labels = short
                .into_iter()
                .map(|(key, value)| (format!("{LABEL_PREFIX}{key}"), value))
                .collect();
            t.labels
                .insert(karpenter_api::labels::INSTANCE_TYPE_LABEL.into(), t.name.clone());
            t.labels
                .insert(karpenter_api::labels::ARCH_LABEL.into(), t.arch.clone());
            t.labels
                .insert(karpenter_api::labels::OS_LABEL.into(), "linux".into());
            for (region, letters) in &t.zones {
                let Some(region_data) = data.regions.get(region) else {
                    return Err(AwsCatalogError::EmbeddedData(format!(
                        "{}: unknown region {region}",
                        t.name
                    )));
                };
                if letters
                    .chars()
                    .any(|l| !region_data.zones.iter().any(|z| z.letter.starts_with(l)))
                {
                    return Err(AwsCatalogError::EmbeddedData(format!(
                        "{}: unknown zone in {region}: {letters}",
                        t.name
                    )));
                }
            }
        }
        Ok(data)
    }

    /// An instance type by name.
    pub fn instance_type(&self, name: &str) -> Option<&AwsInstanceTypeData> {
        self.instance_types.iter().find(|t| t.name == name)
    }
}

/// The embedded facts, parsed on first use and shared afterwards.
pub fn aws_catalog_data() -> Result<&'static AwsCatalogData, AwsCatalogError> {
    static DATA: OnceLock<Result<AwsCatalogData, AwsCatalogError>> = OnceLock::new();
    DATA.get_or_init(|| AwsCatalogData::parse(AWS_CATALOG_JSON))
        .as_ref()
        .map_err(Clone::clone)
}
