//! Label selectors in the scheduler's interned form, `matchLabelKeys`/`mismatchLabelKeys` folded in, and the
//! namespaces a pod-affinity term counts pods in (`namespaces` and `namespaceSelector` resolved against the
//! snapshot's Namespace objects).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeSelector;

use crate::{
    requirements::{LabelInterner, Symbol},
    scheduling::{LabelSelector, NamespaceScope, SelectorExpression, SelectorOperator},
};

fn operator(op: &str) -> Result<SelectorOperator, String> {
    match op {
        "In" => Ok(SelectorOperator::In),
        "NotIn" => Ok(SelectorOperator::NotIn),
        "Exists" => Ok(SelectorOperator::Exists),
        "DoesNotExist" => Ok(SelectorOperator::DoesNotExist),
        other => Err(format!("unknown label selector operator {other:?}")),
    }
}

fn operator_rank(op: SelectorOperator) -> u8 {
    match op {
        SelectorOperator::In => 0,
        SelectorOperator::NotIn => 1,
        SelectorOperator::Exists => 2,
        SelectorOperator::DoesNotExist => 3,
    }
}

/// Sorts expressions so equal selectors written in a different order group together.
fn canonicalize(selector: &mut LabelSelector) {
    for e in &mut selector.expressions {
        e.values.sort_unstable();
        e.values.dedup();
    }
    selector.expressions.sort_by(|a, b| {
        a.key
            .cmp(&b.key)
            .then_with(|| operator_rank(a.operator).cmp(&operator_rank(b.operator)))
            .then_with(|| a.values.cmp(&b.values))
    });
    selector.expressions.dedup();
}

/// A selector that matches no pod: what Kubernetes makes of a term without a `labelSelector`.
pub(super) fn match_nothing(interner: &mut LabelInterner) -> LabelSelector {
    LabelSelector {
        expressions: vec![SelectorExpression {
            key: interner.intern(""),
            operator: SelectorOperator::In,
            values: Vec::new(),
        }],
    }
}

/// Interns a pod label selector (pod label keys are not node label keys, so they are interned as they are).
pub(super) fn label_selector(
    selector: Option<&KubeSelector>,
    interner: &mut LabelInterner,
) -> Result<LabelSelector, String> {
    let Some(selector) = selector else {
        return Ok(match_nothing(interner));
    };
    let mut out = LabelSelector::default();
    for (k, v) in selector.match_labels.iter().flatten() {
        out.expressions.push(SelectorExpression {
            key: interner.intern(k),
            operator: SelectorOperator::In,
            values: vec![interner.intern(v)],
        });
    }
    for e in selector.match_expressions.iter().flatten() {
        let op = operator(&e.operator)?;
        let values: Vec<Symbol> = e.values.iter().flatten().map(|v| interner.intern(v)).collect();
        let needs_values = matches!(op, SelectorOperator::In | SelectorOperator::NotIn);
        if needs_values == values.is_empty() {
            return Err(format!(
                "label selector key {:?}: operator {} {} values",
                e.key,
                e.operator,
                if needs_values { "needs" } else { "takes no" }
            ));
        }
        out.expressions.push(SelectorExpression {
            key: interner.intern(&e.key),
            operator: op,
            values,
        });
    }
    canonicalize(&mut out);
    Ok(out)
}

/// Adds `key In [the pod's value]` (or `NotIn` for mismatchLabelKeys) for each key the pod carries, as the API
/// server does for `matchLabelKeys`; keys the pod lacks are ignored.
pub(super) fn fold_label_keys(
    selector: &mut LabelSelector,
    keys: &[String],
    pod_labels: Option<&BTreeMap<String, String>>,
    operator: SelectorOperator,
    interner: &mut LabelInterner,
) {
    let Some(pod_labels) = pod_labels else { return };
    let mut changed = false;
    for key in keys {
        if let Some(value) = pod_labels.get(key) {
            selector.expressions.push(SelectorExpression {
                key: interner.intern(key),
                operator,
                values: vec![interner.intern(value)],
            });
            changed = true;
        }
    }
    if changed {
        canonicalize(selector);
    }
}

/// Whether string labels match a Kubernetes selector (for Namespace objects and workload selectors).
pub(super) fn matches_labels(
    selector: &KubeSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, String> {
    let get = |k: &str| labels.and_then(|l| l.get(k));
    for (k, v) in selector.match_labels.iter().flatten() {
        if get(k) != Some(v) {
            return Ok(false);
        }
    }
    for e in selector.match_expressions.iter().flatten() {
        let value = get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        let ok = match operator(&e.operator)? {
            SelectorOperator::In => value.is_some_and(|v| values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

fn is_empty(selector: &KubeSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// The snapshot's namespaces and their labels, for `namespaceSelector`.
pub(super) struct NamespaceIndex<'s> {
    namespaces: Vec<(&'s str, Option<&'s BTreeMap<String, String>>)>,
}

impl<'s> NamespaceIndex<'s> {
    pub fn new(namespaces: &'s [Namespace]) -> Self {
        Self {
            namespaces: namespaces
                .iter()
                .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref())))
                .collect(),
        }
    }

    /// The namespaces a pod-affinity term counts pods in: its own namespace when the term names none and has no
    /// selector; every namespace for an empty `namespaceSelector`; otherwise the listed namespaces plus those
    /// whose labels the selector matches. `cache` remembers selector results, since many pods share a term.
    pub fn scope(
        &self,
        own: &str,
        namespaces: Option<&[String]>,
        selector: Option<&KubeSelector>,
        interner: &mut LabelInterner,
        cache: &mut HashMap<String, Vec<Symbol>>,
    ) -> Result<NamespaceScope, String> {
        let listed = namespaces.unwrap_or_default();
        let mut out: Vec<Symbol> = match selector {
            None if listed.is_empty() => return Ok(NamespaceScope::Only(vec![interner.intern(own)])),
            Some(s) if is_empty(s) => return Ok(NamespaceScope::All),
            None => Vec::new(),
            Some(s) => {
                let key = serde_json::to_string(s).map_err(|e| e.to_string())?;
                if let Some(hit) = cache.get(&key) {
                    hit.clone()
                } else {
                    let mut matched = Vec::new();
                    for (name, labels) in &self.namespaces {
                        if matches_labels(s, *labels).map_err(|e| format!("namespaceSelector: {e}"))? {
                            matched.push(interner.intern(name));
                        }
                    }
                    cache.insert(key, matched.clone());
                    matched
                }
            }
        };
        out.extend(listed.iter().map(|n| interner.intern(n)));
        out.sort_unstable();
        out.dedup();
        Ok(NamespaceScope::Only(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn namespace(name: &str, labels: &[(&str, &str)]) -> Namespace {
        let mut n = Namespace::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some(labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect());
        n
    }

    fn selector(labels: &[(&str, &str)]) -> KubeSelector {
        KubeSelector {
            match_labels: Some(labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()),
            match_expressions: None,
        }
    }

    #[test]
    fn namespace_scope_defaults_to_the_pods_namespace_and_empty_selector_means_all() {
        let nss = [
            namespace("a", &[("team", "x")]),
            namespace("b", &[("team", "y")]),
            namespace("c", &[("team", "x")]),
        ];
        let index = NamespaceIndex::new(&nss);
        let mut i = LabelInterner::new();
        let mut cache = HashMap::new();
        let own = index.scope("web", None, None, &mut i, &mut cache).unwrap();
        assert_eq!(own, NamespaceScope::Only(vec![i.intern("web")]));
        let all = index
            .scope("web", None, Some(&KubeSelector::default()), &mut i, &mut cache)
            .unwrap();
        assert_eq!(all, NamespaceScope::All);
        let listed = ["b".to_string()];
        let team_x = index
            .scope(
                "web",
                Some(&listed),
                Some(&selector(&[("team", "x")])),
                &mut i,
                &mut cache,
            )
            .unwrap();
        let mut expected = vec![i.intern("a"), i.intern("b"), i.intern("c")];
        expected.sort_unstable();
        assert_eq!(team_x, NamespaceScope::Only(expected));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn selectors_intern_and_sort_and_missing_selector_matches_nothing() {
        let mut i = LabelInterner::new();
        let s = KubeSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["b".into(), "a".into()]),
            }]),
        };
        let sel = label_selector(Some(&s), &mut i).unwrap();
        assert_eq!(sel.expressions.len(), 2);
        let labels = crate::scheduling::Labels::new(vec![
            (i.intern("app"), i.intern("web")),
            (i.intern("tier"), i.intern("a")),
        ]);
        assert!(sel.matches(&labels));
        assert!(!label_selector(None, &mut i).unwrap().matches(&labels));
        let bad = KubeSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "x".into(),
                operator: "Near".into(),
                values: None,
            }]),
        };
        assert!(label_selector(Some(&bad), &mut i).unwrap_err().contains("Near"));
    }
}
