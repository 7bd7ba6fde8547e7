//! Behaviour of the scheduling simulation, one test per behaviour a user would notice.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::{
    instance_type::{InstanceType, Offering},
    requirements::{LabelInterner, Requirement, Requirements, Symbol, WellKnownKeys},
    resources::{ResourceId, ResourceTable, Resources},
};

const GI: i64 = 1 << 30;

/// Builds instance types, templates and pods against one interner.
struct Fx {
    i: LabelInterner,
    table: ResourceTable,
    wk: WellKnownKeys,
}

fn make_input(
    well_known: WellKnownKeys,
    templates: Vec<NodePoolTemplate>,
    pods: Vec<Pod>,
) -> SchedulingInput {
    SchedulingInput {
        templates,
        existing: Vec::new(),
        bound_pods: Vec::new(),
        pods,
        well_known,
        settings: SchedulingSettings::default(),
        skipped_nodepools: Vec::new(),
    }
}

impl Fx {
    fn new() -> Self {
        let mut i = LabelInterner::new();
        // The test catalog's own instance labels are well-known, as a catalog file's wellKnownLabels are.
        let mut wk = WellKnownKeys::core(&mut i);
        for key in ["size", "example.com/gen", "family"] {
            let k = i.intern_key(key);
            wk.insert(k);
        }
        Self {
            i,
            table: ResourceTable::new(),
            wk,
        }
    }

    fn sym(&mut self, s: &str) -> Symbol {
        self.i.intern(s)
    }

    fn req(&mut self, key: &str, op: &str, values: &[&str]) -> Requirement {
        Requirement::parse(key, op, values, None, &mut self.i).unwrap()
    }

    fn reqs(&mut self, list: &[(&str, &str, &[&str])]) -> Requirements {
        list.iter().map(|(k, op, v)| self.req(k, op, v)).collect()
    }

    fn res(cpu_milli: i64, mem_bytes: i64, pods: i64) -> Resources {
        Resources::zero()
            .with(ResourceId::CPU, cpu_milli)
            .with(ResourceId::MEMORY, mem_bytes * 1000)
            .with(ResourceId::PODS, pods * 1000)
    }

    /// A type with `cpu` cores and `mem` GiB, offered on-demand and spot in each zone (spot at 40%).
    fn it(
        &mut self,
        name: &str,
        cpu: i64,
        mem: i64,
        price: f64,
        zones: &[&str],
        extra: &[(&str, &str)],
    ) -> Arc<InstanceType> {
        let mut offerings = Vec::new();
        for z in zones {
            let zone = self.sym(z);
            for (ct, p) in [("on-demand", price), ("spot", price * 0.4)] {
                let capacity_type = self.sym(ct);
                offerings.push(Offering {
                    zone,
                    capacity_type,
                    price: p,
                    available: true,
                    reservation_id: None,
                    reservation_capacity: None,
                });
            }
        }
        offerings.sort_by(|a, b| a.price.total_cmp(&b.price));
        let mut requirements = self.reqs(&[
            ("node.kubernetes.io/instance-type", "In", &[name]),
            ("kubernetes.io/arch", "In", &["amd64"]),
            ("kubernetes.io/os", "In", &["linux"]),
            ("topology.kubernetes.io/zone", "In", zones),
            ("karpenter.sh/capacity-type", "In", &["on-demand", "spot"]),
        ]);
        for (k, v) in extra {
            let r = self.req(k, "In", &[v]);
            requirements.add(r);
        }
        let capacity = Self::res(cpu * 1000, mem * GI, 110);
        let overhead = Self::res(100, 100 << 20, 0);
        let allocatable = capacity.saturating_sub(&overhead);
        let name_symbol = self.sym(name);
        Arc::new(InstanceType {
            name: name.into(),
            name_symbol,
            requirements,
            capacity,
            overhead,
            allocatable,
            offerings,
            overlays_applied: Default::default(),
        })
    }

    fn catalog(&mut self) -> Vec<Arc<InstanceType>> {
        let zones = ["zone-a", "zone-b", "zone-c"];
        vec![
            self.it(
                "small",
                2,
                4,
                0.10,
                &zones,
                &[("size", "small"), ("example.com/gen", "3")],
            ),
            self.it(
                "medium",
                4,
                8,
                0.20,
                &zones,
                &[("size", "medium"), ("example.com/gen", "5")],
            ),
            self.it(
                "large",
                8,
                16,
                0.40,
                &zones,
                &[("size", "large"), ("example.com/gen", "6")],
            ),
            self.it(
                "xlarge",
                16,
                32,
                0.80,
                &zones,
                &[("size", "xlarge"), ("example.com/gen", "7")],
            ),
        ]
    }

    fn template(
        &mut self,
        name: &str,
        weight: i32,
        extra: &[(&str, &str, &[&str])],
        types: &[Arc<InstanceType>],
    ) -> NodePoolTemplate {
        let mut requirements = self.reqs(extra);
        let np = self.req("karpenter.sh/nodepool", "In", &[name]);
        requirements.add(np);
        let instance_types = types
            .iter()
            .filter(|t| t.requirements.intersects(&requirements).is_ok())
            .cloned()
            .collect();
        NodePoolTemplate {
            name: name.into(),
            weight,
            requirements,
            labels: Vec::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            instance_types,
            daemon_overheads: DaemonOverheads::default(),
            remaining: None,
            remaining_nodes: None,
            claim_metadata: ClaimMetadata::default(),
        }
    }

    fn pod(&mut self, name: &str, cpu_milli: i64, mem_mi: i64) -> Pod {
        let ns = self.sym("default");
        let app = self.sym("app");
        let value = self.sym(name);
        Pod::new(
            format!("default/{name}"),
            PodShape {
                namespace: ns,
                labels: Labels::new(vec![(app, value)]),
                requests: Self::res(cpu_milli, mem_mi << 20, 1),
                base_requirements: Requirements::new(),
                volume_requirements: Requirements::new(),
                required_terms: Vec::new(),
                preferred_terms: Vec::new(),
                tolerations: Vec::new(),
                spread: Vec::new(),
                affinity: Vec::new(),
                anti_affinity: Vec::new(),
                preferred_affinity: Vec::new(),
                preferred_anti_affinity: Vec::new(),
                host_ports: Vec::new(),
                csi_volumes: Vec::new(),
                priority: 0,
            },
        )
    }

    fn selector(&mut self, key: &str, value: &str) -> LabelSelector {
        let k = self.i.intern_key(key);
        let v = self.sym(value);
        LabelSelector {
            expressions: vec![SelectorExpression {
                key: k,
                operator: SelectorOperator::In,
                values: vec![v],
            }],
        }
    }

    fn term(&mut self, topology_key: &str, key: &str, value: &str) -> AffinityTerm {
        let ns = self.sym("default");
        AffinityTerm {
            topology_key: self.i.intern_key(topology_key),
            selector: self.selector(key, value),
            namespaces: NamespaceScope::Only(vec![ns]),
        }
    }

    fn run(&mut self, input: &SchedulingInput) -> SchedulingResults {
        let results = schedule(input, &mut self.i, &self.table);
        check_invariants(input, &results);
        results
    }

    fn existing(&mut self, name: &str, cpu: i64, mem: i64, labels: &[(&str, &str)]) -> ExistingNode {
        let mut list: Vec<(&str, &str, &[&str])> = Vec::new();
        let values: Vec<[&str; 1]> = labels.iter().map(|(_, v)| [*v]).collect();
        for ((k, _), v) in labels.iter().zip(&values) {
            list.push((k, "In", v));
        }
        let host = ["kubernetes.io/hostname"];
        let name_v = [name];
        list.push((host[0], "In", &name_v));
        ExistingNode {
            name: name.into(),
            hostname: self.sym(name),
            requirements: self.reqs(&list),
            available: Self::res(cpu * 1000, mem * GI, 110),
            taints: Vec::new(),
            host_ports: Vec::new(),
            volume_limits: Vec::new(),
            volumes_used: Vec::new(),
            nodepool: None,
            schedulable: true,
            leaving: false,
        }
    }
}

/// What must hold for every simulation: no NodeClaim's pods exceed its cheapest type, no existing node is
/// over-committed, every pod is placed once or has a reason.
fn check_invariants(input: &SchedulingInput, results: &SchedulingResults) {
    let mut seen = vec![0u32; input.pods.len()];
    for claim in &results.new_node_claims {
        let template = &input.templates[claim.template];
        let mut total = Resources::zero();
        for &p in &claim.pods {
            seen[p] += 1;
            total.add_assign(&input.pods[p].requests);
        }
        assert!(
            !claim.instance_types.is_empty(),
            "a NodeClaim with no instance type"
        );
        for it in &claim.instance_types {
            let i = template
                .instance_types
                .iter()
                .position(|t| t.name == it.name)
                .expect("a NodeClaim's types are its NodePool's");
            let daemons = &template.daemon_overheads.of(i).requests;
            assert!(
                total.saturating_add(daemons).fits_in(&it.allocatable),
                "{} cannot hold its pods and its DaemonSets",
                it.name
            );
            assert!(
                it.requirements.intersects(&claim.requirements).is_ok(),
                "{} breaks the claim requirements",
                it.name
            );
        }
        assert!(claim.launch.is_some(), "every NodeClaim can launch");
    }
    for (n, pods) in &results.existing_nodes {
        let mut total = Resources::zero();
        for &p in pods {
            seen[p] += 1;
            total.add_assign(&input.pods[p].requests);
        }
        assert!(
            total.fits_in(&input.existing[*n].available),
            "existing node {} over-committed",
            input.existing[*n].name
        );
    }
    for (p, reason) in &results.pod_errors {
        seen[*p] += 1;
        assert!(!reason.is_empty());
    }
    for (p, count) in seen.iter().enumerate() {
        assert_eq!(
            *count, 1,
            "pod {} placed or explained {count} times",
            input.pods[p].id
        );
    }
}

fn claim_types(c: &NewNodeClaim) -> Vec<&str> {
    c.instance_types.iter().map(|it| it.name.as_str()).collect()
}

#[test]
fn a_pending_pod_gets_the_cheapest_instance_type_that_fits() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let pods = vec![fx.pod("web", 3000, 1024)];
    let input = make_input(fx.wk.clone(), vec![t], pods);
    let r = fx.run(&input);
    assert_eq!(r.new_node_claims.len(), 1);
    let claim = &r.new_node_claims[0];
    assert_eq!(
        claim_types(claim),
        ["medium", "large", "xlarge"],
        "every fitting type, cheapest first"
    );
    let launch = claim.launch.as_ref().unwrap();
    assert_eq!(launch.instance_type.name, "medium");
    assert_eq!(
        fx.i.resolve(launch.offering.capacity_type),
        "spot",
        "the cheapest offering"
    );
}

#[test]
fn pods_are_packed_largest_first_onto_few_nodes() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let mut pods: Vec<Pod> = (0..6).map(|i| fx.pod(&format!("small-{i}"), 500, 256)).collect();
    pods.push(fx.pod("big", 6000, 1024));
    let input = make_input(fx.wk.clone(), vec![t], pods);
    let r = fx.run(&input);
    assert_eq!(
        r.new_node_claims.len(),
        1,
        "the big pod opens a node the small ones join"
    );
    assert_eq!(r.new_node_claims[0].pods[0], 6, "the largest pod is placed first");
}

#[test]
fn existing_nodes_are_used_before_new_node_claims() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let pods = vec![fx.pod("a", 1000, 512)];
    let mut input = make_input(fx.wk.clone(), vec![t], pods);
    input
        .existing
        .push(fx.existing("node-1", 2, 4, &[("topology.kubernetes.io/zone", "zone-a")]));
    let r = fx.run(&input);
    assert!(r.new_node_claims.is_empty());
    assert_eq!(r.existing_nodes, vec![(0, vec![0])]);
}

#[test]
fn in_flight_node_claims_are_filled_before_new_ones_are_opened() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let pods = (0..10).map(|i| fx.pod(&format!("p{i}"), 1000, 512)).collect();
    let input = make_input(fx.wk.clone(), vec![t], pods);
    let r = fx.run(&input);
    assert_eq!(r.new_node_claims.len(), 1, "ten 1-CPU pods share one 16-CPU type");
    assert_eq!(r.new_node_claims[0].pods.len(), 10);
    assert_eq!(claim_types(&r.new_node_claims[0]), ["xlarge"]);
}

#[test]
fn nodepools_are_tried_by_weight_then_name() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let low = fx.template("b-low", 10, &[], &cat);
    let high = fx.template("z-high", 50, &[], &cat);
    let tie = fx.template("a-high", 50, &[], &cat);
    let pods = vec![fx.pod("a", 500, 256)];
    let input = make_input(fx.wk.clone(), vec![low, high, tie], pods);
    let r = fx.run(&input);
    assert_eq!(input.templates[r.new_node_claims[0].template].name, "a-high");
}

#[test]
fn requirement_operators_narrow_the_instance_types() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    for (op, values, expected) in [
        ("In", vec!["large", "small"], vec!["small", "large"]),
        ("NotIn", vec!["small"], vec!["medium", "large", "xlarge"]),
        ("Exists", vec![], vec!["small", "medium", "large", "xlarge"]),
    ] {
        let t = fx.template("default", 0, &[("size", op, &values)], &cat);
        let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 500, 256)]);
        let r = fx.run(&input);
        assert_eq!(
            claim_types(&r.new_node_claims[0]),
            expected,
            "size {op} {values:?}"
        );
    }
    for (op, value, expected) in [
        ("Gt", "5", vec!["large", "xlarge"]),
        ("Gte", "5", vec!["medium", "large", "xlarge"]),
        ("Lt", "6", vec!["small", "medium"]),
        ("Lte", "6", vec!["small", "medium", "large"]),
    ] {
        let t = fx.template("default", 0, &[("example.com/gen", op, &[value])], &cat);
        let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 500, 256)]);
        let r = fx.run(&input);
        assert_eq!(claim_types(&r.new_node_claims[0]), expected, "gen {op} {value}");
    }
    let t = fx.template("default", 0, &[("example.com/absent", "DoesNotExist", &[])], &cat);
    let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 500, 256)]);
    assert_eq!(fx.run(&input).new_node_claims[0].instance_types.len(), 4);
}

#[test]
fn pod_requirements_are_layered_on_the_nodepool_and_instance_types() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template(
        "default",
        0,
        &[("karpenter.sh/capacity-type", "In", &["on-demand"])],
        &cat,
    );
    let mut pod = fx.pod("a", 500, 256);
    pod.base_requirements = fx.reqs(&[
        ("topology.kubernetes.io/zone", "In", &["zone-b"]),
        ("size", "In", &["medium", "large"]),
    ]);
    let input = make_input(fx.wk.clone(), vec![t], vec![pod]);
    let r = fx.run(&input);
    let claim = &r.new_node_claims[0];
    assert_eq!(claim_types(claim), ["medium", "large"]);
    let launch = claim.launch.as_ref().unwrap();
    assert_eq!(fx.i.resolve(launch.offering.zone), "zone-b");
    assert_eq!(
        fx.i.resolve(launch.offering.capacity_type),
        "on-demand",
        "the NodePool allows only on-demand"
    );
}

#[test]
fn labels_a_pod_selects_must_be_declared_by_the_nodepool() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let mut pod = fx.pod("a", 500, 256);
    pod.base_requirements = fx.reqs(&[("example.com/team", "In", &["web"])]);
    let input = make_input(fx.wk.clone(), vec![t.clone()], vec![pod.clone()]);
    let r = fx.run(&input);
    assert_eq!(r.pod_errors.len(), 1);
    assert!(
        r.pod_errors[0].1.contains("example.com/team"),
        "{}",
        r.pod_errors[0].1
    );
    // Declared in the NodePool template, it works.
    let declared = fx.template("default", 0, &[("example.com/team", "In", &["web"])], &cat);
    let input = make_input(fx.wk.clone(), vec![declared], vec![pod]);
    assert!(fx.run(&input).pod_errors.is_empty());
}

#[test]
fn required_node_affinity_terms_are_alternatives() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let mut pod = fx.pod("a", 500, 256);
    pod.required_terms = vec![
        fx.reqs(&[("size", "In", &["huge"])]),
        fx.reqs(&[("size", "In", &["large"])]),
    ];
    let input = make_input(fx.wk.clone(), vec![t], vec![pod]);
    let r = fx.run(&input);
    assert_eq!(
        claim_types(&r.new_node_claims[0]),
        ["large"],
        "the second term is tried when the first fails"
    );
}

#[test]
fn preferred_node_affinity_is_honoured_then_relaxed() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let mut pod = fx.pod("a", 500, 256);
    let prefer_large = fx.reqs(&[("size", "In", &["large"])]);
    pod.preferred_terms = vec![(10, prefer_large)];
    let input = make_input(fx.wk.clone(), vec![t.clone()], vec![pod.clone()]);
    assert_eq!(
        claim_types(&fx.run(&input).new_node_claims[0]),
        ["large"],
        "a satisfiable preference is honoured"
    );
    let mut impossible = pod;
    impossible.preferred_terms = vec![(10, fx.reqs(&[("size", "In", &["huge"])]))];
    let input = make_input(fx.wk.clone(), vec![t.clone()], vec![impossible.clone()]);
    let r = fx.run(&input);
    assert!(r.pod_errors.is_empty(), "an impossible preference is relaxed");
    assert_eq!(r.new_node_claims[0].instance_types.len(), 4);
    // Under the Ignore policy the preference never applies.
    let mut input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("b", 500, 256)]);
    input.pods[0].preferred_terms = vec![(10, fx.reqs(&[("size", "In", &["large"])]))];
    input.settings.preference_policy = PreferencePolicy::Ignore;
    assert_eq!(fx.run(&input).new_node_claims[0].instance_types.len(), 4);
}

#[test]
fn taints_must_be_tolerated_and_startup_taints_are_ignored() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let mut gpu = fx.template("gpu", 100, &[], &cat);
    let key = fx.i.intern_key("nvidia.com/gpu");
    gpu.taints = vec![Taint {
        key,
        value: None,
        effect: TaintEffect::NoSchedule,
    }];
    let startup_key = fx.i.intern_key("example.com/agent-not-ready");
    gpu.startup_taints = vec![Taint {
        key: startup_key,
        value: None,
        effect: TaintEffect::NoSchedule,
    }];
    let input = make_input(fx.wk.clone(), vec![gpu.clone()], vec![fx.pod("a", 500, 256)]);
    let r = fx.run(&input);
    assert_eq!(r.pod_errors.len(), 1);
    assert!(
        r.pod_errors[0]
            .1
            .contains("did not tolerate nvidia.com/gpu=:NoSchedule"),
        "{}",
        r.pod_errors[0].1
    );
    let mut tolerant = fx.pod("b", 500, 256);
    tolerant.tolerations = vec![Toleration {
        key: Some(key),
        exists: true,
        value: None,
        effect: None,
    }];
    let general = fx.template("general", 0, &[], &cat);
    let input = make_input(
        fx.wk.clone(),
        vec![general, gpu],
        vec![tolerant, fx.pod("c", 500, 256)],
    );
    let r = fx.run(&input);
    assert!(
        r.pod_errors.is_empty(),
        "the startup taint does not need a toleration"
    );
    let pools: Vec<&str> = r
        .new_node_claims
        .iter()
        .map(|c| input.templates[c.template].name.as_str())
        .collect();
    assert_eq!(
        pools.len(),
        2,
        "the tolerating pod goes to the heavier gpu pool, the other to general: {pools:?}"
    );
}

#[test]
fn prefer_no_schedule_taints_are_avoided_then_tolerated() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let mut t = fx.template("default", 0, &[], &cat);
    let key = fx.i.intern_key("example.com/soft");
    t.taints = vec![Taint {
        key,
        value: None,
        effect: TaintEffect::PreferNoSchedule,
    }];
    let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 500, 256)]);
    assert!(
        fx.run(&input).pod_errors.is_empty(),
        "relaxation tolerates PreferNoSchedule when nothing else fits"
    );
}

#[test]
fn hostname_anti_affinity_gives_each_pod_its_own_node() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let pods: Vec<Pod> = (0..5)
        .map(|i| {
            let mut p = fx.pod(&format!("nginx-{i}"), 500, 256);
            let app = fx.sym("app");
            let nginx = fx.sym("nginx");
            p.labels = Labels::new(vec![(app, nginx)]);
            p.anti_affinity = vec![fx.term("kubernetes.io/hostname", "app", "nginx")];
            p
        })
        .collect();
    let input = make_input(fx.wk.clone(), vec![t], pods);
    let r = fx.run(&input);
    assert_eq!(r.new_node_claims.len(), 5);
    assert!(r.new_node_claims.iter().all(|c| c.pods.len() == 1));
}

#[test]
fn running_pods_anti_affinity_keeps_matching_pods_away() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let mut input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("web", 500, 256)]);
    input
        .existing
        .push(fx.existing("node-1", 8, 16, &[("topology.kubernetes.io/zone", "zone-a")]));
    let ns = fx.sym("default");
    let anti = fx.term("kubernetes.io/hostname", "app", "web");
    input.bound_pods.push(BoundPod {
        namespace: ns,
        labels: Labels::default(),
        label_set: BoundPod::UNSHARED,
        node: 0,
        anti_affinity: vec![anti].into(),
    });
    let r = fx.run(&input);
    assert!(
        r.existing_nodes.is_empty(),
        "the running pod's anti-affinity excludes its node"
    );
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn zone_affinity_keeps_a_group_in_one_zone() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            let mut p = fx.pod(&format!("db-{i}"), 6000, 1024);
            let k = fx.sym("group");
            let v = fx.sym("db");
            p.labels = Labels::new(vec![(k, v)]);
            p.affinity = vec![fx.term("topology.kubernetes.io/zone", "group", "db")];
            p
        })
        .collect();
    let input = make_input(fx.wk.clone(), vec![t], pods);
    let r = fx.run(&input);
    assert!(r.pod_errors.is_empty());
    let zone_key = fx.i.intern_key("topology.kubernetes.io/zone");
    let zones: std::collections::BTreeSet<_> = r
        .new_node_claims
        .iter()
        .map(|c| c.requirements.single_value(zone_key).unwrap())
        .collect();
    assert_eq!(zones.len(), 1, "every claim is pinned to the same zone");
}

#[test]
fn pod_affinity_to_a_missing_group_is_explained() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let mut pod = fx.pod("cache", 500, 256);
    pod.affinity = vec![fx.term("topology.kubernetes.io/zone", "app", "db")];
    let input = make_input(fx.wk.clone(), vec![t], vec![pod]);
    let r = fx.run(&input);
    assert_eq!(r.pod_errors.len(), 1);
    assert!(
        r.pod_errors[0].1.contains("pod affinity"),
        "{}",
        r.pod_errors[0].1
    );
}

fn spread(fx: &mut Fx, key: &str, max_skew: u32, hard: bool) -> SpreadConstraint {
    SpreadConstraint {
        topology_key: fx.i.intern_key(key),
        max_skew,
        min_domains: None,
        hard,
        selector: fx.selector("app", "web"),
        honor_node_affinity: true,
        honor_node_taints: false,
    }
}

fn web_pods(fx: &mut Fx, n: usize, cpu: i64, spread_c: &SpreadConstraint) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = fx.pod(&format!("web-{i}"), cpu, 256);
            let k = fx.sym("app");
            let v = fx.sym("web");
            p.labels = Labels::new(vec![(k, v)]);
            p.spread = vec![spread_c.clone()];
            p
        })
        .collect()
}

#[test]
fn zone_spread_balances_pods_across_zones() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let s = spread(&mut fx, "topology.kubernetes.io/zone", 1, true);
    let pods = web_pods(&mut fx, 6, 500, &s);
    let input = make_input(fx.wk.clone(), vec![t], pods);
    let r = fx.run(&input);
    let zone_key = fx.i.intern_key("topology.kubernetes.io/zone");
    let mut per_zone = std::collections::BTreeMap::new();
    for c in &r.new_node_claims {
        *per_zone
            .entry(
                fx.i.resolve(c.requirements.single_value(zone_key).unwrap())
                    .to_string(),
            )
            .or_insert(0) += c.pods.len();
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "{per_zone:?}"
    );
}

#[test]
fn hostname_spread_puts_at_most_max_skew_matching_pods_per_node() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let s = spread(&mut fx, "kubernetes.io/hostname", 2, true);
    let pods = web_pods(&mut fx, 6, 500, &s);
    let input = make_input(fx.wk.clone(), vec![t], pods);
    let r = fx.run(&input);
    assert_eq!(r.new_node_claims.len(), 3);
    assert!(r.new_node_claims.iter().all(|c| c.pods.len() == 2));
}

#[test]
fn schedule_anyway_spread_is_relaxed_when_it_cannot_be_met() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    // The NodePool launches only in zone-a while a full node sits in zone-b, so spreading cannot be met.
    let t = fx.template(
        "default",
        0,
        &[("topology.kubernetes.io/zone", "In", &["zone-a"])],
        &cat,
    );
    let mut full = fx.existing("full", 0, 0, &[("topology.kubernetes.io/zone", "zone-b")]);
    full.available = Resources::zero();
    let mut s = spread(&mut fx, "topology.kubernetes.io/zone", 1, false);
    s.honor_node_affinity = false;
    let pods = web_pods(&mut fx, 3, 500, &s);
    let mut input = make_input(fx.wk.clone(), vec![t.clone()], pods);
    input.existing.push(full.clone());
    assert!(fx.run(&input).pod_errors.is_empty(), "ScheduleAnyway is relaxed");
    let mut hard = s.clone();
    hard.hard = true;
    let hard_pods = web_pods(&mut fx, 3, 500, &hard);
    let mut input = make_input(fx.wk.clone(), vec![t], hard_pods);
    input.existing.push(full);
    let r = fx.run(&input);
    assert_eq!(
        r.pod_errors.len(),
        2,
        "DoNotSchedule keeps pods pending instead: {:?}",
        r.pod_errors
    );
    assert!(r.pod_errors[0].1.contains("maxSkew"), "{}", r.pod_errors[0].1);
}

#[test]
fn host_ports_conflict_on_a_node() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let ip = fx.sym("");
    let tcp = fx.sym("TCP");
    let pods: Vec<Pod> = (0..2)
        .map(|i| {
            let mut p = fx.pod(&format!("p{i}"), 500, 256);
            p.host_ports = vec![HostPort {
                ip,
                port: 8080,
                protocol: tcp,
            }];
            p
        })
        .collect();
    let input = make_input(fx.wk.clone(), vec![t], pods);
    assert_eq!(fx.run(&input).new_node_claims.len(), 2);
}

#[test]
fn nodepool_limits_are_enforced_pessimistically() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let mut t = fx.template("default", 0, &[], &cat);
    t.remaining = Some(Fx::res(10_000, 1000 * GI, 1000));
    let pods = vec![fx.pod("a", 1000, 256), fx.pod("b", 7000, 256)];
    let input = make_input(fx.wk.clone(), vec![t.clone()], pods);
    let r = fx.run(&input);
    assert!(
        r.new_node_claims
            .iter()
            .all(|c| !claim_types(c).contains(&"xlarge")),
        "16 CPUs exceed the 10-CPU limit"
    );
    let mut one_node = t;
    one_node.remaining = None;
    one_node.remaining_nodes = Some(1);
    let pods: Vec<Pod> = (0..3).map(|i| fx.pod(&format!("big-{i}"), 12_000, 256)).collect();
    let input = make_input(fx.wk.clone(), vec![one_node], pods);
    let r = fx.run(&input);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(r.pod_errors.len(), 2);
    assert!(
        r.pod_errors[0]
            .1
            .contains("node limits have been exhausted for nodepool (NodePool=default)"),
        "{}",
        r.pod_errors[0].1
    );
}

#[test]
fn daemonset_overhead_is_reserved_on_every_new_node() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let mut t = fx.template("default", 0, &[], &cat);
    t.daemon_overheads = DaemonOverheads::uniform(DaemonOverhead {
        requests: Fx::res(1500, GI, 2),
        host_ports: Vec::new(),
    });
    let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 500, 256)]);
    let r = fx.run(&input);
    assert_eq!(
        claim_types(&r.new_node_claims[0]),
        ["medium", "large", "xlarge"],
        "2 CPUs minus overhead cannot hold 2 CPUs of requests"
    );
    assert_eq!(r.new_node_claims[0].requests.cpu(), 2000);
}

#[test]
fn each_instance_type_carries_only_its_own_daemonset_overhead() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let mut t = fx.template("default", 0, &[], &cat);
    // A DaemonSet of 1 CPU that runs on every type but `small` (the template's first, cheapest type).
    let none = DaemonOverhead::default();
    let agent = DaemonOverhead {
        requests: Fx::res(1000, 0, 1),
        host_ports: Vec::new(),
    };
    t.daemon_overheads = DaemonOverheads::new(vec![none, agent], vec![0, 1, 1, 1]);
    let input = make_input(fx.wk.clone(), vec![t.clone()], vec![fx.pod("a", 1500, 256)]);
    let r = fx.run(&input);
    assert_eq!(
        claim_types(&r.new_node_claims[0]),
        ["small", "medium", "large", "xlarge"],
        "1.5 CPUs fit the 1.9 CPUs of small, which runs no DaemonSet"
    );
    assert_eq!(
        r.new_node_claims[0].requests.cpu(),
        1500,
        "the fewest DaemonSets any of its types runs"
    );

    let input = make_input(
        fx.wk.clone(),
        vec![t],
        vec![fx.pod("a", 1500, 256), fx.pod("b", 1000, 256)],
    );
    let r = fx.run(&input);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(claim_types(&r.new_node_claims[0]), ["medium", "large", "xlarge"]);
    assert_eq!(
        r.new_node_claims[0].requests.cpu(),
        3500,
        "every type left runs the DaemonSet"
    );
}

#[test]
fn instance_types_are_truncated_to_the_maximum_keeping_min_values() {
    let mut fx = Fx::new();
    let zones = ["zone-a"];
    let cat: Vec<Arc<InstanceType>> = (1..=10)
        .map(|k| {
            let family = if k <= 8 { "cheap" } else { "dear" };
            fx.it(
                &format!("t{k}"),
                4,
                8,
                0.1 * k as f64,
                &zones,
                &[("family", family)],
            )
        })
        .collect();
    let t = fx.template("default", 0, &[], &cat);
    let mut input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 500, 256)]);
    input.settings.max_instance_types = 3;
    let r = fx.run(&input);
    assert_eq!(claim_types(&r.new_node_claims[0]), ["t1", "t2", "t3"]);
    // minValues 2 on family keeps going until a second family is in the list.
    let mut fam = Requirement::parse("family", "Exists", &[] as &[&str], Some(2), &mut fx.i).unwrap();
    fam = fam.with_min_values(Some(2));
    let mut t = fx.template("default", 0, &[], &cat);
    t.requirements.add(fam);
    let mut input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 500, 256)]);
    input.settings.max_instance_types = 3;
    let r = fx.run(&input);
    assert_eq!(
        r.new_node_claims[0].instance_types.len(),
        9,
        "cut after the first 'dear' type"
    );
}

#[test]
fn min_values_strict_keeps_pods_pending_and_best_effort_relaxes() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let sizes = Requirement::parse(
        "size",
        "In",
        &["small", "medium", "large", "xlarge"],
        Some(3),
        &mut fx.i,
    )
    .unwrap();
    let mut t = fx.template("default", 0, &[], &cat);
    t.requirements.add(sizes);
    // A 7-CPU pod fits only large and xlarge: 2 sizes, fewer than minValues 3.
    let input = make_input(fx.wk.clone(), vec![t.clone()], vec![fx.pod("a", 7000, 256)]);
    let r = fx.run(&input);
    assert_eq!(r.pod_errors.len(), 1);
    assert!(r.pod_errors[0].1.contains("minValues"), "{}", r.pod_errors[0].1);
    let mut input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 7000, 256)]);
    input.settings.min_values_policy = MinValuesPolicy::BestEffort;
    let r = fx.run(&input);
    assert!(r.new_node_claims[0].min_values_relaxed);
}

/// The test catalog with one reserved offering of the large type in zone-a: reservation `id`, room for one
/// instance.
fn catalog_with_reservation(fx: &mut Fx, id: &str) -> (Vec<Arc<InstanceType>>, Symbol) {
    let mut cat = fx.catalog();
    let zone = fx.sym("zone-a");
    let reserved = fx.sym("reserved");
    let rid = fx.sym(id);
    let large = Arc::make_mut(&mut cat[2]);
    large.offerings.push(Offering {
        zone,
        capacity_type: reserved,
        price: 0.3,
        available: true,
        reservation_id: Some(rid),
        reservation_capacity: Some(1),
    });
    let ct_key = fx.i.intern_key("karpenter.sh/capacity-type");
    // As the AWS catalog does for a type with a reservation: "reserved" joins its capacity types.
    large.requirements.remove(ct_key);
    large.requirements.add(Requirement::in_values(
        ct_key,
        [reserved, fx.i.intern("on-demand"), fx.i.intern("spot")],
    ));
    (cat, rid)
}

#[test]
fn reserved_capacity_is_launched_before_spot_and_on_demand() {
    let mut fx = Fx::new();
    let (cat, _) = catalog_with_reservation(&mut fx, "cr-123");
    let t = fx.template("default", 0, &[], &cat);
    let pods = vec![fx.pod("a", 5000, 256), fx.pod("b", 5000, 256)];
    let mut input = make_input(fx.wk.clone(), vec![t], pods);
    input.pods[0].anti_affinity = vec![fx.term("kubernetes.io/hostname", "app", "b")];
    let r = fx.run(&input);
    let launches: Vec<String> = r
        .new_node_claims
        .iter()
        .map(|c| {
            fx.i.resolve(c.launch.as_ref().unwrap().offering.capacity_type)
                .to_string()
        })
        .collect();
    assert_eq!(
        launches,
        ["reserved", "spot"],
        "one reservation slot, then the cheapest"
    );
}

#[test]
fn a_claim_counted_against_a_reservation_is_pinned_to_it() {
    let mut fx = Fx::new();
    let (cat, rid) = catalog_with_reservation(&mut fx, "cr-123");
    let t = fx.template("default", 0, &[], &cat);
    let pods = vec![fx.pod("a", 5000, 256), fx.pod("b", 5000, 256)];
    let mut input = make_input(fx.wk.clone(), vec![t], pods);
    input.pods[0].anti_affinity = vec![fx.term("kubernetes.io/hostname", "app", "b")];
    let r = fx.run(&input);
    assert_eq!(r.new_node_claims.len(), 2, "{:?}", r.pod_errors);
    let ct_key = fx.i.intern_key("karpenter.sh/capacity-type");
    let rid_key = fx.i.intern_key("karpenter.k8s.aws/capacity-reservation-id");
    let reserved = fx.sym("reserved");
    let (pinned, other): (Vec<_>, Vec<_>) = r.new_node_claims.iter().partition(|c| {
        c.launch
            .as_ref()
            .is_some_and(|l| l.offering.reservation_id == Some(rid))
    });
    assert_eq!(pinned.len(), 1);
    let pinned = pinned[0];
    // The launch may not fall back to on-demand or spot, nor into another reservation.
    assert_eq!(pinned.requirements.get(ct_key).unwrap().values(), &[reserved]);
    assert_eq!(pinned.requirements.get(rid_key).unwrap().values(), &[rid]);
    assert!(
        pinned.labels.contains(&(ct_key, reserved)) && pinned.labels.contains(&(rid_key, rid)),
        "the NodeClaim is labelled with its capacity type and reservation"
    );
    // The claim that found the reservation full is free to launch anything its pods allow.
    assert!(!other[0].requirements.has(rid_key));
}

#[test]
fn one_reservation_is_counted_across_nodepools() {
    let mut fx = Fx::new();
    let (cat, rid) = catalog_with_reservation(&mut fx, "cr-shared");
    // Two NodePools offering the same reservation; each pod selects its own pool's `team`.
    let a = fx.template("a", 10, &[("team", "In", &["a"])], &cat);
    let b = fx.template("b", 0, &[("team", "In", &["b"])], &cat);
    let mut pa = fx.pod("a", 5000, 256);
    let mut pb = fx.pod("b", 5000, 256);
    let (ra, rb) = (fx.req("team", "In", &["a"]), fx.req("team", "In", &["b"]));
    pa.base_requirements.add(ra);
    pb.base_requirements.add(rb);
    let input = make_input(fx.wk.clone(), vec![a, b], vec![pa, pb]);
    let r = fx.run(&input);
    assert_eq!(r.new_node_claims.len(), 2, "{:?}", r.pod_errors);
    let mut reserved_launches = 0;
    for c in &r.new_node_claims {
        if c.launch
            .as_ref()
            .is_some_and(|l| l.offering.reservation_id == Some(rid))
        {
            reserved_launches += 1;
        }
    }
    assert_eq!(
        reserved_launches, 1,
        "the reservation has room for one instance, whichever NodePool asks"
    );
}

#[test]
fn every_pending_pod_says_which_nodepools_were_tried_and_why() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let small_only = fx.template("small-only", 10, &[("size", "In", &["small"])], &cat);
    let mut tainted = fx.template("tainted", 0, &[], &cat);
    let key = fx.i.intern_key("dedicated");
    tainted.taints = vec![Taint {
        key,
        value: None,
        effect: TaintEffect::NoExecute,
    }];
    let input = make_input(
        fx.wk.clone(),
        vec![small_only, tainted],
        vec![fx.pod("huge", 4000, 256)],
    );
    let r = fx.run(&input);
    let why = &r.pod_errors[0].1;
    // One clause per NodePool, by weight, joined as upstream joins its per-NodePool errors.
    assert_eq!(
        why,
        "incompatible with nodepool \"small-only\", daemonset overhead={}, no instance type has enough resources, \
         requirements=karpenter.sh/nodepool In [small-only], size In [small], \
         resources={\"cpu\":\"4\",\"memory\":\"256Mi\",\"pods\":\"1\"}; \
         incompatible with nodepool \"tainted\", daemonset overhead={}, did not tolerate dedicated=:NoExecute"
    );
}

/// The message a user sees for pod `p` of `input`.
fn pod_error(fx: &mut Fx, input: &SchedulingInput) -> String {
    let r = fx.run(input);
    assert_eq!(r.pod_errors.len(), 1, "{:?}", r.pod_errors);
    r.pod_errors[0].1.clone()
}

#[test]
fn a_label_no_nodepool_knows_is_an_incompatible_requirement() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let mut pod = fx.pod("a", 500, 256);
    pod.base_requirements = fx.reqs(&[("acme.io/team", "In", &["web"])]);
    let input = make_input(fx.wk.clone(), vec![t], vec![pod]);
    assert_eq!(
        pod_error(&mut fx, &input),
        "incompatible with nodepool \"default\", daemonset overhead={}, incompatible requirements, \
         label \"acme.io/team\" does not have known values"
    );
}

#[test]
fn values_a_nodepool_does_not_allow_are_an_incompatible_requirement() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template(
        "default",
        0,
        &[("topology.kubernetes.io/zone", "In", &["zone-a"])],
        &cat,
    );
    let mut pod = fx.pod("a", 500, 256);
    pod.base_requirements = fx.reqs(&[("topology.kubernetes.io/zone", "In", &["zone-b"])]);
    let input = make_input(fx.wk.clone(), vec![t], vec![pod]);
    assert_eq!(
        pod_error(&mut fx, &input),
        "incompatible with nodepool \"default\", daemonset overhead={}, incompatible requirements, \
         key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [zone-b] not in \
         topology.kubernetes.io/zone In [zone-a]"
    );
}

#[test]
fn incompatible_requirements_win_over_a_pod_too_large_for_every_type() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template(
        "default",
        0,
        &[("topology.kubernetes.io/zone", "In", &["zone-a"])],
        &cat,
    );
    let mut pod = fx.pod("a", 64_000, 256);
    pod.base_requirements = fx.reqs(&[("topology.kubernetes.io/zone", "In", &["zone-b"])]);
    let input = make_input(fx.wk.clone(), vec![t], vec![pod]);
    let why = pod_error(&mut fx, &input);
    assert!(
        why.contains(", incompatible requirements, key topology.kubernetes.io/zone"),
        "{why}"
    );
}

#[test]
fn a_pod_larger_than_every_type_is_told_no_type_has_enough_resources() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let mut t = fx.template("default", 0, &[], &cat);
    t.daemon_overheads = DaemonOverheads::uniform(DaemonOverhead {
        requests: Fx::res(200, 128 << 20, 2),
        host_ports: Vec::new(),
    });
    let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 20_000, 256)]);
    assert_eq!(
        pod_error(&mut fx, &input),
        "incompatible with nodepool \"default\", daemonset overhead={\"cpu\":\"200m\",\"memory\":\"128Mi\",\"pods\":\"2\"}, \
         no instance type has enough resources, requirements=karpenter.sh/nodepool In [default], \
         resources={\"cpu\":\"20200m\",\"memory\":\"384Mi\",\"pods\":\"3\"}"
    );
}

#[test]
fn a_well_known_value_no_type_has_is_told_no_type_met_the_requirements() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let mut pod = fx.pod("a", 500, 256);
    // `size` is well-known (the catalog's own label), so the NodePool need not declare it; no type is `huge`.
    pod.base_requirements = fx.reqs(&[("size", "In", &["huge"])]);
    let input = make_input(fx.wk.clone(), vec![t], vec![pod]);
    assert_eq!(
        pod_error(&mut fx, &input),
        "incompatible with nodepool \"default\", daemonset overhead={}, no instance type met all requirements, \
         requirements=karpenter.sh/nodepool In [default], size In [huge], \
         resources={\"cpu\":\"500m\",\"memory\":\"256Mi\",\"pods\":\"1\"}"
    );
}

#[test]
fn a_too_large_pod_selecting_a_missing_value_is_told_both() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let mut pod = fx.pod("a", 64_000, 256);
    pod.base_requirements = fx.reqs(&[("size", "In", &["huge"])]);
    let input = make_input(fx.wk.clone(), vec![t], vec![pod]);
    let why = pod_error(&mut fx, &input);
    assert!(
        why.contains(
            ", no instance type met the scheduling requirements or had enough resources, requirements="
        ),
        "{why}"
    );
}

#[test]
fn a_cpu_request_in_millions_hints_at_an_m_typed_for_m() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 2_000_000_000, 256)]);
    assert!(
        pod_error(&mut fx, &input).ends_with(" (CPU request >= 1 Million, m vs M typo?)"),
        "2M CPUs is 2m mistyped"
    );
}

#[test]
fn types_without_an_available_offering_are_told_apart_from_too_small_ones() {
    let mut fx = Fx::new();
    let mut cat = fx.catalog();
    // Every type lists zone-a, but none has capacity there right now.
    let zone_a = fx.sym("zone-a");
    for it in &mut cat {
        let it = Arc::make_mut(it);
        it.offerings
            .iter_mut()
            .filter(|o| o.zone == zone_a)
            .for_each(|o| o.available = false);
    }
    let t = fx.template("default", 0, &[], &cat);
    let mut pod = fx.pod("a", 500, 256);
    pod.base_requirements = fx.reqs(&[("topology.kubernetes.io/zone", "In", &["zone-a"])]);
    let input = make_input(fx.wk.clone(), vec![t], vec![pod]);
    assert_eq!(
        pod_error(&mut fx, &input),
        "incompatible with nodepool \"default\", daemonset overhead={}, no instance type has the required offering, \
         requirements=karpenter.sh/nodepool In [default], topology.kubernetes.io/zone In [zone-a], \
         resources={\"cpu\":\"500m\",\"memory\":\"256Mi\",\"pods\":\"1\"}"
    );
}

#[test]
fn types_that_fit_but_are_not_selected_are_told_apart_from_selected_ones_too_small() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let mut pod = fx.pod("a", 4000, 256);
    pod.base_requirements = fx.reqs(&[("size", "In", &["small"])]);
    let input = make_input(fx.wk.clone(), vec![t], vec![pod]);
    assert_eq!(
        pod_error(&mut fx, &input),
        "incompatible with nodepool \"default\", daemonset overhead={}, no instance type which had enough \
         resources and the required offering met the scheduling requirements, \
         requirements=karpenter.sh/nodepool In [default], size In [small], \
         resources={\"cpu\":\"4\",\"memory\":\"256Mi\",\"pods\":\"1\"}"
    );
}

#[test]
fn a_nodepool_whose_limits_every_type_exceeds_says_so_by_name() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let mut t = fx.template("capped", 0, &[], &cat);
    t.remaining = Some(Fx::res(1000, 64 * GI, 1000));
    let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 500, 256)]);
    assert_eq!(
        pod_error(&mut fx, &input),
        "all available instance types exceed limits for nodepool (NodePool=capped)"
    );
}

#[test]
fn a_nodepool_whose_requirements_allow_no_type_says_so_by_name() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("none", 0, &[("size", "In", &["huge"])], &cat);
    assert!(t.instance_types.is_empty());
    let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 500, 256)]);
    assert_eq!(
        pod_error(&mut fx, &input),
        "nodepool requirements filtered out all available instance types (NodePool=none)"
    );
}

#[test]
fn min_values_the_types_left_fall_short_of_names_the_label() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let sizes = Requirement::parse(
        "size",
        "In",
        &["small", "medium", "large", "xlarge"],
        Some(3),
        &mut fx.i,
    )
    .unwrap();
    let mut t = fx.template("default", 0, &[], &cat);
    t.requirements.add(sizes);
    let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 7000, 256)]);
    assert_eq!(
        pod_error(&mut fx, &input),
        "incompatible with nodepool \"default\", daemonset overhead={}, \
         minValues requirement is not met for label(s) (label(s)=[size]), \
         requirements=karpenter.sh/nodepool In [default], size In [large medium small xlarge] minValues 3, \
         resources={\"cpu\":\"7\",\"memory\":\"256Mi\",\"pods\":\"1\"}"
    );
}

#[test]
fn without_any_nodepool_a_pod_is_told_none_was_found() {
    let mut fx = Fx::new();
    let input = make_input(fx.wk.clone(), Vec::new(), vec![fx.pod("a", 500, 256)]);
    assert_eq!(pod_error(&mut fx, &input), "no nodepools found");
}

#[test]
fn csi_volume_limits_cap_an_existing_node() {
    let mut fx = Fx::new();
    let cat = fx.catalog();
    let t = fx.template("default", 0, &[], &cat);
    let driver = fx.sym("ebs.csi.aws.com");
    let pods: Vec<Pod> = (0..2)
        .map(|i| {
            let mut p = fx.pod(&format!("db-{i}"), 100, 128);
            p.csi_volumes = vec![(driver, 1)];
            p
        })
        .collect();
    let mut input = make_input(fx.wk.clone(), vec![t], pods);
    let mut node = fx.existing("node-1", 8, 16, &[]);
    node.volume_limits = vec![(driver, 1)];
    input.existing.push(node);
    let r = fx.run(&input);
    assert_eq!(r.existing_nodes[0].1.len(), 1);
    assert_eq!(r.new_node_claims.len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// No node is over-committed, every placed pod meets its hard constraints (checked by the invariants and
    /// below), and every pod left pending has a reason.
    #[test]
    fn simulations_never_overcommit_and_explain_every_pending_pod(
        requests in proptest::collection::vec((100i64..20_000, 64i64..40_000, 0usize..4, any::<bool>()), 1..40),
        existing in proptest::collection::vec(1i64..16, 0..4),
        node_limit in proptest::option::of(1i64..6),
    ) {
        let mut fx = Fx::new();
        let cat = fx.catalog();
        let mut t = fx.template("default", 0, &[], &cat);
        t.remaining_nodes = node_limit;
        let zones = ["zone-a", "zone-b", "zone-c", "zone-x"];
        let mut pods = Vec::new();
        for (i, (cpu, mem, zone, anti)) in requests.iter().enumerate() {
            let mut p = fx.pod(&format!("p{i}"), *cpu, *mem);
            p.base_requirements = fx.reqs(&[("topology.kubernetes.io/zone", "In", &[zones[*zone]])]);
            if *anti {
                let k = fx.sym("app");
                let v = fx.sym("solo");
                p.labels = Labels::new(vec![(k, v)]);
                p.anti_affinity = vec![fx.term("kubernetes.io/hostname", "app", "solo")];
            }
            pods.push(p);
        }
        let mut input = make_input(fx.wk.clone(), vec![t], pods);
        for (i, cpu) in existing.iter().enumerate() {
            input.existing.push(fx.existing(&format!("node-{i}"), *cpu, *cpu * 2, &[("topology.kubernetes.io/zone", zones[i % 3])]));
        }
        let r = fx.run(&input);
        let zone_key = fx.i.intern_key("topology.kubernetes.io/zone");
        for c in &r.new_node_claims {
            for &p in &c.pods {
                prop_assert!(c.requirements.is_compatible(&input.pods[p].base_requirements, &input.well_known));
            }
            let solos = c.pods.iter().filter(|&&p| !input.pods[p].anti_affinity.is_empty()).count();
            prop_assert!(solos <= 1, "two anti-affine pods share a node");
            prop_assert!(c.requirements.single_value(zone_key).is_some() || c.pods.iter().all(|&p| input.pods[p].base_requirements.is_empty()));
        }
        for (p, _) in &r.pod_errors {
            // Pods asking for the zone no instance type offers can never be placed; others may hit the node limit.
            prop_assert!(zones[requests[*p].2] == "zone-x" || node_limit.is_some() || requests[*p].0 > 15_900 || requests[*p].1 > 32_000);
        }
    }
}

#[test]
fn spot_is_launched_before_on_demand_when_both_are_allowed() {
    let mut fx = Fx::new();
    let mut cat = fx.catalog();
    // Make spot dearer than on-demand for every type: spot still wins while the NodePool allows it.
    for it in &mut cat {
        let it = Arc::make_mut(it);
        for o in &mut it.offerings {
            o.price = if fx.i.resolve(o.capacity_type) == "spot" {
                1.0
            } else {
                0.5
            };
        }
        it.offerings.sort_by(|a, b| a.price.total_cmp(&b.price));
    }
    let t = fx.template("default", 0, &[], &cat);
    let input = make_input(fx.wk.clone(), vec![t], vec![fx.pod("a", 500, 256)]);
    let r = fx.run(&input);
    let launch = r.new_node_claims[0].launch.as_ref().unwrap();
    assert_eq!(fx.i.resolve(launch.offering.capacity_type), "spot");
    let od_only = fx.template(
        "default",
        0,
        &[("karpenter.sh/capacity-type", "In", &["on-demand"])],
        &cat,
    );
    let input = make_input(fx.wk.clone(), vec![od_only], vec![fx.pod("a", 500, 256)]);
    let r = fx.run(&input);
    assert_eq!(
        fx.i.resolve(
            r.new_node_claims[0]
                .launch
                .as_ref()
                .unwrap()
                .offering
                .capacity_type
        ),
        "on-demand"
    );
}

#[test]
fn node_taints_policy_honor_ignores_pods_on_nodes_the_pod_does_not_tolerate() {
    let zones_of = |fx: &mut Fx, policy_honor: bool| {
        let cat = fx.catalog();
        let t = fx.template(
            "default",
            0,
            &[("topology.kubernetes.io/zone", "In", &["zone-a", "zone-b"])],
            &cat,
        );
        let mut s = spread(fx, "topology.kubernetes.io/zone", 1, true);
        s.honor_node_taints = policy_honor;
        let pods = web_pods(fx, 2, 500, &s);
        let mut input = make_input(fx.wk.clone(), vec![t], pods);
        // A full, tainted node in zone-b already runs two web pods.
        let mut tainted = fx.existing("tainted", 0, 0, &[("topology.kubernetes.io/zone", "zone-b")]);
        tainted.available = Resources::zero();
        let key = fx.i.intern_key("dedicated");
        tainted.taints = vec![Taint {
            key,
            value: None,
            effect: TaintEffect::NoSchedule,
        }];
        input.existing.push(tainted);
        let ns = fx.sym("default");
        let web = Labels::new(vec![(fx.sym("app"), fx.sym("web"))]);
        for _ in 0..2 {
            input.bound_pods.push(BoundPod {
                namespace: ns,
                labels: web.clone(),
                label_set: BoundPod::UNSHARED,
                node: 0,
                anti_affinity: Box::default(),
            });
        }
        let r = fx.run(&input);
        let zone_key = fx.i.intern_key("topology.kubernetes.io/zone");
        let mut zones: Vec<String> = r
            .new_node_claims
            .iter()
            .flat_map(|c| {
                std::iter::repeat_n(
                    fx.i.resolve(c.requirements.single_value(zone_key).unwrap())
                        .to_string(),
                    c.pods.len(),
                )
            })
            .collect();
        zones.sort();
        zones
    };
    let mut fx = Fx::new();
    assert_eq!(
        zones_of(&mut fx, false),
        ["zone-a", "zone-a"],
        "Ignore: the tainted node's pods make zone-b the fuller zone"
    );
    let mut fx = Fx::new();
    assert_eq!(
        zones_of(&mut fx, true),
        ["zone-a", "zone-b"],
        "Honor: pods on an untolerated node do not count"
    );
}
