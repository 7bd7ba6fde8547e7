//! The benchmark catalogs, regenerated from the formulas benchmarks.md states (never copied from upstream).
//!
//! - [`fake_catalog`]: upstream's `fake.InstanceTypes(400)` (§1.1). Type `fake-it-{k-1}` for k = 1..=400 has
//!   k vCPU, 2k GiB and a pod capacity of 10·k (`(i+1)*10` in `pkg/cloudprovider/fake/instancetype.go`); five
//!   offerings at one price (spot in test-zone-1/2, on-demand in test-zone-1/2/3), priced
//!   `0.1 per vCPU + 0.1 per 10^9 bytes` = 0.3147483648·k; kube-reserved 100m CPU and 10Mi memory;
//!   requirements arch amd64, OS {linux, windows, darwin}, `integer` = vCPUs, `size` = small, or
//!   `size` = large with `special` = optional when CPU > 4 and memory > 8Gi (otherwise `special`
//!   DoesNotExist).
//! - [`kwok_catalog`]: the KWOK catalog (§1.3, `kwok/tools/gen_instance_types.go`): CPU {1, 2, ..., 256} x
//!   GiB per vCPU {2 (c), 4 (s), 8 (m)} x {linux, windows} x {amd64, arm64} = 144 types named
//!   `{family}-{cpu}x-{arch}-{os}`, 4 zones x {spot, on-demand}, pods min(16·vCPU, 1024), 20Gi ephemeral
//!   storage, on-demand price `0.025 per vCPU + 0.001 per 10^9 bytes`, spot 0.7x; kube-reserved 100m / 10Mi.
//!   The KWOK NodePool narrows it to linux, on-demand and instance-size < 32: 30 types.

use karpenter_core::catalog::{
    CatalogFile, CatalogInstanceType, CatalogOffering, CatalogOverhead, CatalogRequirement,
};

pub const FAKE_INSTANCE_TYPES: u32 = 400;

/// Bytes per GiB and per MiB.
pub const GIB: i64 = 1 << 30;
pub const MIB: i64 = 1 << 20;

/// The kube-reserved overhead of every benchmark type: 100m CPU and 10Mi memory (in milli-units).
pub const OVERHEAD_CPU_MILLI: i64 = 100;
pub const OVERHEAD_MEMORY_MILLI: i64 = 10 * MIB * 1000;

pub const LABEL_SIZE: &str = "size";
pub const LABEL_SPECIAL: &str = "special";
pub const LABEL_INTEGER: &str = "integer";

pub const KWOK_SIZE_LABEL: &str = "karpenter.kwok.sh/instance-size";
pub const KWOK_FAMILY_LABEL: &str = "karpenter.kwok.sh/instance-family";
pub const KWOK_CPU_LABEL: &str = "karpenter.kwok.sh/instance-cpu";
pub const KWOK_MEMORY_LABEL: &str = "karpenter.kwok.sh/instance-memory";
pub const KWOK_ZONES: [&str; 4] = ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"];
/// On-demand price per vCPU, and per 10^9 bytes of memory.
pub const KWOK_PRICE_PER_VCPU: f64 = 0.025;
pub const KWOK_PRICE_PER_GB: f64 = 0.001;

fn overhead() -> CatalogOverhead {
    CatalogOverhead {
        kube_reserved: [
            ("cpu".to_string(), OVERHEAD_CPU_MILLI),
            ("memory".to_string(), OVERHEAD_MEMORY_MILLI),
        ]
        .into_iter()
        .collect(),
        ..CatalogOverhead::default()
    }
}

fn offering(zone: &str, capacity_type: &str, price: f64) -> CatalogOffering {
    CatalogOffering {
        zone: zone.to_string(),
        capacity_type: capacity_type.to_string(),
        price,
        available: true,
        reservation_id: None,
        reservation_capacity: None,
    }
}

/// `fake.InstanceTypes(total)`.
pub fn fake_catalog(total: u32) -> CatalogFile {
    let instance_types = (1..=i64::from(total))
        .map(|k| {
            let name = format!("fake-it-{}", k - 1);
            let memory_bytes = 2 * k * GIB;
            let price = 0.1 * k as f64 + 0.1 * memory_bytes as f64 / 1e9;
            let large = k > 4 && memory_bytes > 8 * GIB;
            let mut requirements = vec![
                CatalogRequirement::is_in("node.kubernetes.io/instance-type", [name.as_str()]),
                CatalogRequirement::is_in("kubernetes.io/arch", ["amd64"]),
                CatalogRequirement::is_in("kubernetes.io/os", ["linux", "windows", "darwin"]),
                CatalogRequirement::is_in(
                    "topology.kubernetes.io/zone",
                    ["test-zone-1", "test-zone-2", "test-zone-3"],
                ),
                CatalogRequirement::is_in("karpenter.sh/capacity-type", ["spot", "on-demand"]),
                CatalogRequirement::is_in(LABEL_INTEGER, [k.to_string()]),
            ];
            if large {
                requirements.push(CatalogRequirement::is_in(LABEL_SIZE, ["large"]));
                requirements.push(CatalogRequirement::is_in(LABEL_SPECIAL, ["optional"]));
            } else {
                requirements.push(CatalogRequirement::is_in(LABEL_SIZE, ["small"]));
                requirements.push(CatalogRequirement::does_not_exist(LABEL_SPECIAL));
            }
            CatalogInstanceType {
                name,
                requirements: requirements.into(),
                capacity: [
                    ("cpu".to_string(), k * 1000),
                    ("memory".to_string(), memory_bytes * 1000),
                    ("pods".to_string(), 10 * k * 1000),
                ]
                .into_iter()
                .collect(),
                overhead: overhead(),
                offerings: vec![
                    offering("test-zone-1", "spot", price),
                    offering("test-zone-2", "spot", price),
                    offering("test-zone-1", "on-demand", price),
                    offering("test-zone-2", "on-demand", price),
                    offering("test-zone-3", "on-demand", price),
                ],
            }
        })
        .collect();
    CatalogFile {
        well_known_labels: vec![LABEL_SIZE.into(), LABEL_SPECIAL.into(), LABEL_INTEGER.into()],
        instance_types,
        ..CatalogFile::default()
    }
}

/// The full 144-type KWOK catalog.
pub fn kwok_catalog() -> CatalogFile {
    let mut instance_types = Vec::with_capacity(144);
    for cpu in [1i64, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256] {
        for (family, gib_per_vcpu) in [("c", 2i64), ("s", 4), ("m", 8)] {
            for os in ["linux", "windows"] {
                for arch in ["amd64", "arm64"] {
                    let name = format!("{family}-{cpu}x-{arch}-{os}");
                    let memory_gib = cpu * gib_per_vcpu;
                    let pods = (cpu * 16).clamp(0, 1024);
                    let price = kwok_on_demand_price(cpu, memory_gib);
                    let offerings = KWOK_ZONES
                        .iter()
                        .flat_map(|z| [offering(z, "spot", price * 0.7), offering(z, "on-demand", price)])
                        .collect();
                    instance_types.push(CatalogInstanceType {
                        requirements: vec![
                            CatalogRequirement::is_in("node.kubernetes.io/instance-type", [name.as_str()]),
                            CatalogRequirement::is_in("kubernetes.io/arch", [arch]),
                            CatalogRequirement::is_in("kubernetes.io/os", [os]),
                            CatalogRequirement::is_in("topology.kubernetes.io/zone", KWOK_ZONES),
                            CatalogRequirement::is_in("karpenter.sh/capacity-type", ["spot", "on-demand"]),
                            CatalogRequirement::is_in(KWOK_SIZE_LABEL, [cpu.to_string()]),
                            CatalogRequirement::is_in(KWOK_FAMILY_LABEL, [family]),
                            CatalogRequirement::is_in(KWOK_CPU_LABEL, [cpu.to_string()]),
                            CatalogRequirement::is_in(KWOK_MEMORY_LABEL, [(memory_gib * 1024).to_string()]),
                        ]
                        .into(),
                        name,
                        capacity: [
                            ("cpu".to_string(), cpu * 1000),
                            ("memory".to_string(), memory_gib * GIB * 1000),
                            ("pods".to_string(), pods * 1000),
                            ("ephemeral-storage".to_string(), 20 * GIB * 1000),
                        ]
                        .into_iter()
                        .collect(),
                        overhead: overhead(),
                        offerings,
                    });
                }
            }
        }
    }
    CatalogFile {
        well_known_labels: [
            KWOK_SIZE_LABEL,
            KWOK_FAMILY_LABEL,
            KWOK_CPU_LABEL,
            KWOK_MEMORY_LABEL,
        ]
        .map(String::from)
        .to_vec(),
        instance_types,
        ..CatalogFile::default()
    }
}

/// `priceFromResources` of the KWOK generator.
pub fn kwok_on_demand_price(cpu: i64, memory_gib: i64) -> f64 {
    KWOK_PRICE_PER_VCPU * cpu as f64 + KWOK_PRICE_PER_GB * (memory_gib * GIB) as f64 / 1e9
}
