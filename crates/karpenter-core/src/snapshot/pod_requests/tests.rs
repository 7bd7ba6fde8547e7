//! What pods request: containers, sidecars, init containers, pod-level resources, overhead.

use k8s_openapi::api::core::v1::ResourceRequirements;

use super::*;
use crate::resources::tests::{list, res};
use crate::snapshot::compact_pod::{CompactContainer as Container, CompactPodTemplate as PodSpec};

fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
    Container {
        name: name.to_string(),
        resources: Some(ResourceRequirements {
            requests: (!requests.is_empty()).then(|| list(requests)),
            limits: (!limits.is_empty()).then(|| list(limits)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn sidecar(name: &str, requests: &[(&str, &str)]) -> Container {
    Container {
        restart_policy: Some("Always".to_string()),
        ..container(name, requests, &[])
    }
}

fn pod(containers: Vec<Container>, init: Vec<Container>) -> PodSpec {
    PodSpec {
        containers,
        init_containers: (!init.is_empty()).then_some(init),
        ..Default::default()
    }
}

#[test]
fn bad_quantity_error_names_the_resource_and_container() {
    let mut t = ResourceTable::new();
    let spec = pod(vec![container("app", &[("memory", "1Xi")], &[])], vec![]);
    let err = pod_requests(&spec, &mut t).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("container \"app\": resource \"memory\": quantity \"1Xi\""),
        "{err}"
    );
}

#[test]
fn pod_requests_sums_containers_and_counts_one_pod() {
    let mut t = ResourceTable::new();
    let spec = pod(
        vec![
            container("a", &[("cpu", "500m"), ("memory", "1Gi")], &[]),
            container("b", &[("cpu", "1")], &[]),
        ],
        vec![],
    );
    let r = pod_requests(&spec, &mut t).unwrap();
    assert_eq!(
        r,
        res(&mut t, &[("cpu", "1500m"), ("memory", "1Gi"), ("pods", "1")])
    );
}

#[test]
fn pod_requests_use_limits_when_requests_are_missing() {
    let mut t = ResourceTable::new();
    let spec = pod(
        vec![container(
            "a",
            &[("cpu", "100m")],
            &[("cpu", "2"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")],
        )],
        vec![],
    );
    let r = pod_requests(&spec, &mut t).unwrap();
    assert_eq!(r.cpu(), 100, "a request wins over its limit");
    assert_eq!(
        r.memory(),
        (1 << 30) * 1000,
        "a limit without a request becomes the request"
    );
    assert_eq!(r.get(t.get("nvidia.com/gpu").unwrap()), 1000);
}

#[test]
fn pod_requests_take_the_larger_of_containers_and_an_init_container() {
    let mut t = ResourceTable::new();
    let spec = pod(
        vec![container("app", &[("cpu", "1"), ("memory", "1Gi")], &[])],
        vec![container("migrate", &[("cpu", "3"), ("memory", "512Mi")], &[])],
    );
    let r = pod_requests(&spec, &mut t).unwrap();
    assert_eq!(r.cpu(), 3000);
    assert_eq!(r.memory(), (1 << 30) * 1000);
}

#[test]
fn pod_requests_counts_sidecars_alongside_containers() {
    let mut t = ResourceTable::new();
    let spec = pod(
        vec![container("app", &[("cpu", "1")], &[])],
        vec![sidecar("proxy", &[("cpu", "500m")])],
    );
    assert_eq!(pod_requests(&spec, &mut t).unwrap().cpu(), 1500);
}

#[test]
fn pod_requests_counts_sidecars_started_before_an_init_container() {
    let mut t = ResourceTable::new();
    // proxy (1) starts, then setup (2) runs beside it: 3; then logs (1) starts; the app (500m) runs with both
    // sidecars: 2.5. The peak is while setup runs, and logs started after it does not count there.
    let spec = pod(
        vec![container("app", &[("cpu", "500m")], &[])],
        vec![
            sidecar("proxy", &[("cpu", "1")]),
            container("setup", &[("cpu", "2")], &[]),
            sidecar("logs", &[("cpu", "1")]),
        ],
    );
    assert_eq!(pod_requests(&spec, &mut t).unwrap().cpu(), 3000);
}

#[test]
fn pod_requests_add_overhead() {
    let mut t = ResourceTable::new();
    let spec = PodSpec {
        overhead: Some(list(&[("cpu", "250m"), ("memory", "120Mi")])),
        ..pod(vec![container("app", &[("cpu", "1")], &[])], vec![])
    };
    let r = pod_requests(&spec, &mut t).unwrap();
    assert_eq!(r.cpu(), 1250);
    assert_eq!(r.memory(), 120 * (1 << 20) * 1000);
}

#[test]
fn pod_level_requests_override_the_container_sum() {
    let mut t = ResourceTable::new();
    let spec = PodSpec {
        resources: Some(ResourceRequirements {
            requests: Some(list(&[("cpu", "4"), ("nvidia.com/gpu", "8")])),
            ..Default::default()
        }),
        overhead: Some(list(&[("cpu", "100m")])),
        ..pod(
            vec![container("app", &[("cpu", "1"), ("memory", "1Gi")], &[])],
            vec![],
        )
    };
    let r = pod_requests(&spec, &mut t).unwrap();
    assert_eq!(
        r.cpu(),
        4100,
        "pod-level cpu replaces the containers' and overhead still adds"
    );
    assert_eq!(r.memory(), (1 << 30) * 1000, "memory is not named at pod level");
    assert_eq!(
        t.get("nvidia.com/gpu").map(|g| r.get(g)).unwrap_or(0),
        0,
        "only cpu, memory, hugepages"
    );
}

#[test]
fn pod_level_limits_default_the_requests_kubernetes_would() {
    let mut t = ResourceTable::new();
    let spec = PodSpec {
        resources: Some(ResourceRequirements {
            limits: Some(list(&[("cpu", "4"), ("memory", "8Gi"), ("hugepages-2Mi", "1Gi")])),
            ..Default::default()
        }),
        ..pod(vec![container("app", &[("cpu", "1")], &[])], vec![])
    };
    let r = pod_requests(&spec, &mut t).unwrap();
    assert_eq!(
        r.cpu(),
        1000,
        "containers request cpu, so the pod-level request is their total"
    );
    assert_eq!(
        r.memory(),
        8 * (1 << 30) * 1000,
        "no container requests memory, so the limit is the request"
    );
    assert_eq!(r.get(t.get("hugepages-2Mi").unwrap()), (1 << 30) * 1000);
}

#[test]
fn every_pod_counts_one_pod() {
    let mut t = ResourceTable::new();
    let r = pod_requests(&pod(vec![container("a", &[("pods", "5")], &[])], vec![]), &mut t).unwrap();
    assert_eq!(r.pods(), 1000);
    assert_eq!(r.to_resource_list(&t), list(&[("pods", "1")]));
}
