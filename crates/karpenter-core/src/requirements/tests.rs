//! Behaviour of the requirements algebra, named after what users rely on, plus property tests of the algebra.

use proptest::prelude::*;

use super::*;

fn req(i: &mut LabelInterner, key: &str, op: &str, values: &[&str]) -> Requirement {
    Requirement::parse(key, op, values, None, i).unwrap()
}

fn reqs(i: &mut LabelInterner, specs: &[(&str, &str, &[&str])]) -> Requirements {
    specs.iter().map(|(k, op, vals)| req(i, k, op, vals)).collect()
}

fn has(i: &mut LabelInterner, r: &Requirement, value: &str) -> bool {
    let v = i.intern(value);
    r.has(v)
}

const ZONE: &str = "topology.kubernetes.io/zone";

#[test]
fn gte_is_inclusive() {
    let mut i = LabelInterner::new();
    let r = req(&mut i, "cpu", "Gte", &["4"]);
    assert!(has(&mut i, &r, "4"));
    assert!(has(&mut i, &r, "5"));
    assert!(!has(&mut i, &r, "3"));
}

#[test]
fn lte_is_inclusive() {
    let mut i = LabelInterner::new();
    let r = req(&mut i, "cpu", "Lte", &["4"]);
    assert!(has(&mut i, &r, "4"));
    assert!(has(&mut i, &r, "0"));
    assert!(!has(&mut i, &r, "5"));
}

#[test]
fn gt_and_lt_are_exclusive() {
    let mut i = LabelInterner::new();
    let gt = req(&mut i, "cpu", "Gt", &["4"]);
    let lt = req(&mut i, "cpu", "Lt", &["4"]);
    assert!(!has(&mut i, &gt, "4") && has(&mut i, &gt, "5"));
    assert!(!has(&mut i, &lt, "4") && has(&mut i, &lt, "3"));
    assert_eq!(gt, req(&mut i, "cpu", "Gte", &["5"]), "Gt n is Gte n+1");
    assert_eq!(lt, req(&mut i, "cpu", "Lte", &["3"]), "Lt n is Lte n-1");
}

#[test]
fn non_integer_values_never_satisfy_bounds() {
    let mut i = LabelInterner::new();
    let r = req(&mut i, "cpu", "Gt", &["-100"]);
    assert!(!has(&mut i, &r, "large"));
    assert!(!has(&mut i, &r, "4.5"));
    assert!(has(&mut i, &r, "4"));
    // An In set loses its non-integer values when bounded.
    let family = req(&mut i, "cpu", "In", &["4", "x", "16"]);
    let bounded = family.intersection(&req(&mut i, "cpu", "Lt", &["10"]));
    assert_eq!(bounded.values(), &[i.intern("4")]);
}

#[test]
fn has_str_needs_no_interning() {
    let mut i = LabelInterner::new();
    let r = req(&mut i, "cpu", "Gte", &["4"]);
    assert!(
        r.has_str("64", &i),
        "an integer never interned is still within the bounds"
    );
    assert!(!r.has_str("2", &i));
    let not_in = req(&mut i, ZONE, "NotIn", &["a"]);
    assert!(not_in.has_str("never-seen", &i));
    assert!(!not_in.has_str("a", &i));
    let in_ = req(&mut i, ZONE, "In", &["a"]);
    assert!(!in_.has_str("never-seen", &i));
}

#[test]
fn in_intersected_with_in_keeps_common_values() {
    let mut i = LabelInterner::new();
    let a = req(&mut i, ZONE, "In", &["a", "b", "c"]);
    let b = req(&mut i, ZONE, "In", &["b", "c", "d"]);
    let both = a.intersection(&b);
    assert_eq!(both, req(&mut i, ZONE, "In", &["b", "c"]));
    assert_eq!(both.operator(), Operator::In);
}

#[test]
fn not_in_removes_values_from_in() {
    let mut i = LabelInterner::new();
    let a = req(&mut i, ZONE, "In", &["a", "b"]);
    let b = req(&mut i, ZONE, "NotIn", &["a"]);
    assert_eq!(a.intersection(&b), req(&mut i, ZONE, "In", &["b"]));
    let c = req(&mut i, ZONE, "NotIn", &["c"]);
    assert_eq!(
        b.intersection(&c),
        req(&mut i, ZONE, "NotIn", &["a", "c"]),
        "complements union their exclusions"
    );
}

#[test]
fn exists_intersected_with_a_large_set_shares_it() {
    let mut i = LabelInterner::new();
    let names: Vec<String> = (0..700).map(|n| format!("m{n}.large")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let big = req(&mut i, "node.kubernetes.io/instance-type", "In", &names);
    let exists = req(&mut i, "node.kubernetes.io/instance-type", "Exists", &[]);
    let both = big.intersection(&exists);
    assert_eq!(both, big);
    match (&both.values, &big.values) {
        (SymbolSet::Many(a), SymbolSet::Many(b)) => assert!(std::sync::Arc::ptr_eq(a, b)),
        _ => panic!("expected shared value sets"),
    }
}

#[test]
fn conflicting_bounds_intersect_to_does_not_exist() {
    let mut i = LabelInterner::new();
    let r = req(&mut i, "cpu", "Gt", &["8"]).intersection(&req(&mut i, "cpu", "Lt", &["4"]));
    assert!(r.is_empty());
    assert_eq!(r.operator(), Operator::DoesNotExist);
    let touching = req(&mut i, "cpu", "Gte", &["4"]).intersection(&req(&mut i, "cpu", "Lte", &["4"]));
    assert!(!touching.is_empty() && has(&mut i, &touching, "4"));
}

#[test]
fn bounds_combine_with_not_in() {
    let mut i = LabelInterner::new();
    let r = req(&mut i, "cpu", "Gte", &["2"])
        .intersection(&req(&mut i, "cpu", "NotIn", &["4", "100", "x"]))
        .intersection(&req(&mut i, "cpu", "Lte", &["16"]));
    assert_eq!(
        r.values(),
        &[i.intern("4")],
        "exclusions outside the bounds are dropped"
    );
    assert_eq!(r.operator(), Operator::NotIn);
    assert!(has(&mut i, &r, "2") && !has(&mut i, &r, "4") && !has(&mut i, &r, "17"));
}

#[test]
fn undefined_custom_label_is_incompatible() {
    let mut i = LabelInterner::new();
    let wk = WellKnownKeys::from_names(&mut i, [ZONE]);
    let nodepool = reqs(&mut i, &[(ZONE, "In", &["a"])]);
    for op in [("In", &["x"][..]), ("Exists", &[][..]), ("Gt", &["1"][..])] {
        let pod = reqs(&mut i, &[("example.com/team", op.0, op.1)]);
        let err = nodepool.compatible(&pod, &wk).unwrap_err();
        assert!(matches!(err, Incompatibility::Undefined { .. }), "{op:?}");
        assert!(!nodepool.is_compatible(&pod, &wk));
        assert!(
            nodepool.intersects(&pod).is_ok(),
            "intersects ignores undefined keys"
        );
    }
}

#[test]
fn undefined_well_known_label_is_compatible() {
    let mut i = LabelInterner::new();
    let wk = WellKnownKeys::from_names(&mut i, [ZONE]);
    let nodepool = reqs(&mut i, &[("kubernetes.io/arch", "In", &["amd64"])]);
    let pod = reqs(&mut i, &[(ZONE, "In", &["a"])]);
    assert!(nodepool.compatible(&pod, &wk).is_ok());
    assert!(nodepool.compatible(&pod, &WellKnownKeys::none()).is_err());
}

#[test]
fn undefined_label_the_pod_excludes_is_compatible() {
    let mut i = LabelInterner::new();
    let nodepool = Requirements::new();
    let pod = reqs(
        &mut i,
        &[
            ("example.com/team", "NotIn", &["a"]),
            ("example.com/gpu", "DoesNotExist", &[]),
        ],
    );
    assert!(nodepool.compatible(&pod, &WellKnownKeys::none()).is_ok());
}

#[test]
fn pod_excluding_the_only_allowed_value_is_incompatible() {
    let mut i = LabelInterner::new();
    let nodepool = reqs(&mut i, &[(ZONE, "In", &["a"])]);
    let pod = reqs(&mut i, &[(ZONE, "NotIn", &["a"])]);
    assert!(matches!(
        nodepool.compatible(&pod, &WellKnownKeys::none()),
        Err(Incompatibility::Disjoint { .. })
    ));
    let pod = reqs(&mut i, &[(ZONE, "DoesNotExist", &[])]);
    assert!(nodepool.compatible(&pod, &WellKnownKeys::none()).is_err());
}

#[test]
fn two_exclusions_are_compatible_even_without_overlap() {
    let mut i = LabelInterner::new();
    let node = reqs(&mut i, &[("example.com/team", "DoesNotExist", &[])]);
    let pod = reqs(&mut i, &[("example.com/team", "NotIn", &["a"])]);
    assert!(node.compatible(&pod, &WellKnownKeys::none()).is_ok());
    let pod = reqs(&mut i, &[("example.com/team", "In", &["a"])]);
    assert!(node.compatible(&pod, &WellKnownKeys::none()).is_err());
}

#[test]
fn undefined_key_is_reported_before_a_disjoint_one() {
    let mut i = LabelInterner::new();
    // Intern the undefined key last so it sorts after the disjoint one.
    let nodepool = reqs(&mut i, &[(ZONE, "In", &["a"])]);
    let pod = reqs(&mut i, &[(ZONE, "In", &["b"]), ("zzz/custom", "Exists", &[])]);
    let err = nodepool.compatible(&pod, &WellKnownKeys::none()).unwrap_err();
    assert_eq!(i.resolve(err.key()), "zzz/custom");
}

#[test]
fn bounds_against_a_finite_set_check_its_values() {
    let mut i = LabelInterner::new();
    let instance_type = reqs(&mut i, &[("karpenter.k8s.aws/instance-cpu", "In", &["4"])]);
    let wk = WellKnownKeys::none();
    assert!(instance_type.is_compatible(
        &reqs(&mut i, &[("karpenter.k8s.aws/instance-cpu", "Gt", &["3"])]),
        &wk
    ));
    assert!(!instance_type.is_compatible(
        &reqs(&mut i, &[("karpenter.k8s.aws/instance-cpu", "Gt", &["4"])]),
        &wk
    ));
}

#[test]
fn layering_provider_nodepool_and_pod_narrows_values() {
    let mut i = LabelInterner::new();
    let provider = reqs(
        &mut i,
        &[
            (ZONE, "In", &["a", "b", "c"]),
            ("kubernetes.io/arch", "In", &["amd64", "arm64"]),
        ],
    );
    let nodepool = reqs(
        &mut i,
        &[
            (ZONE, "NotIn", &["c"]),
            ("karpenter.sh/capacity-type", "In", &["spot"]),
        ],
    );
    let pod = reqs(&mut i, &[(ZONE, "In", &["b", "c"])]);
    let all = provider.intersect(&nodepool).intersect(&pod);
    let zone = i.lookup_key(ZONE).unwrap();
    assert_eq!(all.single_value(zone), i.lookup("b"));
    assert_eq!(all.len(), 3);
    let mut layered = provider.clone();
    layered.intersect_with(&nodepool);
    layered.intersect_with(&pod);
    assert_eq!(layered, all);
}

#[test]
fn add_intersects_with_an_existing_key() {
    let mut i = LabelInterner::new();
    let mut r = reqs(&mut i, &[(ZONE, "In", &["a", "b"])]);
    r.add(req(&mut i, ZONE, "In", &["b", "c"]));
    let zone = i.lookup_key(ZONE).unwrap();
    assert_eq!(r.get(zone).unwrap().values(), &[i.intern("b")]);
    assert!(r.remove(zone).is_some());
    assert!(!r.has(zone));
}

#[test]
fn labels_are_the_single_valued_keys() {
    let mut i = LabelInterner::new();
    let r = reqs(
        &mut i,
        &[
            (ZONE, "In", &["a"]),
            ("kubernetes.io/arch", "In", &["amd64", "arm64"]),
            ("team", "Exists", &[]),
        ],
    );
    let labels: Vec<(&str, &str)> = r.labels().map(|(k, v)| (i.resolve(k), i.resolve(v))).collect();
    assert_eq!(labels, vec![(ZONE, "a")]);
}

#[test]
fn allows_checks_a_node_label() {
    let mut i = LabelInterner::new();
    let r = reqs(&mut i, &[(ZONE, "In", &["a"])]);
    let (zone, a, b, other) = (
        i.intern_key(ZONE),
        i.intern("a"),
        i.intern("b"),
        i.intern_key("other"),
    );
    assert!(r.allows(zone, a));
    assert!(!r.allows(zone, b));
    assert!(r.allows(other, b), "an unconstrained key allows anything");
}

#[test]
fn any_value_picks_the_smallest_allowed_integer_for_a_complement() {
    let mut i = LabelInterner::new();
    let r = req(&mut i, "cpu", "Gte", &["2"]).intersection(&req(&mut i, "cpu", "NotIn", &["2", "3"]));
    let v = r.any_value(&mut i).unwrap();
    assert_eq!(i.resolve(v), "4");
    let in_ = req(&mut i, ZONE, "In", &["z"]);
    assert_eq!(in_.any_value(&mut i), i.lookup("z"));
    let none = req(&mut i, "cpu", "Lt", &["0"]);
    assert_eq!(
        none.any_value(&mut i),
        None,
        "negative integers are not values a node label can hold here"
    );
}

#[test]
fn len_and_operator_describe_the_set() {
    let mut i = LabelInterner::new();
    assert_eq!(req(&mut i, ZONE, "In", &["a", "b"]).len(), Some(2));
    assert_eq!(req(&mut i, ZONE, "NotIn", &["a"]).len(), None);
    assert_eq!(req(&mut i, ZONE, "NotIn", &["a"]).operator(), Operator::NotIn);
    assert_eq!(req(&mut i, "cpu", "Gt", &["1"]).operator(), Operator::Exists);
    assert_eq!(
        req(&mut i, ZONE, "DoesNotExist", &[]).operator(),
        Operator::DoesNotExist
    );
}

// ---- properties ------------------------------------------------------------------------------------------

/// Values the generated requirements draw from and are checked against: strings, integers inside and around
/// the generated bounds, and a non-canonical integer spelling.
const UNIVERSE: &[&str] = &[
    "a", "b", "c", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "007",
];
const KEYS: &[&str] = &["k0", "k1", "k2"];

#[derive(Clone, Debug)]
enum Desc {
    In(Vec<usize>),
    NotIn(Vec<usize>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
    Gte(i64),
    Lte(i64),
}

fn arb_desc() -> impl Strategy<Value = (Desc, Option<u32>)> {
    let values = prop::collection::vec(0..UNIVERSE.len(), 1..5);
    let desc = prop_oneof![
        values.clone().prop_map(Desc::In),
        values.prop_map(Desc::NotIn),
        Just(Desc::Exists),
        Just(Desc::DoesNotExist),
        (-1i64..13).prop_map(Desc::Gt),
        (-1i64..13).prop_map(Desc::Lt),
        (-1i64..13).prop_map(Desc::Gte),
        (-1i64..13).prop_map(Desc::Lte),
    ];
    (desc, prop::option::of(1u32..4))
}

fn build(i: &mut LabelInterner, key: &str, (desc, min_values): &(Desc, Option<u32>)) -> Requirement {
    let k = i.intern_key(key);
    let syms =
        |i: &mut LabelInterner, v: &[usize]| v.iter().map(|&n| i.intern(UNIVERSE[n])).collect::<Vec<_>>();
    let r = match desc {
        Desc::In(v) => Requirement::in_values(k, syms(i, v)),
        Desc::NotIn(v) => Requirement::not_in(k, syms(i, v)),
        Desc::Exists => Requirement::exists(k),
        Desc::DoesNotExist => Requirement::does_not_exist(k),
        Desc::Gt(n) => Requirement::gt(k, *n),
        Desc::Lt(n) => Requirement::lt(k, *n),
        Desc::Gte(n) => Requirement::gte(k, *n),
        Desc::Lte(n) => Requirement::lte(k, *n),
    };
    r.with_min_values(*min_values)
}

fn arb_reqs() -> impl Strategy<Value = Vec<(usize, (Desc, Option<u32>))>> {
    prop::collection::vec((0..KEYS.len(), arb_desc()), 0..5)
}

fn build_all(i: &mut LabelInterner, descs: &[(usize, (Desc, Option<u32>))]) -> Requirements {
    descs.iter().map(|(k, d)| build(i, KEYS[*k], d)).collect()
}

proptest! {
    #[test]
    fn requirement_intersection_is_commutative(a in arb_desc(), b in arb_desc()) {
        let mut i = LabelInterner::new();
        let (a, b) = (build(&mut i, "k", &a), build(&mut i, "k", &b));
        prop_assert_eq!(a.intersection(&b), b.intersection(&a));
    }

    #[test]
    fn requirement_intersection_is_associative(a in arb_desc(), b in arb_desc(), c in arb_desc()) {
        let mut i = LabelInterner::new();
        let (a, b, c) = (build(&mut i, "k", &a), build(&mut i, "k", &b), build(&mut i, "k", &c));
        prop_assert_eq!(a.intersection(&b).intersection(&c), a.intersection(&b.intersection(&c)));
    }

    #[test]
    fn intersection_allows_exactly_what_both_allow(a in arb_desc(), b in arb_desc()) {
        let mut i = LabelInterner::new();
        let (a, b) = (build(&mut i, "k", &a), build(&mut i, "k", &b));
        let both = a.intersection(&b);
        for v in UNIVERSE {
            let v = i.intern(v);
            prop_assert_eq!(both.has(v), a.has(v) && b.has(v), "value {:?}", i.resolve(v));
        }
    }

    #[test]
    fn has_intersection_agrees_with_intersection(a in arb_desc(), b in arb_desc()) {
        let mut i = LabelInterner::new();
        let (a, b) = (build(&mut i, "k", &a), build(&mut i, "k", &b));
        prop_assert_eq!(a.has_intersection(&b), !a.intersection(&b).is_empty());
        prop_assert_eq!(a.has_intersection(&b), b.has_intersection(&a));
    }

    #[test]
    fn requirements_intersection_is_commutative(a in arb_reqs(), b in arb_reqs()) {
        let mut i = LabelInterner::new();
        let (a, b) = (build_all(&mut i, &a), build_all(&mut i, &b));
        prop_assert_eq!(a.intersect(&b), b.intersect(&a));
    }

    #[test]
    fn nonempty_intersection_is_compatible_with_both_sides(a in arb_reqs(), b in arb_reqs()) {
        let mut i = LabelInterner::new();
        let (a, b) = (build_all(&mut i, &a), build_all(&mut i, &b));
        let both = a.intersect(&b);
        prop_assume!(both.iter().all(|r| !r.is_empty()));
        let every_key = WellKnownKeys::from_names(&mut i, KEYS.iter().copied());
        prop_assert!(a.compatible(&both, &every_key).is_ok());
        prop_assert!(b.compatible(&both, &every_key).is_ok());
        prop_assert!(both.compatible(&a, &every_key).is_ok());
        prop_assert!(both.compatible(&b, &every_key).is_ok());
        // Everything `both` constrains is defined by it, so no allowance is needed the other way round.
        prop_assert!(both.compatible(&both, &WellKnownKeys::none()).is_ok());
    }

    #[test]
    fn is_compatible_agrees_with_compatible(a in arb_reqs(), b in arb_reqs(), allow in any::<bool>()) {
        let mut i = LabelInterner::new();
        let (a, b) = (build_all(&mut i, &a), build_all(&mut i, &b));
        let wk = if allow { WellKnownKeys::from_names(&mut i, ["k1"]) } else { WellKnownKeys::none() };
        prop_assert_eq!(a.is_compatible(&b, &wk), a.compatible(&b, &wk).is_ok());
    }

    #[test]
    fn spec_roundtrip_preserves_requirements(a in arb_reqs()) {
        let mut i = LabelInterner::new();
        let a = build_all(&mut i, &a);
        let specs = a.to_specs(&i);
        prop_assert_eq!(Requirements::from_specs(&specs, &mut i).unwrap(), a);
    }
}

#[test]
fn a_requirement_stays_small() {
    // Every label of every node becomes one: 5,000 nodes of forty labels hold 200,000 of them per snapshot.
    assert!(
        std::mem::size_of::<Requirement>() <= 48,
        "Requirement grew to {} bytes",
        std::mem::size_of::<Requirement>()
    );
}
