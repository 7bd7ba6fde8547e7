use std::cell::RefCell;

use super::*;
use crate::resources::Resources;
use proptest::prelude::*;

/// Interned symbols and builders for small catalogs.
struct Fx {
    i: LabelInterner,
    settings: ConsolidationSettings,
}

impl Fx {
    fn new() -> Self {
        let mut i = LabelInterner::new();
        let settings = ConsolidationSettings::new(&mut i, true);
        Self { i, settings }
    }

    /// A type offered in zone-a: on-demand at `od`, and spot at `spot` when given.
    fn it(&mut self, name: &str, od: f64, spot: Option<f64>) -> Arc<InstanceType> {
        self.it_with(name, &[("zone-a", "on-demand", od)], spot, &[])
    }

    fn it_with(
        &mut self,
        name: &str,
        od_offerings: &[(&str, &str, f64)],
        spot: Option<f64>,
        labels: &[(&str, &str)],
    ) -> Arc<InstanceType> {
        let mut offerings: Vec<Offering> = od_offerings
            .iter()
            .map(|(z, ct, p)| self.offering(z, ct, *p))
            .collect();
        if let Some(p) = spot {
            offerings.push(self.offering("zone-a", "spot", p));
        }
        offerings.sort_by(|a, b| a.price.total_cmp(&b.price));
        let name_symbol = self.i.intern(name);
        let mut requirements: Requirements =
            Requirement::in_values(self.settings.instance_type_key, [name_symbol]).into();
        for (k, v) in labels {
            let key = self.i.intern_key(k);
            let value = self.i.intern(v);
            requirements.add(Requirement::in_values(key, [value]));
        }
        Arc::new(InstanceType {
            name: name.into(),
            name_symbol,
            requirements,
            capacity: Resources::zero(),
            overhead: Resources::zero(),
            allocatable: Resources::zero(),
            offerings,
            overlays_applied: Default::default(),
        })
    }

    fn offering(&mut self, zone: &str, ct: &str, price: f64) -> Offering {
        Offering {
            zone: self.i.intern(zone),
            capacity_type: self.i.intern(ct),
            price,
            available: true,
            reservation_id: None,
            reservation_capacity: None,
        }
    }

    /// A NodeClaim over `types` whose capacity type may be any of `cts`, types sorted cheapest first.
    fn claim(&mut self, mut types: Vec<Arc<InstanceType>>, cts: &[&str]) -> NewNodeClaim {
        let ct_values: Vec<Symbol> = cts.iter().map(|c| self.i.intern(c)).collect();
        let mut requirements: Requirements =
            Requirement::in_values(self.settings.capacity_type_key, ct_values).into();
        requirements.add(Requirement::in_values(
            self.settings.instance_type_key,
            types.iter().map(|it| it.name_symbol),
        ));
        let (zk, ck) = (self.settings.zone_key, self.settings.capacity_type_key);
        types.sort_by(|a, b| {
            let p = |it: &InstanceType| {
                it.cheapest_offering(&requirements, zk, ck)
                    .map_or(f64::MAX, |o| o.price)
            };
            p(a).total_cmp(&p(b))
        });
        NewNodeClaim {
            template: 0,
            requirements,
            instance_types: types,
            requests: Resources::zero(),
            pods: vec![0],
            min_values_relaxed: false,
            labels: Vec::new(),
            launch: None,
        }
    }

    fn cand(&mut self, index: usize, pool: usize, price: f64, ct: &str, cost: f64) -> ConsolidationCandidate {
        ConsolidationCandidate {
            index,
            node_pool: pool,
            node_pool_name: format!("pool-{pool}"),
            policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
            instance_type: format!("node-{index}"),
            capacity_type: self.i.intern(ct),
            zone: self.i.intern("zone-a"),
            price,
            disruption_cost: cost,
            pod_count: 2,
            reserved: ct == "reserved",
        }
    }

    /// `n` spot types priced 0.01, 0.02, … (on-demand at ten times that).
    fn spot_types(
        &mut self,
        n: usize,
        labels: impl Fn(usize) -> Vec<(String, String)>,
    ) -> Vec<Arc<InstanceType>> {
        (0..n)
            .map(|k| {
                let p = 0.01 * (k + 1) as f64;
                let l = labels(k);
                let l: Vec<(&str, &str)> = l.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                self.it_with(
                    &format!("t{k}"),
                    &[("zone-a", "on-demand", p * 10.0)],
                    Some(p),
                    &l,
                )
            })
            .collect()
    }
}

fn always(outcome: SimulationOutcome) -> impl FnMut(&[&ConsolidationCandidate]) -> SimulationOutcome {
    move |_: &[&ConsolidationCandidate]| outcome.clone()
}

fn names(claim: &NewNodeClaim) -> Vec<&str> {
    claim.instance_types.iter().map(|it| it.name.as_str()).collect()
}

#[test]
fn delete_when_pods_fit_elsewhere() {
    let mut fx = Fx::new();
    let cs = vec![fx.cand(7, 0, 0.5, "on-demand", 2.0)];
    let (cmd, rejected, evaluated) =
        single_node(&cs, &[1], &mut always(SimulationOutcome::Delete), &fx.settings);
    let cmd = cmd.unwrap();
    assert_eq!(cmd.decision, Decision::Delete);
    assert_eq!(cmd.candidates, vec![7]);
    assert!(cmd.replacements.is_empty());
    assert_eq!(cmd.savings_per_hour, 0.5);
    assert!(rejected.is_empty());
    assert_eq!(evaluated, 1);

    let cs = vec![
        fx.cand(0, 0, 0.5, "on-demand", 3.0),
        fx.cand(1, 0, 0.25, "on-demand", 1.0),
        fx.cand(2, 0, 0.25, "on-demand", 2.0),
    ];
    let cmd = multi_node(
        &cs,
        &mut [3],
        &mut always(SimulationOutcome::Delete),
        &fx.settings,
    )
    .unwrap();
    assert_eq!(cmd.decision, Decision::Delete);
    assert_eq!(cmd.candidates, vec![1, 2, 0], "ascending disruption cost");
    assert_eq!(cmd.savings_per_hour, 1.0);
}

#[test]
fn unschedulable_pods_block_consolidation_with_the_simulators_reason() {
    let mut fx = Fx::new();
    let cs = vec![fx.cand(0, 0, 0.5, "on-demand", 1.0)];
    let mut sim = always(SimulationOutcome::Unschedulable(
        "pod default/x fits nowhere else".into(),
    ));
    let (cmd, rejected, _) = single_node(&cs, &[1], &mut sim, &fx.settings);
    assert!(cmd.is_none());
    assert_eq!(rejected, vec![(0, "pod default/x fits nowhere else".to_string())]);

    let two = fx.it("a", 0.1, None);
    let two = vec![
        fx.claim(vec![two.clone()], &["on-demand"]),
        fx.claim(vec![two], &["on-demand"]),
    ];
    let (cmd, rejected, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(two)),
        &fx.settings,
    );
    assert!(cmd.is_none());
    assert!(rejected[0].1.contains("2 new nodes"), "{rejected:?}");
}

#[test]
fn replace_only_with_a_cheaper_worst_case_price() {
    let mut fx = Fx::new();
    let cs = vec![fx.cand(0, 0, 1.0, "on-demand", 1.0)];
    let cheap = fx.it("cheap", 0.5, None);
    // Cheap in zone-a, but a launch may land in zone-b at 1.2: its worst case is not cheaper.
    let zonal = fx.it_with(
        "zonal",
        &[("zone-a", "on-demand", 0.4), ("zone-b", "on-demand", 1.2)],
        None,
        &[],
    );
    let same = fx.it("same", 1.0, None);
    let claim = fx.claim(vec![cheap, zonal, same], &["on-demand"]);
    let mut sim = always(SimulationOutcome::Replace(vec![claim]));
    let (cmd, _, _) = single_node(&cs, &[1], &mut sim, &fx.settings);
    let cmd = cmd.unwrap();
    assert_eq!(cmd.decision, Decision::Replace);
    let r = &cmd.replacements[0];
    assert_eq!(names(r), vec!["cheap"]);
    assert_eq!(
        r.worst_price(fx.settings.zone_key, fx.settings.capacity_type_key),
        0.5
    );
    assert_eq!(cmd.savings_per_hour, 0.5);
    let it_req = r.requirements.get(fx.settings.instance_type_key).unwrap();
    assert_eq!(
        it_req.values().len(),
        1,
        "instance-type requirement narrowed to the kept types"
    );
    assert_eq!(
        r.launch.as_ref().map(|l| l.instance_type.name.as_str()),
        Some("cheap")
    );

    // Nothing strictly cheaper: no command.
    let same = fx.it("same", 1.0, None);
    let zonal = fx.it_with(
        "zonal",
        &[("zone-a", "on-demand", 0.4), ("zone-b", "on-demand", 1.2)],
        None,
        &[],
    );
    let claim = fx.claim(vec![same, zonal], &["on-demand"]);
    let (cmd, rejected, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &fx.settings,
    );
    assert!(cmd.is_none());
    assert!(
        rejected[0].1.starts_with("replacement would not be cheaper"),
        "{rejected:?}"
    );
}

#[test]
fn single_node_never_replaces_a_node_with_its_own_type_at_its_price() {
    let mut fx = Fx::new();
    let mut c = fx.cand(0, 0, 0.4, "on-demand", 1.0);
    c.instance_type = "large".into();
    let cs = vec![c];
    // The pods fit only on another "large", on-demand at the node's own price: nothing is saved.
    let large = fx.it("large", 0.4, None);
    let claim = fx.claim(vec![large], &["on-demand"]);
    let (cmd, rejected, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &fx.settings,
    );
    assert!(
        cmd.is_none(),
        "a node is not replaced by its own instance type at its price"
    );
    assert!(
        rejected[0].1.starts_with("replacement would not be cheaper"),
        "{rejected:?}"
    );

    // The same type as spot is cheaper: upstream moves an on-demand node to spot capacity of its own type.
    let large = fx.it("large", 0.4, Some(0.1));
    let claim = fx.claim(vec![large], &["on-demand", "spot"]);
    let (cmd, _, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &fx.settings,
    );
    let cmd = cmd.unwrap();
    assert_eq!(cmd.decision, Decision::Replace);
    assert!((cmd.savings_per_hour - 0.3).abs() < 1e-9);
}

#[test]
fn multi_node_finds_the_largest_prefix() {
    let mut fx = Fx::new();
    let cs: Vec<_> = (0..8)
        .map(|k| fx.cand(k, 0, 0.1, "on-demand", (8 - k) as f64))
        .collect();
    let calls = RefCell::new(Vec::new());
    let mut sim = |c: &[&ConsolidationCandidate]| {
        calls.borrow_mut().push(c.len());
        if c.len() <= 5 {
            SimulationOutcome::Delete
        } else {
            SimulationOutcome::Unschedulable("no room".into())
        }
    };
    let mut budgets = [10];
    let cmd = multi_node(&cs, &mut budgets, &mut sim, &fx.settings).unwrap();
    // The five cheapest to disrupt are the last five given.
    assert_eq!(cmd.candidates, vec![7, 6, 5, 4, 3]);
    assert!((cmd.savings_per_hour - 0.5).abs() < 1e-9);
    assert_eq!(budgets, [5]);
    assert!(calls.borrow().len() <= 3, "binary search: {:?}", calls.borrow());

    // The cap bounds the prefix.
    let mut settings = fx.settings.clone();
    settings.max_multi_candidates = 3;
    let cmd = multi_node(&cs, &mut [10], &mut always(SimulationOutcome::Delete), &settings).unwrap();
    assert_eq!(cmd.candidates.len(), 3);

    // A single candidate is single-node consolidation's business.
    assert!(
        multi_node(
            &cs[..1],
            &mut [10],
            &mut always(SimulationOutcome::Delete),
            &fx.settings
        )
        .is_none()
    );
}

#[test]
fn multi_node_respects_budgets() {
    let mut fx = Fx::new();
    let cs = vec![
        fx.cand(0, 0, 0.1, "on-demand", 1.0),
        fx.cand(1, 0, 0.1, "on-demand", 2.0),
        fx.cand(2, 0, 0.1, "on-demand", 3.0),
        fx.cand(3, 1, 0.1, "on-demand", 4.0),
        fx.cand(4, 1, 0.1, "on-demand", 5.0),
        fx.cand(5, 2, 0.1, "on-demand", 0.5),
    ];
    let mut budgets = [1, 2, 0];
    let cmd = multi_node(
        &cs,
        &mut budgets,
        &mut always(SimulationOutcome::Delete),
        &fx.settings,
    )
    .unwrap();
    assert_eq!(cmd.candidates, vec![0, 3, 4]);
    assert_eq!(budgets, [0, 0, 0]);

    // A pool missing from the budgets may lose nothing.
    let mut budgets = [5];
    let cmd = multi_node(
        &cs,
        &mut budgets,
        &mut always(SimulationOutcome::Delete),
        &fx.settings,
    )
    .unwrap();
    assert_eq!(cmd.candidates, vec![0, 1, 2]);
    assert_eq!(budgets, [2]);
}

#[test]
fn multi_node_never_replaces_with_a_removed_type_at_no_lower_price() {
    let mut fx = Fx::new();
    let mut cs = vec![
        fx.cand(0, 0, 0.8, "on-demand", 1.0),
        fx.cand(1, 0, 0.8, "on-demand", 2.0),
        fx.cand(2, 0, 0.2, "on-demand", 3.0),
    ];
    cs[2].instance_type = "small".into();
    let small = fx.it("small", 0.2, None);
    let large = fx.it("large", 0.8, None);
    // Replacing all three with a "small" (or pricier) is just deleting the two others.
    let claim = fx.claim(vec![small.clone(), large.clone()], &["on-demand"]);
    let cmd = multi_node(
        &cs,
        &mut [3],
        &mut |c: &[&ConsolidationCandidate]| {
            if c.len() == 3 {
                SimulationOutcome::Replace(vec![claim.clone()])
            } else {
                SimulationOutcome::Delete
            }
        },
        &fx.settings,
    )
    .unwrap();
    assert_eq!(cmd.decision, Decision::Delete);
    assert_eq!(cmd.candidates, vec![0, 1]);

    // With a cheaper type on offer, that one is kept.
    let nano = fx.it("nano", 0.1, None);
    let claim = fx.claim(vec![nano, small, large], &["on-demand"]);
    let cmd = multi_node(
        &cs,
        &mut [3],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &fx.settings,
    )
    .unwrap();
    assert_eq!(cmd.decision, Decision::Replace);
    assert_eq!(names(&cmd.replacements[0]), vec!["nano"]);
    assert!((cmd.savings_per_hour - 1.7).abs() < 1e-9);
}

#[test]
fn multi_node_may_replace_on_demand_nodes_with_their_own_type_as_spot() {
    let mut fx = Fx::new();
    let mut cs = vec![
        fx.cand(0, 0, 0.8, "on-demand", 1.0),
        fx.cand(1, 0, 0.8, "on-demand", 2.0),
    ];
    for c in &mut cs {
        c.instance_type = "large".into();
    }
    // One `large` holds both nodes' pods. As spot (pinned, 0.3/h) it is cheaper than either on-demand `large`.
    let large = fx.it("large", 0.8, Some(0.3));
    let claim = fx.claim(vec![large.clone()], &["spot", "on-demand"]);
    let cmd = multi_node(
        &cs,
        &mut [2],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &fx.settings,
    )
    .unwrap();
    assert_eq!(cmd.decision, Decision::Replace);
    assert_eq!(names(&cmd.replacements[0]), vec!["large"]);
    assert!((cmd.savings_per_hour - 1.3).abs() < 1e-9);

    // On-demand only, the replacement costs what one of the nodes does: keeping that node and deleting the
    // other is the same outcome with less disruption, so no command.
    let claim = fx.claim(vec![large], &["on-demand"]);
    let cmd = multi_node(
        &cs,
        &mut [2],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &fx.settings,
    );
    assert!(cmd.is_none(), "{cmd:?}");
}

#[test]
fn single_node_interleaves_nodepools() {
    let mut fx = Fx::new();
    let cs = vec![
        fx.cand(0, 1, 0.1, "on-demand", 20.0),
        fx.cand(1, 0, 0.1, "on-demand", 3.0),
        fx.cand(2, 0, 0.1, "on-demand", 1.0),
        fx.cand(3, 1, 0.1, "on-demand", 10.0),
        fx.cand(4, 0, 0.1, "on-demand", 2.0),
        fx.cand(5, 2, 0.1, "on-demand", 0.5),
    ];
    let tried = RefCell::new(Vec::new());
    let mut sim = |c: &[&ConsolidationCandidate]| {
        tried.borrow_mut().push(c[0].index);
        SimulationOutcome::Unschedulable(format!("pod of node {} fits nowhere else", c[0].index))
    };
    let (cmd, rejected, evaluated) = single_node(&cs, &[5, 5, 0], &mut sim, &fx.settings);
    assert!(cmd.is_none());
    assert_eq!(*tried.borrow(), vec![2, 3, 4, 0, 1]);
    assert_eq!(evaluated, 5);
    assert_eq!(rejected.len(), 6);
    assert_eq!(rejected[0].0, 5);
    assert!(rejected[0].1.contains("disruption budget"), "{rejected:?}");
    assert_eq!(rejected[1], (2, "pod of node 2 fits nowhere else".to_string()));

    // The first candidate that works wins.
    let mut sim = |c: &[&ConsolidationCandidate]| {
        if c[0].node_pool == 1 {
            SimulationOutcome::Delete
        } else {
            SimulationOutcome::Unschedulable("no".into())
        }
    };
    let (cmd, rejected, evaluated) = single_node(&cs, &[5, 5, 5], &mut sim, &fx.settings);
    assert_eq!(cmd.unwrap().candidates, vec![3]);
    assert_eq!(rejected.iter().map(|r| r.0).collect::<Vec<_>>(), vec![5, 2]);
    assert_eq!(evaluated, 3);
}

#[test]
fn spot_to_spot_needs_the_gate_and_fifteen_cheaper_types() {
    let mut fx = Fx::new();
    let cs = vec![fx.cand(0, 0, 1.0, "spot", 1.0)];
    let types = fx.spot_types(20, |_| Vec::new());
    let claim = fx.claim(types.clone(), &["spot", "on-demand"]);

    let mut off = fx.settings.clone();
    off.spot_to_spot = false;
    let (cmd, rejected, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim.clone()])),
        &off,
    );
    assert!(cmd.is_none());
    assert!(
        rejected[0]
            .1
            .starts_with("spot-to-spot consolidation is disabled"),
        "{rejected:?}"
    );

    // 14 spot types are cheaper than a 0.145 node.
    let mut pricier = cs.clone();
    pricier[0].price = 0.145;
    let (cmd, rejected, _) = single_node(
        &pricier,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim.clone()])),
        &fx.settings,
    );
    assert!(cmd.is_none());
    assert!(
        rejected[0]
            .1
            .starts_with("fewer than 15 cheaper spot instance types (14)"),
        "{rejected:?}"
    );

    let (cmd, _, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim.clone()])),
        &fx.settings,
    );
    let cmd = cmd.unwrap();
    let r = &cmd.replacements[0];
    assert_eq!(r.instance_types.len(), 15);
    assert_eq!(r.instance_types[0].name, "t0");
    let ct = r.requirements.get(fx.settings.capacity_type_key).unwrap();
    assert_eq!(ct.values(), &[fx.settings.spot], "pinned to spot");
    assert!((cmd.savings_per_hour - (1.0 - 0.15)).abs() < 1e-9);

    // Several spot nodes need the gate but not fifteen types.
    let few = fx.claim(types[..3].to_vec(), &["spot"]);
    let cs = vec![fx.cand(0, 0, 0.5, "spot", 1.0), fx.cand(1, 0, 0.5, "spot", 1.0)];
    let cmd = multi_node(
        &cs,
        &mut [2],
        &mut always(SimulationOutcome::Replace(vec![few.clone()])),
        &fx.settings,
    )
    .unwrap();
    assert_eq!(cmd.replacements[0].instance_types.len(), 3);
    assert!(
        multi_node(
            &cs,
            &mut [2],
            &mut always(SimulationOutcome::Replace(vec![few])),
            &off
        )
        .is_none()
    );
}

#[test]
fn spot_replacement_truncated_to_fifteen_keeping_min_values() {
    let mut fx = Fx::new();
    let cs = vec![fx.cand(0, 0, 1.0, "spot", 1.0)];
    let family = "karpenter.k8s.aws/instance-family";
    let types = fx.spot_types(20, |k| vec![(family.to_string(), format!("f{k}"))]);
    let mut claim = fx.claim(types, &["spot"]);
    let fam = fx.i.intern_key(family);
    claim
        .requirements
        .add(Requirement::exists(fam).with_min_values(Some(17)));
    let (cmd, _, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim.clone()])),
        &fx.settings,
    );
    assert_eq!(cmd.unwrap().replacements[0].instance_types.len(), 17);

    // minValues of 10 is met within the first 15.
    let mut claim10 = claim.clone();
    claim10.requirements.remove(fam);
    claim10
        .requirements
        .add(Requirement::exists(fam).with_min_values(Some(10)));
    let (cmd, _, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim10])),
        &fx.settings,
    );
    assert_eq!(cmd.unwrap().replacements[0].instance_types.len(), 15);

    // minValues the cheaper types cannot meet blocks the replacement.
    let mut cheap_node = cs.clone();
    cheap_node[0].price = 0.165; // 16 types cheaper, 17 families needed
    let (cmd, rejected, _) = single_node(
        &cheap_node,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &fx.settings,
    );
    assert!(cmd.is_none());
    assert!(rejected[0].1.contains("minValues"), "{rejected:?}");
}

#[test]
fn on_demand_replacement_is_pinned_to_spot() {
    let mut fx = Fx::new();
    let cs = vec![fx.cand(0, 0, 1.0, "on-demand", 1.0)];
    // On-demand at 1.5 would cost more than the node; spot at 0.6 does not.
    let a = fx.it("a", 1.5, Some(0.6));
    let claim = fx.claim(vec![a], &["spot", "on-demand"]);
    let (cmd, _, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &fx.settings,
    );
    let cmd = cmd.unwrap();
    let r = &cmd.replacements[0];
    assert_eq!(
        r.requirements
            .get(fx.settings.capacity_type_key)
            .unwrap()
            .values(),
        &[fx.settings.spot]
    );
    assert!((cmd.savings_per_hour - 0.4).abs() < 1e-9);
    assert_eq!(
        r.launch.as_ref().map(|l| l.offering.capacity_type),
        Some(fx.settings.spot)
    );

    // An on-demand-only replacement stays on-demand and must be cheaper as such.
    let b = fx.it("b", 0.7, Some(0.3));
    let claim = fx.claim(vec![b], &["on-demand"]);
    let (cmd, _, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &fx.settings,
    );
    let cmd = cmd.unwrap();
    assert!((cmd.savings_per_hour - 0.3).abs() < 1e-9);
}

#[test]
fn a_replacement_launched_into_a_reservation_stays_reserved() {
    let mut fx = Fx::new();
    let cs = vec![fx.cand(0, 0, 1.0, "reserved", 1.0)];
    let mut reserved = fx.offering("zone-a", "reserved", 0.2);
    reserved.reservation_id = Some(fx.i.intern("cr-1"));
    reserved.reservation_capacity = Some(1);
    let mut it = (*fx.it("r", 2.0, None)).clone();
    it.offerings.insert(0, reserved.clone());
    let it = Arc::new(it);
    let mut claim = fx.claim(vec![it.clone()], &["reserved", "on-demand"]);
    claim.launch = Some(Launch {
        instance_type: it,
        offering: reserved,
    });
    let (cmd, _, _) = single_node(
        &cs,
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &fx.settings,
    );
    let cmd = cmd.unwrap();
    assert!((cmd.savings_per_hour - 0.8).abs() < 1e-9);
    assert_eq!(
        cmd.replacements[0]
            .requirements
            .get(fx.settings.capacity_type_key)
            .unwrap()
            .values(),
        &[fx.settings.reserved]
    );
}

#[test]
fn consolidation_leaves_empty_nodes_to_emptiness() {
    let mut fx = Fx::new();
    let mut busy = fx.cand(0, 0, 0.5, "on-demand", 0.5);
    busy.policy = ConsolidationPolicy::WhenEmpty;
    let mut empty = fx.cand(1, 0, 0.5, "on-demand", 1.0);
    empty.pod_count = 0;
    let other = fx.cand(2, 0, 0.5, "on-demand", 2.0);
    let third = fx.cand(3, 0, 0.5, "on-demand", 3.0);
    let cs = vec![busy, empty, other, third];

    let simulated = RefCell::new(Vec::new());
    let mut sim = |c: &[&ConsolidationCandidate]| {
        simulated.borrow_mut().extend(c.iter().map(|c| c.index));
        SimulationOutcome::Delete
    };
    let (cmd, rejected, evaluated) = single_node(&cs, &[4], &mut sim, &fx.settings);
    assert_eq!(cmd.unwrap().candidates, vec![2]);
    assert_eq!(
        rejected,
        vec![
            (0, "NodePool policy WhenEmpty: the node is not empty".to_string()),
            (
                1,
                "empty: only emptiness removes it, within the Empty budget".to_string()
            ),
        ]
    );
    assert_eq!(evaluated, 1);
    assert_eq!(*simulated.borrow(), vec![2]);

    let cmd = multi_node(
        &cs,
        &mut [4],
        &mut always(SimulationOutcome::Delete),
        &fx.settings,
    )
    .unwrap();
    assert_eq!(cmd.candidates, vec![2, 3]);
}

#[test]
fn balanced_score_gates_moves() {
    let mut fx = Fx::new();
    let mut costly = fx.cand(0, 0, 1.0, "on-demand", 4.0);
    costly.policy = ConsolidationPolicy::Balanced;
    let mut cheap = fx.cand(1, 0, 1.0, "on-demand", 5.0);
    cheap.policy = ConsolidationPolicy::Balanced;
    cheap.disruption_cost = 1.0;
    let mut settings = fx.settings.clone();
    settings.pool_totals = vec![(10.0, 10.0)];

    // 10% of the price for 40% of the disruption: 0.25 < 0.5.
    let (cmd, rejected, _) = single_node(
        &[costly.clone()],
        &[1],
        &mut always(SimulationOutcome::Delete),
        &settings,
    );
    assert!(cmd.is_none());
    assert_eq!(
        rejected[0].1,
        "Balanced: savings of 10% do not justify disrupting 40% of the NodePool (score 0.25 < 0.50)"
    );
    // 10% of the price for 10% of the disruption: 1.0.
    let (cmd, _, _) = single_node(
        &[costly, cheap],
        &[1],
        &mut always(SimulationOutcome::Delete),
        &settings,
    );
    assert_eq!(cmd.unwrap().candidates, vec![1]);

    // A replace is scored on what it saves.
    let mut node = fx.cand(2, 0, 1.0, "on-demand", 1.0);
    node.policy = ConsolidationPolicy::Balanced;
    let nearly = fx.it("nearly", 0.97, None);
    let claim = fx.claim(vec![nearly], &["on-demand"]);
    let (cmd, rejected, _) = single_node(
        &[node],
        &[1],
        &mut always(SimulationOutcome::Replace(vec![claim])),
        &settings,
    );
    assert!(cmd.is_none());
    assert!(rejected[0].1.contains("score 0.03 < 0.50"), "{rejected:?}");
}

/// A simulator whose answer is a fixed function of which candidates it is given.
fn scripted(outcomes: Vec<SimulationOutcome>) -> impl FnMut(&[&ConsolidationCandidate]) -> SimulationOutcome {
    move |c: &[&ConsolidationCandidate]| {
        let key = c
            .iter()
            .fold(c.len(), |h, c| h.wrapping_mul(31).wrapping_add(c.index));
        outcomes[key % outcomes.len()].clone()
    }
}

proptest! {
    #[test]
    fn replace_commands_save_money_within_budgets(
        nodes in prop::collection::vec((0usize..3, 1u32..100, any::<bool>(), 0u32..20, 0usize..4), 1..12),
        budgets in prop::collection::vec(0usize..4, 3),
        outcomes in prop::collection::vec(
            (0u8..4, prop::collection::vec((1u32..150, any::<bool>()), 0..20), any::<bool>()),
            1..6,
        ),
        gate in any::<bool>(),
    ) {
        let mut fx = Fx::new();
        fx.settings.spot_to_spot = gate;
        let cs: Vec<ConsolidationCandidate> = nodes
            .iter()
            .enumerate()
            .map(|(k, &(pool, cents, spot, cost, pods))| {
                let mut c = fx.cand(k, pool, f64::from(cents) / 100.0, if spot { "spot" } else { "on-demand" }, f64::from(cost));
                c.pod_count = pods;
                c.instance_type = format!("t{}", cents % 7);
                c
            })
            .collect();
        let outcomes: Vec<SimulationOutcome> = outcomes
            .iter()
            .enumerate()
            .map(|(o, (kind, types, any_ct))| match kind {
                0 => SimulationOutcome::Delete,
                1 => SimulationOutcome::Unschedulable("no".into()),
                _ => {
                    let its: Vec<Arc<InstanceType>> = types
                        .iter()
                        .enumerate()
                        .map(|(k, &(cents, spot))| {
                            let p = f64::from(cents) / 100.0;
                            let name = if k % 3 == 0 { format!("t{}", cents % 7) } else { format!("o{o}-{k}") };
                            fx.it_with(&name, &[("zone-a", "on-demand", p), ("zone-b", "on-demand", p * 1.1)], spot.then_some(p / 3.0), &[])
                        })
                        .collect();
                    let cts: &[&str] = if *any_ct { &["spot", "on-demand"] } else { &["on-demand"] };
                    let claims = if *kind == 3 { 1 } else { 2 };
                    SimulationOutcome::Replace((0..claims).map(|_| fx.claim(its.clone(), cts)).collect())
                }
            })
            .collect();
        let (zk, ck) = (fx.settings.zone_key, fx.settings.capacity_type_key);
        let check = |cmd: &ConsolidationCommand, budgets: &[usize]| -> Result<(), TestCaseError> {
            let removed: Vec<&ConsolidationCandidate> =
                cmd.candidates.iter().map(|&i| &cs[i]).collect();
            let price: f64 = removed.iter().map(|c| c.price).sum();
            for (pool, &budget) in budgets.iter().enumerate() {
                let n = removed.iter().filter(|c| c.node_pool == pool).count();
                prop_assert!(n <= budget, "pool {pool}: {n} removed, budget {budget}");
            }
            match cmd.decision {
                Decision::Delete => {
                    prop_assert!(cmd.replacements.is_empty());
                    prop_assert!((cmd.savings_per_hour - price).abs() < 1e-9);
                }
                Decision::Replace => {
                    prop_assert_eq!(cmd.replacements.len(), 1);
                    let r = &cmd.replacements[0];
                    prop_assert!(!r.instance_types.is_empty());
                    let worst = r.worst_price(zk, ck);
                    prop_assert!(worst < price, "worst {worst} >= removed {price}");
                    prop_assert!(cmd.savings_per_hour > 0.0);
                    prop_assert!((cmd.savings_per_hour - (price - worst)).abs() < 1e-9);
                    let spot_pinned = r
                        .requirements
                        .get(ck)
                        .is_some_and(|req| req.values() == [fx.settings.spot]);
                    if removed.iter().all(|c| c.capacity_type == fx.settings.spot) && spot_pinned {
                        prop_assert!(gate, "spot-to-spot without the gate");
                    }
                    if removed.len() > 1 {
                        for it in &r.instance_types {
                            for c in removed.iter().filter(|c| c.instance_type == it.name) {
                                let w = it.worst_offering(&r.requirements, zk, ck).unwrap().price;
                                prop_assert!(w < c.price, "replaces a removed {} at no lower price", it.name);
                            }
                        }
                    }
                }
            }
            Ok(())
        };

        let mut left = budgets.clone();
        if let Some(cmd) = multi_node(&cs, &mut left, &mut scripted(outcomes.clone()), &fx.settings) {
            prop_assert!(cmd.candidates.len() >= 2);
            check(&cmd, &budgets)?;
            for (pool, (&l, &b)) in left.iter().zip(&budgets).enumerate() {
                let n = cmd.candidates.iter().filter(|&&i| cs[i].node_pool == pool).count();
                prop_assert_eq!(l, b - n);
            }
        } else {
            prop_assert_eq!(&left, &budgets);
        }

        let (cmd, rejected, evaluated) = single_node(&cs, &budgets, &mut scripted(outcomes), &fx.settings);
        prop_assert!(evaluated <= cs.len());
        if let Some(cmd) = cmd {
            prop_assert_eq!(cmd.candidates.len(), 1);
            check(&cmd, &budgets)?;
            prop_assert!(rejected.len() < cs.len());
        } else {
            prop_assert_eq!(rejected.len(), cs.len());
        }
    }
}

/// A clock that moves only when a test moves it: the simulator below advances it per candidate re-simulated.
struct FakeClock(std::sync::Mutex<Timestamp>);

impl FakeClock {
    fn new() -> Self {
        Self(std::sync::Mutex::new(Timestamp::UNIX_EPOCH))
    }

    fn advance(&self, by: SignedDuration) {
        let mut now = self.0.lock().unwrap();
        *now = now.checked_add(by).unwrap();
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap()
    }
}

#[test]
fn multi_node_past_its_minute_keeps_the_longest_prefix_found_so_far() {
    let mut fx = Fx::new();
    let cs: Vec<_> = (0..8)
        .map(|k| fx.cand(k, 0, 0.1, "on-demand", k as f64))
        .collect();
    let clock = FakeClock::new();
    let tried = RefCell::new(Vec::new());
    // Every prefix can go; each re-simulation takes 40 s.
    let mut sim = |c: &[&ConsolidationCandidate]| {
        tried.borrow_mut().push(c.len());
        clock.advance(SignedDuration::from_secs(40));
        SimulationOutcome::Delete
    };
    let deadline = Deadline::after(&clock, MULTI_NODE_TIMEOUT);
    let mut budgets = [10];
    let out = multi_node_within(&cs, &mut budgets, &mut sim, &fx.settings, Some(&deadline));
    assert!(out.timed_out);
    // 5 at 0 s, 7 at 40 s; at 80 s the minute is over before 8 is tried.
    assert_eq!(*tried.borrow(), vec![5, 7]);
    let cmd = out.command.expect("the last prefix that worked");
    assert_eq!(cmd.candidates, (0..7).collect::<Vec<_>>());
    assert_eq!(budgets, [3], "the command's nodes are taken from the budget");

    // Without a deadline, the same search goes on to all eight.
    let mut budgets = [10];
    let out = multi_node_within(&cs, &mut budgets, &mut sim, &fx.settings, None);
    assert!(!out.timed_out);
    assert_eq!(out.command.unwrap().candidates.len(), 8);

    // Out of time before any prefix worked: no command, still a timeout.
    let clock = FakeClock::new();
    let mut sim = |_: &[&ConsolidationCandidate]| {
        clock.advance(SignedDuration::from_secs(61));
        SimulationOutcome::Unschedulable("no".into())
    };
    let deadline = Deadline::after(&clock, MULTI_NODE_TIMEOUT);
    let mut budgets = [10];
    let out = multi_node_within(&cs, &mut budgets, &mut sim, &fx.settings, Some(&deadline));
    assert!(out.timed_out);
    assert!(out.command.is_none());
    assert_eq!(budgets, [10]);
}

#[test]
fn multi_node_within_its_minute_is_unchanged() {
    let mut fx = Fx::new();
    let cs: Vec<_> = (0..8)
        .map(|k| fx.cand(k, 0, 0.1, "on-demand", k as f64))
        .collect();
    let clock = FakeClock::new();
    let mut sim = |c: &[&ConsolidationCandidate]| {
        clock.advance(SignedDuration::from_secs(1));
        if c.len() <= 6 {
            SimulationOutcome::Delete
        } else {
            SimulationOutcome::Unschedulable("no".into())
        }
    };
    let deadline = Deadline::after(&clock, MULTI_NODE_TIMEOUT);
    let out = multi_node_within(&cs, &mut [10], &mut sim, &fx.settings, Some(&deadline));
    assert!(!out.timed_out);
    assert_eq!(out.command.unwrap().candidates.len(), 6);
}

#[test]
fn single_node_past_its_three_minutes_stops_and_the_next_search_starts_with_the_nodepools_it_missed() {
    let mut fx = Fx::new();
    // Pool 0 leads the round-robin (its cheapest candidate is the cheapest), then pool 1, then pool 2.
    let cs = vec![
        fx.cand(0, 0, 0.1, "on-demand", 1.0),
        fx.cand(1, 0, 0.1, "on-demand", 4.0),
        fx.cand(2, 1, 0.1, "on-demand", 2.0),
        fx.cand(3, 1, 0.1, "on-demand", 5.0),
        fx.cand(4, 2, 0.1, "on-demand", 3.0),
    ];
    let clock = FakeClock::new();
    let tried = RefCell::new(Vec::new());
    // Nothing consolidates; each candidate takes 100 s.
    let mut sim = |c: &[&ConsolidationCandidate]| {
        tried.borrow_mut().push(c[0].index);
        clock.advance(SignedDuration::from_secs(100));
        SimulationOutcome::Unschedulable("no".into())
    };
    let deadline = Deadline::after(&clock, SINGLE_NODE_TIMEOUT);
    let out = single_node_within(&cs, &[5, 5, 5], &mut sim, &fx.settings, &[], Some(&deadline));
    assert!(out.timed_out);
    assert!(out.command.is_none());
    assert_eq!(*tried.borrow(), vec![0, 2], "at 200 s the three minutes are over");
    assert_eq!(out.evaluated, 2);
    assert_eq!(out.unreached, vec![4, 1, 3]);
    assert_eq!(out.unseen_node_pools, vec![2], "pool 2 had no candidate tried");

    // The next search starts with pool 2.
    tried.borrow_mut().clear();
    let deadline = Deadline::after(&clock, SINGLE_NODE_TIMEOUT);
    let out = single_node_within(
        &cs,
        &[5, 5, 5],
        &mut sim,
        &fx.settings,
        &out.unseen_node_pools,
        Some(&deadline),
    );
    assert!(out.timed_out);
    assert_eq!(*tried.borrow(), vec![4, 0]);
    assert_eq!(out.unseen_node_pools, vec![1]);

    // With time enough, every candidate is tried and none is left unseen.
    tried.borrow_mut().clear();
    let out = single_node_within(&cs, &[5, 5, 5], &mut sim, &fx.settings, &[1], None);
    assert!(!out.timed_out);
    assert_eq!(*tried.borrow(), vec![2, 0, 4, 3, 1]);
    assert!(out.unreached.is_empty() && out.unseen_node_pools.is_empty());
    assert_eq!(out.rejected.len(), 5);
}

#[test]
fn single_node_finds_its_command_before_the_limit_as_without_one() {
    let mut fx = Fx::new();
    let cs = vec![
        fx.cand(0, 0, 0.1, "on-demand", 1.0),
        fx.cand(1, 1, 0.1, "on-demand", 2.0),
    ];
    let clock = FakeClock::new();
    let mut sim = |c: &[&ConsolidationCandidate]| {
        clock.advance(SignedDuration::from_secs(170));
        if c[0].index == 1 {
            SimulationOutcome::Delete
        } else {
            SimulationOutcome::Unschedulable("no".into())
        }
    };
    let deadline = Deadline::after(&clock, SINGLE_NODE_TIMEOUT);
    let out = single_node_within(&cs, &[1, 1], &mut sim, &fx.settings, &[], Some(&deadline));
    assert!(
        !out.timed_out,
        "170 s is within the limit when candidate 1 is reached"
    );
    assert_eq!(out.command.unwrap().candidates, vec![1]);
}
