//! Saying why requirements do not fit, in words a user can act on.
//!
//! The hot path ([`Requirements::compatible`]) returns a small [`Incompatibility`] holding symbols; the strings,
//! sorting and typo suggestions happen here, only when someone asks for an explanation.

use std::fmt;

use super::{LabelInterner, Requirement, Requirements, Symbol, WellKnownKeys};

/// Values shown before "and N others", so a NodePool listing hundreds of instance types stays readable.
const MAX_LISTED_VALUES: usize = 5;

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

    /// The explanation in upstream's words (`Requirements.Compatible`): `label "example.com/team" does not have
    /// known values (typo of "example.com/teams"?)` for an undefined label, and `key topology.kubernetes.io/zone,
    /// topology.kubernetes.io/zone In [us-east-1a] not in topology.kubernetes.io/zone In [us-east-1b us-east-1c]`
    /// (what the incoming side asks, then what the other side allows) for disjoint values.
    pub fn explain(&self, interner: &LabelInterner) -> String {
        match self {
            Self::Undefined { key, suggestion } => {
                let mut msg = format!("label {:?} does not have known values", interner.resolve(*key));
                if let Some(s) = suggestion {
                    msg.push_str(&format!(" (typo of {:?}?)", interner.resolve(*s)));
                }
                msg
            }
            Self::Disjoint {
                key,
                incoming,
                existing,
            } => format!(
                "key {}, {} not in {}",
                interner.resolve(*key),
                incoming.display(interner),
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

/// A [`Requirement`] formatted as upstream's `Requirement.String()` does: `key In [a b]`, `key NotIn [a]`,
/// `key Exists`, `key DoesNotExist`, integer bounds appended (`key Exists >=4 <=8`), then ` minValues N`. Values
/// are sorted and cut after five (`and N others`), so a NodePool listing hundreds of instance types stays readable.
pub struct RequirementDisplay<'a> {
    pub(super) requirement: &'a Requirement,
    pub(super) interner: &'a LabelInterner,
}

impl fmt::Display for RequirementDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.requirement;
        write!(f, "{} ", self.interner.resolve(r.key()))?;
        let mut values: Vec<&str> = r.values().iter().map(|&v| self.interner.resolve(v)).collect();
        values.sort_unstable();
        let operator = match (r.is_complement(), values.is_empty()) {
            (false, true) => "DoesNotExist",
            (false, false) => "In",
            (true, true) => "Exists",
            (true, false) => "NotIn",
        };
        f.write_str(operator)?;
        if !values.is_empty() {
            f.write_str(" [")?;
            for (n, v) in values.iter().take(MAX_LISTED_VALUES).enumerate() {
                if n > 0 {
                    f.write_str(" ")?;
                }
                f.write_str(v)?;
            }
            if values.len() > MAX_LISTED_VALUES {
                write!(f, " and {} others", values.len() - MAX_LISTED_VALUES)?;
            }
            f.write_str("]")?;
        }
        if let Some(b) = r.lower_bound() {
            write!(f, " >={b}")?;
        }
        if let Some(b) = r.upper_bound() {
            write!(f, " <={b}")?;
        }
        if let Some(m) = r.min_values() {
            write!(f, " minValues {m}")?;
        }
        Ok(())
    }
}

/// [`Requirements`] formatted as upstream's `Requirements.String()`: each requirement as [`RequirementDisplay`],
/// sorted, joined by `, `.
pub struct RequirementsDisplay<'a> {
    pub(super) requirements: &'a Requirements,
    pub(super) interner: &'a LabelInterner,
}

impl fmt::Display for RequirementsDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = self
            .requirements
            .iter()
            .map(|r| r.display(self.interner).to_string())
            .collect();
        items.sort_unstable();
        f.write_str(&items.join(", "))
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
            err.explain(&i),
            "key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [us-east-1a] not in \
             topology.kubernetes.io/zone In [us-east-1b us-east-1c]"
        );
    }

    #[test]
    fn undefined_label_is_a_label_without_known_values() {
        let mut i = LabelInterner::new();
        let nodepool = reqs(&mut i, &[("kubernetes.io/arch", "In", &["amd64"])]);
        let pod = reqs(&mut i, &[("example.com/team", "In", &["a"])]);
        let err = nodepool.compatible(&pod, &WellKnownKeys::none()).unwrap_err();
        assert_eq!(
            err.explain(&i),
            "label \"example.com/team\" does not have known values"
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
            err.explain(&i)
                .ends_with(" (typo of \"karpenter.k8s.aws/instance-family\"?)"),
            "{}",
            err.explain(&i)
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
        assert_eq!(r.display(&i).to_string(), "t In [a b c d e and 2 others]");
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
        assert_eq!(r.display(&i).to_string(), "cpu NotIn [8] >=4 <=16");
        let r = Requirement::parse("family", "Exists", &[] as &[&str], Some(3), &mut i).unwrap();
        assert_eq!(r.display(&i).to_string(), "family Exists minValues 3");
        let k = i.intern_key("k");
        assert_eq!(
            Requirement::does_not_exist(k).display(&i).to_string(),
            "k DoesNotExist"
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
