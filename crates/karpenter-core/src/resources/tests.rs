//! Behaviour of resource vectors, plus property tests of the vector arithmetic.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;

use super::*;

/// A resource list of `(name, quantity)` pairs.
pub(crate) fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

/// A resource vector of `(name, quantity)` pairs.
pub(crate) fn res(table: &mut ResourceTable, pairs: &[(&str, &str)]) -> Resources {
    Resources::from_resource_list(&list(pairs), table).unwrap()
}

#[test]
fn fixed_resources_have_fixed_slots() {
    let mut t = ResourceTable::new();
    assert_eq!(t.intern("cpu"), ResourceId::CPU);
    assert_eq!(t.intern("memory"), ResourceId::MEMORY);
    assert_eq!(t.intern("ephemeral-storage"), ResourceId::EPHEMERAL_STORAGE);
    assert_eq!(t.intern("pods"), ResourceId::PODS);
    let gpu = t.intern("nvidia.com/gpu");
    assert_eq!(gpu.index(), 4);
    assert_eq!(t.intern("nvidia.com/gpu"), gpu);
    assert_eq!(t.name(gpu), "nvidia.com/gpu");
    assert_eq!(t.get("hugepages-2Mi"), None);
}

#[test]
fn resource_list_roundtrips_in_milli_units() {
    let mut t = ResourceTable::new();
    let r = res(
        &mut t,
        &[
            ("cpu", "1500m"),
            ("memory", "1Gi"),
            ("nvidia.com/gpu", "2"),
            ("hugepages-2Mi", "0"),
        ],
    );
    assert_eq!(r.cpu(), 1500);
    assert_eq!(r.memory(), (1 << 30) * 1000);
    assert_eq!(r.get(t.get("nvidia.com/gpu").unwrap()), 2000);
    let back = r.to_resource_list(&t);
    assert_eq!(
        back,
        list(&[("cpu", "1500m"), ("memory", "1Gi"), ("nvidia.com/gpu", "2")]),
        "zeros are dropped"
    );
    assert_eq!(
        r.display(&t).to_string(),
        "{cpu: 1500m, memory: 1Gi, nvidia.com/gpu: 2}"
    );
}

#[test]
fn bad_quantity_error_names_the_resource() {
    let mut t = ResourceTable::new();
    let err = Resources::from_resource_list(&list(&[("cpu", "lots")]), &mut t).unwrap_err();
    assert!(
        err.to_string().starts_with("resource \"cpu\": quantity \"lots\""),
        "{err}"
    );
}

#[test]
fn missing_and_zero_are_the_same() {
    let mut t = ResourceTable::new();
    let gpu = t.intern("nvidia.com/gpu");
    let a = Resources::zero().with(gpu, 1000);
    let b = a.saturating_sub(&Resources::zero().with(gpu, 1000));
    assert!(b.is_zero());
    assert_eq!(b, Resources::zero());
}

#[test]
fn fits_requires_every_requested_resource() {
    let mut t = ResourceTable::new();
    let available = res(&mut t, &[("cpu", "2"), ("memory", "4Gi"), ("pods", "10")]);
    assert!(fits(&res(&mut t, &[("cpu", "2"), ("memory", "1Gi")]), &available));
    assert!(!fits(&res(&mut t, &[("cpu", "2001m")]), &available));
    let gpu_pod = res(&mut t, &[("cpu", "1"), ("nvidia.com/gpu", "1")]);
    assert!(!fits(&gpu_pod, &available), "a resource the node lacks is zero");
    let exceeded = first_exceeding(&gpu_pod, &available).unwrap();
    assert_eq!(exceeded.explain(&t), "nvidia.com/gpu: requested 1, available 0");
}

#[test]
fn fits_rejects_an_overcommitted_node() {
    let mut t = ResourceTable::new();
    let available = res(&mut t, &[("cpu", "2"), ("memory", "-1")]);
    let cpu_only = res(&mut t, &[("cpu", "100m")]);
    assert!(
        !fits(&cpu_only, &available),
        "upstream refuses any node with a negative amount left"
    );
    assert_eq!(
        first_exceeding(&cpu_only, &available).map(|e| e.resource),
        Some(ResourceId::MEMORY)
    );
}

#[test]
fn first_exceeding_reports_amounts_for_explanations() {
    let mut t = ResourceTable::new();
    let e = first_exceeding(&res(&mut t, &[("cpu", "2")]), &res(&mut t, &[("cpu", "1500m")])).unwrap();
    assert_eq!(e.explain(&t), "cpu: requested 2, available 1500m");
}

#[test]
fn max_takes_the_larger_per_slot() {
    let mut t = ResourceTable::new();
    let a = res(&mut t, &[("cpu", "1"), ("memory", "2Gi")]);
    let b = res(
        &mut t,
        &[("cpu", "2"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")],
    );
    assert_eq!(
        a.max(&b),
        res(
            &mut t,
            &[("cpu", "2"), ("memory", "2Gi"), ("nvidia.com/gpu", "1")]
        )
    );
}

#[test]
fn sub_floor_zero_never_goes_negative() {
    let mut t = ResourceTable::new();
    let a = res(&mut t, &[("cpu", "1")]);
    let b = res(&mut t, &[("cpu", "2"), ("memory", "1Gi")]);
    assert!(a.sub_floor_zero(&b).is_zero());
    assert!(a.saturating_sub(&b).any_negative());
}

#[test]
fn arithmetic_saturates_instead_of_overflowing() {
    let big = Resources::zero().with(ResourceId::CPU, i64::MAX);
    assert_eq!(big.saturating_add(&big).cpu(), i64::MAX);
    assert_eq!(big.checked_add(&big), None);
    assert_eq!(big.scaled(2).cpu(), i64::MAX);
    let one = Resources::zero().with(ResourceId::CPU, 1);
    assert_eq!(one.checked_add(&one).map(|r| r.cpu()), Some(2));
    assert_eq!([one.clone(), one.clone(), one].iter().sum::<Resources>().cpu(), 3);
}

// ---- properties ------------------------------------------------------------------------------------------

/// Vectors over the fixed slots and up to three extended ones, in a range where sums cannot saturate.
fn arb_resources() -> impl Strategy<Value = Resources> {
    (
        prop::array::uniform4(-1_000_000i64..1_000_000),
        prop::collection::vec(-1_000_000i64..1_000_000, 0..3),
    )
        .prop_map(|(fixed, ext)| {
            let mut r = Resources::zero();
            for (i, v) in fixed.into_iter().chain(ext).enumerate() {
                r.set(ResourceId(i as u32), v);
            }
            r
        })
}

fn arb_nonneg() -> impl Strategy<Value = Resources> {
    arb_resources().prop_map(|r| {
        let mut out = Resources::zero();
        for (id, v) in r.iter() {
            out.set(id, v.abs());
        }
        out
    })
}

proptest! {
    #[test]
    fn add_then_sub_is_identity(a in arb_resources(), b in arb_resources()) {
        prop_assert_eq!(&(&a + &b) - &b, a);
    }

    #[test]
    fn addition_is_commutative(a in arb_resources(), b in arb_resources()) {
        prop_assert_eq!(&a + &b, &b + &a);
    }

    #[test]
    fn fits_is_monotone(r in arb_nonneg(), a in arb_resources(), less in arb_nonneg(), more in arb_nonneg()) {
        if fits(&r, &a) {
            prop_assert!(fits(&r.sub_floor_zero(&less), &a), "asking for less still fits");
            prop_assert!(fits(&r, &(&a + &more)), "more room still fits");
        }
    }

    #[test]
    fn fits_agrees_with_first_exceeding(r in arb_resources(), a in arb_resources()) {
        prop_assert_eq!(fits(&r, &a), first_exceeding(&r, &a).is_none());
    }

    #[test]
    fn requests_fit_in_their_own_sum(a in arb_nonneg(), b in arb_nonneg()) {
        prop_assert!(fits(&a, &(&a + &b)));
    }

    #[test]
    fn max_is_an_upper_bound(a in arb_resources(), b in arb_resources()) {
        let m = a.max(&b);
        prop_assert!(!(m.saturating_sub(&a)).any_negative());
        prop_assert!(!(m.saturating_sub(&b)).any_negative());
    }

    #[test]
    fn resource_list_roundtrip(a in arb_resources()) {
        let mut t = ResourceTable::new();
        for i in 0..3 {
            t.intern(&format!("example.com/r{i}"));
        }
        let back = Resources::from_resource_list(&a.to_resource_list(&t), &mut t).unwrap();
        prop_assert_eq!(back, a);
    }
}
