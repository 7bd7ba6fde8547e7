//! The check upstream makes before carrying out a consolidation: the decision is taken again 15 seconds later
//! (the pods a scale-down removes, and the nodes they free, take a moment to settle) and the command goes ahead
//! only if the same method still chooses the same candidates for the same kind of action. Pure.

use std::collections::BTreeSet;

use karpenter_core::disruption::{
    consolidation::Decision,
    pass::{DisruptionCommand, Method},
};

/// What a command is about, independent of when it was computed: its method, action and candidate NodeClaims.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CommandShape {
    pub method: Method,
    pub replace: bool,
    pub candidates: BTreeSet<String>,
}

/// The shapes of a pass's commands; `claim_of` names a candidate's NodeClaim from its view index.
pub fn command_shapes<'a>(
    commands: &[DisruptionCommand],
    claim_of: impl Fn(usize) -> Option<&'a str>,
) -> BTreeSet<CommandShape> {
    commands
        .iter()
        .map(|c| CommandShape {
            method: c.method,
            replace: matches!(c.decision, Decision::Replace),
            candidates: c
                .candidates
                .iter()
                .filter_map(|&n| claim_of(n))
                .map(str::to_string)
                .collect(),
        })
        .collect()
}

/// Whether a method's commands wait for validation: emptiness and consolidation do, drift does not (a drifted
/// node stays drifted).
pub fn needs_validation(method: Method) -> bool {
    matches!(
        method,
        Method::Emptiness | Method::MultiNodeConsolidation | Method::SingleNodeConsolidation
    )
}

/// `Ok` when the decision taken again matches the first; otherwise why the command is abandoned.
pub fn validate(decided: &BTreeSet<CommandShape>, again: &BTreeSet<CommandShape>) -> Result<(), String> {
    if decided == again {
        return Ok(());
    }
    let describe = |shapes: &BTreeSet<CommandShape>| -> String {
        if shapes.is_empty() {
            return "nothing".to_string();
        }
        shapes
            .iter()
            .map(|s| {
                let names: Vec<&str> = s.candidates.iter().map(String::as_str).collect();
                format!(
                    "{} {} [{}]",
                    s.method.as_str(),
                    if s.replace { "replace" } else { "delete" },
                    names.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    Err(format!(
        "the decision changed during validation: {} became {}",
        describe(decided),
        describe(again)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(method: Method, replace: bool, claims: &[&str]) -> CommandShape {
        CommandShape {
            method,
            replace,
            candidates: claims.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn the_same_decision_goes_ahead() {
        let a: BTreeSet<_> = [shape(Method::SingleNodeConsolidation, true, &["c1"])].into();
        assert_eq!(validate(&a, &a.clone()), Ok(()));
    }

    #[test]
    fn other_candidates_an_other_action_or_nothing_abandon_it() {
        let a: BTreeSet<_> = [shape(Method::MultiNodeConsolidation, false, &["c1", "c2"])].into();
        let fewer: BTreeSet<_> = [shape(Method::MultiNodeConsolidation, false, &["c1"])].into();
        let replace: BTreeSet<_> = [shape(Method::MultiNodeConsolidation, true, &["c1", "c2"])].into();
        assert_eq!(
            validate(&a, &fewer),
            Err("the decision changed during validation: multi-node-consolidation delete [c1, c2] became multi-node-consolidation delete [c1]".into())
        );
        assert!(validate(&a, &replace).is_err());
        assert_eq!(
            validate(&a, &BTreeSet::new()),
            Err("the decision changed during validation: multi-node-consolidation delete [c1, c2] became nothing".into())
        );
    }

    #[test]
    fn drift_is_not_validated() {
        assert!(!needs_validation(Method::Drift) && !needs_validation(Method::StaticDrift));
        assert!(needs_validation(Method::Emptiness) && needs_validation(Method::SingleNodeConsolidation));
    }
}
