//! User data for the launch templates: how an instance joins the cluster, per AMI family, merged with the
//! EC2NodeClass's own `spec.userData`.
//!
//! - **AL2023**: a MIME multipart document whose last part is a nodeadm `NodeConfig` (cluster name, API server
//!   endpoint, CA bundle, service CIDR, the kubelet configuration from `spec.kubelet` plus the max pods, the
//!   node's taints as `registerWithTaints` and its labels as a `--node-labels` flag). The user's data comes
//!   first: its parts when it is MIME, else one part typed by its content (a NodeConfig, a shell script or a
//!   cloud-config). nodeadm merges the NodeConfigs in order, so the cluster settings Karpenter writes win.
//! - **Bottlerocket**: TOML. The user's document is parsed and Karpenter's `settings.kubernetes` values are set
//!   over it; `node-labels` and `node-taints` are merged key by key (Karpenter's win).
//! - **AL2**: a MIME multipart document: the user's parts, then a shell script calling `/etc/eks/bootstrap.sh`
//!   with the cluster, the CA, the DNS address and `--kubelet-extra-args` (labels, taints, max pods, reserved
//!   resources, eviction thresholds).
//! - **Windows**: one `<powershell>` block: the user's script, then the EKS bootstrap script with the same
//!   settings.
//! - **Custom**: the user's data unchanged (none when unset).
//!
//! Every node registers with the `karpenter.sh/unregistered:NoExecute` taint, which Karpenter removes once the
//! Node and its NodeClaim are linked. The documents are plain strings; [`base64_encode`] makes EC2's form.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use karpenter_api::common::{Taint, TaintEffect};
use karpenter_api::ec2nodeclass::{AmiFamily, KubeletConfiguration};
use karpenter_api::labels::UNREGISTERED_TAINT_KEY;
use serde_json::{Value, json};

/// EC2's limit on user data (after base64 decoding): 16 KiB.
pub const USER_DATA_LIMIT_BYTES: usize = 16 * 1024;
/// The MIME boundary of the documents Karpenter writes.
pub const MIME_BOUNDARY: &str = "//";
/// The MIME type nodeadm reads NodeConfigs from.
pub const NODEADM_CONTENT_TYPE: &str = "application/node.eks.aws";

/// What user data knows about the cluster the node joins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    pub name: String,
    /// The API server URL; nodes cannot join without it.
    pub endpoint: Option<String>,
    /// The cluster CA bundle, base64 of the PEM (as `certificate-authority-data` in a kubeconfig).
    pub ca_bundle: Option<String>,
    /// The Service CIDR (`10.100.0.0/16`); nodeadm requires it.
    pub service_cidr: Option<String>,
    /// The cluster DNS Service address (`10.100.0.10`), unless `spec.kubelet.clusterDNS` names others.
    pub dns_ip: Option<String>,
}

/// What one launch template's user data is generated from.
#[derive(Debug, Clone, PartialEq)]
pub struct UserDataInput<'a> {
    pub cluster: &'a ClusterInfo,
    pub kubelet: Option<&'a KubeletConfiguration>,
    /// The max pods of the instance types launched with it (`spec.kubelet.maxPods` when set).
    pub max_pods: Option<i64>,
    /// The node's labels (only those a kubelet may set: see [`kubelet_labels`]).
    pub labels: BTreeMap<String, String>,
    /// The node's taints; [`taints_with_unregistered`] adds Karpenter's registration taint.
    pub taints: Vec<Taint>,
    /// `spec.userData`.
    pub custom: Option<&'a str>,
    /// `spec.instanceStorePolicy: RAID0`: the node's bootstrap assembles its instance-store disks into one
    /// array for containerd and the kubelet (AL2 and AL2023; the other families have no such switch).
    pub instance_store_raid0: bool,
}

/// User data that cannot be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    #[error("spec.userData is not valid TOML for Bottlerocket: {0}")]
    InvalidToml(String),
    #[error("spec.userData is a MIME document without a boundary")]
    InvalidMime,
}

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

fn effect_name(effect: TaintEffect) -> &'static str {
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

fn labels_flag(labels: &BTreeMap<String, String>) -> String {
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
fn cluster_dns(input: &UserDataInput<'_>) -> Vec<String> {
    input
        .kubelet
        .and_then(|k| k.cluster_dns.clone())
        .filter(|dns| !dns.is_empty())
        .or_else(|| input.cluster.dns_ip.clone().map(|ip| vec![ip]))
        .unwrap_or_default()
}

/// The max pods to configure: `spec.kubelet.maxPods` wins over the instance type's.
fn max_pods(input: &UserDataInput<'_>) -> Option<i64> {
    input
        .kubelet
        .and_then(|k| k.max_pods)
        .map(i64::from)
        .or(input.max_pods)
}

/// The user data for `family`. None for `Custom` without `spec.userData`.
pub fn generate(family: AmiFamily, input: &UserDataInput<'_>) -> Result<Option<String>, UserDataError> {
    match family {
        AmiFamily::AL2023 => al2023(input).map(Some),
        AmiFamily::AL2 => al2(input).map(Some),
        AmiFamily::Bottlerocket => bottlerocket(input).map(Some),
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => Ok(Some(windows(input))),
        AmiFamily::Custom => Ok(input.custom.map(str::to_string)),
    }
}

// --- MIME -----------------------------------------------------------------------------------------------------------

/// One part of a multipart document: its headers (without the trailing blank line) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MimePart {
    pub headers: String,
    pub body: String,
}

impl MimePart {
    fn typed(content_type: &str, body: &str) -> Self {
        Self {
            headers: format!("Content-Type: {content_type}"),
            body: body.to_string(),
        }
    }
}

/// The boundary of a `multipart/*` document's top-level Content-Type, if `text` is one.
fn mime_boundary(text: &str) -> Option<Option<String>> {
    let (head, _) = split_headers(text)?;
    let unfolded = head
        .replace("\r\n", "\n")
        .replace("\n ", " ")
        .replace("\n\t", " ");
    let content_type = unfolded.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-type")
            .then(|| value.trim().to_string())
    })?;
    if !content_type.to_ascii_lowercase().starts_with("multipart/") {
        return None;
    }
    let boundary = content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"').to_string())
    });
    Some(boundary)
}

/// `(headers, body)` when `text` starts with RFC 822 style headers ended by a blank line.
fn split_headers(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start_matches(['\r', '\n']);
    let first = text.lines().next()?;
    if !first.contains(':') || first.starts_with('#') || first.starts_with('<') {
        return None;
    }
    let (head, body) = text.split_once("\r\n\r\n").or_else(|| text.split_once("\n\n"))?;
    head.lines()
        .all(|l| l.starts_with([' ', '\t']) || l.split_once(':').is_some_and(|(n, _)| !n.contains(' ')))
        .then_some((head, body))
}

/// The parts of a MIME multipart document, or None when `text` is not one.
pub fn parse_mime(text: &str) -> Result<Option<Vec<MimePart>>, UserDataError> {
    let Some(boundary) = mime_boundary(text) else {
        return Ok(None);
    };
    let boundary = boundary.ok_or(UserDataError::InvalidMime)?;
    let delimiter = format!("\n--{boundary}");
    let text = text.replace("\r\n", "\n");
    let mut parts = Vec::new();
    let mut sections = text.split(delimiter.as_str());
    // Everything before the first delimiter is the preamble (with the top-level headers).
    sections.next();
    for section in sections {
        if section.starts_with("--") {
            break;
        }
        let section = section
            .trim_start_matches([' ', '\t'])
            .strip_prefix('\n')
            .unwrap_or(section);
        let (headers, body) = section.split_once("\n\n").unwrap_or(("", section));
        parts.push(MimePart {
            headers: headers.to_string(),
            body: body.trim_end_matches('\n').to_string() + "\n",
        });
    }
    Ok(Some(parts))
}

/// A multipart/mixed document of `parts`.
pub fn render_mime(parts: &[MimePart]) -> String {
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{MIME_BOUNDARY}\"\n\n");
    for part in parts {
        let _ = write!(out, "--{MIME_BOUNDARY}\n{}\n\n{}", part.headers, part.body);
        if !part.body.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
    }
    let _ = writeln!(out, "--{MIME_BOUNDARY}--");
    out
}

/// The user's data as MIME parts: its own parts when it is MIME, else one part typed by its content.
fn custom_parts(custom: Option<&str>) -> Result<Vec<MimePart>, UserDataError> {
    let Some(custom) = custom.filter(|c| !c.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    if let Some(parts) = parse_mime(custom)? {
        return Ok(parts);
    }
    let trimmed = custom.trim_start();
    let content_type = if trimmed.starts_with("#cloud-config") {
        "text/cloud-config"
    } else if trimmed.starts_with("#!") {
        "text/x-shellscript; charset=\"us-ascii\""
    } else if trimmed.contains("kind: NodeConfig") || trimmed.starts_with("apiVersion: node.eks.aws") {
        NODEADM_CONTENT_TYPE
    } else {
        "text/x-shellscript; charset=\"us-ascii\""
    };
    let mut body = custom.to_string();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Ok(vec![MimePart::typed(content_type, &body)])
}

// --- YAML (a JSON value as block YAML) -----------------------------------------------------------------------------

fn yaml_scalar(value: &Value) -> String {
    match value {
        Value::String(s) => {
            let plain = !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '-' | '_' | ':' | '%'))
                && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && !s.contains(": ")
                && !s.ends_with(':')
                && !matches!(
                    s.to_ascii_lowercase().as_str(),
                    "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
                );
            if plain {
                s.clone()
            } else {
                Value::String(s.clone()).to_string()
            }
        }
        other => other.to_string(),
    }
}

fn yaml_key(key: &str) -> String {
    yaml_scalar(&Value::String(key.to_string()))
}

fn write_yaml(out: &mut String, value: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            // Sorted, whatever order serde_json keeps (its `preserve_order` feature may be on elsewhere).
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(key, _)| *key);
            for (key, item) in entries {
                match item {
                    Value::Object(inner) if !inner.is_empty() => {
                        let _ = writeln!(out, "{pad}{}:", yaml_key(key));
                        write_yaml(out, item, indent + 2);
                    }
                    Value::Array(inner) if !inner.is_empty() => {
                        let _ = writeln!(out, "{pad}{}:", yaml_key(key));
                        write_yaml(out, item, indent);
                    }
                    Value::Object(_) => {
                        let _ = writeln!(out, "{pad}{}: {{}}", yaml_key(key));
                    }
                    Value::Array(_) => {
                        let _ = writeln!(out, "{pad}{}: []", yaml_key(key));
                    }
                    scalar => {
                        let _ = writeln!(out, "{pad}{}: {}", yaml_key(key), yaml_scalar(scalar));
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::Object(map) if !map.is_empty() => {
                        let mut nested = String::new();
                        write_yaml(&mut nested, item, indent + 2);
                        // The first key goes on the dash's line.
                        let nested = nested.trim_start_matches(' ');
                        let _ = write!(out, "{pad}- {nested}");
                    }
                    scalar => {
                        let _ = writeln!(out, "{pad}- {}", yaml_scalar(scalar));
                    }
                }
            }
        }
        scalar => {
            let _ = writeln!(out, "{pad}{}", yaml_scalar(scalar));
        }
    }
}

/// A JSON value as block YAML (strings quoted when they are not plainly safe).
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    write_yaml(&mut out, value, 0);
    out
}

// --- AL2023 ---------------------------------------------------------------------------------------------------------

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

fn al2023(input: &UserDataInput<'_>) -> Result<String, UserDataError> {
    let mut parts = custom_parts(input.custom)?;
    parts.push(MimePart::typed(NODEADM_CONTENT_TYPE, &al2023_node_config(input)));
    Ok(render_mime(&parts))
}

// --- AL2 ------------------------------------------------------------------------------------------------------------

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `--kubelet-extra-args` for AL2's bootstrap script and Windows' (labels, taints, max pods, reserved
/// resources, eviction thresholds, image GC, CFS quota).
fn kubelet_extra_args(input: &UserDataInput<'_>, with_pods_per_core: bool) -> String {
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

/// The AL2 bootstrap script.
pub fn al2_script(input: &UserDataInput<'_>) -> String {
    let cluster = input.cluster;
    let mut command = format!("/etc/eks/bootstrap.sh {}", shell_quote(&cluster.name));
    if let Some(endpoint) = &cluster.endpoint {
        let _ = write!(command, " \\\n  --apiserver-endpoint {}", shell_quote(endpoint));
    }
    if let Some(ca) = &cluster.ca_bundle {
        let _ = write!(command, " \\\n  --b64-cluster-ca {}", shell_quote(ca));
    }
    if let Some(dns) = cluster_dns(input).first() {
        let _ = write!(command, " \\\n  --dns-cluster-ip {}", shell_quote(dns));
    }
    if max_pods(input).is_some() {
        // The script's own max-pods table would otherwise override --max-pods.
        command.push_str(" \\\n  --use-max-pods false");
    }
    if input.instance_store_raid0 {
        command.push_str(" \\\n  --local-disks raid0");
    }
    let _ = write!(
        command,
        " \\\n  --kubelet-extra-args {}",
        shell_quote(&kubelet_extra_args(input, true))
    );
    format!(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log | logger -t user-data -s 2>/dev/console) 2>&1\n{command}\n"
    )
}

fn al2(input: &UserDataInput<'_>) -> Result<String, UserDataError> {
    let mut parts = custom_parts(input.custom)?;
    parts.push(MimePart::typed(
        "text/x-shellscript; charset=\"us-ascii\"",
        &al2_script(input),
    ));
    Ok(render_mime(&parts))
}

// --- Bottlerocket ---------------------------------------------------------------------------------------------------

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

// --- Windows --------------------------------------------------------------------------------------------------------

fn powershell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The PowerShell that joins a Windows node: the user's script, then the EKS bootstrap script.
fn windows(input: &UserDataInput<'_>) -> String {
    let mut out = String::from("<powershell>\n");
    if let Some(custom) = input.custom.filter(|c| !c.trim().is_empty()) {
        let script = custom
            .trim()
            .trim_start_matches("<powershell>")
            .trim_end_matches("</powershell>")
            .trim_matches('\n');
        out.push_str(script);
        out.push('\n');
    }
    let cluster = input.cluster;
    out.push_str(
        "[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n",
    );
    let _ = write!(
        out,
        "& $EKSBootstrapScriptFile -EKSClusterName {}",
        powershell_quote(&cluster.name)
    );
    if let Some(endpoint) = &cluster.endpoint {
        let _ = write!(out, " -APIServerEndpoint {}", powershell_quote(endpoint));
    }
    if let Some(ca) = &cluster.ca_bundle {
        let _ = write!(out, " -Base64ClusterCA {}", powershell_quote(ca));
    }
    if let Some(dns) = cluster_dns(input).first() {
        let _ = write!(out, " -DNSClusterIP {}", powershell_quote(dns));
    }
    let _ = write!(
        out,
        " -KubeletExtraArgs {}",
        powershell_quote(&kubelet_extra_args(input, false))
    );
    out.push_str("\n</powershell>\n");
    out
}

// --- base64 ---------------------------------------------------------------------------------------------------------

const BASE64_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as EC2 takes user data.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64_ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (whitespace ignored); None when it is not base64.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut buffer = 0u32;
    let mut bits = 0;
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace()) {
        if c == b'=' {
            break;
        }
        let value = BASE64_ALPHABET.iter().position(|a| *a == c)?;
        buffer = (buffer << 6) | u32::try_from(value).ok()?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((buffer >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
}

/// DER certificates as a base64 PEM bundle (a kubeconfig's `certificate-authority-data`).
pub fn ca_bundle_from_der(certificates: &[Vec<u8>]) -> String {
    let mut pem = String::new();
    for der in certificates {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let encoded = base64_encode(der);
        for line in encoded.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    base64_encode(pem.as_bytes())
}

#[cfg(test)]
mod tests;
