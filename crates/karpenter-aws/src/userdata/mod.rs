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
//!
//! One file per family (`al2023.rs`, `al2.rs`, `bottlerocket.rs`, `windows.rs`; Custom is the one line of
//! [`generate`] that passes the user's data through), and the shared parts: `kubelet.rs` (labels, taints,
//! max pods, DNS and kubelet flags), `mime.rs` (multipart documents), `yaml.rs` and `base64.rs` (small
//! hand-written encoders).

use std::collections::BTreeMap;

use karpenter_api::common::Taint;
use karpenter_api::ec2nodeclass::{AmiFamily, KubeletConfiguration};

mod al2;
mod al2023;
mod base64;
mod bottlerocket;
mod kubelet;
mod mime;
mod windows;
mod yaml;

pub use al2::al2_script;
pub use al2023::al2023_node_config;
pub use base64::{base64_decode, base64_encode, ca_bundle_from_der};
pub use bottlerocket::bottlerocket;
pub use kubelet::{kubelet_labels, taints_with_unregistered};
pub use mime::{MimePart, parse_mime, render_mime};
pub use yaml::to_yaml;

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

/// The user data for `family`. None for `Custom` without `spec.userData`.
pub fn generate(family: AmiFamily, input: &UserDataInput<'_>) -> Result<Option<String>, UserDataError> {
    match family {
        AmiFamily::AL2023 => al2023::al2023(input).map(Some),
        AmiFamily::AL2 => al2::al2(input).map(Some),
        AmiFamily::Bottlerocket => bottlerocket(input).map(Some),
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
            Ok(Some(windows::windows(input)))
        }
        AmiFamily::Custom => Ok(input.custom.map(str::to_string)),
    }
}

#[cfg(test)]
mod tests;
