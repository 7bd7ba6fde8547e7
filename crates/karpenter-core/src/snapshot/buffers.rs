//! CapacityBuffers (feature gate CapacityBuffer): spare capacity kept as placeholder pods. Each buffer's pod
//! shape comes from its `podTemplateRef` (a PodTemplate in its namespace) or its `scalableRef` workload's pod
//! template; the count from `karpenter_api::capacitybuffer` (replicas, percentage of the workload, limits). The
//! placeholders have the lowest priority, `i32::MIN`, and are named `namespace/<buffer>-buffer-<i>`.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::PodTemplateSpec;
use karpenter_api::capacitybuffer::{ACTIVE_CAPACITY_STRATEGY, CapacityBuffer};

use crate::{resources::pod_requests, scheduling::Pod};

use super::{
    Snapshot,
    compact_pod::{CompactPod, CompactPodSpec},
    context::{Context, describe},
    pods::PodConverter,
};

type Key<'s> = (&'s str, &'s str);

fn key<'s>(meta: &'s k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<Key<'s>> {
    Some((
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref()?,
    ))
}

/// The workloads a buffer may point at, indexed by namespace and name.
struct Workloads<'s> {
    pod_templates: HashMap<Key<'s>, &'s PodTemplateSpec>,
    /// Kind, namespace, name to (template, replicas).
    scalables: HashMap<(&'static str, &'s str, &'s str), (&'s PodTemplateSpec, i64)>,
}

impl<'s> Workloads<'s> {
    fn new(snapshot: &'s Snapshot) -> Self {
        let mut scalables = HashMap::new();
        for d in &snapshot.deployments {
            if let (Some((ns, name)), Some(spec)) = (key(&d.metadata), d.spec.as_ref()) {
                scalables.insert(
                    ("Deployment", ns, name),
                    (&spec.template, i64::from(spec.replicas.unwrap_or(1))),
                );
            }
        }
        for s in &snapshot.stateful_sets {
            if let (Some((ns, name)), Some(spec)) = (key(&s.metadata), s.spec.as_ref()) {
                scalables.insert(
                    ("StatefulSet", ns, name),
                    (&spec.template, i64::from(spec.replicas.unwrap_or(1))),
                );
            }
        }
        for r in &snapshot.replica_sets {
            if let (Some((ns, name)), Some(spec)) = (key(&r.metadata), r.spec.as_ref())
                && let Some(template) = spec.template.as_ref()
            {
                scalables.insert(
                    ("ReplicaSet", ns, name),
                    (template, i64::from(spec.replicas.unwrap_or(1))),
                );
            }
        }
        let pod_templates = snapshot
            .pod_templates
            .iter()
            .filter_map(|t| Some((key(&t.metadata)?, t.template.as_ref()?)))
            .collect();
        Self {
            pod_templates,
            scalables,
        }
    }

    /// The buffer's pod template and, for a scalable, its replica count.
    fn resolve(
        &self,
        namespace: &str,
        buffer: &CapacityBuffer,
    ) -> Result<(&'s PodTemplateSpec, Option<i64>), String> {
        if let Some(r) = &buffer.spec.pod_template_ref {
            return self
                .pod_templates
                .get(&(namespace, r.name.as_str()))
                .map(|t| (*t, None))
                .ok_or_else(|| format!("PodTemplate {namespace}/{} is not in the snapshot", r.name));
        }
        let Some(s) = &buffer.spec.scalable_ref else {
            return Err("names neither a podTemplateRef nor a scalableRef".into());
        };
        let kind = match s.kind.as_str() {
            "Deployment" => "Deployment",
            "StatefulSet" => "StatefulSet",
            "ReplicaSet" => "ReplicaSet",
            other => return Err(format!("scalableRef kind {other} is not supported")),
        };
        self.scalables
            .get(&(kind, namespace, s.name.as_str()))
            .map(|(t, n)| (*t, Some(*n)))
            .ok_or_else(|| format!("{kind} {namespace}/{} is not in the snapshot", s.name))
    }
}

/// The placeholder pods of every active buffer.
pub(super) fn buffer_pods(
    cx: &mut Context,
    snapshot: &Snapshot,
    converter: &mut PodConverter<'_, '_>,
) -> Vec<Pod> {
    let mut out = Vec::new();
    if snapshot.capacity_buffers.is_empty() {
        return out;
    }
    let workloads = Workloads::new(snapshot);
    for buffer in &snapshot.capacity_buffers {
        let namespace = buffer.metadata.namespace.as_deref().unwrap_or("default");
        let name = buffer.metadata.name.as_deref().unwrap_or_default();
        let object = describe("CapacityBuffer", Some(namespace), Some(name));
        if buffer.spec.provisioning_strategy() != ACTIVE_CAPACITY_STRATEGY {
            cx.note(
                object,
                format!(
                    "provisioning strategy {} is not {ACTIVE_CAPACITY_STRATEGY}; ignored",
                    buffer.spec.provisioning_strategy()
                ),
            );
            continue;
        }
        if let Err(e) = buffer.validate() {
            cx.note(object, format!("{e}; ignored"));
            continue;
        }
        let (template, scalable_replicas) = match workloads.resolve(namespace, buffer) {
            Ok(t) => t,
            Err(e) => {
                cx.note(object, format!("{e}; ignored"));
                continue;
            }
        };
        let Some(spec) = template.spec.as_ref() else {
            cx.note(object, "its pod template has no spec; ignored");
            continue;
        };
        let spec = CompactPodSpec::from(spec);
        let requests = match pod_requests(&spec, &mut cx.table) {
            Ok(r) => r,
            Err(e) => {
                cx.note(object, format!("{e}; ignored"));
                continue;
            }
        };
        let per_pod: BTreeMap<String, i64> = requests
            .iter()
            .map(|(id, v)| (cx.table.name(id).to_string(), v))
            .collect();
        let replicas = match buffer.spec.desired_replicas(scalable_replicas, &per_pod) {
            Ok(n) => n,
            Err(e) => {
                cx.note(object, format!("spec.limits: {e}; ignored"));
                continue;
            }
        };
        if replicas <= 0 {
            continue;
        }
        let mut pod = CompactPod {
            metadata: template.metadata.clone().unwrap_or_default().into(),
            spec: Some(spec),
            status: None,
        };
        pod.metadata.namespace = Some(namespace.to_string());
        pod.metadata.name = Some(format!("{name}-buffer-0"));
        if let Some(spec) = pod.spec.as_mut() {
            spec.priority = Some(i32::MIN);
            spec.node_name = None;
            // A placeholder claims no storage: its template's claims belong to the real workload.
            if let Some(volumes) = spec.volumes.as_mut() {
                volumes.retain(|v| v.persistent_volume_claim.is_none() && v.ephemeral.is_none());
            }
        }
        // Every placeholder is the same pod under another name: convert once.
        let Some(first) = converter.convert_pending(cx, &pod) else {
            continue;
        };
        let copies: Vec<Pod> = (1..replicas)
            .map(|i| {
                let mut p = first.clone();
                p.id = format!("{namespace}/{name}-buffer-{i}");
                p
            })
            .collect();
        out.push(first);
        out.extend(copies);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{BuildOptions, ScheduleInputs, build_schedule_inputs};

    fn build(objects: &[&str]) -> ScheduleInputs {
        let options = BuildOptions {
            capacity_buffers: true,
            ..Default::default()
        };
        build_schedule_inputs(&snapshot(objects), &catalog(), &options)
    }

    const TEMPLATE: &str = "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: chunk, namespace: ml}\ntemplate:\n  metadata: {labels: {app: chunk}}\n  spec:\n    containers: [{name: c, resources: {requests: {cpu: \"1\"}}}]\n";

    #[test]
    fn capacity_buffer_creates_virtual_pods() {
        let buffer = "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: spare, namespace: ml}\nspec:\n  podTemplateRef: {name: chunk}\n  replicas: 3\n";
        let built = build(&[TEMPLATE, buffer, &pending_pod("default", "web", "100m", "")]);
        assert!(built.notes.is_empty(), "{:?}", built.notes);
        assert_eq!(
            built.pod_names,
            vec![
                "default/web",
                "ml/spare-buffer-0",
                "ml/spare-buffer-1",
                "ml/spare-buffer-2"
            ]
        );
        let p = &built.input.pods[1];
        assert_eq!(p.priority, i32::MIN);
        assert_eq!(p.requests.cpu(), 1000);
        assert_eq!(
            p.labels.get(built.interner.lookup("app").unwrap()),
            built.interner.lookup("chunk")
        );
    }

    #[test]
    fn capacity_buffer_from_a_deployment_percentage() {
        let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: ml}\nspec:\n  replicas: 10\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n    spec:\n      containers: [{name: c, resources: {requests: {cpu: 500m}}}]\n";
        let buffer = "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: headroom, namespace: ml}\nspec:\n  scalableRef: {apiGroup: apps, kind: Deployment, name: api}\n  percentage: 20\n";
        let missing = "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: lost, namespace: ml}\nspec:\n  scalableRef: {apiGroup: apps, kind: Deployment, name: nope}\n  replicas: 1\n";
        let built = build(&[deployment, buffer, missing]);
        assert_eq!(
            built.pod_names,
            vec!["ml/headroom-buffer-0", "ml/headroom-buffer-1"]
        );
        assert_eq!(built.notes.len(), 1);
        assert_eq!(built.notes[0].object, "CapacityBuffer ml/lost");
    }

    #[test]
    fn capacity_buffers_are_ignored_without_the_gate() {
        let buffer = "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: spare, namespace: ml}\nspec:\n  podTemplateRef: {name: chunk}\n  replicas: 3\n";
        let built = build_schedule_inputs(
            &snapshot(&[TEMPLATE, buffer]),
            &catalog(),
            &BuildOptions::default(),
        );
        assert!(built.input.pods.is_empty());
        assert_eq!(built.notes.len(), 1);
    }
}
