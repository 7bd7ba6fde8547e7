//! CapacityBuffers (feature gate CapacityBuffer): spare capacity kept as placeholder pods. Each buffer's pod
//! shape comes from its `podTemplateRef` (a PodTemplate in its namespace) or its `scalableRef` workload's pod
//! template; the count from `karpenter_api::capacitybuffer` (replicas, percentage of the workload, limits). The
//! placeholders have the lowest priority, `i32::MIN`, and are named `namespace/<buffer>-buffer-<i>`.
//!
//! [`resolve_buffers`] answers the same resolution for a buffer's status: the PodTemplate or workload it
//! resolved to and its size, or why not (the missing object or the field at fault named).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::capacitybuffer::{ACTIVE_CAPACITY_STRATEGY, CapacityBuffer, reasons};

use crate::{scheduling::Pod, snapshot::pod_requests::pod_requests};

use super::{
    Snapshot,
    compact_pod::{CompactPod, CompactPodSpec},
    context::{Context, describe},
    pods::PodConverter,
};

type Key<'s> = (&'s str, &'s str);

fn key(meta: &ObjectMeta) -> Option<Key<'_>> {
    Some((
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref()?,
    ))
}

/// A workload a `scalableRef` may name: its metadata, pod template and replica count.
type Scalable<'s> = (&'s ObjectMeta, &'s PodTemplateSpec, i64);

/// The workloads a buffer may point at, indexed by namespace and name.
struct Workloads<'s> {
    pod_templates: HashMap<Key<'s>, (&'s PodTemplate, &'s PodTemplateSpec)>,
    /// Kind, namespace, name to the workload.
    scalables: HashMap<(&'static str, &'s str, &'s str), Scalable<'s>>,
}

/// Where a buffer's pod shape comes from.
#[derive(Debug, Clone, Copy)]
enum Source<'s> {
    PodTemplate(&'s PodTemplate),
    Scalable(&'static str, &'s ObjectMeta),
}

/// A buffer whose reference and size were resolved.
struct Resolved<'s> {
    template: &'s PodTemplateSpec,
    spec: CompactPodSpec,
    replicas: i64,
    source: Source<'s>,
}

/// Why a buffer could not be resolved.
enum Unresolved {
    /// The referenced object does not exist: `kind namespace/name`.
    NotFound { reason: &'static str, object: String },
    /// Anything else, with the field at fault.
    Failed(String),
}

impl Unresolved {
    /// The status condition's reason and message.
    fn condition(&self) -> (&'static str, String) {
        match self {
            Self::NotFound { reason, object } => (*reason, format!("{object} not found")),
            Self::Failed(message) => (reasons::RESOLUTION_FAILED, message.clone()),
        }
    }

    /// The snapshot note (the CLI reads a snapshot, which may simply have left the object out).
    fn note(&self) -> String {
        match self {
            Self::NotFound { object, .. } => format!("{object} is not in the snapshot; ignored"),
            Self::Failed(message) => format!("{message}; ignored"),
        }
    }
}

impl<'s> Workloads<'s> {
    fn new(snapshot: &'s Snapshot) -> Self {
        let mut scalables = HashMap::new();
        for d in &snapshot.deployments {
            if let (Some((ns, name)), Some(spec)) = (key(&d.metadata), d.spec.as_ref()) {
                scalables.insert(
                    ("Deployment", ns, name),
                    (&d.metadata, &spec.template, i64::from(spec.replicas.unwrap_or(1))),
                );
            }
        }
        for s in &snapshot.stateful_sets {
            if let (Some((ns, name)), Some(spec)) = (key(&s.metadata), s.spec.as_ref()) {
                scalables.insert(
                    ("StatefulSet", ns, name),
                    (&s.metadata, &spec.template, i64::from(spec.replicas.unwrap_or(1))),
                );
            }
        }
        for r in &snapshot.replica_sets {
            if let (Some((ns, name)), Some(spec)) = (key(&r.metadata), r.spec.as_ref())
                && let Some(template) = spec.template.as_ref()
            {
                scalables.insert(
                    ("ReplicaSet", ns, name),
                    (&r.metadata, template, i64::from(spec.replicas.unwrap_or(1))),
                );
            }
        }
        let pod_templates = snapshot
            .pod_templates
            .iter()
            .filter_map(|t| Some((key(&t.metadata)?, (t, t.template.as_ref()?))))
            .collect();
        Self {
            pod_templates,
            scalables,
        }
    }

    /// The buffer's pod template, its source and, for a scalable, its replica count.
    fn find(
        &self,
        namespace: &str,
        buffer: &CapacityBuffer,
    ) -> Result<(&'s PodTemplateSpec, Source<'s>, Option<i64>), Unresolved> {
        if let Some(r) = &buffer.spec.pod_template_ref {
            return self
                .pod_templates
                .get(&(namespace, r.name.as_str()))
                .map(|(object, t)| (*t, Source::PodTemplate(object), None))
                .ok_or_else(|| Unresolved::NotFound {
                    reason: reasons::POD_TEMPLATE_NOT_FOUND,
                    object: format!("PodTemplate {namespace}/{}", r.name),
                });
        }
        let Some(s) = &buffer.spec.scalable_ref else {
            return Err(Unresolved::Failed(
                "names neither a podTemplateRef nor a scalableRef".into(),
            ));
        };
        let kind = match s.kind.as_str() {
            "Deployment" => "Deployment",
            "StatefulSet" => "StatefulSet",
            "ReplicaSet" => "ReplicaSet",
            other => {
                return Err(Unresolved::Failed(format!(
                    "spec.scalableRef.kind: {other} is not supported"
                )));
            }
        };
        self.scalables
            .get(&(kind, namespace, s.name.as_str()))
            .map(|(meta, t, n)| (*t, Source::Scalable(kind, meta), Some(*n)))
            .ok_or_else(|| Unresolved::NotFound {
                reason: reasons::SCALABLE_REF_NOT_FOUND,
                object: format!("{kind} {namespace}/{}", s.name),
            })
    }

    /// Resolves one buffer of the active-capacity strategy: its reference, pod shape and size.
    fn resolve(
        &self,
        cx: &mut Context,
        namespace: &str,
        buffer: &CapacityBuffer,
    ) -> Result<Resolved<'s>, Unresolved> {
        buffer.validate().map_err(|e| Unresolved::Failed(e.to_string()))?;
        let (template, source, scalable_replicas) = self.find(namespace, buffer)?;
        let Some(spec) = template.spec.as_ref() else {
            return Err(Unresolved::Failed("its pod template has no spec".into()));
        };
        let spec = CompactPodSpec::from(spec);
        let requests = pod_requests(&spec, &mut cx.table).map_err(|e| Unresolved::Failed(e.to_string()))?;
        let per_pod: BTreeMap<String, i64> = requests
            .iter()
            .map(|(id, v)| (cx.table.name(id).to_string(), v))
            .collect();
        let replicas = buffer
            .spec
            .desired_replicas(scalable_replicas, &per_pod)
            .map_err(|e| Unresolved::Failed(format!("spec.limits: {e}")))?;
        Ok(Resolved {
            template,
            spec,
            replicas,
            source,
        })
    }
}

/// What a CapacityBuffer resolved to: what its status reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferResolution {
    pub namespace: String,
    pub name: String,
    pub outcome: Result<ResolvedBuffer, UnresolvedBuffer>,
}

/// A buffer ready for provisioning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedBuffer {
    /// The PodTemplate it takes its shape from (`podTemplateRef` buffers; a `scalableRef` buffer reads the
    /// workload's own template, and no PodTemplate object is made for it).
    pub pod_template: Option<String>,
    /// That PodTemplate's generation, when the API server reports one.
    pub pod_template_generation: Option<i64>,
    /// How many placeholder pods it keeps.
    pub replicas: i64,
    /// The object the shape comes from, `kind namespace/name`.
    pub source: String,
    /// Changes when the source's template may have: the PodTemplate's resourceVersion, the workload's
    /// generation.
    pub source_version: String,
}

/// A buffer that is not ready for provisioning, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnresolvedBuffer {
    /// `PodTemplateNotFound`, `ScalableRefNotFound` or `ResolutionFailed`.
    pub reason: &'static str,
    /// Names the missing object or the field at fault.
    pub message: String,
}

/// Every buffer of the active-capacity strategy, resolved as the provisioner resolves it (buffers of another
/// strategy belong to another autoscaler and are left out).
pub fn resolve_buffers(snapshot: &Snapshot) -> Vec<BufferResolution> {
    if snapshot.capacity_buffers.is_empty() {
        return Vec::new();
    }
    let mut cx = Context::new();
    let workloads = Workloads::new(snapshot);
    snapshot
        .capacity_buffers
        .iter()
        .filter(|b| b.spec.provisioning_strategy() == ACTIVE_CAPACITY_STRATEGY)
        .map(|buffer| {
            let namespace = buffer.metadata.namespace.as_deref().unwrap_or("default");
            let outcome = match workloads.resolve(&mut cx, namespace, buffer) {
                Ok(r) => {
                    let (pod_template, pod_template_generation, source, source_version) = match r.source {
                        Source::PodTemplate(t) => (
                            t.metadata.name.clone(),
                            t.metadata.generation,
                            format!(
                                "PodTemplate {namespace}/{}",
                                t.metadata.name.as_deref().unwrap_or_default()
                            ),
                            t.metadata.resource_version.clone().unwrap_or_default(),
                        ),
                        Source::Scalable(kind, meta) => (
                            None,
                            None,
                            format!("{kind} {namespace}/{}", meta.name.as_deref().unwrap_or_default()),
                            meta.generation.unwrap_or_default().to_string(),
                        ),
                    };
                    Ok(ResolvedBuffer {
                        pod_template,
                        pod_template_generation,
                        replicas: r.replicas,
                        source,
                        source_version,
                    })
                }
                Err(e) => {
                    let (reason, message) = e.condition();
                    Err(UnresolvedBuffer { reason, message })
                }
            };
            BufferResolution {
                namespace: namespace.to_string(),
                name: buffer.metadata.name.clone().unwrap_or_default(),
                outcome,
            }
        })
        .collect()
}

/// The placeholder pods of one buffer: `input.pods[pods]`, made for buffer `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferPods {
    pub buffer: String,
    pub pods: std::ops::Range<usize>,
}

/// The placeholder pods of every active buffer, grouped by buffer.
pub(super) fn buffer_pods(
    cx: &mut Context,
    snapshot: &Snapshot,
    converter: &mut PodConverter<'_, '_>,
) -> Vec<(String, Vec<Pod>)> {
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
        let Resolved {
            template,
            spec,
            replicas,
            ..
        } = match workloads.resolve(cx, namespace, buffer) {
            Ok(r) => r,
            Err(e) => {
                cx.note(object, e.note());
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
        let mut pods = Vec::with_capacity(copies.len() + 1);
        pods.push(first);
        pods.extend(copies);
        out.push((format!("{namespace}/{name}"), pods));
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

    const BUFFER_ON_TEMPLATE: &str = "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: spare, namespace: ml}\nspec:\n  podTemplateRef: {name: chunk}\n  replicas: 3\n";

    #[test]
    fn a_pod_template_buffer_resolves_to_its_template_and_replicas() {
        let template = TEMPLATE.replace(
            "namespace: ml}",
            "namespace: ml, generation: 4, resourceVersion: \"17\"}",
        );
        let resolved = super::resolve_buffers(&snapshot(&[&template, BUFFER_ON_TEMPLATE]));
        assert_eq!(resolved.len(), 1);
        assert_eq!(
            (resolved[0].namespace.as_str(), resolved[0].name.as_str()),
            ("ml", "spare")
        );
        let ok = resolved[0].outcome.as_ref().unwrap();
        assert_eq!(ok.pod_template.as_deref(), Some("chunk"));
        assert_eq!(ok.pod_template_generation, Some(4));
        assert_eq!(ok.replicas, 3);
        assert_eq!(ok.source, "PodTemplate ml/chunk");
        assert_eq!(ok.source_version, "17");
    }

    #[test]
    fn a_missing_pod_template_or_workload_is_named() {
        let scalable = "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: lost, namespace: ml}\nspec:\n  scalableRef: {kind: StatefulSet, name: db}\n  replicas: 1\n";
        let resolved = super::resolve_buffers(&snapshot(&[BUFFER_ON_TEMPLATE, scalable]));
        let errors: Vec<_> = resolved.iter().map(|r| r.outcome.clone().unwrap_err()).collect();
        assert_eq!(errors[0].reason, "PodTemplateNotFound");
        assert_eq!(errors[0].message, "PodTemplate ml/chunk not found");
        assert_eq!(errors[1].reason, "ScalableRefNotFound");
        assert_eq!(errors[1].message, "StatefulSet ml/db not found");
        // The CLI's notes keep saying the snapshot left it out.
        let built = build(&[BUFFER_ON_TEMPLATE]);
        assert_eq!(
            built.notes[0].message,
            "PodTemplate ml/chunk is not in the snapshot; ignored"
        );
    }

    #[test]
    fn a_deployment_buffer_reports_its_percentage_and_an_invalid_one_its_field() {
        let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: ml, generation: 2}\nspec:\n  replicas: 10\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n    spec:\n      containers: [{name: c, resources: {requests: {cpu: 500m}}}]\n";
        let buffer = "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: headroom, namespace: ml}\nspec:\n  scalableRef: {apiGroup: apps, kind: Deployment, name: api}\n  percentage: 30\n  limits: {cpu: \"1\"}\n";
        let other = "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: theirs, namespace: ml}\nspec:\n  provisioningStrategy: example.com/other\n  podTemplateRef: {name: chunk}\n  replicas: 1\n";
        let mut snap = snapshot(&[deployment, buffer, other]);
        let mut invalid = snap.capacity_buffers[0].clone();
        invalid.metadata.name = Some("bad".into());
        invalid.spec.replicas = Some(-1);
        snap.capacity_buffers.push(invalid);
        let resolved = super::resolve_buffers(&snap);
        // Another strategy's buffer is left to its autoscaler.
        assert_eq!(
            resolved.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            vec!["headroom", "bad"]
        );
        let ok = resolved[0].outcome.as_ref().unwrap();
        // 30% of 10 is 3, capped by the limits at 2 (1 CPU / 500m).
        assert_eq!(ok.replicas, 2);
        assert_eq!(ok.pod_template, None);
        assert_eq!(ok.source, "Deployment ml/api");
        assert_eq!(ok.source_version, "2");
        let bad = resolved[1].outcome.as_ref().unwrap_err();
        assert_eq!(bad.reason, "ResolutionFailed");
        assert!(bad.message.contains("spec.replicas"), "{}", bad.message);
    }

    #[test]
    fn placeholder_pods_are_grouped_by_buffer_after_the_real_pods() {
        let built = build(&[
            TEMPLATE,
            BUFFER_ON_TEMPLATE,
            &pending_pod("default", "web", "100m", ""),
        ]);
        assert_eq!(
            built.buffer_pods,
            vec![super::BufferPods {
                buffer: "ml/spare".into(),
                pods: 1..4
            }]
        );
        assert!(!built.is_buffer_pod(0));
        assert!(built.is_buffer_pod(1) && built.is_buffer_pod(3));
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
