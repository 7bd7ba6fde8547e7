//! Which VolumeAttachments hold a drained node's instance, by upstream's rule. Pure: the terminator reads the
//! attachments and the claims from the state cache.
//!
//! The instance waits for the volumes of the pods the drain moved, so that they can attach elsewhere. It does
//! not wait for an attachment without a PersistentVolume (an inline volume), nor for the volume of a pod the
//! drain leaves on the node (one tolerating the disrupted taint, a mirror pod, one stuck terminating): nothing
//! detaches those before the instance goes, and waiting for them would hold the node until its deadline, or
//! for good.

use std::{collections::HashSet, sync::Arc};

use jiff::Timestamp;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use karpenter_core::snapshot::CompactPod;
use kube::ResourceExt;

use crate::drain::is_drainable;

/// The names of the attachments on `node` (of `attachments`) the instance waits for, given the node's `pods`
/// and `volume_of_claim(namespace, claim)`, the PersistentVolume a PersistentVolumeClaim is bound to.
pub fn blocking_attachments<'a>(
    attachments: impl IntoIterator<Item = &'a VolumeAttachment>,
    node: &str,
    pods: &[Arc<CompactPod>],
    volume_of_claim: impl Fn(&str, &str) -> Option<String>,
    now: Timestamp,
) -> Vec<String> {
    let left_behind: HashSet<String> = pods
        .iter()
        .filter(|p| !is_drainable(p, now))
        .flat_map(|pod| {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
            pod.spec
                .as_ref()
                .and_then(|s| s.volumes.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
                    (Some(claim), _) => Some(claim.claim_name.clone()),
                    // A generic ephemeral volume's claim is named after the pod and the volume.
                    (None, Some(_)) => Some(format!("{pod_name}-{}", v.name)),
                    (None, None) => None,
                })
                .filter_map(|claim| volume_of_claim(namespace, &claim))
                .collect::<Vec<_>>()
        })
        .collect();
    attachments
        .into_iter()
        .filter(|va| va.spec.node_name == node && va.metadata.deletion_timestamp.is_none())
        .filter(|va| {
            va.spec
                .source
                .persistent_volume_name
                .as_ref()
                .is_some_and(|pv| !left_behind.contains(pv))
        })
        .map(|va| va.name_any())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attachment(name: &str, node: &str, pv: Option<&str>) -> VolumeAttachment {
        let source = match pv {
            Some(pv) => json!({"persistentVolumeName": pv}),
            None => {
                json!({"inlineVolumeSpec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}})
            }
        };
        match serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": source}
        })) {
            Ok(va) => va,
            Err(e) => panic!("{e}"),
        }
    }

    fn pod(name: &str, claim: &str, extra_spec: serde_json::Value) -> Arc<CompactPod> {
        let mut spec = json!({"nodeName": "n1", "containers": [],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
            s.extend(e.clone());
        }
        match serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"}, "spec": spec, "status": {"phase": "Running"}
        })) {
            Ok(p) => Arc::new(p),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn only_the_volumes_of_drained_pods_hold_the_instance() {
        let now: Timestamp = match "2026-01-01T00:10:00Z".parse() {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        };
        let attachments = vec![
            attachment("web", "n1", Some("pv-web")),
            attachment("logs", "n1", Some("pv-logs")),
            attachment("inline", "n1", None),
            attachment("elsewhere", "n2", Some("pv-other")),
        ];
        let pods = vec![
            // Moved by the drain (now gone or going): its volume is waited for.
            pod("web", "web-data", json!({})),
            // Tolerates the disrupted taint, so it stays on the node: its volume never detaches before.
            pod(
                "logs",
                "logs-data",
                json!({"tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists"}]}),
            ),
        ];
        let bound = |ns: &str, claim: &str| match (ns, claim) {
            ("default", "web-data") => Some("pv-web".to_string()),
            ("default", "logs-data") => Some("pv-logs".to_string()),
            _ => None,
        };
        assert_eq!(
            blocking_attachments(&attachments, "n1", &pods, bound, now),
            ["web"]
        );
        // Without the pods (all gone), every attachment with a volume holds it.
        assert_eq!(
            blocking_attachments(&attachments, "n1", &[], bound, now),
            ["web", "logs"]
        );
    }
}
