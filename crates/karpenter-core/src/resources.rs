//! Resource vectors: requests, capacity, allocatable and overhead as integers in fixed slots.
//!
//! Bin-packing adds, subtracts and compares resources for every pod against every candidate node, so a
//! Kubernetes `ResourceList` (a map of strings to decimal quantities) is converted once, at the edge, into a
//! [`Resources`] vector of `i64` milli-units: millicores for cpu, milli-bytes for memory and storage,
//! thousandths of a pod for `pods`. cpu, memory, ephemeral-storage and pods always sit in the first four slots;
//! any other name (`nvidia.com/gpu`, `aws.amazon.com/neuron`, `vpc.amazonaws.com/efa`, `hugepages-2Mi`, ...) is
//! interned by a [`ResourceTable`] into a further slot. A missing resource and a zero one are the same thing.
//!
//! [`crate::snapshot::pod_requests`] computes what a pod asks for exactly as Kubernetes does (`k8s.io/component-helpers`
//! `resource.PodRequests`): sidecars, init containers, pod overhead and pod-level resources.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_api::quantity::{QuantityError, format_milli, parse_milli};

/// The slots every vector has.
const FIXED: usize = 4;
const FIXED_NAMES: [&str; FIXED] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// One milli-unit of "pods" is a thousandth of a pod; a pod counts 1000.
pub(crate) const ONE_POD: i64 = 1000;

/// A resource name interned by a [`ResourceTable`]: an index into every [`Resources`] vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceId(u32);

impl ResourceId {
    pub const CPU: Self = Self(0);
    pub const MEMORY: Self = Self(1);
    pub const EPHEMERAL_STORAGE: Self = Self(2);
    pub const PODS: Self = Self(3);

    /// The slot index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Maps resource names to slots. One table serves a whole snapshot; extended resources get slots in the order
/// they are first seen.
#[derive(Clone, Debug)]
pub struct ResourceTable {
    names: Vec<Box<str>>,
    index: HashMap<Box<str>, ResourceId>,
}

impl Default for ResourceTable {
    fn default() -> Self {
        Self::new()
    }
}

impl ResourceTable {
    /// A table holding the four fixed resources.
    pub fn new() -> Self {
        let mut table = Self {
            names: Vec::new(),
            index: HashMap::new(),
        };
        for name in FIXED_NAMES {
            table.intern(name);
        }
        table
    }

    /// The slot of `name`, allocating one for a new extended resource.
    pub fn intern(&mut self, name: &str) -> ResourceId {
        if let Some(&id) = self.index.get(name) {
            return id;
        }
        // Resource names come from a cluster's objects; four billion distinct ones cannot fit in memory.
        let id = ResourceId(u32::try_from(self.names.len()).unwrap_or(u32::MAX));
        self.names.push(name.into());
        self.index.insert(name.into(), id);
        id
    }

    /// The slot of a name seen before.
    pub fn get(&self, name: &str) -> Option<ResourceId> {
        self.index.get(name).copied()
    }

    /// The name of a slot; `"<unknown>"` for a slot from another table.
    pub fn name(&self, id: ResourceId) -> &str {
        self.names.get(id.index()).map_or("<unknown>", |n| n)
    }

    /// How many resources have slots (at least the four fixed ones).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Always false: the fixed resources are always present.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn ids(&self) -> impl Iterator<Item = ResourceId> {
        (0..self.names.len()).map(|i| ResourceId(i as u32))
    }
}

/// Why a resource list could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("resource {resource:?}: {error}")]
    InvalidQuantity { resource: String, error: QuantityError },
    /// Where in a pod the bad quantity is (`container "app"`, `spec.overhead`).
    #[error("{place}: {error}")]
    At {
        place: String,
        error: Box<ResourceError>,
    },
}

impl ResourceError {
    pub(crate) fn at(self, place: impl FnOnce() -> String) -> Self {
        Self::At {
            place: place(),
            error: Box::new(self),
        }
    }
}

/// A vector of resource amounts in milli-units, indexed by [`ResourceId`]. Amounts may be negative (what is
/// left after subtracting more than there was). Arithmetic saturates at the `i64` limits instead of
/// overflowing; no real quantity comes near them.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    fixed: [i64; FIXED],
    /// Extended slots `FIXED..`, with no trailing zeros (so equal vectors are equal structs).
    extended: Vec<i64>,
}

impl Resources {
    /// All zero.
    pub fn zero() -> Self {
        Self::default()
    }

    /// The same vector with `id` set to `milli`.
    pub fn with(mut self, id: ResourceId, milli: i64) -> Self {
        self.set(id, milli);
        self
    }

    /// The amount of `id`, in milli-units (0 when absent).
    #[inline]
    pub fn get(&self, id: ResourceId) -> i64 {
        let i = id.index();
        if i < FIXED {
            self.fixed[i]
        } else {
            self.extended.get(i - FIXED).copied().unwrap_or(0)
        }
    }

    pub fn set(&mut self, id: ResourceId, milli: i64) {
        let i = id.index();
        if i < FIXED {
            self.fixed[i] = milli;
            return;
        }
        let e = i - FIXED;
        if e >= self.extended.len() {
            if milli == 0 {
                return;
            }
            self.extended.resize(e + 1, 0);
        }
        self.extended[e] = milli;
        self.trim();
    }

    pub fn cpu(&self) -> i64 {
        self.fixed[ResourceId::CPU.index()]
    }

    pub fn memory(&self) -> i64 {
        self.fixed[ResourceId::MEMORY.index()]
    }

    pub fn ephemeral_storage(&self) -> i64 {
        self.fixed[ResourceId::EPHEMERAL_STORAGE.index()]
    }

    /// Pods in milli-units (1000 per pod).
    pub fn pods(&self) -> i64 {
        self.fixed[ResourceId::PODS.index()]
    }

    fn trim(&mut self) {
        while self.extended.last() == Some(&0) {
            self.extended.pop();
        }
    }

    /// Applies `f` slot by slot over both vectors (missing slots are 0).
    #[inline]
    fn zip_assign(&mut self, other: &Self, mut f: impl FnMut(i64, i64) -> i64) {
        for (a, &b) in self.fixed.iter_mut().zip(&other.fixed) {
            *a = f(*a, b);
        }
        if self.extended.len() < other.extended.len() {
            self.extended.resize(other.extended.len(), 0);
        }
        for (i, a) in self.extended.iter_mut().enumerate() {
            *a = f(*a, other.extended.get(i).copied().unwrap_or(0));
        }
        self.trim();
    }

    /// `self += other`, saturating.
    pub fn add_assign(&mut self, other: &Self) {
        self.zip_assign(other, i64::saturating_add);
    }

    /// `self -= other`, saturating (the result may be negative).
    pub fn sub_assign(&mut self, other: &Self) {
        self.zip_assign(other, i64::saturating_sub);
    }

    /// `self + other`, saturating.
    pub fn saturating_add(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.add_assign(other);
        out
    }

    /// `self - other`, saturating (the result may be negative).
    pub fn saturating_sub(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.sub_assign(other);
        out
    }

    /// `self - other` with every slot floored at zero: what is left of a budget that cannot go below nothing.
    pub fn sub_floor_zero(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.zip_assign(other, |a, b| a.saturating_sub(b).max(0));
        out
    }

    /// `self + other`, or `None` if any slot would overflow.
    pub fn checked_add(&self, other: &Self) -> Option<Self> {
        let mut overflow = false;
        let mut out = self.clone();
        out.zip_assign(other, |a, b| {
            a.checked_add(b).unwrap_or_else(|| {
                // A flag rather than an early return keeps zip_assign one tight loop.
                overflow = true;
                0
            })
        });
        (!overflow).then_some(out)
    }

    /// The larger amount in each slot.
    pub fn max_assign(&mut self, other: &Self) {
        self.zip_assign(other, i64::max);
    }

    /// The smaller amount in each slot (a slot one side lacks counts as 0).
    pub fn min_assign(&mut self, other: &Self) {
        self.zip_assign(other, i64::min);
    }

    /// The larger amount in each slot.
    pub fn max(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.max_assign(other);
        out
    }

    /// Every slot `n` times (a DaemonSet's pods on `n` nodes, say), saturating.
    pub fn scaled(&self, n: i64) -> Self {
        let mut out = self.clone();
        for a in out.fixed.iter_mut().chain(out.extended.iter_mut()) {
            *a = a.saturating_mul(n);
        }
        out.trim();
        out
    }

    pub fn is_zero(&self) -> bool {
        self.fixed == [0; FIXED] && self.extended.is_empty()
    }

    pub fn any_negative(&self) -> bool {
        self.fixed.iter().chain(&self.extended).any(|&v| v < 0)
    }

    /// Whether `self` (requests) fits in `available`; see [`fits`].
    #[inline]
    pub fn fits_in(&self, available: &Self) -> bool {
        fits(self, available)
    }

    /// The non-zero slots, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (ResourceId, i64)> + '_ {
        self.fixed
            .iter()
            .chain(&self.extended)
            .enumerate()
            .filter(|(_, v)| **v != 0)
            .map(|(i, &v)| (ResourceId(i as u32), v))
    }

    /// Reads a Kubernetes `ResourceList`.
    pub fn from_resource_list(
        list: &BTreeMap<String, Quantity>,
        table: &mut ResourceTable,
    ) -> Result<Self, ResourceError> {
        let mut out = Self::zero();
        for (name, quantity) in list {
            out.set(table.intern(name), parse_quantity(name, quantity)?);
        }
        Ok(out)
    }

    /// The Kubernetes `ResourceList` form of the non-zero slots, each quantity printed as Kubernetes would
    /// (`1500m`, `2`, `1Gi`).
    pub fn to_resource_list(&self, table: &ResourceTable) -> BTreeMap<String, Quantity> {
        self.iter()
            .map(|(id, v)| {
                let name = table.name(id);
                (name.to_string(), Quantity(format_milli(name, v)))
            })
            .collect()
    }

    /// Formats as upstream's pod errors quote resources: `{"cpu":"1500m","memory":"1Gi","pods":"3"}`.
    pub fn json<'a>(&'a self, table: &'a ResourceTable) -> ResourcesJson<'a> {
        ResourcesJson {
            resources: self,
            table,
        }
    }

    /// Formats as `{cpu: 1500m, memory: 1Gi, pods: 3}` for logs and explanations.
    pub fn display<'a>(&'a self, table: &'a ResourceTable) -> ResourcesDisplay<'a> {
        ResourcesDisplay {
            resources: self,
            table,
        }
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(id, v)| (id.index(), v)))
            .finish()
    }
}

impl AddAssign<&Resources> for Resources {
    fn add_assign(&mut self, rhs: &Resources) {
        Resources::add_assign(self, rhs);
    }
}

impl SubAssign<&Resources> for Resources {
    fn sub_assign(&mut self, rhs: &Resources) {
        Resources::sub_assign(self, rhs);
    }
}

impl Add<&Resources> for &Resources {
    type Output = Resources;

    fn add(self, rhs: &Resources) -> Resources {
        self.saturating_add(rhs)
    }
}

impl Sub<&Resources> for &Resources {
    type Output = Resources;

    fn sub(self, rhs: &Resources) -> Resources {
        self.saturating_sub(rhs)
    }
}

impl<'a> std::iter::Sum<&'a Resources> for Resources {
    fn sum<I: Iterator<Item = &'a Resources>>(iter: I) -> Self {
        let mut total = Resources::zero();
        for r in iter {
            total += r;
        }
        total
    }
}

/// [`Resources`] formatted with names, e.g. `{cpu: 1500m, memory: 1Gi, pods: 3}`.
pub struct ResourcesDisplay<'a> {
    resources: &'a Resources,
    table: &'a ResourceTable,
}

impl fmt::Display for ResourcesDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (n, (id, v)) in self.resources.iter().enumerate() {
            let name = self.table.name(id);
            write!(
                f,
                "{}{name}: {}",
                if n > 0 { ", " } else { "" },
                format_milli(name, v)
            )?;
        }
        f.write_str("}")
    }
}

/// [`Resources`] formatted as upstream's `resources.String` prints a ResourceList: compact JSON with names sorted,
/// e.g. `{"cpu":"1500m","memory":"1Gi","pods":"3"}`; `{}` when nothing is requested.
pub struct ResourcesJson<'a> {
    resources: &'a Resources,
    table: &'a ResourceTable,
}

impl fmt::Display for ResourcesJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut entries: Vec<(&str, i64)> = self
            .resources
            .iter()
            .map(|(id, v)| (self.table.name(id), v))
            .collect();
        entries.sort_unstable_by_key(|(name, _)| *name);
        f.write_str("{")?;
        for (n, (name, v)) in entries.into_iter().enumerate() {
            write!(
                f,
                "{}{name:?}:\"{}\"",
                if n > 0 { "," } else { "" },
                format_milli(name, v)
            )?;
        }
        f.write_str("}")
    }
}

/// A resource a request does not fit in, for explanations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exceeded {
    pub resource: ResourceId,
    pub requested: i64,
    pub available: i64,
}

impl Exceeded {
    /// e.g. `cpu: requested 2, available 1500m`.
    pub fn explain(&self, table: &ResourceTable) -> String {
        let name = table.name(self.resource);
        format!(
            "{name}: requested {}, available {}",
            format_milli(name, self.requested),
            format_milli(name, self.available)
        )
    }
}

/// Whether `requests` fit in `available`: every slot requested is at most what is available, and (as upstream's
/// `resources.Fits`) nothing available is negative, since a node already over-committed takes no more pods.
#[inline]
pub fn fits(requests: &Resources, available: &Resources) -> bool {
    for (&r, &a) in requests.fixed.iter().zip(&available.fixed) {
        if a < 0 || r > a {
            return false;
        }
    }
    let (re, ae) = (&requests.extended, &available.extended);
    for i in 0..re.len().max(ae.len()) {
        let r = re.get(i).copied().unwrap_or(0);
        let a = ae.get(i).copied().unwrap_or(0);
        if a < 0 || r > a {
            return false;
        }
    }
    true
}

/// Whether `a + b` fits in `available`, without building the sum (the scheduler's hot path).
#[inline]
pub fn sum_fits(a: &Resources, b: &Resources, available: &Resources) -> bool {
    for ((&x, &y), &avail) in a.fixed.iter().zip(&b.fixed).zip(&available.fixed) {
        if avail < 0 || x.saturating_add(y) > avail {
            return false;
        }
    }
    let slots = a
        .extended
        .len()
        .max(b.extended.len())
        .max(available.extended.len());
    (0..slots).all(|i| {
        let x = a.extended.get(i).copied().unwrap_or(0);
        let y = b.extended.get(i).copied().unwrap_or(0);
        let avail = available.extended.get(i).copied().unwrap_or(0);
        avail >= 0 && x.saturating_add(y) <= avail
    })
}

/// The first slot (in slot order) that makes [`fits`] false, with both amounts.
pub fn first_exceeding(requests: &Resources, available: &Resources) -> Option<Exceeded> {
    let slots = FIXED + requests.extended.len().max(available.extended.len());
    (0..slots).map(|i| ResourceId(i as u32)).find_map(|id| {
        let (r, a) = (requests.get(id), available.get(id));
        (a < 0 || r > a).then_some(Exceeded {
            resource: id,
            requested: r,
            available: a,
        })
    })
}

pub(crate) fn parse_quantity(name: &str, quantity: &Quantity) -> Result<i64, ResourceError> {
    parse_milli(&quantity.0).map_err(|error| ResourceError::InvalidQuantity {
        resource: name.to_string(),
        error,
    })
}

#[cfg(test)]
pub(crate) mod tests;
