//! What a pod's volumes mean for scheduling (upstream `volumetopology.go`, `volumeusage.go`):
//!
//! - topology: a PVC bound to a PV with required node affinity pins the pod to the PV's first node selector term
//!   (the zone, usually; hostname dropped for local and hostPath volumes, which a new node cannot reach); an
//!   unbound PVC takes its StorageClass's first `allowedTopologies` term. `topology.ebs.csi.aws.com/zone` is the
//!   standard zone key once interned. These become node requirements, not pod affinity, so spread counts stay
//!   right;
//! - CSI attach limits: each PVC counts against its driver (the bound PV's `csi.driver`, else the StorageClass's
//!   provisioner);
//! - pods the kube-scheduler would not bind either are refused: a PVC that does not exist, is being deleted or
//!   lost, or is unbound without a StorageClass or with `Immediate` binding.

use std::collections::HashMap;

use k8s_openapi::api::{
    core::v1::{PersistentVolume, PersistentVolumeClaim},
    storage::v1::StorageClass,
};

use crate::requirements::{LabelInterner, Requirement, Requirements};

use super::{Snapshot, compact_pod::CompactPod};

pub(super) struct VolumeIndex<'s> {
    pvcs: HashMap<(&'s str, &'s str), &'s PersistentVolumeClaim>,
    pvs: HashMap<&'s str, &'s PersistentVolume>,
    storage_classes: HashMap<&'s str, &'s StorageClass>,
}

/// What one pod's volumes add.
#[derive(Debug, Default)]
pub(super) struct PodVolumes {
    /// Node requirements from volume topology.
    pub requirements: Requirements,
    /// `(driver, namespace/pvc)` of every CSI volume.
    pub csi: Vec<(String, String)>,
    /// Problems that leave the pod schedulable but may make the answer less exact.
    pub warnings: Vec<String>,
}

impl<'s> VolumeIndex<'s> {
    pub fn new(snapshot: &'s Snapshot) -> Self {
        Self {
            pvcs: snapshot
                .pvcs
                .iter()
                .filter_map(|c| {
                    Some((
                        (
                            c.metadata.namespace.as_deref().unwrap_or("default"),
                            c.metadata.name.as_deref()?,
                        ),
                        c,
                    ))
                })
                .collect(),
            pvs: snapshot
                .pvs
                .iter()
                .filter_map(|v| Some((v.metadata.name.as_deref()?, v)))
                .collect(),
            storage_classes: snapshot
                .storage_classes
                .iter()
                .filter_map(|s| Some((s.metadata.name.as_deref()?, s)))
                .collect(),
        }
    }

    /// The volumes of a pod. For a pod about to be scheduled (`pending`), a volume the kube-scheduler would refuse
    /// is an error naming it; for a pod already running, such volumes are skipped and only CSI usage is counted.
    pub fn pod_volumes(
        &self,
        pod: &CompactPod,
        pending: bool,
        interner: &mut LabelInterner,
    ) -> Result<PodVolumes, String> {
        let mut out = PodVolumes::default();
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(out);
        };
        // A bound pod's ephemeral PVC is deleted with it; its replacement gets a new PVC anywhere.
        let ephemeral_topology = spec.node_name.as_deref().is_none_or(str::is_empty);
        for volume in spec.volumes.iter().flatten() {
            let (claim, ephemeral) = if let Some(pvc) = &volume.persistent_volume_claim {
                (pvc.claim_name.clone(), None)
            } else if let Some(e) = &volume.ephemeral {
                (format!("{pod_name}-{}", volume.name), Some(e))
            } else {
                continue;
            };
            let id = format!("{namespace}/{claim}");
            let with_topology = pending && (ephemeral.is_none() || ephemeral_topology);
            let (storage_class, volume_name) = match self.pvcs.get(&(namespace, claim.as_str())) {
                Some(pvc) => {
                    let spec = pvc.spec.as_ref();
                    let sc = spec
                        .and_then(|s| s.storage_class_name.as_deref())
                        .filter(|s| !s.is_empty());
                    let vn = spec
                        .and_then(|s| s.volume_name.as_deref())
                        .filter(|s| !s.is_empty());
                    if pending {
                        if pvc.metadata.deletion_timestamp.is_some() {
                            return Err(format!("PersistentVolumeClaim {id} is being deleted"));
                        }
                        if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
                            return Err(format!(
                                "PersistentVolumeClaim {id} is bound to a PersistentVolume that no longer exists"
                            ));
                        }
                    }
                    (sc, vn)
                }
                // The ephemeral volume controller may not have created the PVC yet; its template says enough.
                None => match ephemeral.and_then(|e| e.volume_claim_template.as_ref()) {
                    Some(t) => (
                        t.spec.storage_class_name.as_deref().filter(|s| !s.is_empty()),
                        t.spec.volume_name.as_deref().filter(|s| !s.is_empty()),
                    ),
                    None if pending => {
                        return Err(format!("PersistentVolumeClaim {id} is not in the snapshot"));
                    }
                    None => continue,
                },
            };
            let mut driver = None;
            if let Some(vn) = volume_name {
                match self.pvs.get(vn) {
                    Some(pv) => {
                        driver = pv.spec.as_ref().and_then(|s| s.csi.as_ref()).map(|c| c.driver.clone());
                        if with_topology {
                            let reqs = pv_requirements(pv, interner)
                                .map_err(|e| format!("PersistentVolume {vn} node affinity: {e}"))?;
                            out.requirements.intersect_with(&reqs);
                        }
                    }
                    None if pending => out.warnings.push(format!(
                        "PersistentVolume {vn} (bound to PersistentVolumeClaim {id}) is not in the snapshot; its topology is unknown"
                    )),
                    None => {}
                }
            } else if pending {
                let Some(sc_name) = storage_class else {
                    return Err(format!(
                        "unbound PersistentVolumeClaim {id} names no StorageClass"
                    ));
                };
                match self.storage_classes.get(sc_name) {
                    Some(sc) => {
                        if sc.volume_binding_mode.as_deref() == Some("Immediate") {
                            return Err(format!(
                                "unbound PersistentVolumeClaim {id} uses StorageClass {sc_name} with Immediate volume binding; it must be bound first"
                            ));
                        }
                        if with_topology {
                            out.requirements.intersect_with(&storage_class_requirements(sc, interner));
                        }
                    }
                    None => out.warnings.push(format!(
                        "StorageClass {sc_name} (of PersistentVolumeClaim {id}) is not in the snapshot; its topology is unknown"
                    )),
                }
            }
            let driver = driver.or_else(|| {
                storage_class
                    .and_then(|n| self.storage_classes.get(n))
                    .map(|sc| sc.provisioner.clone())
            });
            if let Some(d) = driver.filter(|d| !d.is_empty()) {
                out.csi.push((d, id));
            }
        }
        Ok(out)
    }
}

/// The first required node selector term of a PV (terms are ORed; upstream uses the first), without hostname for
/// local and hostPath volumes.
fn pv_requirements(pv: &PersistentVolume, interner: &mut LabelInterner) -> Result<Requirements, String> {
    let Some(spec) = pv.spec.as_ref() else {
        return Ok(Requirements::new());
    };
    let Some(term) = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .and_then(|r| r.node_selector_terms.first())
    else {
        return Ok(Requirements::new());
    };
    let node_local = spec.local.is_some() || spec.host_path.is_some();
    let expressions: Vec<_> = term
        .match_expressions
        .iter()
        .flatten()
        .filter(|e| !(node_local && e.key == karpenter_api::labels::HOSTNAME_LABEL))
        .cloned()
        .collect();
    Requirements::from_node_selector_requirements(&expressions, interner).map_err(|e| e.to_string())
}

/// The first `allowedTopologies` term of a StorageClass, as `In` requirements.
fn storage_class_requirements(sc: &StorageClass, interner: &mut LabelInterner) -> Requirements {
    let Some(term) = sc.allowed_topologies.as_ref().and_then(|t| t.first()) else {
        return Requirements::new();
    };
    term.match_label_expressions
        .iter()
        .flatten()
        .filter(|e| !e.values.is_empty())
        .map(|e| {
            let key = interner.intern_key(&e.key);
            Requirement::in_values(key, e.values.iter().map(|v| interner.intern(v)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{BuildOptions, build_schedule_inputs};

    const EBS_PV: &str = "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pv-1}\nspec:\n  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-1}\n  nodeAffinity:\n    required:\n      nodeSelectorTerms:\n      - matchExpressions: [{key: topology.ebs.csi.aws.com/zone, operator: In, values: [test-zone-2]}]\n      - matchExpressions: [{key: topology.ebs.csi.aws.com/zone, operator: In, values: [test-zone-1]}]\n";

    fn pvc(name: &str, volume: &str, sc: &str) -> String {
        format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}, namespace: default}}\nspec: {{storageClassName: {sc}, volumeName: \"{volume}\"}}\n"
        )
    }

    fn pod_with_claim(name: &str, claim: &str) -> String {
        pending_pod(
            "default",
            name,
            "100m",
            &format!("  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]\n"),
        )
    }

    #[test]
    fn bound_pv_zone_becomes_a_requirement() {
        let snap = snapshot(&[EBS_PV, &pvc("data", "pv-1", "gp3"), &pod_with_claim("db", "data")]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        assert!(built.notes.is_empty(), "{:?}", built.notes);
        let pod = &built.input.pods[0];
        let zone = built.interner.lookup_key("topology.kubernetes.io/zone").unwrap();
        assert_eq!(
            pod.volume_requirements.single_value(zone),
            built.interner.lookup("test-zone-2")
        );
        let driver = built.interner.lookup("ebs.csi.aws.com").unwrap();
        assert_eq!(pod.csi_volumes, vec![(driver, 1)]);
    }

    #[test]
    fn wait_for_first_consumer_allowed_topologies_become_zones() {
        let sc = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: zonal}\nprovisioner: ebs.csi.aws.com\nvolumeBindingMode: WaitForFirstConsumer\nallowedTopologies:\n- matchLabelExpressions: [{key: topology.ebs.csi.aws.com/zone, values: [test-zone-1, test-zone-3]}]\n";
        let snap = snapshot(&[sc, &pvc("data", "", "zonal"), &pod_with_claim("db", "data")]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        assert!(built.notes.is_empty(), "{:?}", built.notes);
        let zone = built.interner.lookup_key("topology.kubernetes.io/zone").unwrap();
        let req = built.input.pods[0].volume_requirements.get(zone).unwrap();
        assert_eq!(req.len(), Some(2));
        assert!(req.has(built.interner.lookup("test-zone-3").unwrap()));
        let driver = built.interner.lookup("ebs.csi.aws.com").unwrap();
        assert_eq!(built.input.pods[0].csi_volumes, vec![(driver, 1)]);
    }

    #[test]
    fn missing_pvc_skips_the_pod_with_a_note() {
        let snap = snapshot(&[
            &pod_with_claim("db", "nope"),
            &pending_pod("default", "web", "100m", ""),
        ]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        assert_eq!(built.pod_names, vec!["default/web"]);
        assert_eq!(built.notes.len(), 1);
        assert_eq!(built.notes[0].object, "Pod default/db");
        assert!(
            built.notes[0]
                .message
                .contains("PersistentVolumeClaim default/nope"),
            "{}",
            built.notes[0].message
        );
    }

    #[test]
    fn immediate_binding_unbound_pvc_skips_the_pod() {
        let sc = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: now}\nprovisioner: ebs.csi.aws.com\nvolumeBindingMode: Immediate\n";
        let snap = snapshot(&[sc, &pvc("data", "", "now"), &pod_with_claim("db", "data")]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        assert!(built.input.pods.is_empty());
        assert!(built.notes[0].message.contains("Immediate"));
    }
}
