//! Bottlerocket: the user's TOML with Karpenter's `settings.kubernetes` set over it.

use std::collections::BTreeMap;

use super::kubelet::{cluster_dns, effect_name, kubelet_labels, max_pods, taints_with_unregistered};
use super::{UserDataError, UserDataInput};

fn toml_table(item: &mut toml_edit::Item) -> Option<&mut toml_edit::Table> {
    if item.is_none() {
        let mut table = toml_edit::Table::new();
        table.set_implicit(true);
        *item = toml_edit::Item::Table(table);
    }
    if let Some(inline) = item.as_inline_table().cloned() {
        *item = toml_edit::Item::Table(inline.into_table());
    }
    item.as_table_mut()
}

fn string_map_value(map: &BTreeMap<String, String>) -> toml_edit::Item {
    let mut table = toml_edit::Table::new();
    for (k, v) in map {
        table.insert(k, toml_edit::value(v.as_str()));
    }
    toml_edit::Item::Table(table)
}

/// Bottlerocket's TOML: the user's document with Karpenter's `settings.kubernetes`.
pub fn bottlerocket(input: &UserDataInput<'_>) -> Result<String, UserDataError> {
    let mut doc: toml_edit::DocumentMut = input
        .custom
        .unwrap_or_default()
        .parse()
        .map_err(|e: toml_edit::TomlError| UserDataError::InvalidToml(e.to_string().trim().to_string()))?;
    let invalid = |what: &str| UserDataError::InvalidToml(format!("{what} is not a table"));
    let settings = toml_table(&mut doc["settings"]).ok_or_else(|| invalid("settings"))?;
    let kubernetes = toml_table(&mut settings["kubernetes"]).ok_or_else(|| invalid("settings.kubernetes"))?;
    kubernetes.set_implicit(false);
    let cluster = input.cluster;
    kubernetes.insert("cluster-name", toml_edit::value(cluster.name.as_str()));
    if let Some(endpoint) = &cluster.endpoint {
        kubernetes.insert("api-server", toml_edit::value(endpoint.as_str()));
    }
    if let Some(ca) = &cluster.ca_bundle {
        kubernetes.insert("cluster-certificate", toml_edit::value(ca.as_str()));
    }
    let dns = cluster_dns(input);
    if !dns.is_empty() && !kubernetes.contains_key("cluster-dns-ip") {
        kubernetes.insert(
            "cluster-dns-ip",
            match dns.as_slice() {
                [one] => toml_edit::value(one.as_str()),
                many => toml_edit::value(many.iter().map(String::as_str).collect::<toml_edit::Array>()),
            },
        );
    }
    if let Some(pods) = max_pods(input) {
        kubernetes.insert("max-pods", toml_edit::value(pods));
    }
    if let Some(k) = input.kubelet {
        for (key, map) in [
            ("system-reserved", &k.system_reserved),
            ("kube-reserved", &k.kube_reserved),
            ("eviction-hard", &k.eviction_hard),
            ("eviction-soft", &k.eviction_soft),
            ("eviction-soft-grace-period", &k.eviction_soft_grace_period),
        ] {
            if let Some(map) = map.as_ref().filter(|m| !m.is_empty()) {
                kubernetes.insert(key, string_map_value(map));
            }
        }
        if let Some(v) = k.eviction_max_pod_grace_period {
            kubernetes.insert("eviction-max-pod-grace-period", toml_edit::value(i64::from(v)));
        }
        if let Some(v) = k.image_gc_high_threshold_percent {
            kubernetes.insert("image-gc-high-threshold-percent", toml_edit::value(i64::from(v)));
        }
        if let Some(v) = k.image_gc_low_threshold_percent {
            kubernetes.insert("image-gc-low-threshold-percent", toml_edit::value(i64::from(v)));
        }
        if let Some(v) = k.cpu_cfs_quota {
            kubernetes.insert("cpu-cfs-quota-enforced", toml_edit::value(v));
        }
    }
    let labels = kubelet_labels(&input.labels);
    if !labels.is_empty() {
        let node_labels = toml_table(&mut kubernetes["node-labels"])
            .ok_or_else(|| invalid("settings.kubernetes.node-labels"))?;
        node_labels.set_implicit(false);
        for (k, v) in &labels {
            node_labels.insert(k, toml_edit::value(v.as_str()));
        }
    }
    let node_taints = toml_table(&mut kubernetes["node-taints"])
        .ok_or_else(|| invalid("settings.kubernetes.node-taints"))?;
    node_taints.set_implicit(false);
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for taint in taints_with_unregistered(&input.taints) {
        by_key.entry(taint.key.clone()).or_default().push(format!(
            "{}:{}",
            taint.value.as_deref().unwrap_or_default(),
            effect_name(taint.effect)
        ));
    }
    for (key, values) in by_key {
        node_taints.insert(
            &key,
            toml_edit::value(values.iter().map(String::as_str).collect::<toml_edit::Array>()),
        );
    }
    Ok(doc.to_string())
}
