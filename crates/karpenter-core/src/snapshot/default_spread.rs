//! kube-scheduler's default topology spread constraints (`SCHEDULER_CONFIG`), applied to the pods that declare
//! none of their own, as kube-scheduler's PodTopologySpread plugin does and as upstream Karpenter mirrors it.
//!
//! A default constraint has no selector: kube-scheduler deduces one per pod, so the simulation must deduce the
//! same one to count the same pods. The selectors of every Service in the pod's namespace that selects the pod are
//! merged (as equality matches), then the selector of the pod's controller is added when it is a
//! ReplicationController (merged the same way) or a ReplicaSet or StatefulSet (each of its terms added). A pod for
//! which nothing can be deduced (no Service selects it, no such controller) is left unconstrained: an empty
//! selector would count every pod of the namespace. A controller that is not in the snapshot contributes nothing,
//! as kube-scheduler goes on without an owner it cannot read.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::{
    api::core::v1::TopologySpreadConstraint,
    apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement},
};

use super::{Snapshot, compact_pod::CompactPod};

/// The deduction's inputs, indexed once per snapshot, and the selectors deduced so far.
#[derive(Default)]
pub(super) struct DefaultSpread<'s> {
    constraints: &'s [TopologySpreadConstraint],
    /// Per namespace, the selectors of its Services that have one (a Service without a selector selects nothing).
    services: HashMap<&'s str, Vec<&'s BTreeMap<String, String>>>,
    /// Per `(namespace, name)`.
    replication_controllers: HashMap<(&'s str, &'s str), &'s BTreeMap<String, String>>,
    replica_sets: HashMap<(&'s str, &'s str), &'s LabelSelector>,
    stateful_sets: HashMap<(&'s str, &'s str), &'s LabelSelector>,
    /// The pods of one workload deduce the same selector: by namespace, controller and labels.
    deduced: HashMap<(String, String, BTreeMap<String, String>), Option<LabelSelector>>,
}

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<(&str, &str)> {
    Some((
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref()?,
    ))
}

impl<'s> DefaultSpread<'s> {
    /// Nothing is indexed when no default constraints are configured.
    pub fn new(snapshot: &'s Snapshot, constraints: &'s [TopologySpreadConstraint]) -> Self {
        if constraints.is_empty() {
            return Self::default();
        }
        let mut services: HashMap<&str, Vec<&BTreeMap<String, String>>> = HashMap::new();
        for service in &snapshot.services {
            let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
            if let (Some((namespace, _)), Some(selector)) = (key(&service.metadata), selector) {
                services.entry(namespace).or_default().push(selector);
            }
        }
        let replication_controllers = snapshot
            .replication_controllers
            .iter()
            .filter_map(|rc| Some((key(&rc.metadata)?, rc.spec.as_ref()?.selector.as_ref()?)))
            .collect();
        let replica_sets = snapshot
            .replica_sets
            .iter()
            .filter_map(|rs| Some((key(&rs.metadata)?, &rs.spec.as_ref()?.selector)))
            .collect();
        let stateful_sets = snapshot
            .stateful_sets
            .iter()
            .filter_map(|ss| Some((key(&ss.metadata)?, &ss.spec.as_ref()?.selector)))
            .collect();
        Self {
            constraints,
            services,
            replication_controllers,
            replica_sets,
            stateful_sets,
            deduced: HashMap::new(),
        }
    }

    /// The default constraints for `pod`, each with the pod's deduced selector; `None` when the pod has
    /// constraints of its own, none are configured, or no selector can be deduced.
    pub fn for_pod(&mut self, pod: &CompactPod) -> Option<Vec<TopologySpreadConstraint>> {
        if self.constraints.is_empty() {
            return None;
        }
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref());
        if own.is_some_and(|c| !c.is_empty()) {
            return None;
        }
        let selector = self.selector(pod)?;
        Some(
            self.constraints
                .iter()
                .map(|c| TopologySpreadConstraint {
                    label_selector: Some(selector.clone()),
                    ..c.clone()
                })
                .collect(),
        )
    }

    fn selector(&mut self, pod: &CompactPod) -> Option<LabelSelector> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let controller = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let cache_key = (
            namespace.to_owned(),
            controller
                .map(|o| format!("{}/{}/{}", o.api_version, o.kind, o.name))
                .unwrap_or_default(),
            labels,
        );
        if let Some(cached) = self.deduced.get(&cache_key) {
            return cached.clone();
        }
        let pod_labels = &cache_key.2;

        let mut match_labels = BTreeMap::new();
        for selector in self.services.get(namespace).into_iter().flatten() {
            if selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)) {
                match_labels.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let mut match_expressions = Vec::new();
        if let Some(owner) = controller {
            let at = (namespace, owner.name.as_str());
            match (owner.api_version.as_str(), owner.kind.as_str()) {
                ("v1", "ReplicationController") => {
                    if let Some(selector) = self.replication_controllers.get(&at) {
                        match_labels.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                }
                ("apps/v1", "ReplicaSet") => {
                    if let Some(selector) = self.replica_sets.get(&at) {
                        match_expressions.extend(requirements_of(selector));
                    }
                }
                ("apps/v1", "StatefulSet") => {
                    if let Some(selector) = self.stateful_sets.get(&at) {
                        match_expressions.extend(requirements_of(selector));
                    }
                }
                _ => {}
            }
        }
        let selector = (!match_labels.is_empty() || !match_expressions.is_empty()).then(|| LabelSelector {
            match_labels: (!match_labels.is_empty()).then_some(match_labels),
            match_expressions: (!match_expressions.is_empty()).then_some(match_expressions),
        });
        self.deduced.insert(cache_key, selector.clone());
        selector
    }
}

/// A selector as a list of requirements: each `matchLabels` entry an `In` of one value.
fn requirements_of(selector: &LabelSelector) -> impl Iterator<Item = LabelSelectorRequirement> + '_ {
    let labels = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| LabelSelectorRequirement {
            key: k.clone(),
            operator: "In".into(),
            values: Some(vec![v.clone()]),
        });
    labels.chain(selector.match_expressions.iter().flatten().cloned())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::{
        apps::v1::{ReplicaSet, ReplicaSetSpec, StatefulSet, StatefulSetSpec},
        core::v1::{Pod, PodSpec, ReplicationController, ReplicationControllerSpec, Service, ServiceSpec},
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn defaults() -> Vec<TopologySpreadConstraint> {
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
            .into_iter()
            .map(|key| TopologySpreadConstraint {
                max_skew: 1,
                topology_key: key.into(),
                when_unsatisfiable: "DoNotSchedule".into(),
                ..Default::default()
            })
            .collect()
    }

    fn pod(pod_labels: &[(&str, &str)], owner: Option<(&str, &str, &str)>) -> CompactPod {
        CompactPod::from(Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                labels: Some(labels(pod_labels)),
                owner_references: owner.map(|(api_version, kind, name)| {
                    vec![OwnerReference {
                        api_version: api_version.into(),
                        kind: kind.into(),
                        name: name.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            ..Default::default()
        })
    }

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        }
    }

    fn service(name: &str, selector: Option<&[(&str, &str)]>) -> Service {
        Service {
            metadata: meta(name),
            spec: Some(ServiceSpec {
                selector: selector.map(labels),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn replica_set(name: &str, selector: &[(&str, &str)]) -> ReplicaSet {
        ReplicaSet {
            metadata: meta(name),
            spec: Some(ReplicaSetSpec {
                selector: LabelSelector {
                    match_labels: Some(labels(selector)),
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn selector_of(spread: &mut DefaultSpread<'_>, pod: &CompactPod) -> Option<LabelSelector> {
        let constraints = spread.for_pod(pod)?;
        assert_eq!(constraints.len(), 2, "every default is applied");
        assert_eq!(constraints[0].label_selector, constraints[1].label_selector);
        constraints[0].label_selector.clone()
    }

    #[test]
    fn a_replica_sets_selector_becomes_the_pods_selector() {
        let snapshot = Snapshot {
            replica_sets: vec![replica_set("web-1", &[("app", "web")])],
            ..Default::default()
        };
        let constraints = defaults();
        let mut spread = DefaultSpread::new(&snapshot, &constraints);
        let p = pod(
            &[("app", "web"), ("hash", "1")],
            Some(("apps/v1", "ReplicaSet", "web-1")),
        );
        let selector = selector_of(&mut spread, &p).unwrap();
        assert_eq!(selector.match_labels, None);
        let expression = &selector.match_expressions.unwrap()[0];
        assert_eq!(
            (expression.key.as_str(), expression.operator.as_str()),
            ("app", "In")
        );
        assert_eq!(expression.values.as_deref(), Some(&["web".to_string()][..]));
    }

    #[test]
    fn services_that_select_the_pod_are_merged_and_others_ignored() {
        let snapshot = Snapshot {
            services: vec![
                service("a", Some(&[("app", "web")])),
                service("b", Some(&[("tier", "front")])),
                service("other", Some(&[("app", "db")])),
                // No selector selects nothing; an empty one selects everything but adds nothing.
                service("external", None),
                service("everything", Some(&[])),
            ],
            ..Default::default()
        };
        let constraints = defaults();
        let mut spread = DefaultSpread::new(&snapshot, &constraints);
        let p = pod(&[("app", "web"), ("tier", "front")], None);
        let selector = selector_of(&mut spread, &p).unwrap();
        assert_eq!(
            selector.match_labels,
            Some(labels(&[("app", "web"), ("tier", "front")]))
        );
        assert_eq!(selector.match_expressions, None);
    }

    #[test]
    fn a_pod_nothing_selects_is_not_defaulted() {
        let snapshot = Snapshot {
            services: vec![service("db", Some(&[("app", "db")]))],
            ..Default::default()
        };
        let constraints = defaults();
        let mut spread = DefaultSpread::new(&snapshot, &constraints);
        assert_eq!(spread.for_pod(&pod(&[("app", "web")], None)), None);
        // A Job (or a controller not in the snapshot) contributes nothing either.
        assert_eq!(
            spread.for_pod(&pod(&[("app", "web")], Some(("batch/v1", "Job", "j")))),
            None
        );
        assert_eq!(
            spread.for_pod(&pod(&[("app", "web")], Some(("apps/v1", "ReplicaSet", "gone")))),
            None
        );
    }

    #[test]
    fn a_pod_with_constraints_of_its_own_keeps_them() {
        let snapshot = Snapshot {
            replica_sets: vec![replica_set("web-1", &[("app", "web")])],
            ..Default::default()
        };
        let constraints = defaults();
        let mut spread = DefaultSpread::new(&snapshot, &constraints);
        let mut p = pod(&[("app", "web")], Some(("apps/v1", "ReplicaSet", "web-1")));
        p.spec.as_mut().unwrap().topology_spread_constraints = Some(vec![constraints[0].clone()]);
        assert_eq!(spread.for_pod(&p), None);
    }

    #[test]
    fn nothing_applies_when_nothing_is_configured() {
        let snapshot = Snapshot {
            replica_sets: vec![replica_set("web-1", &[("app", "web")])],
            ..Default::default()
        };
        let mut spread = DefaultSpread::new(&snapshot, &[]);
        assert_eq!(
            spread.for_pod(&pod(&[("app", "web")], Some(("apps/v1", "ReplicaSet", "web-1")))),
            None
        );
    }

    #[test]
    fn replication_controllers_merge_and_stateful_sets_add_terms() {
        let snapshot = Snapshot {
            services: vec![service("svc", Some(&[("app", "old")]))],
            replication_controllers: vec![ReplicationController {
                metadata: meta("rc"),
                spec: Some(ReplicationControllerSpec {
                    selector: Some(labels(&[("app", "old"), ("rc", "1")])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            stateful_sets: vec![StatefulSet {
                metadata: meta("db"),
                spec: Some(StatefulSetSpec {
                    selector: LabelSelector {
                        match_expressions: Some(vec![LabelSelectorRequirement {
                            key: "app".into(),
                            operator: "Exists".into(),
                            values: None,
                        }]),
                        ..Default::default()
                    },
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let constraints = defaults();
        let mut spread = DefaultSpread::new(&snapshot, &constraints);
        let rc_pod = pod(
            &[("app", "old"), ("rc", "1")],
            Some(("v1", "ReplicationController", "rc")),
        );
        let selector = selector_of(&mut spread, &rc_pod).unwrap();
        assert_eq!(
            selector.match_labels,
            Some(labels(&[("app", "old"), ("rc", "1")]))
        );

        let ss_pod = pod(&[("app", "db")], Some(("apps/v1", "StatefulSet", "db")));
        let selector = selector_of(&mut spread, &ss_pod).unwrap();
        assert_eq!(selector.match_labels, None);
        assert_eq!(selector.match_expressions.unwrap()[0].operator, "Exists");
    }

    #[test]
    fn pods_of_one_workload_share_the_deduction() {
        let snapshot = Snapshot {
            replica_sets: vec![replica_set("web-1", &[("app", "web")])],
            ..Default::default()
        };
        let constraints = defaults();
        let mut spread = DefaultSpread::new(&snapshot, &constraints);
        let owner = Some(("apps/v1", "ReplicaSet", "web-1"));
        let first = spread.for_pod(&pod(&[("app", "web")], owner));
        let second = spread.for_pod(&pod(&[("app", "web")], owner));
        assert_eq!(first, second);
        assert_eq!(spread.deduced.len(), 1);
    }

    /// The whole path: pending pods of a ReplicaSet, the cluster's defaults, a claim per pod in a zone each.
    #[test]
    fn a_defaulted_workload_gets_a_node_per_pod_in_a_zone_each() {
        use crate::{
            provisioning::{ClaimContext, node_claim_object},
            scheduling::schedule,
            snapshot::{BuildOptions, build_schedule_inputs, test_support::*},
        };
        let owned_pod = |name: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{app: web}}\n  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-1, uid: u, controller: true}}]\nspec:\n  containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]\n"
            )
        };
        let replica_set = "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: web-1, namespace: default}\nspec:\n  selector: {matchLabels: {app: web}}\n  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c}]}}\n";
        let pods: Vec<String> = (0..3).map(|i| owned_pod(&format!("web-{i}"))).collect();
        let mut objects: Vec<&str> = vec![DEFAULT_POOL, replica_set];
        objects.extend(pods.iter().map(String::as_str));
        let snap = snapshot(&objects);

        let zones_of_claims = |options: &BuildOptions| -> Vec<Vec<String>> {
            let mut inputs = build_schedule_inputs(&snap, &catalog(), options);
            let results = schedule(&inputs.input, &mut inputs.interner, &inputs.table);
            assert!(results.pod_errors.is_empty(), "{:?}", results.pod_errors);
            results
                .new_node_claims
                .iter()
                .map(|claim| {
                    let object = node_claim_object(
                        &ClaimContext {
                            interner: &inputs.interner,
                            table: &inputs.table,
                            template: &inputs.input.templates[claim.template],
                            nodepool_hash: None,
                            nodepool_uid: None,
                        },
                        claim,
                    );
                    object
                        .spec
                        .requirements
                        .iter()
                        .find(|r| r.key == "topology.kubernetes.io/zone")
                        .map(|r| r.values.clone())
                        .unwrap_or_default()
                })
                .collect()
        };

        // Without defaults the three small pods share one node.
        assert_eq!(zones_of_claims(&BuildOptions::default()).len(), 1);

        let options = BuildOptions {
            default_spread: defaults(),
            ..BuildOptions::default()
        };
        let mut zones = zones_of_claims(&options);
        assert_eq!(zones.len(), 3, "one node per pod: {zones:?}");
        assert!(
            zones.iter().all(|z| z.len() == 1),
            "each claim pinned to a zone: {zones:?}"
        );
        zones.sort();
        zones.dedup();
        assert_eq!(zones.len(), 3, "a zone each: {zones:?}");
    }
}
