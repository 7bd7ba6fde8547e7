//! Taints and tolerations in the scheduler's form. An empty value and no value are the same to Kubernetes, so both
//! become `None`; known ephemeral taints (a node starting up) are recognised here.

use k8s_openapi::api::core::v1::{Taint as KubeTaint, Toleration as KubeToleration};
use karpenter_api::{common, labels};

use crate::{
    requirements::LabelInterner,
    scheduling::{Taint, TaintEffect, Toleration},
};

fn effect(effect: &str) -> Option<TaintEffect> {
    match effect {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    }
}

fn api_effect(effect: common::TaintEffect) -> TaintEffect {
    match effect {
        common::TaintEffect::NoSchedule => TaintEffect::NoSchedule,
        common::TaintEffect::PreferNoSchedule => TaintEffect::PreferNoSchedule,
        common::TaintEffect::NoExecute => TaintEffect::NoExecute,
    }
}

fn value(v: Option<&str>, interner: &mut LabelInterner) -> Option<crate::requirements::Symbol> {
    v.filter(|v| !v.is_empty()).map(|v| interner.intern(v))
}

/// Taints that come and go while a node starts (not-ready, unreachable, uninitialized, unregistered and the
/// `readiness.k8s.io/` gates): scheduling ignores them.
pub(super) fn is_ephemeral(key: &str) -> bool {
    labels::KNOWN_EPHEMERAL_TAINT_KEYS.contains(&key) || key.starts_with(labels::EPHEMERAL_TAINT_PREFIX)
}

/// A Node's taint; `None` for an effect Kubernetes does not define.
pub(super) fn node_taint(t: &KubeTaint, interner: &mut LabelInterner) -> Option<Taint> {
    Some(Taint {
        key: interner.intern(&t.key),
        value: value(t.value.as_deref(), interner),
        effect: effect(&t.effect)?,
    })
}

/// A NodePool's or NodeClaim's taint.
pub(super) fn api_taint(t: &common::Taint, interner: &mut LabelInterner) -> Taint {
    Taint {
        key: interner.intern(&t.key),
        value: value(t.value.as_deref(), interner),
        effect: api_effect(t.effect),
    }
}

/// Whether a Node taint is the same taint as a NodePool's or NodeClaim's (key, value and effect).
pub(super) fn same_taint(node: &KubeTaint, api: &common::Taint) -> bool {
    node.key == api.key
        && node.value.as_deref().unwrap_or_default() == api.value.as_deref().unwrap_or_default()
        && effect(&node.effect) == Some(api_effect(api.effect))
}

pub(super) fn tolerations(list: Option<&[KubeToleration]>, interner: &mut LabelInterner) -> Vec<Toleration> {
    list.unwrap_or_default()
        .iter()
        .filter_map(|t| {
            // An empty effect tolerates every effect; one Kubernetes does not define tolerates nothing.
            let effect = match t.effect.as_deref() {
                None | Some("") => None,
                Some(e) => Some(effect(e)?),
            };
            Some(Toleration {
                key: t
                    .key
                    .as_deref()
                    .filter(|k| !k.is_empty())
                    .map(|k| interner.intern(k)),
                exists: t.operator.as_deref() == Some("Exists"),
                value: value(t.value.as_deref(), interner),
                effect,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::pod::untolerated;

    #[test]
    fn empty_values_and_exists_tolerations() {
        let mut i = LabelInterner::new();
        let taint = node_taint(
            &KubeTaint {
                key: "dedicated".into(),
                value: Some(String::new()),
                effect: "NoSchedule".into(),
                time_added: None,
            },
            &mut i,
        )
        .unwrap();
        assert_eq!(taint.value, None);
        let equal_no_value = KubeToleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            ..Default::default()
        };
        let exists_all = KubeToleration {
            operator: Some("Exists".into()),
            ..Default::default()
        };
        for t in [equal_no_value, exists_all] {
            let tols = tolerations(Some(&[t]), &mut i);
            assert!(untolerated(&tols, std::slice::from_ref(&taint), true).is_none());
        }
        assert!(is_ephemeral("node.kubernetes.io/not-ready"));
        assert!(is_ephemeral("readiness.k8s.io/network"));
        assert!(!is_ephemeral("dedicated"));
    }
}
