//! AL2023: a MIME multipart document whose last part is Karpenter's nodeadm `NodeConfig`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::kubelet::{
    cluster_dns, effect_name, kubelet_labels, labels_flag, max_pods, taints_with_unregistered,
};
use super::mime::{MimePart, custom_parts, render_mime};
use super::yaml::to_yaml;
use super::{NODEADM_CONTENT_TYPE, UserDataError, UserDataInput};

fn insert_map(
    config: &mut serde_json::Map<String, Value>,
    key: &str,
    map: Option<&BTreeMap<String, String>>,
) {
    if let Some(map) = map.filter(|m| !m.is_empty()) {
        config.insert(key.into(), json!(map));
    }
}

/// The kubelet configuration (KubeletConfiguration field names) from `spec.kubelet`, max pods and DNS.
fn kubelet_config(input: &UserDataInput<'_>) -> serde_json::Map<String, Value> {
    let mut config = serde_json::Map::new();
    let dns = cluster_dns(input);
    if !dns.is_empty() {
        config.insert("clusterDNS".into(), json!(dns));
    }
    if let Some(pods) = max_pods(input) {
        config.insert("maxPods".into(), json!(pods));
    }
    if let Some(k) = input.kubelet {
        if let Some(v) = k.pods_per_core {
            config.insert("podsPerCore".into(), json!(v));
        }
        insert_map(&mut config, "systemReserved", k.system_reserved.as_ref());
        insert_map(&mut config, "kubeReserved", k.kube_reserved.as_ref());
        insert_map(&mut config, "evictionHard", k.eviction_hard.as_ref());
        insert_map(&mut config, "evictionSoft", k.eviction_soft.as_ref());
        insert_map(
            &mut config,
            "evictionSoftGracePeriod",
            k.eviction_soft_grace_period.as_ref(),
        );
        if let Some(v) = k.eviction_max_pod_grace_period {
            config.insert("evictionMaxPodGracePeriod".into(), json!(v));
        }
        if let Some(v) = k.image_gc_high_threshold_percent {
            config.insert("imageGCHighThresholdPercent".into(), json!(v));
        }
        if let Some(v) = k.image_gc_low_threshold_percent {
            config.insert("imageGCLowThresholdPercent".into(), json!(v));
        }
        if let Some(v) = k.cpu_cfs_quota {
            config.insert("cpuCFSQuota".into(), json!(v));
        }
    }
    config
}

/// The nodeadm NodeConfig Karpenter writes, as YAML.
pub fn al2023_node_config(input: &UserDataInput<'_>) -> String {
    let mut cluster = serde_json::Map::new();
    cluster.insert("name".into(), json!(input.cluster.name));
    if let Some(endpoint) = &input.cluster.endpoint {
        cluster.insert("apiServerEndpoint".into(), json!(endpoint));
    }
    if let Some(ca) = &input.cluster.ca_bundle {
        cluster.insert("certificateAuthority".into(), json!(ca));
    }
    if let Some(cidr) = &input.cluster.service_cidr {
        cluster.insert("cidr".into(), json!(cidr));
    }
    let mut config = kubelet_config(input);
    let taints: Vec<Value> = taints_with_unregistered(&input.taints)
        .iter()
        .map(|t| {
            let mut taint = serde_json::Map::new();
            taint.insert("key".into(), json!(t.key));
            if let Some(value) = t.value.as_deref().filter(|v| !v.is_empty()) {
                taint.insert("value".into(), json!(value));
            }
            taint.insert("effect".into(), json!(effect_name(t.effect)));
            Value::Object(taint)
        })
        .collect();
    config.insert("registerWithTaints".into(), Value::Array(taints));
    let mut kubelet = serde_json::Map::new();
    kubelet.insert("config".into(), Value::Object(config));
    let labels = kubelet_labels(&input.labels);
    if !labels.is_empty() {
        kubelet.insert(
            "flags".into(),
            json!([format!("--node-labels={}", labels_flag(&labels))]),
        );
    }
    let mut spec = json!({"cluster": Value::Object(cluster), "kubelet": Value::Object(kubelet)});
    if input.instance_store_raid0 {
        spec["instance"] = json!({"localStorage": {"strategy": "RAID0"}});
    }
    let document = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": spec,
    });
    // Keys are written sorted; a NodeConfig reads better with apiVersion and kind first.
    let mut out = String::from("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n");
    out.push_str(&to_yaml(&json!({"spec": document["spec"]})));
    out
}

pub(super) fn al2023(input: &UserDataInput<'_>) -> Result<String, UserDataError> {
    let mut parts = custom_parts(input.custom)?;
    parts.push(MimePart::typed(NODEADM_CONTENT_TYPE, &al2023_node_config(input)));
    Ok(render_mime(&parts))
}
