//! What the families share about the kubelet: the labels it may register with, its taints and max pods, the
//! cluster DNS, and the `--kubelet-extra-args` of AL2 and Windows.

use std::collections::BTreeMap;

use karpenter_api::common::{Taint, TaintEffect};
use karpenter_api::labels::UNREGISTERED_TAINT_KEY;

use super::UserDataInput;

/// `taints` plus `karpenter.sh/unregistered:NoExecute` (once).
pub fn taints_with_unregistered(taints: &[Taint]) -> Vec<Taint> {
    let mut all = taints.to_vec();
    if !all
        .iter()
        .any(|t| t.key == UNREGISTERED_TAINT_KEY && t.effect == TaintEffect::NoExecute)
    {
        all.push(Taint::new(UNREGISTERED_TAINT_KEY, None, TaintEffect::NoExecute));
    }
    all
}

/// The labels a kubelet may register itself with: everything outside the `kubernetes.io` and `k8s.io`
/// domains, and inside them only the `kubelet.` and `node.` subdomains and the well-known topology, instance-type,
/// OS and architecture labels (the NodeRestriction admission plugin refuses the rest).
pub fn kubelet_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    const ALLOWED: [&str; 9] = [
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    ];
    labels
        .iter()
        .filter(|(key, _)| {
            let Some((domain, _)) = key.split_once('/') else {
                return true;
            };
            let restricted = ["kubernetes.io", "k8s.io"]
                .iter()
                .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
            !restricted
                || ALLOWED.contains(&key.as_str())
                || domain.starts_with("kubelet.kubernetes.io")
                || domain.ends_with("kubelet.kubernetes.io")
                || domain == "node.kubernetes.io"
                || domain.ends_with(".node.kubernetes.io")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

pub(super) fn effect_name(effect: TaintEffect) -> &'static str {
    match effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

/// `key=value:Effect` (or `key:Effect`), as kubelet's `--register-with-taints` takes it.
fn taint_flag(taint: &Taint) -> String {
    match taint.value.as_deref().filter(|v| !v.is_empty()) {
        Some(value) => format!("{}={value}:{}", taint.key, effect_name(taint.effect)),
        None => format!("{}:{}", taint.key, effect_name(taint.effect)),
    }
}

pub(super) fn labels_flag(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn map_flag(map: &BTreeMap<String, String>, separator: char) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}{separator}{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The cluster DNS addresses: `spec.kubelet.clusterDNS`, else the discovered one.
pub(super) fn cluster_dns(input: &UserDataInput<'_>) -> Vec<String> {
    input
        .kubelet
        .and_then(|k| k.cluster_dns.clone())
        .filter(|dns| !dns.is_empty())
        .or_else(|| input.cluster.dns_ip.clone().map(|ip| vec![ip]))
        .unwrap_or_default()
}

/// The max pods to configure: `spec.kubelet.maxPods` wins over the instance type's.
pub(super) fn max_pods(input: &UserDataInput<'_>) -> Option<i64> {
    input
        .kubelet
        .and_then(|k| k.max_pods)
        .map(i64::from)
        .or(input.max_pods)
}

/// `--kubelet-extra-args` for AL2's bootstrap script and Windows' (labels, taints, max pods, reserved
/// resources, eviction thresholds, image GC, CFS quota).
pub(super) fn kubelet_extra_args(input: &UserDataInput<'_>, with_pods_per_core: bool) -> String {
    let mut args = Vec::new();
    let labels = kubelet_labels(&input.labels);
    if !labels.is_empty() {
        args.push(format!("--node-labels={}", labels_flag(&labels)));
    }
    let taints: Vec<String> = taints_with_unregistered(&input.taints)
        .iter()
        .map(taint_flag)
        .collect();
    args.push(format!("--register-with-taints={}", taints.join(",")));
    if let Some(pods) = max_pods(input) {
        args.push(format!("--max-pods={pods}"));
    }
    if let Some(k) = input.kubelet {
        if with_pods_per_core && let Some(v) = k.pods_per_core {
            args.push(format!("--pods-per-core={v}"));
        }
        for (flag, map, separator) in [
            ("system-reserved", &k.system_reserved, '='),
            ("kube-reserved", &k.kube_reserved, '='),
            ("eviction-hard", &k.eviction_hard, '<'),
            ("eviction-soft", &k.eviction_soft, '<'),
            ("eviction-soft-grace-period", &k.eviction_soft_grace_period, '='),
        ] {
            if let Some(map) = map.as_ref().filter(|m| !m.is_empty()) {
                args.push(format!("--{flag}={}", map_flag(map, separator)));
            }
        }
        if let Some(v) = k.eviction_max_pod_grace_period {
            args.push(format!("--eviction-max-pod-grace-period={v}"));
        }
        if let Some(v) = k.image_gc_high_threshold_percent {
            args.push(format!("--image-gc-high-threshold={v}"));
        }
        if let Some(v) = k.image_gc_low_threshold_percent {
            args.push(format!("--image-gc-low-threshold={v}"));
        }
        if let Some(v) = k.cpu_cfs_quota {
            args.push(format!("--cpu-cfs-quota={v}"));
        }
    }
    args.join(" ")
}
