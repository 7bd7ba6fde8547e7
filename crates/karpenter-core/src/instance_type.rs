//! Instance types and offerings in the compact form decisions use: interned requirements, resource vectors and
//! offerings with prices. Built once from a catalog (a file, the embedded AWS catalog or a cloud provider).

use crate::{
    catalog::{CatalogFile, CatalogInstanceType, Quantities},
    requirements::{LabelInterner, Requirement, RequirementError, Requirements, Symbol},
    resources::{ResourceError, ResourceTable, Resources},
};
use karpenter_api::labels;

/// One way to buy an instance type: a zone, a capacity type and a price.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    pub zone: Symbol,
    pub capacity_type: Symbol,
    /// Price per hour.
    pub price: f64,
    pub available: bool,
    /// The capacity reservation a reserved offering draws on.
    pub reservation_id: Option<Symbol>,
    /// How many more instances the reservation can launch (already net of running ones).
    pub reservation_capacity: Option<i64>,
}

/// An instance type with everything scheduling needs.
#[derive(Debug, Clone)]
pub struct InstanceType {
    pub name: String,
    pub name_symbol: Symbol,
    /// What a node of this type carries, including zone and capacity type over its offerings.
    pub requirements: Requirements,
    pub capacity: Resources,
    /// kube-reserved + system-reserved + eviction threshold.
    pub overhead: Resources,
    /// capacity - overhead (hugepages come out of memory), never negative.
    pub allocatable: Resources,
    /// Offerings sorted by price, cheapest first.
    pub offerings: Vec<Offering>,
    /// Which NodeOverlay changes these figures carry (none for a type as the provider describes it).
    pub overlays_applied: OverlaysApplied,
}

/// What NodeOverlays changed on an instance type: a NodeClaim that may launch it is annotated
/// `karpenter.sh/price-overlay-applied` / `karpenter.sh/capacity-overlay-applied` (upstream's applied markers;
/// upstream's AWS provider reads the first to switch CreateFleet to its prioritized allocation strategies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OverlaysApplied {
    /// An overlay set the price of at least one of its offerings.
    pub price: bool,
    /// An overlay set at least one of its capacity resources.
    pub capacity: bool,
}

impl InstanceType {
    /// The cheapest available offering the requirements allow, if any.
    pub fn cheapest_offering(
        &self,
        requirements: &Requirements,
        zone_key: Symbol,
        ct_key: Symbol,
    ) -> Option<&Offering> {
        self.offerings.iter().find(|o| {
            o.available
                && requirements.allows(zone_key, o.zone)
                && requirements.allows(ct_key, o.capacity_type)
        })
    }

    /// The most expensive available offering the requirements allow: what a launch may cost at worst.
    pub fn worst_offering(
        &self,
        requirements: &Requirements,
        zone_key: Symbol,
        ct_key: Symbol,
    ) -> Option<&Offering> {
        self.offerings.iter().rev().find(|o| {
            o.available
                && requirements.allows(zone_key, o.zone)
                && requirements.allows(ct_key, o.capacity_type)
        })
    }
}

/// Why a catalog could not be turned into instance types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceTypeError {
    #[error("instance type {name}: requirement {index}: {source}")]
    Requirement {
        name: String,
        index: usize,
        source: RequirementError,
    },
    #[error("instance type {name}: {source}")]
    Resource { name: String, source: ResourceError },
}

fn quantities(table: &mut ResourceTable, q: &Quantities) -> Resources {
    let mut r = Resources::default();
    for (name, milli) in q {
        let id = table.intern(name);
        r.set(id, r.get(id) + milli);
    }
    r
}

/// Converts one catalog entry, adding zone and capacity-type requirements from its offerings when the entry does
/// not state them, as providers build them.
pub fn from_catalog(
    it: &CatalogInstanceType,
    interner: &mut LabelInterner,
    table: &mut ResourceTable,
) -> Result<InstanceType, InstanceTypeError> {
    let mut requirements = Requirements::new();
    for (index, r) in it.requirements.iter().enumerate() {
        let parsed =
            Requirement::parse(&r.key, r.operator.as_str(), &r.values, None, interner).map_err(|source| {
                InstanceTypeError::Requirement {
                    name: it.name.clone(),
                    index,
                    source,
                }
            })?;
        requirements.add(parsed);
    }
    let zone_key = interner.intern_key(labels::ZONE_LABEL);
    let ct_key = interner.intern_key(labels::CAPACITY_TYPE_LABEL);
    let it_key = interner.intern_key(labels::INSTANCE_TYPE_LABEL);
    let name_symbol = interner.intern(&it.name);
    if !requirements.has(it_key) {
        requirements.add(Requirement::in_values(it_key, [name_symbol]));
    }
    let mut offerings: Vec<Offering> = it
        .offerings
        .iter()
        .map(|o| Offering {
            zone: interner.intern(&o.zone),
            capacity_type: interner.intern(&o.capacity_type),
            price: o.price,
            available: o.available,
            reservation_id: o.reservation_id.as_deref().map(|r| interner.intern(r)),
            reservation_capacity: o.reservation_capacity,
        })
        .collect();
    offerings.sort_by(|a, b| a.price.total_cmp(&b.price));
    if !requirements.has(zone_key) {
        requirements.add(Requirement::in_values(zone_key, offerings.iter().map(|o| o.zone)));
    }
    if !requirements.has(ct_key) {
        requirements.add(Requirement::in_values(
            ct_key,
            offerings.iter().map(|o| o.capacity_type),
        ));
    }
    let capacity = quantities(table, &it.capacity);
    let overhead = quantities(table, &it.overhead.total());
    let allocatable = quantities(table, &it.allocatable());
    Ok(InstanceType {
        name: it.name.clone(),
        name_symbol,
        requirements,
        capacity,
        overhead,
        allocatable,
        offerings,
        overlays_applied: OverlaysApplied::default(),
    })
}

/// Converts a whole catalog.
pub fn from_catalog_file(
    file: &CatalogFile,
    interner: &mut LabelInterner,
    table: &mut ResourceTable,
) -> Result<Vec<InstanceType>, InstanceTypeError> {
    file.instance_types
        .iter()
        .map(|it| from_catalog(it, interner, table))
        .collect()
}
