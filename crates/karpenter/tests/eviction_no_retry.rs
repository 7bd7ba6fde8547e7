//! A pod a PodDisruptionBudget protects is evicted through the controllers' client exactly as `karpenter controller`
//! builds it (`karpenter_operator::kube_client::controllers_client`, from the admin kubeconfig as the binary reads
//! one), against a real kube-apiserver whose disruption controller (kube-controller-manager) has computed the PDB
//! and whose Eviction API refuses the eviction with 429: the client hands that 429 back after one request (counted
//! by the API server itself, `apiserver_request_total`), not after kube's default 15 retries over minutes, which
//! would hold every node's termination pass behind one blocked pod. A pod no PDB covers is evicted.
//!
//! The pods run on a kwok Node (the real control plane of `karpenter_e2e::control_plane::shared`; no kubelet):
//! the Eviction API ignores PDBs for a Pending pod, so they must be Running. Needs Go (the control plane is built
//! once), openssl and kubectl; fails, never skips, when one is missing.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // test helpers outside #[test] fns

use std::time::{Duration, Instant};

use k8s_openapi::api::{
    core::v1::{Namespace, Node, Pod},
    policy::v1::PodDisruptionBudget,
};
use karpenter_e2e::control_plane::{self, ControlPlane};
use karpenter_operator::{Settings, kube_client};
use kube::{
    Api,
    api::{EvictParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::json;

const NAMESPACE: &str = "eviction-no-retry";
const NODE: &str = "eviction-no-retry-node";
/// The pod the PDB protects, and the one no PDB covers.
const GUARDED: &str = "guarded";
const FREE: &str = "free";
/// Far below the minutes kube's default retries of a 429 take (15, from 5ms doubling), far above one request.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

fn control_plane() -> &'static ControlPlane {
    match control_plane::shared() {
        Ok(cp) => cp,
        Err(e) => panic!("cannot start the test control plane: {e}"),
    }
}

/// The binary's kube::Config: the kubeconfig read as `karpenter controller --kubeconfig` reads it.
async fn config(cp: &ControlPlane) -> kube::Config {
    let file = Kubeconfig::read_from(&cp.kubeconfig).unwrap();
    kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .unwrap()
}

/// The API server's count of eviction requests it answered 429 (any verb, any pod), from its /metrics.
fn evictions_refused(cp: &ControlPlane) -> u64 {
    let out = cp.kubectl().args(["get", "--raw", "/metrics"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains(r#"resource="pods""#)
                && l.contains(r#"subresource="eviction""#)
                && l.contains(r#"code="429""#)
        })
        .map(|l| {
            let value = l.rsplit(' ').next().unwrap_or_default();
            value.parse::<f64>().unwrap_or_else(|e| panic!("{l}: {e}")) as u64
        })
        .sum()
}

fn pod(name: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": app}},
        "spec": {
            // Bound directly: no scheduling, kwok runs it.
            "nodeName": NODE,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "app", "image": "example.invalid/app:1"}]
        }
    }))
    .unwrap()
}

async fn wait_for(what: &str, timeout: Duration, mut done: impl AsyncFnMut() -> Result<bool, String>) {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        match done().await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{what} not within {timeout:?} (last: {last})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_a_pdb_blocks_is_answered_429_after_one_request_and_other_evictions_proceed() {
    let cp = tokio::task::spawn_blocking(control_plane).await.unwrap();
    let admin = kube::Client::try_from(config(cp).await).unwrap();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap(),
        )
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(admin.clone());
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": NODE,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux", "type": "kwok"}
        },
        "status": {
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}
        }
    });
    nodes
        .create(&PostParams::default(), &serde_json::from_value(node).unwrap())
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    for p in [pod(GUARDED, "guarded"), pod(FREE, "free")] {
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), NAMESPACE);
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded", "namespace": NAMESPACE},
        // An integer minAvailable needs no controller behind the pod; with the one pod healthy, no disruption
        // is allowed.
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    });
    pdbs.create(&PostParams::default(), &serde_json::from_value(pdb).unwrap())
        .await
        .unwrap();

    wait_for(
        "both pods Running and Ready on the kwok node",
        Duration::from_secs(60),
        async || {
            for name in [GUARDED, FREE] {
                let p = pods.get(name).await.map_err(|e| e.to_string())?;
                let status = p.status.unwrap_or_default();
                let ready = status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if status.phase.as_deref() != Some("Running") || !ready {
                    return Err(format!("{name}: phase {:?}, ready {ready}", status.phase));
                }
            }
            Ok(true)
        },
    )
    .await;
    wait_for(
        "the disruption controller to count the guarded pod healthy and allow no disruption",
        Duration::from_secs(60),
        async || {
            let pdb = pdbs.get("guarded").await.map_err(|e| e.to_string())?;
            let generation = pdb.metadata.generation;
            let status = pdb.status.unwrap_or_default();
            let settled = status.observed_generation == generation
                && status.current_healthy == 1
                && status.desired_healthy == 1
                && status.disruptions_allowed == 0;
            if settled {
                Ok(true)
            } else {
                Err(format!("{status:?}"))
            }
        },
    )
    .await;

    // The client under test, as the binary builds it.
    let client = kube_client::controllers_client(config(cp).await, &Settings::default()).unwrap();
    let evict: Api<Pod> = Api::namespaced(client, NAMESPACE);

    let refused_before = evictions_refused(cp);
    let started = Instant::now();
    let answer = tokio::time::timeout(ANSWER_WITHIN, evict.evict(GUARDED, &EvictParams::default())).await;
    let elapsed = started.elapsed();
    // The API server counts a request once it has answered it; give the counter a moment to catch up.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let requests = evictions_refused(cp) - refused_before;
    match answer {
        Err(_) => panic!(
            "the eviction of the PDB-protected pod has no answer after {ANSWER_WITHIN:?}: the client is still \
             retrying the API server's 429 ({requests} eviction requests refused so far)"
        ),
        Ok(Err(kube::Error::Api(status))) => {
            assert_eq!(
                status.code, 429,
                "the Eviction API refuses the eviction: {status:?}"
            )
        }
        Ok(other) => panic!("the eviction of the PDB-protected pod is refused with 429, got {other:?}"),
    }
    assert_eq!(
        requests, 1,
        "the refused eviction is one request to the API server (answered in {elapsed:?})"
    );

    // Another pod's eviction is not held up: the PDB covers only the guarded pod.
    let free = tokio::time::timeout(ANSWER_WITHIN, evict.evict(FREE, &EvictParams::default()))
        .await
        .expect("the unprotected pod's eviction is answered");
    free.unwrap_or_else(|e| panic!("the pod no PDB covers is evicted: {e}"));
    wait_for(
        "the evicted pod to be deleted",
        Duration::from_secs(60),
        async || match pods.get_opt(FREE).await.map_err(|e| e.to_string())? {
            None => Ok(true),
            Some(p) if p.metadata.deletion_timestamp.is_some() => Ok(true),
            Some(_) => Err(format!("{FREE} has no deletionTimestamp")),
        },
    )
    .await;
    let guarded = pods.get(GUARDED).await.unwrap();
    assert!(
        guarded.metadata.deletion_timestamp.is_none(),
        "the PDB-protected pod is not evicted"
    );
}
