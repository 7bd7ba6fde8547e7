//! `minValues`: a NodePool's demand that the instance types offered for a NodeClaim span at least N distinct
//! values of a key (for example three instance families, so spot capacity has somewhere to go). Upstream checks it
//! when truncating the instance-type list (`InstanceTypes.SatisfiesMinValues`).

use super::{LabelInterner, Requirements, Symbol};

/// A key whose `minValues` the instance types do not reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MinValuesShortfall {
    pub key: Symbol,
    pub min_values: u32,
    /// Distinct values the instance types offer for the key.
    pub found: u32,
}

impl MinValuesShortfall {
    /// e.g. `minValues requires 3 distinct values of "karpenter.k8s.aws/instance-family", the instance types
    /// offer 2`.
    pub fn explain(&self, interner: &LabelInterner) -> String {
        format!(
            "minValues requires {} distinct values of {:?}, the instance types offer {}",
            self.min_values,
            interner.resolve(self.key),
            self.found
        )
    }
}

/// The shortfalls in upstream's words (`InstanceTypes.SatisfiesMinValues`):
/// `minValues requirement is not met for label(s) (label(s)=[karpenter.k8s.aws/instance-family])`, keys sorted.
pub fn explain_shortfalls(shortfalls: &[MinValuesShortfall], interner: &LabelInterner) -> String {
    let mut keys: Vec<&str> = shortfalls.iter().map(|s| interner.resolve(s.key)).collect();
    keys.sort_unstable();
    format!(
        "minValues requirement is not met for label(s) (label(s)=[{}])",
        keys.join(" ")
    )
}

impl Requirements {
    /// Checks `minValues` against instance types given by their requirements, in order (cheapest first, say).
    ///
    /// Returns how many of the leading instance types are needed to satisfy every `minValues` (0 when there is
    /// none), or every key that even the whole list falls short on, sorted by key symbol. Values are counted from
    /// each instance type's `In` values for the key, as upstream counts `Requirements.Get(key).Values()`.
    pub fn check_min_values<'a>(
        &self,
        instance_types: impl IntoIterator<Item = &'a Requirements>,
    ) -> Result<usize, Vec<MinValuesShortfall>> {
        // (key, minValues, distinct values seen so far, sorted)
        let mut tallies: Vec<(Symbol, u32, Vec<Symbol>)> = self
            .iter()
            .filter_map(|r| r.min_values().map(|m| (r.key(), m, Vec::new())))
            .collect();
        if tallies.is_empty() {
            return Ok(0);
        }
        let short = |tallies: &[(Symbol, u32, Vec<Symbol>)]| {
            tallies.iter().any(|(_, min, seen)| seen.len() < *min as usize)
        };
        let mut count = 0;
        for it in instance_types {
            count += 1;
            for (key, _, seen) in &mut tallies {
                let Some(r) = it.get(*key) else { continue };
                if r.is_complement() {
                    continue;
                }
                for &v in r.values() {
                    if let Err(pos) = seen.binary_search(&v) {
                        seen.insert(pos, v);
                    }
                }
            }
            if !short(&tallies) {
                return Ok(count);
            }
        }
        Err(tallies
            .into_iter()
            .filter(|(_, min, seen)| seen.len() < *min as usize)
            .map(|(key, min_values, seen)| MinValuesShortfall {
                key,
                min_values,
                found: u32::try_from(seen.len()).unwrap_or(u32::MAX),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Requirement;
    use super::*;

    fn instance_type(i: &mut LabelInterner, name: &str, family: &str) -> Requirements {
        let it = i.intern_key("node.kubernetes.io/instance-type");
        let fam = i.intern_key("karpenter.k8s.aws/instance-family");
        [
            Requirement::in_values(it, [i.intern(name)]),
            Requirement::in_values(fam, [i.intern(family)]),
        ]
        .into_iter()
        .collect()
    }

    fn claim(i: &mut LabelInterner, min_families: u32, min_types: Option<u32>) -> Requirements {
        let it = i.intern_key("node.kubernetes.io/instance-type");
        let fam = i.intern_key("karpenter.k8s.aws/instance-family");
        [
            Requirement::exists(fam).with_min_values(Some(min_families)),
            Requirement::exists(it).with_min_values(min_types),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn min_values_reports_the_prefix_that_satisfies_it() {
        let mut i = LabelInterner::new();
        let its = [
            instance_type(&mut i, "c4.large", "c4"),
            instance_type(&mut i, "c4.xlarge", "c4"),
            instance_type(&mut i, "c5.large", "c5"),
            instance_type(&mut i, "m4.large", "m4"),
        ];
        let reqs = claim(&mut i, 3, Some(2));
        assert_eq!(reqs.check_min_values(&its), Ok(4));
        let reqs = claim(&mut i, 2, None);
        assert_eq!(reqs.check_min_values(&its), Ok(3));
    }

    #[test]
    fn min_values_names_the_key_that_falls_short() {
        let mut i = LabelInterner::new();
        let its = [
            instance_type(&mut i, "c4.large", "c4"),
            instance_type(&mut i, "c4.xlarge", "c4"),
        ];
        let reqs = claim(&mut i, 2, Some(2));
        let fam = i.lookup_key("karpenter.k8s.aws/instance-family").unwrap();
        let err = reqs.check_min_values(&its).unwrap_err();
        assert_eq!(
            err,
            vec![MinValuesShortfall {
                key: fam,
                min_values: 2,
                found: 1
            }]
        );
        assert_eq!(
            err[0].explain(&i),
            "minValues requires 2 distinct values of \"karpenter.k8s.aws/instance-family\", the instance types offer 1"
        );
    }

    #[test]
    fn no_min_values_needs_no_instance_types() {
        let mut i = LabelInterner::new();
        let k = i.intern_key("k");
        let reqs: Requirements = Requirement::exists(k).into();
        assert_eq!(reqs.check_min_values(std::iter::empty()), Ok(0));
    }

    #[test]
    fn min_values_survives_intersection_as_the_larger() {
        let mut i = LabelInterner::new();
        let k = i.intern_key("karpenter.k8s.aws/instance-family");
        let a = Requirement::exists(k).with_min_values(Some(2));
        let b = Requirement::in_values(k, [i.intern("c5"), i.intern("m5"), i.intern("r5")])
            .with_min_values(Some(3));
        assert_eq!(a.intersection(&b).min_values(), Some(3));
        assert_eq!(b.intersection(&a).min_values(), Some(3));
        assert_eq!(a.intersection(&Requirement::exists(k)).min_values(), Some(2));
        let none = Requirement::gt(k, 5).intersection(&Requirement::lt(k, 3).with_min_values(Some(4)));
        assert!(none.is_empty());
        assert_eq!(
            none.min_values(),
            Some(4),
            "an empty intersection still remembers minValues"
        );
    }
}
