//! Choosing what a launch buys: the catalog compiled once into core's requirement form, and the offerings a
//! NodeClaim's requirements and requests allow, cheapest first.
//!
//! An offering is compatible when its instance type's requirements, narrowed to the offering's zone and capacity
//! type, intersect the claim's `spec.requirements` (core's algebra: In/NotIn/Exists/DoesNotExist/Gt/Lt/Gte/Lte
//! over any key; a key the instance type does not declare constrains nothing, as in upstream's launch path), and
//! when the type's allocatable covers the claim's `spec.resources.requests`.

use std::{collections::BTreeMap, sync::Arc};

use karpenter_api::{labels, nodeclaim::NodeClaim};
use karpenter_core::{
    catalog::{CatalogFile, CatalogInstanceType, CatalogOffering, Quantities},
    instance_type,
    requirements::{LabelInterner, Requirement, Requirements, Symbol},
    resources::ResourceTable,
};

/// The catalog with each instance type's requirements compiled.
pub(super) struct CompiledCatalog {
    /// The catalog as the cloud was given it, shared with the cloud rather than copied per type (the us-east-1
    /// catalog is megabytes).
    source: Arc<CatalogFile>,
    pub interner: LabelInterner,
    pub types: Vec<CompiledType>,
    zone_key: Symbol,
    capacity_type_key: Symbol,
}

pub(super) struct CompiledType {
    /// Index into the source catalog's instance types.
    source_index: usize,
    pub requirements: Requirements,
    pub allocatable: Quantities,
}

/// One offering a claim could launch, by index into the catalog.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate {
    pub type_index: usize,
    pub offering_index: usize,
    pub price: f64,
}

impl CompiledCatalog {
    /// Compiles every instance type; one whose requirements do not parse is left out with a warning.
    pub fn new(catalog: Arc<CatalogFile>) -> Self {
        let mut interner = LabelInterner::new();
        let mut table = ResourceTable::default();
        let mut types = Vec::with_capacity(catalog.instance_types.len());
        for (source_index, it) in catalog.instance_types.iter().enumerate() {
            match instance_type::from_catalog(it, &mut interner, &mut table) {
                Ok(compiled) => types.push(CompiledType {
                    source_index,
                    requirements: compiled.requirements,
                    allocatable: it.allocatable(),
                }),
                Err(e) => tracing::warn!("sim cloud: instance type {} left out: {e}", it.name),
            }
        }
        let zone_key = interner.intern_key(labels::ZONE_LABEL);
        let capacity_type_key = interner.intern_key(labels::CAPACITY_TYPE_LABEL);
        Self {
            source: catalog,
            interner,
            types,
            zone_key,
            capacity_type_key,
        }
    }

    /// The claim's requirements in compiled form.
    pub fn claim_requirements(&mut self, claim: &NodeClaim) -> Result<Requirements, String> {
        Requirements::from_api(&claim.spec.requirements, &mut self.interner).map_err(|e| e.to_string())
    }

    /// Every offering `requirements` and `requests` allow, cheapest first (ties by type name, zone, capacity
    /// type, so the choice is stable), whether available or not.
    pub fn compatible(&mut self, requirements: &Requirements, requests: &Quantities) -> Vec<Candidate> {
        let mut out = Vec::new();
        for (type_index, ty) in self.types.iter().enumerate() {
            if !fits(requests, &ty.allocatable) {
                continue;
            }
            for (offering_index, o) in self.source.instance_types[ty.source_index]
                .offerings
                .iter()
                .enumerate()
            {
                let mut offer = ty.requirements.clone();
                offer.add(Requirement::in_values(
                    self.zone_key,
                    [self.interner.intern(&o.zone)],
                ));
                offer.add(Requirement::in_values(
                    self.capacity_type_key,
                    [self.interner.intern(&o.capacity_type)],
                ));
                if offer.intersects(requirements).is_ok() {
                    out.push(Candidate {
                        type_index,
                        offering_index,
                        price: o.price,
                    });
                }
            }
        }
        out.sort_by(|a, b| {
            a.price.total_cmp(&b.price).then_with(|| {
                let (oa, ob) = (self.offering(a), self.offering(b));
                self.source_type(a.type_index)
                    .name
                    .cmp(&self.source_type(b.type_index).name)
                    .then_with(|| oa.zone.cmp(&ob.zone))
                    .then_with(|| oa.capacity_type.cmp(&ob.capacity_type))
            })
        });
        out
    }

    pub fn offering(&self, c: &Candidate) -> &CatalogOffering {
        &self.source_type(c.type_index).offerings[c.offering_index]
    }

    /// The catalog entry of compiled type `type_index`.
    pub fn source_type(&self, type_index: usize) -> &CatalogInstanceType {
        &self.source.instance_types[self.types[type_index].source_index]
    }

    /// The labels a node of this type carries from the type itself: every single-valued requirement.
    pub fn type_labels(&self, type_index: usize) -> BTreeMap<String, String> {
        self.types[type_index]
            .requirements
            .labels()
            .map(|(k, v)| {
                (
                    self.interner.resolve(k).to_string(),
                    self.interner.resolve(v).to_string(),
                )
            })
            .collect()
    }
}

/// Whether every requested amount fits in `allocatable` (a resource the type lacks has none).
pub(super) fn fits(requests: &Quantities, allocatable: &Quantities) -> bool {
    requests
        .iter()
        .all(|(resource, amount)| *amount <= allocatable.get(resource).copied().unwrap_or(0))
}
