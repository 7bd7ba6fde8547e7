//! A sorted, deduplicated set of symbols that is cheap to clone.
//!
//! Most requirement value sets hold one value (a node selector, a label), so that case lives inline with no heap
//! allocation. Large sets (a NodePool listing hundreds of instance types) are shared behind an `Arc`, so copying a
//! requirement while layering NodePool, NodeClaim and pod constraints never copies the values, and set operations
//! whose result equals an input hand back that input instead of allocating.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::interner::Symbol;

#[derive(Clone, Default)]
pub(crate) enum SymbolSet {
    #[default]
    Empty,
    One(Symbol),
    Many(Arc<[Symbol]>),
}

impl SymbolSet {
    /// Builds a set from symbols in any order, with duplicates.
    pub(crate) fn from_unsorted(mut values: Vec<Symbol>) -> Self {
        values.sort_unstable();
        values.dedup();
        Self::from_sorted(values)
    }

    /// Builds a set from strictly increasing symbols.
    pub(crate) fn from_sorted(values: Vec<Symbol>) -> Self {
        debug_assert!(values.windows(2).all(|w| w[0] < w[1]));
        match values.as_slice() {
            [] => Self::Empty,
            [one] => Self::One(*one),
            _ => Self::Many(values.into()),
        }
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[Symbol] {
        match self {
            Self::Empty => &[],
            Self::One(s) => std::slice::from_ref(s),
            Self::Many(s) => s,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Self::Empty)
    }

    #[inline]
    pub(crate) fn contains(&self, value: Symbol) -> bool {
        match self {
            Self::Empty => false,
            Self::One(s) => *s == value,
            Self::Many(s) => s.binary_search(&value).is_ok(),
        }
    }

    /// The members of `self` that pass `keep`; `self` itself (no allocation) when all do.
    pub(crate) fn filter(&self, keep: impl Fn(Symbol) -> bool) -> Self {
        let values = self.as_slice();
        match values.iter().position(|&v| !keep(v)) {
            None => self.clone(),
            Some(first_dropped) => {
                let mut kept = Vec::with_capacity(values.len() - 1);
                kept.extend_from_slice(&values[..first_dropped]);
                kept.extend(values[first_dropped + 1..].iter().copied().filter(|&v| keep(v)));
                Self::from_sorted(kept)
            }
        }
    }

    /// `self ∪ other`, restricted to members that pass `keep`.
    pub(crate) fn union_filtered(&self, other: &Self, keep: impl Fn(Symbol) -> bool) -> Self {
        if other.is_empty() {
            return self.filter(keep);
        }
        if self.is_empty() {
            return other.filter(keep);
        }
        let (a, b) = (self.as_slice(), other.as_slice());
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let next = match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => {
                    i += 1;
                    a[i - 1]
                }
                std::cmp::Ordering::Greater => {
                    j += 1;
                    b[j - 1]
                }
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                    a[i - 1]
                }
            };
            if keep(next) {
                out.push(next);
            }
        }
        out.extend(a[i..].iter().chain(&b[j..]).copied().filter(|&v| keep(v)));
        Self::from_sorted(out)
    }
}

impl PartialEq for SymbolSet {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SymbolSet {}

impl Hash for SymbolSet {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl std::fmt::Debug for SymbolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.as_slice()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::LabelInterner;

    fn syms(i: &mut LabelInterner, names: &[&str]) -> Vec<Symbol> {
        names.iter().map(|n| i.intern(n)).collect()
    }

    #[test]
    fn building_sorts_and_deduplicates() {
        let mut i = LabelInterner::new();
        let v = syms(&mut i, &["b", "a", "b", "c"]);
        let set = SymbolSet::from_unsorted(v.clone());
        assert_eq!(set.len(), 3);
        assert!(v.iter().all(|&s| set.contains(s)));
        assert!(matches!(
            SymbolSet::from_unsorted(vec![v[0], v[0]]),
            SymbolSet::One(_)
        ));
        assert!(SymbolSet::from_unsorted(Vec::new()).is_empty());
    }

    #[test]
    fn filter_that_keeps_everything_shares_the_allocation() {
        let mut i = LabelInterner::new();
        let set = SymbolSet::from_unsorted(syms(&mut i, &["a", "b", "c"]));
        let kept = set.filter(|_| true);
        match (&set, &kept) {
            (SymbolSet::Many(a), SymbolSet::Many(b)) => assert!(Arc::ptr_eq(a, b)),
            _ => panic!("expected shared sets"),
        }
    }

    #[test]
    fn union_merges_in_order() {
        let mut i = LabelInterner::new();
        let a = SymbolSet::from_unsorted(syms(&mut i, &["a", "c"]));
        let b = SymbolSet::from_unsorted(syms(&mut i, &["b", "c", "d"]));
        let u = a.union_filtered(&b, |_| true);
        assert_eq!(u, SymbolSet::from_unsorted(syms(&mut i, &["a", "b", "c", "d"])));
        let c = i.intern("c");
        let without_c = a.union_filtered(&b, |s| s != c);
        assert_eq!(without_c.len(), 3);
    }
}
