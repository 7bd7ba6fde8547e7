//! Which domains a topology spread constraint counts, as kube-scheduler counts them: the zones of the NodePools
//! and nodes its nodeTaintsPolicy and nodeAffinityPolicy admit, never narrowed by preferred node affinity or by a
//! volume's zone, with minDomains lowering the global minimum to 0 when too few are left. Each test places pods
//! and reads the zones of the NodeClaims the simulation opens, as a user reading `karpenter schedule` would.

use std::sync::Arc;

use super::*;
use crate::{
    instance_type::{InstanceType, Offering},
    requirements::{LabelInterner, Requirement, Requirements, WellKnownKeys},
    resources::{ResourceId, ResourceTable, Resources},
};

const ZONE: &str = "topology.kubernetes.io/zone";
const ALL_ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

struct Fx {
    i: LabelInterner,
    table: ResourceTable,
    wk: WellKnownKeys,
    /// One 4-cpu instance type offered on-demand in every zone.
    types: Vec<Arc<InstanceType>>,
}

/// Where the pods went: the zone of each pod placed on a new NodeClaim (sorted), and how many stayed pending.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    zones: Vec<String>,
    pending: usize,
}

impl Outcome {
    fn new(zones: &[&str], pending: usize) -> Self {
        Self {
            zones: zones.iter().map(|z| z.to_string()).collect(),
            pending,
        }
    }
}

impl Fx {
    fn new() -> Self {
        let mut i = LabelInterner::new();
        let wk = WellKnownKeys::core(&mut i);
        let mut fx = Self {
            i,
            table: ResourceTable::new(),
            wk,
            types: Vec::new(),
        };
        let it = fx.instance_type();
        fx.types.push(it);
        fx
    }

    fn res(cpu_milli: i64, pods: i64) -> Resources {
        Resources::zero()
            .with(ResourceId::CPU, cpu_milli)
            .with(ResourceId::MEMORY, (8i64 << 30) * 1000)
            .with(ResourceId::PODS, pods * 1000)
    }

    fn reqs(&mut self, list: &[(&str, &str, &[&str])]) -> Requirements {
        list.iter()
            .map(|(k, op, v)| Requirement::parse(k, op, v, None, &mut self.i).unwrap())
            .collect()
    }

    fn instance_type(&mut self) -> Arc<InstanceType> {
        let on_demand = self.i.intern("on-demand");
        let offerings = ALL_ZONES
            .iter()
            .map(|z| Offering {
                zone: self.i.intern(z),
                capacity_type: on_demand,
                price: 0.2,
                available: true,
                reservation_id: None,
                reservation_capacity: None,
            })
            .collect();
        let requirements = self.reqs(&[
            ("node.kubernetes.io/instance-type", "In", &["m"]),
            ("kubernetes.io/arch", "In", &["amd64"]),
            ("kubernetes.io/os", "In", &["linux"]),
            (ZONE, "In", &ALL_ZONES),
            ("karpenter.sh/capacity-type", "In", &["on-demand"]),
        ]);
        Arc::new(InstanceType {
            name: "m".into(),
            name_symbol: self.i.intern("m"),
            requirements,
            capacity: Self::res(4000, 110),
            overhead: Resources::zero(),
            allocatable: Self::res(4000, 110),
            offerings,
            overlays_applied: Default::default(),
        })
    }

    /// A NodePool in `zones` with the label `team` (when given) and a `dedicated=<name>:NoSchedule` taint (when
    /// `tainted`).
    fn pool(&mut self, name: &str, zones: &[&str], team: Option<&str>, tainted: bool) -> NodePoolTemplate {
        let mut requirements = self.reqs(&[("karpenter.sh/nodepool", "In", &[name]), (ZONE, "In", zones)]);
        let mut labels = Vec::new();
        if let Some(team) = team {
            requirements.add(Requirement::parse("team", "In", &[team], None, &mut self.i).unwrap());
            labels.push((self.i.intern_key("team"), self.i.intern(team)));
        }
        let taints = if tainted {
            vec![Taint {
                key: self.i.intern_key("dedicated"),
                value: Some(self.i.intern(name)),
                effect: TaintEffect::NoSchedule,
            }]
        } else {
            Vec::new()
        };
        NodePoolTemplate {
            name: name.into(),
            weight: 0,
            requirements,
            labels,
            taints,
            startup_taints: Vec::new(),
            instance_types: self.types.clone(),
            daemon_overheads: crate::scheduling::daemon_overhead::DaemonOverheads::default(),
            remaining: None,
            remaining_nodes: None,
            claim_metadata: ClaimMetadata::default(),
        }
    }

    /// A full node (no room left) in `zone` with the label `team`, running no pod.
    fn full_node(&mut self, name: &str, zone: &str, team: &str) -> ExistingNode {
        ExistingNode {
            name: name.into(),
            hostname: self.i.intern(name),
            requirements: self.reqs(&[
                ("kubernetes.io/hostname", "In", &[name]),
                (ZONE, "In", &[zone]),
                ("team", "In", &[team]),
            ]),
            available: Resources::zero(),
            taints: Vec::new(),
            host_ports: Vec::new(),
            volume_limits: Vec::new(),
            volumes_used: Vec::new(),
            nodepool: None,
            schedulable: true,
            leaving: false,
        }
    }

    /// A zone spread (DoNotSchedule) over the pods labelled `app=web`.
    fn zone_spread(&mut self, max_skew: u32) -> SpreadConstraint {
        let app = self.i.intern_key("app");
        let web = self.i.intern("web");
        SpreadConstraint {
            topology_key: self.i.intern_key(ZONE),
            max_skew,
            min_domains: None,
            hard: true,
            selector: LabelSelector {
                expressions: vec![SelectorExpression {
                    key: app,
                    operator: SelectorOperator::In,
                    values: vec![web],
                }],
            },
            honor_node_affinity: true,
            honor_node_taints: false,
        }
    }

    /// `n` pods labelled `app=web` asking for one cpu each, with `spread`.
    fn web_pods(&mut self, n: usize, spread: &SpreadConstraint) -> Vec<Pod> {
        let namespace = self.i.intern("default");
        let labels = Labels::new(vec![(self.i.intern_key("app"), self.i.intern("web"))]);
        (0..n)
            .map(|i| {
                Pod::new(
                    format!("default/web-{i}"),
                    PodShape {
                        namespace,
                        labels: labels.clone(),
                        requests: Self::res(1000, 1),
                        base_requirements: Requirements::new(),
                        volume_requirements: Requirements::new(),
                        required_terms: Vec::new(),
                        preferred_terms: Vec::new(),
                        tolerations: Vec::new(),
                        spread: vec![spread.clone()],
                        affinity: Vec::new(),
                        anti_affinity: Vec::new(),
                        preferred_affinity: Vec::new(),
                        preferred_anti_affinity: Vec::new(),
                        host_ports: Vec::new(),
                        csi_volumes: Vec::new(),
                        priority: 0,
                    },
                )
            })
            .collect()
    }

    fn run(
        &mut self,
        templates: Vec<NodePoolTemplate>,
        existing: Vec<ExistingNode>,
        pods: Vec<Pod>,
    ) -> Outcome {
        let input = SchedulingInput {
            templates,
            existing,
            bound_pods: Vec::new(),
            pods,
            well_known: self.wk.clone(),
            settings: SchedulingSettings::default(),
            skipped_nodepools: Vec::new(),
        };
        self.run_input(&input)
    }

    fn run_input(&mut self, input: &SchedulingInput) -> Outcome {
        let results = schedule(input, &mut self.i, &self.table);
        let zone_key = self.i.intern_key(ZONE);
        let mut zones: Vec<String> = results
            .new_node_claims
            .iter()
            .flat_map(|c| {
                let zone = c
                    .requirements
                    .single_value(zone_key)
                    .expect("a spread pins the zone");
                std::iter::repeat_n(self.i.resolve(zone).to_string(), c.pods.len())
            })
            .collect();
        zones.sort();
        Outcome {
            zones,
            pending: results.pod_errors.len(),
        }
    }
}

#[test]
fn node_taints_policy_honor_leaves_out_the_zones_of_node_pools_the_pod_does_not_tolerate() {
    // `general` launches in zone-a and zone-b; only the tainted `gpu` pool launches in zone-c, and the pods do not
    // tolerate its taint.
    for (honor, expected, why) in [
        (
            true,
            Outcome::new(&["zone-a", "zone-a", "zone-b", "zone-b"], 0),
            "Honor: the pods spread over the zones of the pool they tolerate",
        ),
        (
            false,
            Outcome::new(&["zone-a", "zone-b"], 2),
            "Ignore: zone-c counts with 0 pods, so no zone may take a second pod",
        ),
    ] {
        let mut fx = Fx::new();
        let general = fx.pool("general", &["zone-a", "zone-b"], None, false);
        let gpu = fx.pool("gpu", &["zone-c"], None, true);
        let mut spread = fx.zone_spread(1);
        spread.honor_node_taints = honor;
        let pods = fx.web_pods(4, &spread);
        assert_eq!(fx.run(vec![general, gpu], Vec::new(), pods), expected, "{why}");
    }
}

/// How the pods of a test select the NodePool labelled `team=a`.
#[derive(Debug, Clone, Copy)]
enum TeamSelection {
    NodeSelector,
    RequiredNodeAffinity,
}

impl TeamSelection {
    fn apply(self, fx: &mut Fx, pods: &mut [Pod]) {
        let team_a = fx.reqs(&[("team", "In", &["a"])]);
        for p in pods {
            match self {
                Self::NodeSelector => p.base_requirements = team_a.clone(),
                Self::RequiredNodeAffinity => p.required_terms = vec![team_a.clone()],
            }
        }
    }
}

#[test]
fn node_affinity_policy_honor_counts_only_the_zones_of_node_pools_the_pod_selects() {
    // Team a's pool launches in zone-a and zone-b, team b's only in zone-c; the pods select team a.
    for selection in [TeamSelection::NodeSelector, TeamSelection::RequiredNodeAffinity] {
        for (honor, expected, why) in [
            (
                true,
                Outcome::new(&["zone-a", "zone-a", "zone-b", "zone-b"], 0),
                "Honor (the default): the pods spread over their own pool's zones",
            ),
            (
                false,
                Outcome::new(&["zone-a", "zone-b"], 2),
                "Ignore: zone-c counts with 0 pods, so no zone may take a second pod",
            ),
        ] {
            let mut fx = Fx::new();
            let team_a = fx.pool("team-a", &["zone-a", "zone-b"], Some("a"), false);
            let team_b = fx.pool("team-b", &["zone-c"], Some("b"), false);
            let mut spread = fx.zone_spread(1);
            spread.honor_node_affinity = honor;
            let mut pods = fx.web_pods(4, &spread);
            selection.apply(&mut fx, &mut pods);
            assert_eq!(
                fx.run(vec![team_a, team_b], Vec::new(), pods),
                expected,
                "{selection:?}: {why}"
            );
        }
    }
}

#[test]
fn node_affinity_policy_honor_counts_only_the_zones_of_nodes_the_pod_selects() {
    // Only team a's pool can launch (zone-a and zone-b); a full node of team b sits in zone-c.
    for (honor, expected, why) in [
        (
            true,
            Outcome::new(&["zone-a", "zone-a", "zone-b", "zone-b"], 0),
            "Honor: the other team's node is not a domain of this spread",
        ),
        (
            false,
            Outcome::new(&["zone-a", "zone-b"], 2),
            "Ignore: the node's zone counts with 0 pods, as kube-scheduler would count it",
        ),
    ] {
        let mut fx = Fx::new();
        let team_a = fx.pool("team-a", &["zone-a", "zone-b"], Some("a"), false);
        let other = fx.full_node("other", "zone-c", "b");
        let mut spread = fx.zone_spread(1);
        spread.honor_node_affinity = honor;
        let mut pods = fx.web_pods(4, &spread);
        TeamSelection::NodeSelector.apply(&mut fx, &mut pods);
        assert_eq!(fx.run(vec![team_a], vec![other], pods), expected, "{why}");
    }
}

#[test]
fn preferred_node_affinity_does_not_narrow_the_spread_domains() {
    // The pods prefer zone-a. Counting only zone-a would let every pod in; kube-scheduler counts all three zones,
    // so the second and third pods give up their preference and go where the spread allows.
    let mut fx = Fx::new();
    let general = fx.pool("general", &ALL_ZONES, None, false);
    let spread = fx.zone_spread(1);
    let mut pods = fx.web_pods(3, &spread);
    let prefer_a = fx.reqs(&[(ZONE, "In", &["zone-a"])]);
    for p in &mut pods {
        p.preferred_terms = vec![(1, prefer_a.clone())];
    }
    assert_eq!(
        fx.run(vec![general], Vec::new(), pods),
        Outcome::new(&["zone-a", "zone-b", "zone-c"], 0)
    );
}

#[test]
fn min_domains_above_the_counted_domains_caps_each_domain_at_max_skew() {
    // The pool launches in three zones but the pods require zone-a or zone-b: two domains count. With more
    // minDomains than that the global minimum is 0, so each zone takes at most maxSkew pods; without minDomains
    // (as with 1) or with 2 it changes nothing.
    for (min_domains, expected) in [
        (None, Outcome::new(&["zone-a", "zone-a", "zone-b", "zone-b"], 0)),
        (
            Some(2),
            Outcome::new(&["zone-a", "zone-a", "zone-b", "zone-b"], 0),
        ),
        (Some(3), Outcome::new(&["zone-a", "zone-b"], 2)),
    ] {
        let mut fx = Fx::new();
        let general = fx.pool("general", &ALL_ZONES, None, false);
        let mut spread = fx.zone_spread(1);
        spread.min_domains = min_domains;
        let mut pods = fx.web_pods(4, &spread);
        let a_or_b = fx.reqs(&[(ZONE, "In", &["zone-a", "zone-b"])]);
        for p in &mut pods {
            p.required_terms = vec![a_or_b.clone()];
        }
        assert_eq!(
            fx.run(vec![general], Vec::new(), pods),
            expected,
            "minDomains {min_domains:?}"
        );
    }
}

/// A replica of `db` whose claim `data-{i}` is bound to a volume in test-zone-2, spread over zones with maxSkew 1.
fn db_replica_with_volume_in_zone_2(i: usize) -> [String; 3] {
    let pv = format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: pv-{i}}}\nspec:\n  csi: {{driver: ebs.csi.aws.com, volumeHandle: vol-{i}}}\n  nodeAffinity:\n    required:\n      nodeSelectorTerms:\n      - matchExpressions: [{{key: topology.kubernetes.io/zone, operator: In, values: [test-zone-2]}}]\n"
    );
    let pvc = format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data-{i}, namespace: default}}\nspec: {{storageClassName: gp3, volumeName: pv-{i}}}\n"
    );
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: db-{i}, namespace: default, labels: {{app: db}}}}\nspec:\n  containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]\n  topologySpreadConstraints:\n  - {{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: db}}}}}}\n  volumes: [{{name: data, persistentVolumeClaim: {{claimName: data-{i}}}}}]\n"
    );
    [pv, pvc, pod]
}

#[test]
fn a_volume_zone_limits_where_the_pod_goes_but_not_the_zones_its_spread_counts() {
    // Both replicas' volumes are in test-zone-2 and the NodePool launches in three zones. The spread counts the
    // three: the first replica goes to test-zone-2 with its volume, and the second would make the skew 2 there
    // against 0 in the other zones, so it stays pending (as upstream keeps it) instead of piling into the
    // volume's zone as if that were the only one.
    use crate::snapshot::{
        BuildOptions, build_schedule_inputs,
        test_support::{DEFAULT_POOL, catalog, snapshot},
    };
    let replicas: Vec<String> = (0..2).flat_map(db_replica_with_volume_in_zone_2).collect();
    let mut objects: Vec<&str> = vec![DEFAULT_POOL];
    objects.extend(replicas.iter().map(String::as_str));
    let mut built = build_schedule_inputs(&snapshot(&objects), &catalog(), &BuildOptions::default());
    assert!(built.notes.is_empty(), "{:?}", built.notes);
    let results = schedule(&built.input, &mut built.interner, &built.table);
    let zone_key = built.interner.lookup_key(ZONE).unwrap();
    let zones: Vec<&str> = results
        .new_node_claims
        .iter()
        .map(|c| {
            built
                .interner
                .resolve(c.requirements.single_value(zone_key).unwrap())
        })
        .collect();
    assert_eq!(zones, ["test-zone-2"], "one NodeClaim, beside the volume");
    assert_eq!(results.new_node_claims[0].pods.len(), 1);
    assert_eq!(results.pod_errors.len(), 1, "{:?}", results.pod_errors);
    assert!(
        results.pod_errors[0].1.contains("maxSkew"),
        "{}",
        results.pod_errors[0].1
    );
}

#[test]
fn node_affinity_policy_honor_ignores_pods_on_a_node_without_the_selected_label() {
    // A full node in zone-b without any `team` label runs two web pods. The pods select team a, so under Honor
    // that node is not one of theirs (a node must carry the label a nodeSelector names) and its pods do not
    // count: the new pods spread evenly. Under Ignore they count, and zone-a takes the new pods until it
    // catches up.
    for (honor, expected, why) in [
        (
            true,
            Outcome::new(&["zone-a", "zone-a", "zone-b", "zone-b"], 0),
            "Honor: the unlabelled node's pods do not count",
        ),
        (
            false,
            Outcome::new(&["zone-a", "zone-a", "zone-a", "zone-b"], 0),
            "Ignore: zone-b starts with two pods",
        ),
    ] {
        let mut fx = Fx::new();
        let team_a = fx.pool("team-a", &["zone-a", "zone-b"], Some("a"), false);
        let mut unlabelled = fx.full_node("unlabelled", "zone-b", "none");
        unlabelled.requirements.remove(fx.i.intern_key("team"));
        let mut spread = fx.zone_spread(1);
        spread.honor_node_affinity = honor;
        let mut pods = fx.web_pods(4, &spread);
        TeamSelection::NodeSelector.apply(&mut fx, &mut pods);
        let input = SchedulingInput {
            templates: vec![team_a],
            existing: vec![unlabelled],
            bound_pods: (0..2)
                .map(|_| BoundPod {
                    namespace: pods[0].namespace,
                    labels: pods[0].labels.clone(),
                    label_set: BoundPod::UNSHARED,
                    node: 0,
                    anti_affinity: Box::default(),
                })
                .collect(),
            pods,
            well_known: fx.wk.clone(),
            settings: SchedulingSettings::default(),
            skipped_nodepools: Vec::new(),
        };
        assert_eq!(fx.run_input(&input), expected, "{why}");
    }
}
