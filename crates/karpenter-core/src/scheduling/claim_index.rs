//! The open NodeClaims indexed by what rules them out for a pod's topology, so a pod walks, in the scheduler's
//! claim order, only the claims it could join.
//!
//! Two constraints rule a claim out whatever else the pod asks, and only ever more claims as pods are placed:
//! - hostname spread: once a claim holds maxSkew pods a constraint selects (one more than that for a pod that
//!   does not select itself), no later pod of the constraint can join it (counts only grow);
//! - pod affinity on another key (zone): a claim pinned to one value of the key can take a pod only if that
//!   domain is one the affinity allows (where its pods are, or, for the first of a self-selecting group, any the
//!   pod allows).
//!
//! Without the index a pod tried every claim least-loaded first, each rejection a full topology check: at 20,000
//! diverse pods, 194 rejections a pod, nearly all zone affinity. The index keeps each set under the claims' keys
//! in the claim order, (pods placed, creation index), so the walk merges the sets a pod may join and steps past
//! the ones it may not. It is a filter only: every claim it leaves out is one the topology check rejects, so no
//! decision changes (the scheduler checks that in debug builds).

use std::{
    collections::{BTreeSet, HashMap, btree_set},
    iter::Peekable,
};

use crate::requirements::{Requirements, Symbol};

/// A claim's place in the scheduler's claim order: (pods placed on it, creation index).
pub(super) type ClaimKey = (usize, usize);

/// The claims a hostname spread constraint has filled.
#[derive(Debug, Default)]
struct Filled {
    max_skew: u32,
    /// Indexed by whether the pod selects itself (0 or 1): the claims whose count plus that exceeds maxSkew.
    by_own: [BTreeSet<ClaimKey>; 2],
}

/// The claims by their value of one key an affinity constraint uses.
#[derive(Debug)]
struct ByDomain {
    key: Symbol,
    /// Claims whose requirements allow exactly one value of the key, by that value.
    pinned: HashMap<Symbol, BTreeSet<ClaimKey>>,
    /// The others (no requirement on the key, or several values).
    unpinned: BTreeSet<ClaimKey>,
}

impl ByDomain {
    fn set(&mut self, slot: Option<Symbol>) -> &mut BTreeSet<ClaimKey> {
        match slot {
            Some(d) => self.pinned.entry(d).or_default(),
            None => &mut self.unpinned,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct ClaimIndex {
    /// Per topology group; `None` for groups that are not hostname spread constraints.
    filled: Vec<Option<Filled>>,
    /// Per claim: the groups whose `filled` sets hold it, to re-key it when a pod joins.
    filled_in: Vec<Vec<usize>>,
    /// One partition per key a non-hostname pod affinity group uses.
    by_domain: Vec<ByDomain>,
    /// Per claim: its slot in each partition of `by_domain`; empty until the claim is first placed.
    slots: Vec<Vec<Option<Symbol>>>,
}

impl ClaimIndex {
    /// `skews`: per topology group, its maxSkew when it is a hostname spread constraint. `affinity_keys`: the keys
    /// of the non-hostname pod affinity groups.
    pub(super) fn new(
        skews: impl Iterator<Item = Option<u32>>,
        affinity_keys: impl Iterator<Item = Symbol>,
    ) -> Self {
        let mut by_domain: Vec<ByDomain> = Vec::new();
        for key in affinity_keys {
            if !by_domain.iter().any(|p| p.key == key) {
                by_domain.push(ByDomain {
                    key,
                    pinned: HashMap::new(),
                    unpinned: BTreeSet::new(),
                });
            }
        }
        Self {
            filled: skews
                .map(|s| {
                    s.map(|max_skew| Filled {
                        max_skew,
                        ..Filled::default()
                    })
                })
                .collect(),
            filled_in: Vec::new(),
            by_domain,
            slots: Vec::new(),
        }
    }

    /// Whether group `g`'s counts matter here (a hostname spread constraint).
    pub(super) fn tracks(&self, g: usize) -> bool {
        self.filled.get(g).is_some_and(Option::is_some)
    }

    /// Claim `c` moved from `old` to `new` in the claim order (a pod joined it; a claim just opened was in no
    /// set yet) and now has `requirements`.
    pub(super) fn place(&mut self, c: usize, old: ClaimKey, new: ClaimKey, requirements: &Requirements) {
        for &g in self.filled_in.get(c).into_iter().flatten() {
            if let Some(filled) = self.filled[g].as_mut() {
                for set in &mut filled.by_own {
                    if set.remove(&old) {
                        set.insert(new);
                    }
                }
            }
        }
        if self.by_domain.is_empty() {
            return;
        }
        if self.slots.len() <= c {
            self.slots.resize_with(c + 1, Vec::new);
        }
        let slots = &mut self.slots[c];
        let placed_before = !slots.is_empty();
        slots.resize(self.by_domain.len(), None);
        for (partition, slot) in self.by_domain.iter_mut().zip(slots.iter_mut()) {
            if placed_before {
                partition.set(*slot).remove(&old);
            }
            *slot = requirements.single_value(partition.key);
            partition.set(*slot).insert(new);
        }
    }

    /// Group `g` now counts `count` pods on claim `c`, whose key is `key`.
    pub(super) fn counted(&mut self, g: usize, c: usize, key: ClaimKey, count: u32) {
        let Some(filled) = self.filled.get_mut(g).and_then(Option::as_mut) else {
            return;
        };
        let mut added = false;
        for (own, set) in (0u32..).zip(filled.by_own.iter_mut()) {
            if count + own > filled.max_skew {
                added |= set.insert(key);
            }
        }
        if added {
            if self.filled_in.len() <= c {
                self.filled_in.resize_with(c + 1, Vec::new);
            }
            if !self.filled_in[c].contains(&g) {
                self.filled_in[c].push(g);
            }
        }
    }

    /// The claims of `claim_order` a pod may join, in that order. `spread`: the pod's hostname spread
    /// constraints in force, as (group, whether it selects the pod); `affinity`: a pod affinity key and the
    /// domains it allows a pinned claim to be in.
    pub(super) fn walk<'a>(
        &'a self,
        claim_order: &'a BTreeSet<ClaimKey>,
        spread: impl Iterator<Item = (usize, bool)>,
        affinity: Option<(Symbol, Vec<Symbol>)>,
    ) -> Walk<'a> {
        let skip = spread
            .filter_map(|(g, own)| {
                self.filled
                    .get(g)
                    .and_then(Option::as_ref)
                    .map(|f| &f.by_own[usize::from(own)])
            })
            .max_by_key(|set| set.len())
            .filter(|set| !set.is_empty())
            .map(|set| set.iter().peekable());
        let partition = affinity
            .and_then(|(key, allowed)| self.by_domain.iter().find(|p| p.key == key).map(|p| (p, allowed)));
        let source = match partition {
            None => Source::All(claim_order.iter()),
            Some((partition, allowed)) => Source::Merge(
                std::iter::once(&partition.unpinned)
                    .chain(allowed.iter().filter_map(|d| partition.pinned.get(d)))
                    .map(|set| set.iter().peekable())
                    .collect(),
            ),
        };
        Walk { source, skip }
    }
}

enum Source<'a> {
    All(btree_set::Iter<'a, ClaimKey>),
    /// Disjoint sets, merged in key order.
    Merge(Vec<Peekable<btree_set::Iter<'a, ClaimKey>>>),
}

/// Claims in the claim order, less those a pod's topology rules out.
pub(super) struct Walk<'a> {
    source: Source<'a>,
    /// Claims to step past, in key order.
    skip: Option<Peekable<btree_set::Iter<'a, ClaimKey>>>,
}

impl Iterator for Walk<'_> {
    type Item = ClaimKey;

    fn next(&mut self) -> Option<ClaimKey> {
        loop {
            let key = match &mut self.source {
                Source::All(it) => *it.next()?,
                Source::Merge(its) => {
                    let i = its
                        .iter_mut()
                        .enumerate()
                        .filter_map(|(i, it)| it.peek().map(|k| (i, **k)))
                        .min_by_key(|&(_, k)| k)?
                        .0;
                    *its[i].next()?
                }
            };
            if let Some(skip) = self.skip.as_mut() {
                while skip.next_if(|k| **k < key).is_some() {}
                if skip.next_if_eq(&&key).is_some() {
                    continue;
                }
            }
            return Some(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::{LabelInterner, Requirement};

    fn walked(
        index: &ClaimIndex,
        order: &BTreeSet<ClaimKey>,
        spread: &[(usize, bool)],
        affinity: Option<(Symbol, Vec<Symbol>)>,
    ) -> Vec<ClaimKey> {
        index.walk(order, spread.iter().copied(), affinity).collect()
    }

    #[test]
    fn a_claim_a_hostname_spread_has_filled_is_stepped_past() {
        // Group 0: hostname spread maxSkew 1; group 1: not tracked.
        let mut index = ClaimIndex::new([Some(1), None].into_iter(), std::iter::empty());
        assert!(index.tracks(0) && !index.tracks(1));
        let order: BTreeSet<ClaimKey> = [(0, 2), (1, 0), (1, 3), (2, 1)].into();
        index.counted(0, 3, (1, 3), 1);
        // A pod selecting itself cannot join a claim holding one; a pod that does not still can.
        assert_eq!(
            walked(&index, &order, &[(0, true)], None),
            vec![(0, 2), (1, 0), (2, 1)]
        );
        assert_eq!(
            walked(&index, &order, &[(0, false)], None),
            order.iter().copied().collect::<Vec<_>>()
        );
        index.counted(0, 3, (1, 3), 2);
        assert_eq!(
            walked(&index, &order, &[(0, false)], None),
            vec![(0, 2), (1, 0), (2, 1)]
        );
        // Untracked groups never filter.
        index.counted(1, 0, (1, 0), 9);
        assert_eq!(walked(&index, &order, &[(1, true)], None).len(), 4);
    }

    #[test]
    fn a_filled_claim_stays_filled_when_a_pod_joins_it() {
        let mut index = ClaimIndex::new([Some(1), Some(2)].into_iter(), std::iter::empty());
        let reqs = Requirements::new();
        index.place(0, (1, 0), (2, 0), &reqs);
        index.counted(0, 0, (2, 0), 1);
        index.counted(1, 0, (2, 0), 2);
        index.place(0, (2, 0), (3, 0), &reqs);
        let order: BTreeSet<ClaimKey> = [(0, 1), (3, 0)].into();
        assert_eq!(walked(&index, &order, &[(0, true)], None), vec![(0, 1)]);
        assert_eq!(walked(&index, &order, &[(1, true)], None), vec![(0, 1)]);
        assert_eq!(walked(&index, &order, &[(1, false)], None), vec![(0, 1), (3, 0)]);
    }

    #[test]
    fn a_claim_pinned_outside_an_affinity_s_domains_is_left_out_and_the_rest_keep_their_order() {
        let mut interner = LabelInterner::default();
        let zone = interner.intern_key("topology.kubernetes.io/zone");
        let (a, b) = (interner.intern("zone-a"), interner.intern("zone-b"));
        let pinned = |d: Symbol| {
            let mut r = Requirements::new();
            r.add(Requirement::in_values(zone, [d]));
            r
        };
        let mut index = ClaimIndex::new(std::iter::empty(), [zone, zone].into_iter());
        index.place(0, (0, 0), (1, 0), &Requirements::new());
        index.place(1, (0, 1), (1, 1), &pinned(a));
        index.place(2, (0, 2), (1, 2), &pinned(b));
        // Claim 0 gets pinned to zone-b as a pod joins it.
        index.place(0, (1, 0), (2, 0), &pinned(b));
        index.place(3, (0, 3), (1, 3), &Requirements::new());
        let order: BTreeSet<ClaimKey> = [(1, 1), (1, 2), (1, 3), (2, 0)].into();
        assert_eq!(
            walked(&index, &order, &[], Some((zone, vec![b]))),
            vec![(1, 2), (1, 3), (2, 0)]
        );
        assert_eq!(
            walked(&index, &order, &[], Some((zone, vec![a]))),
            vec![(1, 1), (1, 3)]
        );
        assert_eq!(walked(&index, &order, &[], Some((zone, vec![]))), vec![(1, 3)]);
        assert_eq!(walked(&index, &order, &[], None).len(), 4);
    }
}
