//! The embedded AWS catalog: every EC2 instance type of a region as a catalog file, with requirements and
//! offerings built the way upstream's instance-type provider builds them (`computeRequirements`,
//! `createOfferings` in aws/karpenter-provider-aws pkg/providers/instancetype) and capacity from
//! [`crate::capacity`]. This is what `karpenter schedule` uses without `--instance-types`.
//!
//! Prices: us-east-1 on-demand prices are facts (Karpenter's generated initial price table). The data has no
//! prices for us-west-2 or eu-west-1, so their on-demand offerings reuse the us-east-1 price (synthetic).
//! Spot prices are not in the data at all and are synthetic everywhere; see [`synthetic_spot_price`]. Types
//! without a us-east-1 price get no offerings: they still match requirements but can never be launched.

use std::sync::Arc;

use karpenter_core::catalog::{CatalogFile, CatalogInstanceType, CatalogOffering, CatalogRequirement};

use crate::AwsCatalogError;
use crate::capacity::{AmiFamily, AwsCapacitySettings, ResolvedCapacitySettings, capacity_and_overhead};
use crate::data::{AWS_CATALOG_JSON, AwsCatalogData, AwsInstanceTypeData, AwsRegionData, aws_catalog_data};

/// The regions the embedded catalog covers.
pub const AWS_CATALOG_REGIONS: [&str; 3] = ["us-east-1", "us-west-2", "eu-west-1"];

/// Synthetic spot prices are this fraction of on-demand, before the per-zone variation.
pub const SPOT_PRICE_FRACTION: f64 = 0.35;
/// The per-zone variation takes one of this many whole-percent steps, centred on zero (-5% ..= +5%).
pub const SPOT_ZONE_VARIATION_STEPS: u64 = 11;

/// The karpenter.k8s.aws/instance-* labels Karpenter derives from an instance type, in upstream's order. A
/// type lacking one gets a DoesNotExist requirement, so NotIn and DoesNotExist selectors work.
pub const AWS_INSTANCE_LABELS: [&str; 21] = [
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-memory",
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-capability-flex",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-generation",
    "karpenter.k8s.aws/instance-local-nvme",
    "karpenter.k8s.aws/instance-size",
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
    "karpenter.k8s.aws/instance-hypervisor",
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
];

pub const LABEL_INSTANCE_TYPE: &str = karpenter_api::labels::INSTANCE_TYPE_LABEL;
pub const LABEL_ARCH: &str = karpenter_api::labels::ARCH_LABEL;
pub const LABEL_OS: &str = karpenter_api::labels::OS_LABEL;
pub const LABEL_ZONE: &str = karpenter_api::labels::ZONE_LABEL;
pub const LABEL_REGION: &str = karpenter_api::labels::REGION_LABEL;
pub const LABEL_WINDOWS_BUILD: &str = karpenter_api::labels::WINDOWS_BUILD_LABEL;
pub const LABEL_CAPACITY_TYPE: &str = karpenter_api::labels::CAPACITY_TYPE_LABEL;
pub const LABEL_INSTANCE_TENANCY: &str = karpenter_api::labels::AWS_INSTANCE_TENANCY_LABEL;
pub const LABEL_ZONE_ID: &str = "topology.k8s.aws/zone-id";
pub const LABEL_CAPACITY_RESERVATION_ID: &str = karpenter_api::labels::AWS_CAPACITY_RESERVATION_ID_LABEL;
pub const LABEL_CAPACITY_RESERVATION_TYPE: &str = karpenter_api::labels::AWS_CAPACITY_RESERVATION_TYPE_LABEL;

/// The label keys AWS adds to Karpenter's well-known labels (upstream pkg/apis/v1/labels.go): the AWS
/// catalog's `wellKnownLabels`.
pub fn aws_well_known_labels() -> Vec<String> {
    AWS_INSTANCE_LABELS
        .iter()
        .chain(&[
            LABEL_INSTANCE_TENANCY,
            LABEL_CAPACITY_RESERVATION_ID,
            LABEL_CAPACITY_RESERVATION_TYPE,
            LABEL_ZONE_ID,
            LABEL_WINDOWS_BUILD,
        ])
        .map(|key| (*key).to_string())
        .collect()
}

/// A synthetic spot price for `instance_type` in `zone`, because the reference data has no spot prices:
/// `on_demand x 0.35 x (1 + d)`, rounded to 6 decimals, where `d = (FNV-1a-64("<type>/<zone>") mod 11 - 5) /
/// 100` is a deterministic per-zone variation of -5% to +5%, so zones differ and no zone is always cheapest.
/// The embedded data file's header states the same formula.
pub fn synthetic_spot_price(instance_type: &str, zone: &str, on_demand_price: f64) -> f64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in instance_type
        .bytes()
        .chain(std::iter::once(b'/'))
        .chain(zone.bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let steps = (hash % SPOT_ZONE_VARIATION_STEPS) as f64 - ((SPOT_ZONE_VARIATION_STEPS - 1) / 2) as f64;
    let price = on_demand_price * SPOT_PRICE_FRACTION * (1.0 + steps / 100.0);
    (price * 1e6).round() / 1e6
}

/// The embedded AWS catalog for `region` (one of [`AWS_CATALOG_REGIONS`]) under `settings`: every type the
/// region offers in some zone, in the data's order (family, then size).
pub fn aws_catalog(region: &str, settings: &AwsCapacitySettings) -> Result<CatalogFile, AwsCatalogError> {
    catalog_of(aws_catalog_data()?, region, settings)
}

/// [`aws_catalog`] from facts parsed for this call alone: for a process that builds its catalog once (the
/// controller with `--cloud-provider kwok`), since the shared parse is kept for the life of the process (5.5 MiB
/// of facts nothing reads again).
pub fn aws_catalog_once(
    region: &str,
    settings: &AwsCapacitySettings,
) -> Result<CatalogFile, AwsCatalogError> {
    catalog_of(&AwsCatalogData::parse(AWS_CATALOG_JSON)?, region, settings)
}

fn catalog_of(
    data: &AwsCatalogData,
    region: &str,
    settings: &AwsCapacitySettings,
) -> Result<CatalogFile, AwsCatalogError> {
    let Some(region_data) = data.regions.get(region) else {
        return Err(AwsCatalogError::UnknownRegion {
            region: region.to_string(),
            known: data.regions.keys().cloned().collect::<Vec<_>>().join(", "),
        });
    };
    let settings = settings.resolve()?;
    let instance_types = data
        .instance_types
        .iter()
        .filter(|t| t.zones.get(region).is_some_and(|letters| !letters.is_empty()))
        .map(|t| aws_instance_type(t, region, region_data, &settings))
        .collect();
    Ok(CatalogFile {
        well_known_labels: aws_well_known_labels(),
        instance_types,
        node_pool_types: Default::default(),
    })
}

/// One AWS instance type of `region` as a catalog entry.
pub fn aws_instance_type(
    t: &AwsInstanceTypeData,
    region: &str,
    region_data: &AwsRegionData,
    settings: &ResolvedCapacitySettings,
) -> CatalogInstanceType {
    let zones = t.zones_in(region_data, region);
    let family = settings.ami_family;
    let mut requirements = Vec::with_capacity(AWS_INSTANCE_LABELS.len() + 12);
    requirements.push(CatalogRequirement::is_in(LABEL_INSTANCE_TYPE, [t.name.as_str()]));
    requirements.push(CatalogRequirement::is_in(LABEL_ARCH, [t.arch.as_str()]));
    requirements.push(CatalogRequirement::is_in(
        LABEL_OS,
        operating_systems(family, &t.arch),
    ));
    requirements.push(CatalogRequirement::is_in(
        LABEL_ZONE,
        zones.iter().map(|z| z.name.as_str()),
    ));
    requirements.push(CatalogRequirement::is_in(LABEL_REGION, [region]));
    requirements.push(match family.windows_build() {
        Some(build) => CatalogRequirement::is_in(LABEL_WINDOWS_BUILD, [build]),
        None => CatalogRequirement::does_not_exist(LABEL_WINDOWS_BUILD),
    });
    requirements.push(CatalogRequirement::is_in(
        LABEL_CAPACITY_TYPE,
        t.capacity_types.iter().map(String::as_str),
    ));
    for key in AWS_INSTANCE_LABELS {
        requirements.push(match t.label(key) {
            Some(value) => CatalogRequirement::is_in(key, [value]),
            None => CatalogRequirement::does_not_exist(key),
        });
    }
    // Labels the data may carry beyond upstream's list still constrain the type.
    for (key, value) in &t.labels {
        let known = [LABEL_INSTANCE_TYPE, LABEL_ARCH, LABEL_OS].contains(&key.as_str())
            || AWS_INSTANCE_LABELS.contains(&key.as_str());
        if !known {
            requirements.push(CatalogRequirement::is_in(key, [value.as_str()]));
        }
    }
    requirements.push(CatalogRequirement::is_in(
        LABEL_INSTANCE_TENANCY,
        ["default", "dedicated"],
    ));
    if !zones.is_empty() {
        requirements.push(CatalogRequirement::is_in(
            LABEL_ZONE_ID,
            zones.iter().map(|z| z.zone_id.as_str()),
        ));
    }
    requirements.push(CatalogRequirement::does_not_exist(LABEL_CAPACITY_RESERVATION_ID));
    requirements.push(CatalogRequirement::does_not_exist(
        LABEL_CAPACITY_RESERVATION_TYPE,
    ));

    let mut offerings = Vec::new();
    if let Some(on_demand) = t.on_demand_price {
        offerings.reserve(zones.len() * t.capacity_types.len());
        for zone in &zones {
            for capacity_type in &t.capacity_types {
                let price = match capacity_type.as_str() {
                    "spot" => synthetic_spot_price(&t.name, &zone.name, on_demand),
                    _ => on_demand,
                };
                offerings.push(CatalogOffering {
                    zone: zone.name.clone(),
                    capacity_type: capacity_type.clone(),
                    price,
                    available: true,
                    reservation_id: None,
                    reservation_capacity: None,
                });
            }
        }
    }

    let computed = capacity_and_overhead(&t.facts(), settings);
    CatalogInstanceType {
        name: t.name.clone(),
        requirements: Arc::new(requirements),
        capacity: computed.capacity,
        overhead: computed.overhead,
        offerings,
    }
}

/// kubernetes.io/os values: linux, or windows on amd64 for the Windows families (none on arm64, so such
/// types match nothing).
fn operating_systems(family: AmiFamily, arch: &str) -> Vec<&'static str> {
    match family.is_windows() {
        false => vec!["linux"],
        true if arch == "amd64" => vec!["windows"],
        true => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use karpenter_api::quantity::parse_milli;
    use serde::Deserialize;

    use super::*;
    use crate::capacity::AwsCapacitySettings;
    use karpenter_core::catalog::RequirementOperator;

    const GOLDEN_JSON: &str = include_str!("../data/aws-allocatable-golden.json");

    #[derive(Deserialize)]
    struct Golden {
        allocatable: BTreeMap<String, BTreeMap<String, String>>,
    }

    fn us_east_1() -> CatalogFile {
        aws_catalog("us-east-1", &AwsCapacitySettings::default()).unwrap()
    }

    #[test]
    fn a_catalog_built_once_is_the_shared_one() {
        let settings = AwsCapacitySettings::default();
        for region in AWS_CATALOG_REGIONS {
            assert_eq!(
                aws_catalog_once(region, &settings).unwrap(),
                aws_catalog(region, &settings).unwrap(),
                "{region}"
            );
        }
        assert!(aws_catalog_once("ap-south-1", &settings).is_err());
    }

    fn requirement<'a>(t: &'a CatalogInstanceType, key: &str) -> &'a CatalogRequirement {
        t.requirements
            .iter()
            .find(|r| r.key == key)
            .unwrap_or_else(|| panic!("{} has no {key}", t.name))
    }

    #[test]
    fn allocatable_matches_karpenter_docs_for_every_type() {
        let golden: Golden = serde_json::from_str(GOLDEN_JSON).unwrap();
        let data = aws_catalog_data().unwrap();
        let settings = AwsCapacitySettings::default().resolve().unwrap();
        let mut matched = 0;
        let mut newer_pod_eni = 0;
        let mut mismatches = Vec::new();
        for (name, expected) in &golden.allocatable {
            let t = data
                .instance_type(name)
                .unwrap_or_else(|| panic!("{name} is not in the embedded data"));
            let computed = capacity_and_overhead(&t.facts(), &settings);
            let allocatable = CatalogInstanceType {
                name: name.clone(),
                requirements: Default::default(),
                capacity: computed.capacity,
                overhead: computed.overhead,
                offerings: Vec::new(),
            }
            .allocatable();
            let mut ok = true;
            for (resource, text) in expected {
                let want = parse_milli(text).unwrap();
                let got = allocatable.get(resource).copied().unwrap_or(0);
                if want != got {
                    ok = false;
                    mismatches.push(format!("{name} {resource}: doc {text} = {want}, computed {got}"));
                }
            }
            for required in ["cpu", "memory", "ephemeral-storage", "pods"] {
                assert!(
                    expected.contains_key(required),
                    "{name}: golden value lacks {required}"
                );
            }
            // Every non-zero computed resource must be documented too (no invented capacity), with one known
            // exception: the doc was regenerated (2026-07-11) before the vpclimits table (2026-08-06) made 56
            // more types trunking-compatible, so it lacks their vpc.amazonaws.com/pod-eni.
            for (resource, amount) in &allocatable {
                if *amount != 0 && !expected.contains_key(resource) {
                    if resource == "vpc.amazonaws.com/pod-eni" {
                        newer_pod_eni += 1;
                    } else {
                        ok = false;
                        mismatches.push(format!("{name} {resource}: computed {amount}, not in the doc"));
                    }
                }
            }
            matched += usize::from(ok);
        }
        println!(
            "{matched} of {} documented instance types match the doc's allocatable in every documented resource \
             (cpu, memory, ephemeral-storage, pods and devices); {newer_pod_eni} also have pod-eni from the newer \
             vpclimits table",
            golden.allocatable.len()
        );
        assert_eq!(matched, golden.allocatable.len());
        assert!(
            golden.allocatable.len() >= 1363,
            "the golden file holds every documented type"
        );
        assert!(
            mismatches.is_empty(),
            "{} mismatches:\n{}",
            mismatches.len(),
            mismatches.join("\n")
        );
    }

    #[test]
    fn every_region_loads_and_offers_only_its_zones() {
        for region in AWS_CATALOG_REGIONS {
            let catalog = aws_catalog(region, &AwsCapacitySettings::default()).unwrap();
            assert!(
                catalog.instance_types.len() > 1000,
                "{region}: {}",
                catalog.instance_types.len()
            );
            for t in &catalog.instance_types {
                let zones = &requirement(t, LABEL_ZONE).values;
                assert!(!zones.is_empty(), "{} has no zone in {region}", t.name);
                assert!(zones.iter().all(|z| z.starts_with(region)));
                assert_eq!(requirement(t, LABEL_REGION).values, [region]);
                for offering in &t.offerings {
                    assert!(
                        zones.contains(&offering.zone),
                        "{} offers {} outside its zones",
                        t.name,
                        offering.zone
                    );
                }
            }
        }
        let err = aws_catalog("ap-south-1", &AwsCapacitySettings::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"unknown region "ap-south-1": the embedded AWS catalog covers eu-west-1, us-east-1, us-west-2"#
        );
    }

    #[test]
    fn offerings_cover_each_zone_and_capacity_type_at_us_east_1_prices() {
        let catalog = us_east_1();
        let m5 = catalog.instance_type("m5.large").unwrap();
        let zones = &requirement(m5, LABEL_ZONE).values;
        assert_eq!(m5.offerings.len(), zones.len() * 2);
        for offering in &m5.offerings {
            assert!(offering.available);
            assert_eq!(offering.reservation_id, None);
            if offering.capacity_type == "on-demand" {
                assert_eq!(offering.price, 0.096, "the us-east-1 on-demand price is a fact");
            }
        }
        for region in ["us-west-2", "eu-west-1"] {
            let catalog = aws_catalog(region, &AwsCapacitySettings::default()).unwrap();
            let m5 = catalog.instance_type("m5.large").unwrap();
            let on_demand: Vec<f64> = m5
                .offerings
                .iter()
                .filter(|o| o.capacity_type == "on-demand")
                .map(|o| o.price)
                .collect();
            assert!(
                !on_demand.is_empty() && on_demand.iter().all(|p| *p == 0.096),
                "{region} reuses us-east-1"
            );
        }
    }

    #[test]
    fn spot_prices_are_a_documented_fraction_of_on_demand() {
        let catalog = us_east_1();
        let mut spot_offerings = 0;
        for t in &catalog.instance_types {
            let Some(on_demand) = t
                .offerings
                .iter()
                .find(|o| o.capacity_type == "on-demand")
                .map(|o| o.price)
            else {
                continue;
            };
            for offering in t.offerings.iter().filter(|o| o.capacity_type == "spot") {
                spot_offerings += 1;
                // Within -5%..+5% of 35%, give or take the rounding to 6 decimals.
                let (low, high) = (on_demand * 0.35 * 0.95 - 5e-7, on_demand * 0.35 * 1.05 + 5e-7);
                assert!(
                    (low..=high).contains(&offering.price),
                    "{} in {}: spot {} is {} of on-demand {on_demand}",
                    t.name,
                    offering.zone,
                    offering.price,
                    offering.price / on_demand
                );
                assert_eq!(
                    offering.price,
                    synthetic_spot_price(&t.name, &offering.zone, on_demand)
                );
            }
        }
        assert!(spot_offerings > 5000, "{spot_offerings}");
        // The formula, pinned: a change must update the data file's header too.
        let base = 0.096 * 0.35;
        let price = synthetic_spot_price("m5.large", "us-east-1a", 0.096);
        let steps = ((price / base - 1.0) * 100.0).round();
        assert!((-5.0..=5.0).contains(&steps));
        assert!((price - (base * (1.0 + steps / 100.0) * 1e6).round() / 1e6).abs() < 1e-12);
    }

    #[test]
    fn spot_prices_differ_between_zones() {
        let catalog = us_east_1();
        let m5 = catalog.instance_type("m5.large").unwrap();
        let spot: Vec<f64> = m5
            .offerings
            .iter()
            .filter(|o| o.capacity_type == "spot")
            .map(|o| o.price)
            .collect();
        assert!(spot.len() >= 3);
        assert!(
            spot.iter().any(|p| *p != spot[0]),
            "zones should differ: {spot:?}"
        );
        // No zone is cheapest for every type.
        let mut cheapest: HashMap<String, usize> = HashMap::new();
        for t in &catalog.instance_types {
            if let Some(best) = t
                .offerings
                .iter()
                .filter(|o| o.capacity_type == "spot")
                .min_by(|a, b| a.price.total_cmp(&b.price))
            {
                *cheapest.entry(best.zone.clone()).or_default() += 1;
            }
        }
        assert!(cheapest.len() >= 3, "{cheapest:?}");
    }

    #[test]
    fn types_without_a_price_have_no_offerings() {
        let data = aws_catalog_data().unwrap();
        let unpriced: Vec<&str> = data
            .instance_types
            .iter()
            .filter(|t| t.on_demand_price.is_none() && t.zones.contains_key("us-east-1"))
            .map(|t| t.name.as_str())
            .collect();
        assert!(!unpriced.is_empty());
        let catalog = us_east_1();
        for name in unpriced {
            let t = catalog.instance_type(name).unwrap();
            assert!(t.offerings.is_empty(), "{name}");
            assert!(
                !requirement(t, LABEL_ZONE).values.is_empty(),
                "{name} still matches zone selectors"
            );
        }
    }

    #[test]
    fn requirements_model_missing_labels_as_does_not_exist() {
        let catalog = us_east_1();
        let m5 = catalog.instance_type("m5.large").unwrap();
        let gpu = requirement(m5, "karpenter.k8s.aws/instance-gpu-name");
        assert_eq!(gpu.operator, RequirementOperator::DoesNotExist);
        assert!(gpu.values.is_empty());
        assert_eq!(
            requirement(m5, "karpenter.k8s.aws/instance-family").values,
            ["m5"]
        );
        assert_eq!(requirement(m5, "karpenter.k8s.aws/instance-cpu").values, ["2"]);
        assert_eq!(requirement(m5, LABEL_OS).values, ["linux"]);
        assert_eq!(requirement(m5, LABEL_CAPACITY_TYPE).values, ["on-demand", "spot"]);
        assert_eq!(
            requirement(m5, LABEL_WINDOWS_BUILD).operator,
            RequirementOperator::DoesNotExist
        );
        assert_eq!(
            requirement(m5, LABEL_INSTANCE_TENANCY).values,
            ["default", "dedicated"]
        );
        assert_eq!(
            requirement(m5, LABEL_CAPACITY_RESERVATION_ID).operator,
            RequirementOperator::DoesNotExist
        );
        assert_eq!(
            requirement(m5, LABEL_ZONE_ID).values.len(),
            requirement(m5, LABEL_ZONE).values.len()
        );

        let p5 = catalog.instance_type("p5.48xlarge").unwrap();
        assert_eq!(
            requirement(p5, "karpenter.k8s.aws/instance-gpu-name").values,
            ["h100"]
        );
        assert_eq!(
            requirement(p5, "karpenter.k8s.aws/instance-gpu-count").values,
            ["8"]
        );
        assert_eq!(p5.capacity["nvidia.com/gpu"], 8000);
        assert_eq!(p5.capacity["vpc.amazonaws.com/efa"], 32_000);

        let inf2 = catalog.instance_type("inf2.xlarge").unwrap();
        assert_eq!(
            requirement(inf2, "karpenter.k8s.aws/instance-accelerator-name").values,
            ["inferentia2"]
        );
        assert_eq!(inf2.capacity["aws.amazon.com/neuron"], 1000);

        let metal = catalog.instance_type("m5.metal").unwrap();
        assert_eq!(
            requirement(metal, "karpenter.k8s.aws/instance-hypervisor").values,
            [""]
        );

        let graviton = catalog.instance_type("c6g.large").unwrap();
        assert_eq!(requirement(graviton, LABEL_ARCH).values, ["arm64"]);

        let every_type_has_every_label = catalog.instance_types.iter().all(|t| {
            AWS_INSTANCE_LABELS
                .iter()
                .all(|key| t.requirements.iter().filter(|r| r.key == *key).count() == 1)
        });
        assert!(every_type_has_every_label);
    }

    #[test]
    fn windows_families_select_windows_on_amd64_only() {
        let settings = AwsCapacitySettings {
            ami_family: AmiFamily::Windows2022,
            ..Default::default()
        };
        let catalog = aws_catalog("us-east-1", &settings).unwrap();
        let m5 = catalog.instance_type("m5.large").unwrap();
        assert_eq!(requirement(m5, LABEL_OS).values, ["windows"]);
        assert_eq!(requirement(m5, LABEL_WINDOWS_BUILD).values, ["10.0.20348"]);
        assert_eq!(m5.capacity["pods"], 110_000);
        assert_eq!(m5.capacity["vpc.amazonaws.com/PrivateIPv4Address"], 9000);
        let graviton = catalog.instance_type("c6g.large").unwrap();
        assert!(requirement(graviton, LABEL_OS).values.is_empty());
    }

    #[test]
    fn settings_change_capacity_and_bad_settings_fail() {
        let settings = AwsCapacitySettings {
            max_pods: Some(110),
            ..Default::default()
        };
        let catalog = aws_catalog("us-east-1", &settings).unwrap();
        assert_eq!(
            catalog.instance_type("m5.large").unwrap().capacity["pods"],
            110_000
        );
        let bad = AwsCapacitySettings {
            kube_reserved: std::collections::BTreeMap::from([("cpu".into(), "lots".into())]),
            ..Default::default()
        };
        assert!(
            aws_catalog("us-east-1", &bad)
                .unwrap_err()
                .to_string()
                .starts_with("settings.kubeReserved.cpu")
        );
    }

    #[test]
    fn aws_catalog_round_trips_through_the_catalog_file_format() {
        let catalog = us_east_1();
        let text = serde_json::to_string(&catalog).unwrap();
        let again = CatalogFile::from_json_str(&text).unwrap();
        assert_eq!(again, catalog);
        assert!(
            catalog
                .well_known_labels
                .iter()
                .any(|l| l == "karpenter.k8s.aws/instance-family")
        );
    }

    #[test]
    fn embedded_catalog_is_the_same_every_time_it_is_built() {
        let data = aws_catalog_data().unwrap();
        assert!(data.instance_types.len() > 1000);
        assert_eq!(us_east_1(), us_east_1());
    }

    #[test]
    fn embedded_data_matches_the_shared_reference_when_present() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/aws/instance-types.json"
        );
        let Ok(text) = std::fs::read_to_string(path) else {
            println!("note: {path} is absent; skipping the cross-check against the shared data");
            return;
        };
        let shared: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        let data = aws_catalog_data().unwrap();
        assert_eq!(shared.len(), data.instance_types.len());
        for entry in &shared {
            let name = entry["name"].as_str().unwrap();
            let t = data.instance_type(name).unwrap();
            let labels: BTreeMap<String, String> = serde_json::from_value(entry["labels"].clone()).unwrap();
            assert_eq!(
                t.labels, labels,
                "{name}: the restored labels map equals the shared one"
            );
            assert_eq!(entry["max_enis"].as_i64(), Some(t.max_enis), "{name}");
        }
    }
}
