//! The requirements algebra: what label values a node may carry, as constrained by a provider's instance types and
//! offerings, a NodePool, a NodeClaim and the pods placed on it (upstream `pkg/scheduling/requirement(s).go`).
//!
//! A [`Requirement`] is one key with the set of values it allows: a finite set (`In`), or the complement of a
//! finite set (`NotIn`, `Exists`) optionally narrowed by inclusive integer bounds (`Gt`, `Lt`, `Gte`, `Lte`), or no
//! value at all (`DoesNotExist`). [`Requirements`] maps keys to requirements. Layering is intersection; asking
//! "may this pod land on that node?" is [`Requirements::compatible`], which follows upstream's rules exactly:
//!
//! - a key both sides constrain must have a value both allow, unless both sides only exclude values
//!   (`NotIn`/`DoesNotExist` on each side);
//! - a key only the pod constrains must be declared by the node side when the pod needs the label to exist
//!   (`In`, `Exists`, bounds): the labels a pod may select must be declared. Well-known keys that every instance
//!   type defines (zone, architecture, ...) are exempt, and so are `NotIn`/`DoesNotExist`, which an absent label
//!   satisfies.
//!
//! Everything works on interned [`Symbol`]s and sorted vectors: no string compares, hashing or map allocation in
//! `compatible`, `intersects` or `has`; `intersect` allocates only the result.

mod explain;
mod interner;
mod min_values;
mod parse;
mod set;

pub use explain::{Incompatibility, RequirementDisplay, RequirementsDisplay};
pub use interner::{LabelInterner, Symbol, WellKnownKeys};
pub use min_values::{MinValuesShortfall, explain_shortfalls};
pub use parse::{Operator, RequirementError, RequirementSpec, UnknownOperator};

use set::SymbolSet;

/// The values one label key may take. See the module docs.
///
/// Invariants (so that equal constraints compare equal): bounds only ever appear on a complement; a complement's
/// excluded values all lie inside its bounds; `Gt n`/`Lt n` are stored as `Gte n+1`/`Lte n-1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: Symbol,
    /// `true`: the allowed values are everything except `values` (and within the bounds).
    complement: bool,
    values: SymbolSet,
    /// Inclusive lower and upper bounds on integer values (`Gt`, `Lt`, `Gte`, `Lte`), boxed because few
    /// requirements have any: a node's forty-odd labels each become a requirement, so every byte here counts
    /// thousands of times over in a large cluster (this keeps a requirement at 48 bytes rather than 72).
    bounds: Option<Box<Bounds>>,
    min_values: Option<u32>,
}

/// See [`Requirement::lower_bound`] and [`Requirement::upper_bound`]; at least one is set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Bounds {
    gte: Option<i64>,
    lte: Option<i64>,
}

impl Requirement {
    /// `key In [values]`.
    pub fn in_values(key: Symbol, values: impl IntoIterator<Item = Symbol>) -> Self {
        Self::from_parts(
            key,
            false,
            SymbolSet::from_unsorted(values.into_iter().collect()),
            None,
            None,
        )
    }

    /// `key NotIn [values]`: the label may be absent or take any other value.
    pub fn not_in(key: Symbol, values: impl IntoIterator<Item = Symbol>) -> Self {
        Self::from_parts(
            key,
            true,
            SymbolSet::from_unsorted(values.into_iter().collect()),
            None,
            None,
        )
    }

    /// `key Exists`: any value.
    pub fn exists(key: Symbol) -> Self {
        Self::from_parts(key, true, SymbolSet::Empty, None, None)
    }

    /// `key DoesNotExist`: no value.
    pub fn does_not_exist(key: Symbol) -> Self {
        Self::from_parts(key, false, SymbolSet::Empty, None, None)
    }

    /// `key Gt n`: integer values above `n`.
    pub fn gt(key: Symbol, n: i64) -> Self {
        n.checked_add(1)
            .map_or_else(|| Self::does_not_exist(key), |n| Self::gte(key, n))
    }

    /// `key Lt n`: integer values below `n`.
    pub fn lt(key: Symbol, n: i64) -> Self {
        n.checked_sub(1)
            .map_or_else(|| Self::does_not_exist(key), |n| Self::lte(key, n))
    }

    /// `key Gte n`: integer values of at least `n`.
    pub fn gte(key: Symbol, n: i64) -> Self {
        Self::from_parts(key, true, SymbolSet::Empty, Some(n), None)
    }

    /// `key Lte n`: integer values of at most `n`.
    pub fn lte(key: Symbol, n: i64) -> Self {
        Self::from_parts(key, true, SymbolSet::Empty, None, Some(n))
    }

    /// The same requirement with a minimum number of distinct values the chosen instance types must span.
    pub fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    fn from_parts(
        key: Symbol,
        complement: bool,
        values: SymbolSet,
        gte: Option<i64>,
        lte: Option<i64>,
    ) -> Self {
        Self {
            key,
            complement,
            values,
            bounds: boxed_bounds(gte, lte),
            min_values: None,
        }
    }

    pub fn key(&self) -> Symbol {
        self.key
    }

    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// Whether the allowed values are "everything except [`Requirement::values`]".
    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The listed values: the allowed ones for `In`, the excluded ones for `NotIn`. Sorted by symbol.
    pub fn values(&self) -> &[Symbol] {
        self.values.as_slice()
    }

    /// Inclusive lower bound on integer values, if any.
    pub fn lower_bound(&self) -> Option<i64> {
        self.bounds.as_ref().and_then(|b| b.gte)
    }

    /// Inclusive upper bound on integer values, if any.
    pub fn upper_bound(&self) -> Option<i64> {
        self.bounds.as_ref().and_then(|b| b.lte)
    }

    /// The set operator this requirement amounts to, as upstream reports it: bounds count as `Exists`
    /// (or `NotIn` when values are also excluded).
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
        }
    }

    /// How many values are allowed; `None` when unboundedly many (a complement).
    pub fn len(&self) -> Option<usize> {
        (!self.complement).then(|| self.values.len())
    }

    /// Whether no value is allowed (`DoesNotExist`, or an empty intersection).
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// Whether the requirement only excludes values (`NotIn`, `DoesNotExist`), which upstream treats as met by a
    /// node without the label.
    fn allows_absent(&self) -> bool {
        matches!(self.operator(), Operator::NotIn | Operator::DoesNotExist)
    }

    /// Whether `value` is allowed.
    #[inline]
    pub fn has(&self, value: Symbol) -> bool {
        self.values.contains(value) != self.complement
            && within(value, self.lower_bound(), self.upper_bound())
    }

    /// Whether a value given as a string is allowed, without interning it.
    pub fn has_str(&self, value: &str, interner: &LabelInterner) -> bool {
        match interner.lookup(value) {
            Some(sym) => self.has(sym),
            // A string never interned is in no listed set, so only a complement can allow it.
            None => {
                self.complement
                    && ((self.lower_bound().is_none() && self.upper_bound().is_none())
                        || interner::canonical_small_int(value).is_some_and(|n| {
                            let n = i64::from(n);
                            self.lower_bound().is_none_or(|g| n >= g)
                                && self.upper_bound().is_none_or(|l| n <= l)
                        }))
            }
        }
    }

    /// The value, when exactly one is allowed (`In [v]`): what a node launched from this requirement is labelled.
    pub fn single_value(&self) -> Option<Symbol> {
        match (&self.values, self.complement) {
            (SymbolSet::One(v), false) => Some(*v),
            _ => None,
        }
    }

    /// The values both requirements allow (for the same key). `minValues` survives as the larger of the two.
    pub fn intersection(&self, other: &Self) -> Self {
        debug_assert_eq!(self.key, other.key, "intersecting requirements on different keys");
        let complement = self.complement && other.complement;
        let gte = max_opt(self.lower_bound(), other.lower_bound());
        let lte = min_opt(self.upper_bound(), other.upper_bound());
        let min_values = max_opt(self.min_values, other.min_values);
        if let (Some(g), Some(l)) = (gte, lte)
            && g > l
        {
            return Self::does_not_exist(self.key).with_min_values(min_values);
        }
        let keep = |v| within(v, gte, lte);
        let values = match (self.complement, other.complement) {
            (true, true) => self.values.union_filtered(&other.values, keep),
            (true, false) => other.values.filter(|v| !self.values.contains(v) && keep(v)),
            (false, true) => self.values.filter(|v| !other.values.contains(v) && keep(v)),
            (false, false) => {
                let (small, large) = smaller_first(&self.values, &other.values);
                small.filter(|v| large.contains(v))
            }
        };
        // A finite set already holds only in-bounds values, so it carries no bounds.
        let (gte, lte) = if complement { (gte, lte) } else { (None, None) };
        Self {
            key: self.key,
            complement,
            values,
            bounds: boxed_bounds(gte, lte),
            min_values,
        }
    }

    /// Whether some value is allowed by both, without building the intersection.
    pub fn has_intersection(&self, other: &Self) -> bool {
        let gte = max_opt(self.lower_bound(), other.lower_bound());
        let lte = min_opt(self.upper_bound(), other.upper_bound());
        if let (Some(g), Some(l)) = (gte, lte)
            && g > l
        {
            return false;
        }
        match (self.complement, other.complement) {
            // Both exclude finitely many values; like upstream, bounds that leave some integer count as overlap.
            (true, true) => true,
            (true, false) => other
                .values
                .as_slice()
                .iter()
                .any(|&v| !self.values.contains(v) && within(v, gte, lte)),
            (false, true) => self
                .values
                .as_slice()
                .iter()
                .any(|&v| !other.values.contains(v) && within(v, gte, lte)),
            (false, false) => {
                let (small, large) = smaller_first(&self.values, &other.values);
                small.as_slice().iter().any(|&v| large.contains(v))
            }
        }
    }

    /// Some allowed value, for labelling a hypothetical node: the first listed value of an `In`; for a complement
    /// the smallest non-negative integer inside the bounds that is not excluded (upstream picks a random integer;
    /// the smallest keeps simulations repeatable). `None` when nothing suitable exists.
    pub fn any_value(&self, interner: &mut LabelInterner) -> Option<Symbol> {
        if !self.complement {
            return self.values.as_slice().first().copied();
        }
        let low = self.lower_bound().unwrap_or(0).max(0);
        let high = self.upper_bound().unwrap_or(i64::MAX).min(i64::from(i32::MAX));
        // At most |excluded| candidates can be rejected, so this loop is short.
        let mut n = low;
        while n <= high {
            let sym = interner.intern(&n.to_string());
            if self.has(sym) {
                return Some(sym);
            }
            n += 1;
        }
        None
    }

    /// Formats the requirement as upstream prints one: `key In [a b]`, `key NotIn [a]`, `key Exists >=4 <=8`.
    pub fn display<'a>(&'a self, interner: &'a LabelInterner) -> RequirementDisplay<'a> {
        RequirementDisplay {
            requirement: self,
            interner,
        }
    }
}

/// Whether `value` satisfies the inclusive integer bounds; a value that is not an integer never does.
#[inline]
/// Bounds as a requirement keeps them: none at all in the common case.
fn boxed_bounds(gte: Option<i64>, lte: Option<i64>) -> Option<Box<Bounds>> {
    (gte.is_some() || lte.is_some()).then(|| Box::new(Bounds { gte, lte }))
}

fn within(value: Symbol, gte: Option<i64>, lte: Option<i64>) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    value
        .as_int()
        .is_some_and(|v| gte.is_none_or(|g| v >= g) && lte.is_none_or(|l| v <= l))
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn smaller_first<'a>(a: &'a SymbolSet, b: &'a SymbolSet) -> (&'a SymbolSet, &'a SymbolSet) {
    if a.len() <= b.len() { (a, b) } else { (b, a) }
}

/// Requirements on several keys, at most one per key, kept sorted by key symbol.
///
/// A key that is absent is unconstrained (upstream's `Get` of a missing key is `Exists`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    items: Vec<Requirement>,
}

/// Where [`Requirements::first_failure`] found a problem, by index, so the fast path clones nothing.
enum Failure {
    Undefined { incoming: usize },
    Disjoint { existing: usize, incoming: usize },
}

impl Requirements {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The requirements, sorted by key symbol.
    pub fn iter(&self) -> std::slice::Iter<'_, Requirement> {
        self.items.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = Symbol> + '_ {
        self.items.iter().map(|r| r.key)
    }

    #[inline]
    fn position(&self, key: Symbol) -> Result<usize, usize> {
        self.items.binary_search_by_key(&key, |r| r.key)
    }

    pub fn get(&self, key: Symbol) -> Option<&Requirement> {
        self.position(key).ok().map(|i| &self.items[i])
    }

    /// Whether the key is constrained at all (upstream `Has`).
    pub fn has(&self, key: Symbol) -> bool {
        self.position(key).is_ok()
    }

    /// Whether a node whose label `key` is `value` satisfies these requirements on that key.
    pub fn allows(&self, key: Symbol, value: Symbol) -> bool {
        self.get(key).is_none_or(|r| r.has(value))
    }

    /// Adds a requirement, intersecting it with any existing one on the same key.
    pub fn add(&mut self, requirement: Requirement) {
        match self.position(requirement.key) {
            Ok(i) => self.items[i] = self.items[i].intersection(&requirement),
            Err(i) => self.items.insert(i, requirement),
        }
    }

    pub fn remove(&mut self, key: Symbol) -> Option<Requirement> {
        self.position(key).ok().map(|i| self.items.remove(i))
    }

    /// Both sets of requirements at once: keys of either side, intersected where both constrain the key.
    pub fn intersect(&self, other: &Self) -> Self {
        let (a, b) = (&self.items, &other.items);
        let mut items = Vec::with_capacity(a.len().max(b.len()));
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].key.cmp(&b[j].key) {
                std::cmp::Ordering::Less => {
                    items.push(a[i].clone());
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    items.push(b[j].clone());
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    items.push(a[i].intersection(&b[j]));
                    i += 1;
                    j += 1;
                }
            }
        }
        items.extend_from_slice(&a[i..]);
        items.extend_from_slice(&b[j..]);
        Self { items }
    }

    /// `*self = self.intersect(other)`.
    pub fn intersect_with(&mut self, other: &Self) {
        if other.items.len() == 1 {
            // The common case of layering one more constraint needs no merge.
            if let Some(r) = other.items.first() {
                self.add(r.clone());
            }
            return;
        }
        *self = self.intersect(other);
    }

    /// Whether `incoming` (a pod's requirements, say) can be met by a node described by `self` (a NodePool, a
    /// NodeClaim, an instance type). Keys in `allow_undefined` may be required by `incoming` without `self`
    /// declaring them; any other key `incoming` needs to exist must be declared by `self`. Returns the first
    /// problem, preferring an undefined key over a disjoint one as upstream does.
    pub fn compatible(
        &self,
        incoming: &Self,
        allow_undefined: &WellKnownKeys,
    ) -> Result<(), Incompatibility> {
        match self.first_failure(incoming, Some(allow_undefined)) {
            None => Ok(()),
            Some(f) => Err(self.incompatibility(incoming, f)),
        }
    }

    /// [`Requirements::compatible`] as a bool, without building an error.
    #[inline]
    pub fn is_compatible(&self, incoming: &Self, allow_undefined: &WellKnownKeys) -> bool {
        self.first_failure(incoming, Some(allow_undefined)).is_none()
    }

    /// Whether every key both sides constrain has a value both allow (undefined keys are fine).
    pub fn intersects(&self, incoming: &Self) -> Result<(), Incompatibility> {
        match self.first_failure(incoming, None) {
            None => Ok(()),
            Some(f) => Err(self.incompatibility(incoming, f)),
        }
    }

    /// One merge pass over both sorted lists. With `allow_undefined`, also checks undefined keys.
    fn first_failure(&self, incoming: &Self, allow_undefined: Option<&WellKnownKeys>) -> Option<Failure> {
        let existing = &self.items;
        let mut i = 0;
        let mut disjoint = None;
        for (j, inc) in incoming.items.iter().enumerate() {
            while i < existing.len() && existing[i].key < inc.key {
                i += 1;
            }
            if let Some(ex) = existing.get(i).filter(|ex| ex.key == inc.key) {
                if disjoint.is_none()
                    && !ex.has_intersection(inc)
                    // Two requirements that only exclude values are satisfied by a node without the label.
                    && !(inc.allows_absent() && ex.allows_absent())
                {
                    disjoint = Some(Failure::Disjoint {
                        existing: i,
                        incoming: j,
                    });
                    if allow_undefined.is_none() {
                        return disjoint;
                    }
                }
            } else if let Some(allowed) = allow_undefined
                && !allowed.contains(inc.key)
                && !inc.allows_absent()
            {
                return Some(Failure::Undefined { incoming: j });
            }
        }
        disjoint
    }

    fn incompatibility(&self, incoming: &Self, failure: Failure) -> Incompatibility {
        match failure {
            Failure::Undefined { incoming: j } => Incompatibility::Undefined {
                key: incoming.items[j].key,
                suggestion: None,
            },
            Failure::Disjoint {
                existing: i,
                incoming: j,
            } => Incompatibility::Disjoint {
                key: incoming.items[j].key,
                incoming: Box::new(incoming.items[j].clone()),
                existing: Box::new(self.items[i].clone()),
            },
        }
    }

    /// `(key, value)` for every key with exactly one allowed value: the labels a node launched from these
    /// requirements carries.
    pub fn labels(&self) -> impl Iterator<Item = (Symbol, Symbol)> + '_ {
        self.items
            .iter()
            .filter_map(|r| r.single_value().map(|v| (r.key, v)))
    }

    /// The single allowed value of `key`, if it has exactly one.
    pub fn single_value(&self, key: Symbol) -> Option<Symbol> {
        self.get(key).and_then(Requirement::single_value)
    }

    /// Whether any requirement carries `minValues`.
    pub fn has_min_values(&self) -> bool {
        self.items.iter().any(|r| r.min_values.is_some())
    }

    /// Formats as upstream prints requirements: `key In [a b], key2 Exists`, sorted.
    pub fn display<'a>(&'a self, interner: &'a LabelInterner) -> RequirementsDisplay<'a> {
        RequirementsDisplay {
            requirements: self,
            interner,
        }
    }
}

impl FromIterator<Requirement> for Requirements {
    /// Collects requirements, intersecting those that share a key.
    fn from_iter<T: IntoIterator<Item = Requirement>>(iter: T) -> Self {
        let mut items: Vec<Requirement> = iter.into_iter().collect();
        // A stable sort keeps the intersection order deterministic; it is commutative anyway.
        items.sort_by_key(|r| r.key);
        let mut merged: Vec<Requirement> = Vec::with_capacity(items.len());
        for r in items {
            match merged.last_mut() {
                Some(last) if last.key == r.key => *last = last.intersection(&r),
                _ => merged.push(r),
            }
        }
        Self { items: merged }
    }
}

impl From<Requirement> for Requirements {
    fn from(requirement: Requirement) -> Self {
        Self {
            items: vec![requirement],
        }
    }
}

impl<'a> IntoIterator for &'a Requirements {
    type Item = &'a Requirement;
    type IntoIter = std::slice::Iter<'a, Requirement>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

#[cfg(test)]
mod tests;
