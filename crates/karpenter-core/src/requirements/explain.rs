//! Saying why requirements do not fit, in words a user can act on.
//!
//! The hot path ([`Requirements::compatible`]) returns a small [`Incompatibility`] holding symbols; the strings,
//! sorting and typo suggestions happen here, only when someone asks for an explanation.

use std::fmt;

use super::{LabelInterner, Requirement, Requirements, Symbol, WellKnownKeys};

/// Values shown before "and N others", so a NodePool listing hundreds of instance types stays readable.
const MAX_LISTED_VALUES: usize = 5;

/// What the two sides of a compatibility check are called in explanations, and how to fix an undefined label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sides<'a> {
    /// The side that asks (usually "pod").
    pub incoming: &'a str,
    /// The side that offers ("NodePool", "node", "instance type").
    pub existing: &'a str,
    /// What to do when `incoming` selects a label `existing` does not define.
    pub how_to_define: Option<&'a str>,
}

impl Sides<'static> {
    pub const POD_AND_NODEPOOL: Self = Sides {
        incoming: "pod",
        existing: "NodePool",
        how_to_define: Some("add it to spec.template.metadata.labels or requirements"),
    };
    pub const POD_AND_NODE: Self = Sides {
        incoming: "pod",
        existing: "node",
        how_to_define: None,
    };
    pub const POD_AND_INSTANCE_TYPE: Self = Sides {
        incoming: "pod",
        existing: "instance type",
        how_to_define: None,
    };
    pub const POD_AND_OFFERING: Self = Sides {
        incoming: "pod",
        existing: "offering",
        how_to_define: None,
    };
}

/// Why one set of requirements cannot be met by another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incompatibility {
    /// `incoming` needs label `key` to exist, but the other side neither defines it nor is it well-known.
    Undefined { key: Symbol, suggestion: Option<Symbol> },
    /// Both sides constrain `key` and no value satisfies both. (Boxed to keep `Result<(), Incompatibility>`
    /// small on the success path.)
    Disjoint {
        key: Symbol,
        incoming: Box<Requirement>,
        existing: Box<Requirement>,
    },
}

impl Incompatibility {
    pub fn key(&self) -> Symbol {
        match self {
            Self::Undefined { key, .. } | Self::Disjoint { key, .. } => *key,
        }
    }

    /// Fills in a likely intended key for an undefined label (a well-known key or one `existing` defines whose
    /// name is close), as upstream's "typo of ...?" hint does. Costs string work, so it is not done by
    /// `compatible` itself.
    pub fn with_suggestion(
        self,
        existing: &Requirements,
        well_known: &WellKnownKeys,
        interner: &LabelInterner,
    ) -> Self {
        match self {
            Self::Undefined { key, .. } => {
                let wanted = interner.resolve(key);
                let suggestion = well_known
                    .iter()
                    .chain(existing.keys())
                    .find(|&candidate| candidate != key && looks_like(wanted, interner.resolve(candidate)));
                Self::Undefined { key, suggestion }
            }
            other => other,
        }
    }

    /// The explanation, e.g. `key "topology.kubernetes.io/zone": pod requires In [us-east-1a], NodePool allows
    /// In [us-east-1b, us-east-1c]`.
    pub fn explain(&self, interner: &LabelInterner, sides: Sides<'_>) -> String {
        match self {
            Self::Undefined { key, suggestion } => {
                let mut msg = format!(
                    "label {:?} is not defined by the {}",
                    interner.resolve(*key),
                    sides.existing
                );
                if let Some(fix) = sides.how_to_define {
                    msg.push_str(&format!(" ({fix})"));
                }
                if let Some(s) = suggestion {
                    msg.push_str(&format!("; did you mean {:?}?", interner.resolve(*s)));
                }
                msg
            }
            Self::Disjoint {
                key,
                incoming,
                existing,
            } => format!(
                "key {:?}: {} requires {}, {} allows {}",
                interner.resolve(*key),
                sides.incoming,
                incoming.display(interner),
                sides.existing,
                existing.display(interner),
            ),
        }
    }
}

/// Whether `candidate` is plausibly what someone typing `wanted` meant.
fn looks_like(wanted: &str, candidate: &str) -> bool {
    let name = |k: &str| k.rsplit_once('/').map_or(k, |(_, n)| n).to_string();
    candidate.contains(wanted)
        || (!name(wanted).is_empty() && name(wanted) == name(candidate))
        || edit_distance(wanted, candidate) <= (candidate.len() / 5).max(1)
}

/// Levenshtein distance over bytes (label keys are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// A [`Requirement`] formatted without its key: `In [a, b]`, `NotIn [a]`, `Exists`, `DoesNotExist`,
/// `Gte 4, Lte 8`, with `, minValues N` when set.
pub struct RequirementDisplay<'a> {
    pub(super) requirement: &'a Requirement,
    pub(super) interner: &'a LabelInterner,
}

impl fmt::Display for RequirementDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.requirement;
        let mut values: Vec<&str> = r.values().iter().map(|&v| self.interner.resolve(v)).collect();
        values.sort_unstable();
        let listed = |f: &mut fmt::Formatter<'_>, op: &str| -> fmt::Result {
            write!(f, "{op} [")?;
            for (n, v) in values.iter().take(MAX_LISTED_VALUES).enumerate() {
                if n > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(v)?;
            }
            if values.len() > MAX_LISTED_VALUES {
                write!(f, " and {} others", values.len() - MAX_LISTED_VALUES)?;
            }
            f.write_str("]")
        };
        if !r.is_complement() {
            if values.is_empty() {
                f.write_str("DoesNotExist")?;
            } else {
                listed(f, "In")?;
            }
        } else {
            let mut parts = 0;
            if !values.is_empty() {
                listed(f, "NotIn")?;
                parts += 1;
            }
            for (op, bound) in [("Gte", r.lower_bound()), ("Lte", r.upper_bound())] {
                if let Some(b) = bound {
                    write!(f, "{}{op} {b}", if parts > 0 { ", " } else { "" })?;
                    parts += 1;
                }
            }
            if parts == 0 {
                f.write_str("Exists")?;
            }
        }
        if let Some(m) = r.min_values() {
            write!(f, ", minValues {m}")?;
        }
        Ok(())
    }
}

/// [`Requirements`] formatted as `key In [a], key2 Exists`, sorted by key name.
pub struct RequirementsDisplay<'a> {
    pub(super) requirements: &'a Requirements,
    pub(super) interner: &'a LabelInterner,
}

impl fmt::Display for RequirementsDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<(&str, &Requirement)> = self
            .requirements
            .iter()
            .map(|r| (self.interner.resolve(r.key()), r))
            .collect();
        items.sort_unstable_by_key(|(k, _)| *k);
        for (n, (key, r)) in items.into_iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{key} {}", r.display(self.interner))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reqs(i: &mut LabelInterner, specs: &[(&str, &str, &[&str])]) -> Requirements {
        specs
            .iter()
            .map(|(k, op, vals)| Requirement::parse(k, op, vals, None, i).unwrap())
            .collect()
    }

    #[test]
    fn disjoint_zone_is_explained_with_both_sides() {
        let mut i = LabelInterner::new();
        let nodepool = reqs(
            &mut i,
            &[("topology.kubernetes.io/zone", "In", &["us-east-1c", "us-east-1b"])],
        );
        let pod = reqs(&mut i, &[("topology.kubernetes.io/zone", "In", &["us-east-1a"])]);
        let err = nodepool.compatible(&pod, &WellKnownKeys::none()).unwrap_err();
        assert_eq!(
            err.explain(&i, Sides::POD_AND_NODEPOOL),
            "key \"topology.kubernetes.io/zone\": pod requires In [us-east-1a], \
             NodePool allows In [us-east-1b, us-east-1c]"
        );
    }

    #[test]
    fn undefined_label_explains_how_to_define_it() {
        let mut i = LabelInterner::new();
        let nodepool = reqs(&mut i, &[("kubernetes.io/arch", "In", &["amd64"])]);
        let pod = reqs(&mut i, &[("example.com/team", "In", &["a"])]);
        let err = nodepool.compatible(&pod, &WellKnownKeys::none()).unwrap_err();
        assert_eq!(
            err.explain(&i, Sides::POD_AND_NODEPOOL),
            "label \"example.com/team\" is not defined by the NodePool \
             (add it to spec.template.metadata.labels or requirements)"
        );
    }

    #[test]
    fn undefined_label_suggests_a_close_key() {
        let mut i = LabelInterner::new();
        let wk = WellKnownKeys::from_names(&mut i, ["karpenter.k8s.aws/instance-family"]);
        let nodepool = reqs(&mut i, &[("example.com/team", "In", &["a"])]);
        let pod = reqs(&mut i, &[("karpenter.k8s.aws/instance-familly", "In", &["m5"])]);
        let err = nodepool
            .compatible(&pod, &wk)
            .unwrap_err()
            .with_suggestion(&nodepool, &wk, &i);
        assert!(
            err.explain(&i, Sides::POD_AND_NODE)
                .ends_with("; did you mean \"karpenter.k8s.aws/instance-family\"?"),
            "{}",
            err.explain(&i, Sides::POD_AND_NODE)
        );
        let pod = reqs(&mut i, &[("example.org/team", "In", &["a"])]);
        let err = nodepool
            .compatible(&pod, &wk)
            .unwrap_err()
            .with_suggestion(&nodepool, &wk, &i);
        assert!(
            matches!(err, Incompatibility::Undefined { suggestion: Some(s), .. } if i.resolve(s) == "example.com/team")
        );
    }

    #[test]
    fn long_value_lists_are_truncated() {
        let mut i = LabelInterner::new();
        let r = reqs(&mut i, &[("t", "In", &["a", "b", "c", "d", "e", "f", "g"])]);
        assert_eq!(r.display(&i).to_string(), "t In [a, b, c, d, e and 2 others]");
    }

    #[test]
    fn bounds_and_min_values_are_displayed() {
        let mut i = LabelInterner::new();
        let r = reqs(
            &mut i,
            &[
                ("cpu", "Gt", &["3"]),
                ("cpu", "Lte", &["16"]),
                ("cpu", "NotIn", &["8"]),
            ],
        );
        assert_eq!(r.display(&i).to_string(), "cpu NotIn [8], Gte 4, Lte 16");
        let r = Requirement::parse("family", "Exists", &[] as &[&str], Some(3), &mut i).unwrap();
        assert_eq!(r.display(&i).to_string(), "Exists, minValues 3");
        let k = i.intern_key("k");
        assert_eq!(
            Requirement::does_not_exist(k).display(&i).to_string(),
            "DoesNotExist"
        );
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("zone", "zone"), 0);
        assert_eq!(edit_distance("zone", "zones"), 1);
        assert_eq!(edit_distance("zone", "zome"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
