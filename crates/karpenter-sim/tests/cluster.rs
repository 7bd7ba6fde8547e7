//! The simulated cluster end to end: cloud, kubelets, kube-scheduler and workload controllers on virtual time.

mod support;

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_core::{catalog::CatalogFile, cloudprovider::CloudProvider};
use karpenter_sim::{
    ApiServer, KubeletOptions, SimCluster, SimOptions, VirtualClock, apiserver::ResourceId,
    cloud::SimCloudProvider,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{TestResult, eventually, start};

const CATALOG: &str = include_str!("fixtures/catalog.json");

fn options() -> Result<SimOptions, Box<dyn std::error::Error + Send + Sync>> {
    let catalog = CatalogFile::from_json_str(CATALOG)?;
    Ok(SimOptions::new(
        catalog,
        Arc::new(VirtualClock::starting_at(start())),
    ))
}

fn cluster() -> Result<SimCluster, Box<dyn std::error::Error + Send + Sync>> {
    Ok(SimCluster::start(options()?))
}

fn claim(name: &str, extra_spec: Value) -> Result<NodeClaim, serde_json::Error> {
    let mut spec = json!({
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": spec
    }))
}

fn nodes() -> ResourceId {
    ResourceId::core("nodes")
}

fn pods() -> ResourceId {
    ResourceId::core("pods")
}

/// A Ready node made by hand (no instance behind it).
fn ready_node(api: &ApiServer, name: &str, labels: Value, taints: Value, cpu: &str) -> TestResult {
    let mut all_labels = json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"});
    if let (Some(l), Some(extra)) = (all_labels.as_object_mut(), labels.as_object()) {
        l.extend(extra.clone());
    }
    api.create_internal(
        &nodes(),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": all_labels},
               "spec": {"taints": taints},
               "status": {"capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                          "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    )?;
    Ok(())
}

fn pod(name: &str, cpu: &str, extra_spec: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "sim",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(e.clone());
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn get(api: &ApiServer, id: &ResourceId, ns: &str, name: &str) -> Option<Value> {
    api.get_internal(id, ns, name).map(|v| (*v).clone())
}

fn node_of(api: &ApiServer, pod: &str) -> Option<String> {
    get(api, &pods(), "default", pod)?["spec"]["nodeName"]
        .as_str()
        .map(str::to_string)
}

fn condition(obj: &Value, kind: &str) -> Option<Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

fn taint_keys(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["key"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

async fn sleep(secs: u64) {
    tokio::time::sleep(Duration::from_secs(secs)).await;
}

// ---- kubelet ----

#[tokio::test(start_paused = true)]
async fn a_launched_claim_registers_as_a_tainted_node_with_catalog_capacity_and_turns_ready() -> TestResult {
    let sim = cluster()?;
    let c = claim(
        "nc-1",
        json!({"taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}],
               "startupTaints": [{"key": "agent-not-ready", "effect": "NoSchedule"}]}),
    )?;
    let launched = sim.cloud().create(&c).await?;
    let provider_id = launched
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .ok_or("no provider id")?;
    let instance = sim.cloud().instance(&provider_id).ok_or("no instance")?;
    let name = karpenter_sim::kubelet::node_name_of(&instance);
    assert!(name.starts_with("ip-10-0-0-1"), "{name}");

    sleep(20).await;
    assert!(
        get(sim.api(), &nodes(), "", &name).is_none(),
        "not registered before the delay"
    );
    sleep(11).await;
    let node = get(sim.api(), &nodes(), "", &name).ok_or("node registered")?;
    assert_eq!(node["spec"]["providerID"], provider_id.as_str());
    assert_eq!(
        taint_keys(&node),
        ["karpenter.sh/unregistered", "team", "agent-not-ready"]
    );
    assert_eq!(node["spec"]["taints"][0]["effect"], "NoExecute");
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"],
        name.as_str()
    );
    assert_eq!(
        node["metadata"]["labels"]["node.kubernetes.io/instance-type"],
        "small-instance-type"
    );
    assert_eq!(node["metadata"]["labels"]["karpenter.sh/nodepool"], "default");
    assert_eq!(node["status"]["capacity"]["cpu"], "2");
    assert_eq!(node["status"]["allocatable"]["cpu"], "1900m");
    assert_eq!(
        condition(&node, "Ready").map(|c| c["status"].clone()),
        Some(json!("False"))
    );

    sleep(10).await;
    let node = get(sim.api(), &nodes(), "", &name).ok_or("node")?;
    assert_eq!(
        condition(&node, "Ready").map(|c| c["status"].clone()),
        Some(json!("True"))
    );
    assert_eq!(
        taint_keys(&node),
        ["karpenter.sh/unregistered", "team"],
        "startup taints removed"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_never_registering_instance_never_produces_a_node() -> TestResult {
    let sim = cluster()?;
    sim.cloud().set_never_register(true);
    sim.cloud().create(&claim("nc-1", json!({}))?).await?;
    sleep(3600).await;
    assert!(sim.api().list_internal(&nodes(), None).is_empty());
    assert_eq!(sim.cloud().running_instances().len(), 1);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn graceful_pod_deletion_takes_the_shorter_of_grace_and_container_stop_time() -> TestResult {
    let mut options = options()?;
    options.kubelet = KubeletOptions {
        container_stop_time: Duration::from_secs(5),
        ..KubeletOptions::default()
    };
    let sim = SimCluster::start(options);
    ready_node(sim.api(), "n1", json!({}), json!([]), "4")?;
    let pods_api: Api<Pod> = Api::namespaced(sim.client(), "default");
    for (name, grace) in [("slow", 30), ("quick", 2)] {
        let mut p = pod(name, "100m", json!({"terminationGracePeriodSeconds": grace}));
        p["spec"]["nodeName"] = json!("n1");
        sim.api().create_internal(&pods(), p)?;
    }
    sleep(5).await;
    let running = get(sim.api(), &pods(), "default", "slow").ok_or("slow pod")?;
    assert_eq!(running["status"]["phase"], "Running");
    assert_eq!(
        condition(&running, "Ready").map(|c| c["status"].clone()),
        Some(json!("True"))
    );
    assert!(running["status"]["startTime"].is_string());

    pods_api.delete("slow", &DeleteParams::default()).await?;
    pods_api.delete("quick", &DeleteParams::default()).await?;
    sleep(3).await;
    assert!(
        get(sim.api(), &pods(), "default", "quick").is_none(),
        "grace 2 < stop time"
    );
    let slow = get(sim.api(), &pods(), "default", "slow").ok_or("still terminating")?;
    assert!(slow["metadata"]["deletionTimestamp"].is_string());
    sleep(3).await;
    assert!(
        get(sim.api(), &pods(), "default", "slow").is_none(),
        "containers stopped after 5 s"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_terminated_instance_leaves_its_node_unknown_then_node_lifecycle_deletes_it() -> TestResult {
    let sim = cluster()?;
    let launched = sim.cloud().create(&claim("nc-1", json!({}))?).await?;
    sleep(60).await;
    let node = sim
        .api()
        .list_internal(&nodes(), None)
        .first()
        .cloned()
        .ok_or("node")?;
    let name = node["metadata"]["name"].as_str().ok_or("name")?.to_string();
    sim.cloud().delete(&launched).await?;
    sleep(2).await;
    let node = get(sim.api(), &nodes(), "", &name).ok_or("node still there")?;
    assert_eq!(
        condition(&node, "Ready").map(|c| c["status"].clone()),
        Some(json!("Unknown"))
    );
    sleep(10).await;
    assert!(get(sim.api(), &nodes(), "", &name).is_none());
    sim.shutdown().await;
    Ok(())
}

// ---- scheduler ----

#[tokio::test(start_paused = true)]
async fn the_scheduler_binds_pods_that_fit_and_marks_the_rest_unschedulable() -> TestResult {
    let sim = cluster()?;
    let api = sim.api();
    ready_node(api, "plain", json!({"disk": "ssd"}), json!([]), "2")?;
    ready_node(
        api,
        "gpu",
        json!({"disk": "hdd"}),
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        "8",
    )?;
    ready_node(
        api,
        "joining",
        json!({"disk": "nvme"}),
        json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]),
        "8",
    )?;
    let toleration =
        json!([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
    for p in [
        pod("fits", "1", json!({})),
        pod("too-big", "16", json!({})),
        pod("ssd", "500m", json!({"nodeSelector": {"disk": "ssd"}})),
        pod("no-such-label", "100m", json!({"nodeSelector": {"disk": "tape"}})),
        pod(
            "hdd-untolerated",
            "100m",
            json!({"nodeSelector": {"disk": "hdd"}}),
        ),
        pod(
            "hdd-tolerated",
            "100m",
            json!({"nodeSelector": {"disk": "hdd"}, "tolerations": toleration}),
        ),
        pod("nvme", "100m", json!({"nodeSelector": {"disk": "nvme"}})),
        pod("other-scheduler", "100m", json!({"schedulerName": "custom"})),
    ] {
        api.create_internal(&pods(), p)?;
    }
    sleep(2).await;
    assert_eq!(node_of(api, "fits").as_deref(), Some("plain"));
    assert_eq!(node_of(api, "ssd").as_deref(), Some("plain"));
    assert_eq!(node_of(api, "hdd-tolerated").as_deref(), Some("gpu"));
    for pending in ["too-big", "no-such-label", "hdd-untolerated", "nvme"] {
        let p = get(api, &pods(), "default", pending).ok_or("pod")?;
        assert!(p["spec"]["nodeName"].is_null(), "{pending} stays pending");
        let c = condition(&p, "PodScheduled").ok_or("PodScheduled condition")?;
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some("Unschedulable")),
            "{pending}"
        );
        assert!(
            c["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("0/3 nodes are available")),
            "{c}"
        );
    }
    let bound = get(api, &pods(), "default", "fits").ok_or("pod")?;
    assert_eq!(
        condition(&bound, "PodScheduled").map(|c| c["status"].clone()),
        Some(json!("True"))
    );
    let other = get(api, &pods(), "default", "other-scheduler").ok_or("pod")?;
    assert!(other["spec"]["nodeName"].is_null() && condition(&other, "PodScheduled").is_none());
    // The bound pods run.
    sleep(3).await;
    assert_eq!(
        get(api, &pods(), "default", "fits").ok_or("pod")?["status"]["phase"],
        "Running"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_scheduler_honours_resources_across_pods_and_topology_spread() -> TestResult {
    let sim = cluster()?;
    let api = sim.api();
    ready_node(
        api,
        "a",
        json!({"topology.kubernetes.io/zone": "z1"}),
        json!([]),
        "2",
    )?;
    ready_node(
        api,
        "b",
        json!({"topology.kubernetes.io/zone": "z2"}),
        json!([]),
        "2",
    )?;
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    for i in 0..4 {
        let mut p = pod(&format!("web-{i}"), "900m", spread.clone());
        p["metadata"]["labels"] = json!({"app": "web"});
        api.create_internal(&pods(), p)?;
    }
    sleep(2).await;
    let on = |node: &str| {
        (0..4)
            .filter(|i| node_of(api, &format!("web-{i}")).as_deref() == Some(node))
            .count()
    };
    assert_eq!((on("a"), on("b")), (2, 2));
    api.create_internal(&pods(), pod("extra", "900m", json!({})))?;
    sleep(2).await;
    assert!(node_of(api, "extra").is_none(), "both nodes are full");
    sim.shutdown().await;
    Ok(())
}

// ---- workloads ----

fn deployment(replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "sim",
                    "resources": {"requests": {"cpu": "100m"}}}]}}}})
}

fn active_pods(api: &ApiServer) -> Vec<Value> {
    api.list_internal(&pods(), Some("default"))
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| (**p).clone())
        .collect()
}

// The disruption controller of kube-controller-manager: a PDB's status follows the pods it selects.
#[tokio::test(start_paused = true)]
async fn pdb_status_counts_healthy_pods_and_allowed_disruptions() -> TestResult {
    let sim = cluster()?;
    let api = sim.api();
    ready_node(api, "n1", json!({}), json!([]), "8")?;
    api.create_internal(&ResourceId::new("apps", "deployments"), deployment(3))?;
    let pdbs = ResourceId::new("policy", "poddisruptionbudgets");
    api.create_internal(
        &pdbs,
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
    )?;
    sleep(60).await;
    let pdb = api.get_internal(&pdbs, "default", "web").ok_or("no pdb")?;
    let status = &pdb["status"];
    assert_eq!(
        (
            status["expectedPods"].as_i64(),
            status["currentHealthy"].as_i64(),
            status["desiredHealthy"].as_i64(),
            status["disruptionsAllowed"].as_i64()
        ),
        (Some(3), Some(3), Some(2), Some(1)),
        "{status}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_deployment_scales_zero_five_two() -> TestResult {
    let sim = cluster()?;
    let api = sim.api();
    ready_node(api, "n1", json!({}), json!([]), "8")?;
    let deployments = ResourceId::new("apps", "deployments");
    api.create_internal(&deployments, deployment(0))?;
    sleep(3).await;
    assert!(active_pods(api).is_empty());
    let replica_sets = api.list_internal(&ResourceId::new("apps", "replicasets"), Some("default"));
    assert_eq!(replica_sets.len(), 1);
    let rs_name = replica_sets[0]["metadata"]["name"]
        .as_str()
        .ok_or("rs name")?
        .to_string();
    assert!(rs_name.starts_with("web-"));

    let deploy_api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(sim.client(), "default");
    deploy_api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await?;
    sleep(10).await;
    let five = active_pods(api);
    assert_eq!(five.len(), 5);
    for p in &five {
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            name.starts_with(&format!("{rs_name}-")) && name.len() == rs_name.len() + 6,
            "{name}"
        );
        let owner = &p["metadata"]["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["controller"].as_bool()),
            (Some("ReplicaSet"), Some(true))
        );
        assert_eq!(p["status"]["phase"], "Running");
    }
    let deploy = get(api, &deployments, "default", "web").ok_or("deployment")?;
    assert_eq!(deploy["status"]["readyReplicas"], 5);

    deploy_api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await?;
    sleep(40).await;
    let two = active_pods(api);
    assert_eq!(two.len(), 2);
    assert_eq!(
        api.list_internal(&pods(), Some("default")).len(),
        2,
        "terminated pods are gone"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_daemonset_runs_one_pod_per_matching_node() -> TestResult {
    let sim = cluster()?;
    let api = sim.api();
    ready_node(api, "n1", json!({}), json!([]), "4")?;
    ready_node(
        api,
        "n2",
        json!({}),
        json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        "4",
    )?;
    ready_node(
        api,
        "n3",
        json!({}),
        json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
        "4",
    )?;
    ready_node(
        api,
        "windows",
        json!({"kubernetes.io/os": "windows"}),
        json!([]),
        "4",
    )?;
    api.create_internal(
        &ResourceId::new("apps", "daemonsets"),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}},
                    "spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                        "containers": [{"name": "c", "image": "sim"}]}}}}),
    )?;
    sleep(5).await;
    let mut on: Vec<String> = api
        .list_internal(&pods(), Some("kube-system"))
        .iter()
        .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
        .collect();
    on.sort();
    assert_eq!(
        on,
        ["n1", "n3"],
        "not the tainted node, not the windows node; not-ready is tolerated"
    );
    ready_node(api, "n4", json!({}), json!([]), "4")?;
    sleep(5).await;
    assert_eq!(api.list_internal(&pods(), Some("kube-system")).len(), 3);

    // A NoSchedule taint added later (Karpenter's disrupted taint) leaves the running pod to the drain; an
    // untolerated NoExecute taint removes it.
    let on_node = |node: &str| {
        api.list_internal(&pods(), Some("kube-system"))
            .iter()
            .filter(|p| p["spec"]["nodeName"] == node && p["metadata"]["deletionTimestamp"].is_null())
            .count()
    };
    for (node, effect) in [("n1", "NoSchedule"), ("n4", "NoExecute")] {
        api.apply_internal(
            &nodes(),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                   "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": effect}]}}),
        )?;
    }
    sleep(5).await;
    assert_eq!(
        on_node("n1"),
        1,
        "a NoSchedule taint does not remove a running daemon pod"
    );
    assert_eq!(on_node("n4"), 0, "an untolerated NoExecute taint does");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_job_runs_to_completion_after_its_duration() -> TestResult {
    let sim = cluster()?;
    let api = sim.api();
    ready_node(api, "n1", json!({}), json!([]), "4")?;
    let jobs = ResourceId::new("batch", "jobs");
    api.create_internal(
        &jobs,
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "batch", "namespace": "default", "annotations": {"sim.karpenter.sh/duration": "2m"}},
            "spec": {"completions": 3, "parallelism": 2,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "sim"}]}}}}),
    )?;
    sleep(60).await;
    let job = get(api, &jobs, "default", "batch").ok_or("job")?;
    assert_eq!(job["status"]["active"], 2);
    assert!(condition(&job, "Complete").is_none());
    sleep(300).await;
    let job = get(api, &jobs, "default", "batch").ok_or("job")?;
    assert_eq!(
        condition(&job, "Complete").map(|c| c["status"].clone()),
        Some(json!("True"))
    );
    assert_eq!(job["status"]["succeeded"], 3);
    let pods = api.list_internal(&pods(), Some("default"));
    assert_eq!(pods.len(), 3);
    assert!(pods.iter().all(|p| p["status"]["phase"] == "Succeeded"));
    sim.shutdown().await;
    Ok(())
}

// ---- end to end ----

#[tokio::test(start_paused = true)]
// How fast a simulated hour runs is a benchmark's question, not a test's: this checks what happens in it.
async fn a_nodeclaim_launches_registers_and_runs_a_pending_pod_and_an_hour_passes() -> TestResult {
    let sim = cluster()?;
    let client = sim.client();
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let node_api: Api<Node> = Api::all(client.clone());
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");

    // A pending pod nothing can run yet: the scheduler says so, which is what Karpenter reacts to.
    pod_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod("app", "1", json!({})))?,
        )
        .await?;
    sleep(2).await;
    let pending = pod_api.get("app").await?;
    let scheduled = pending.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        scheduled
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
    );

    // As the provisioner would: create the NodeClaim, launch it, record the launch in its status.
    let created = claims
        .create(&PostParams::default(), &claim("default-abc12", json!({}))?)
        .await?;
    let cloud: Arc<dyn CloudProvider> = sim.cloud_provider();
    let launched = cloud.create(&created).await?;
    let provider_id = launched
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .ok_or("provider id")?;
    claims
        .patch_status(
            "default-abc12",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"providerID": provider_id, "imageID": "sim-image"}})),
        )
        .await?;

    // The kubelet registers the Node; as Karpenter's registration would, drop the unregistered taint.
    let mut registered = None;
    eventually(Duration::from_secs(120), || {
        let found = sim
            .api()
            .list_internal(&nodes(), None)
            .iter()
            .find(|n| n["spec"]["providerID"] == provider_id.as_str())
            .map(|n| n["metadata"]["name"].as_str().unwrap_or_default().to_string());
        registered = found.clone();
        async move { found.is_some() }
    })
    .await?;
    let node_name = registered.ok_or("registered node")?;
    node_api
        .patch(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await?;

    // Ready, untainted: the scheduler binds the pod and the kubelet runs it.
    eventually(Duration::from_secs(60), || {
        let api = pod_api.clone();
        async move {
            api.get("app")
                .await
                .ok()
                .and_then(|p| p.status?.phase)
                .is_some_and(|phase| phase == "Running")
        }
    })
    .await?;
    assert_eq!(node_of(sim.api(), "app").as_deref(), Some(node_name.as_str()));

    // An hour of virtual time.
    let before = sim.clock().now();
    sleep(3600).await;
    assert_eq!(sim.clock().now().duration_since(before).as_secs(), 3600);
    let cost = sim.cloud().cost_so_far();
    assert!((0.04..0.042).contains(&cost), "{cost}");
    assert!(sim.cloud().launch_log().len() == 1);
    sim.shutdown().await;
    Ok(())
}

/// Runs a small scenario and returns every pod with its node.
async fn scenario() -> Result<Vec<(String, String)>, Box<dyn std::error::Error + Send + Sync>> {
    let sim = cluster()?;
    for i in 0..2 {
        let c = claim(&format!("nc-{i}"), json!({}))?;
        sim.cloud().create(&c).await?;
    }
    sleep(45).await;
    let names: Vec<String> = sim
        .api()
        .list_internal(&nodes(), None)
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    for name in &names {
        sim.api().apply_internal(
            &nodes(),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"taints": []}}),
        )?;
    }
    sim.api()
        .create_internal(&ResourceId::new("apps", "deployments"), deployment(6))?;
    sleep(30).await;
    let mut placed: Vec<(String, String)> = sim
        .api()
        .list_internal(&pods(), None)
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                p["spec"]["nodeName"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    placed.sort();
    sim.shutdown().await;
    Ok(placed)
}

#[tokio::test(start_paused = true)]
async fn the_same_scenario_gives_the_same_cluster_every_run() -> TestResult {
    let first = scenario().await?;
    let second = scenario().await?;
    assert_eq!(first.len(), 6);
    assert!(first.iter().all(|(_, node)| !node.is_empty()), "{first:?}");
    assert_eq!(first, second);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_cloud_is_usable_on_its_own_as_a_trait_object() -> TestResult {
    let catalog = CatalogFile::from_json_str(CATALOG)?;
    let cloud: Arc<dyn CloudProvider> = SimCloudProvider::new(
        catalog,
        Arc::new(VirtualClock::starting_at(start())),
        Default::default(),
    )
    .as_dyn();
    let launched = cloud.create(&claim("nc", json!({}))?).await?;
    assert_eq!(cloud.list().await?.len(), 1);
    cloud.delete(&launched).await?;
    assert!(cloud.list().await?.is_empty());
    Ok(())
}
