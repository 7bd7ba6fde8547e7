//! Simulated kubelets (and the bits of kube-controller-manager that act on nodes and their pods): what turns a
//! launched instance into a Node and bound pods into running ones.
//!
//! # Public API
//! - [`Kubelets::new`]`(api, cloud, clock, options)` and [`Kubelets::step`], which does whatever is due at the
//!   clock's current time; [`crate::cluster::SimCluster`] calls it on every tick. [`KubeletOptions`] holds the
//!   delays.
//!
//! # Behaviour
//! - Registration: [`KubeletOptions::registration_delay`] after an instance launches (unless it was launched
//!   with the cloud's never-register fault), its kubelet creates the Node: name `ip-10-a-b-c.sim.internal` from
//!   the instance's private IP, `spec.providerID`, the claim's labels plus `kubernetes.io/hostname`, the taint
//!   `karpenter.sh/unregistered:NoExecute` followed by the claim's taints and startup taints, capacity and
//!   allocatable from the catalog, and `Ready=False`. [`KubeletOptions::ready_delay`] later Ready turns True
//!   and, when [`KubeletOptions::remove_startup_taints`] is set, the startup taints are removed (standing in for
//!   the DaemonSet agent that would remove them).
//! - Pods: a pod bound to a Ready node becomes Running and Ready [`KubeletOptions::pod_start_delay`] after the
//!   kubelet first sees it (startTime, conditions Initialized/ContainersReady/Ready, hostIP, podIP). A pod being
//!   deleted with a grace period on a Ready node is removed (`grace 0`) `min(grace, container_stop_time)` after
//!   the delete request, as a kubelet does once its containers stop.
//! - Instance gone (terminated by the cloud or by Karpenter): the Node's Ready turns Unknown ("Kubelet stopped
//!   posting node status") at once, and, as upstream's cloud-node-lifecycle controller does, the Node is deleted
//!   [`KubeletOptions::node_lifecycle_delay`] later (when [`KubeletOptions::delete_nodes_of_terminated_instances`]
//!   is set; a Node with Karpenter's finalizer then waits for Karpenter). Pods bound to a Node that no longer
//!   exists are deleted at once (kube-controller-manager's pod GC).
//!
//! # Simplified
//! - A Node deleted while its instance runs is not registered again (a real kubelet would recreate it).
//! - No node heartbeats, leases, images, volumes or probes; every container starts at once and is always ready.
//! - Times read back from objects have whole-second precision, as the API server stores them.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use jiff::Timestamp;
use karpenter_api::labels;
use serde_json::{Value, json};

use crate::{
    apiserver::ApiServer,
    clock::{Clock, format_time},
    cloud::{Instance, SimCloudProvider},
    objects::{self, after, set_condition},
};

/// Delays of the simulated node and pod lifecycle.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// From instance launch to the Node object's creation.
    pub registration_delay: Duration,
    /// From the Node's creation to Ready=True.
    pub ready_delay: Duration,
    /// Whether startup taints are removed when the node turns Ready.
    pub remove_startup_taints: bool,
    /// From first seeing a pod bound to a Ready node to Running.
    pub pod_start_delay: Duration,
    /// The longest containers take to stop; a graceful delete finishes after `min(grace, this)`.
    pub container_stop_time: Duration,
    /// Whether Nodes of terminated instances are deleted (upstream's cloud-node-lifecycle controller).
    pub delete_nodes_of_terminated_instances: bool,
    /// From the instance's termination to the Node's deletion.
    pub node_lifecycle_delay: Duration,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        Self {
            registration_delay: Duration::from_secs(30),
            ready_delay: Duration::from_secs(10),
            remove_startup_taints: true,
            pod_start_delay: Duration::from_secs(2),
            container_stop_time: Duration::from_secs(5),
            delete_nodes_of_terminated_instances: true,
            node_lifecycle_delay: Duration::from_secs(10),
        }
    }
}

/// What the kubelet of one instance has done.
#[derive(Debug, Clone)]
struct NodeRecord {
    name: String,
    registered_at: Timestamp,
    ready: bool,
    /// When the kubelet noticed its instance was gone.
    lost_at: Option<Timestamp>,
    deleted: bool,
}

/// The kubelets of every simulated instance. See the module documentation.
pub struct Kubelets {
    api: ApiServer,
    cloud: SimCloudProvider,
    clock: Arc<dyn Clock>,
    options: KubeletOptions,
    /// By provider ID.
    nodes: BTreeMap<String, NodeRecord>,
    /// Pods bound to a Ready node and when they start, by (namespace, name, uid).
    starting: BTreeMap<(String, String, String), Timestamp>,
    seen_rv: u64,
    seen_cloud: u64,
    next_due: Option<Timestamp>,
    /// Pod IPs handed out so far.
    pod_ips: u64,
}

impl std::fmt::Debug for Kubelets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelets")
            .field("nodes", &self.nodes.len())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The Node name of an instance: AWS's `ip-a-b-c-d` from the private IP.
pub fn node_name_of(instance: &Instance) -> String {
    format!("ip-{}.sim.internal", instance.private_ip.replace('.', "-"))
}

fn taints_json(taints: &[karpenter_api::common::Taint]) -> Vec<Value> {
    taints
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect()
}

impl Kubelets {
    pub fn new(
        api: ApiServer,
        cloud: SimCloudProvider,
        clock: Arc<dyn Clock>,
        options: KubeletOptions,
    ) -> Self {
        Self {
            api,
            cloud,
            clock,
            options,
            nodes: BTreeMap::new(),
            starting: BTreeMap::new(),
            seen_rv: u64::MAX,
            seen_cloud: u64::MAX,
            next_due: None,
            pod_ips: 0,
        }
    }

    fn due(&mut self, at: Timestamp) {
        self.next_due = Some(self.next_due.map_or(at, |d| d.min(at)));
    }

    /// Does everything due now. Cheap when nothing changed and no timer is due.
    pub fn step(&mut self) {
        let now = self.clock.now();
        let rv = self.api.resource_version();
        let cloud = self.cloud.version();
        if rv == self.seen_rv && cloud == self.seen_cloud && self.next_due.is_none_or(|d| now < d) {
            return;
        }
        // Our own writes below bump the resourceVersion, so the next step looks again once.
        self.seen_rv = rv;
        self.seen_cloud = cloud;
        self.next_due = None;
        self.step_instances(now);
        self.step_pods(now);
    }

    fn step_instances(&mut self, now: Timestamp) {
        for instance in self.cloud.instances() {
            match self.nodes.get(&instance.provider_id).cloned() {
                None => {
                    if !instance.is_running() || !instance.registers {
                        continue;
                    }
                    let at = after(instance.launched_at, self.options.registration_delay);
                    if now < at {
                        self.due(at);
                        continue;
                    }
                    self.register(&instance, now);
                }
                Some(record) if record.deleted => {}
                Some(mut record) => {
                    if !instance.is_running() {
                        let lost_at = match record.lost_at {
                            Some(t) => t,
                            None => {
                                self.set_ready(
                                    &record.name,
                                    "Unknown",
                                    "NodeStatusUnknown",
                                    "Kubelet stopped posting node status.",
                                    now,
                                    &[],
                                );
                                let t = instance.terminated_at.unwrap_or(now);
                                record.lost_at = Some(t);
                                t
                            }
                        };
                        if self.options.delete_nodes_of_terminated_instances {
                            let at = after(lost_at, self.options.node_lifecycle_delay);
                            if now < at {
                                self.due(at);
                            } else {
                                if let Err(e) =
                                    self.api
                                        .delete_internal(&objects::nodes(), "", &record.name, None)
                                {
                                    tracing::debug!("sim node lifecycle: deleting node {}: {e}", record.name);
                                }
                                record.deleted = true;
                            }
                        }
                    } else if !record.ready {
                        let at = after(record.registered_at, self.options.ready_delay);
                        if now < at {
                            self.due(at);
                        } else {
                            let startup: Vec<String> = if self.options.remove_startup_taints {
                                instance
                                    .claim
                                    .spec
                                    .startup_taints
                                    .iter()
                                    .map(|t| t.key.clone())
                                    .collect()
                            } else {
                                Vec::new()
                            };
                            self.set_ready(
                                &record.name,
                                "True",
                                "KubeletReady",
                                "kubelet is posting ready status",
                                now,
                                &startup,
                            );
                            record.ready = true;
                        }
                    }
                    self.nodes.insert(instance.provider_id.clone(), record);
                }
            }
        }
    }

    fn register(&mut self, instance: &Instance, now: Timestamp) {
        let claim = &instance.claim;
        let name = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| node_name_of(instance));
        let mut node_labels = claim.metadata.labels.clone().unwrap_or_default();
        node_labels.insert(labels::HOSTNAME_LABEL.into(), name.clone());
        let mut taints = vec![json!({"key": labels::UNREGISTERED_TAINT_KEY, "effect": "NoExecute"})];
        taints.extend(taints_json(&claim.spec.taints));
        taints.extend(taints_json(&claim.spec.startup_taints));
        let status = claim.status.clone().unwrap_or_default();
        let mut conditions = Value::Null;
        set_condition(
            &mut conditions,
            "Ready",
            "False",
            "KubeletNotReady",
            "container runtime status check may not have completed yet",
            now,
            true,
        );
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": node_labels},
            "spec": {"providerID": instance.provider_id, "taints": taints},
            "status": {
                "capacity": status.capacity.unwrap_or_default(),
                "allocatable": status.allocatable.unwrap_or_default(),
                "conditions": conditions,
                "addresses": [{"type": "InternalIP", "address": instance.private_ip},
                              {"type": "Hostname", "address": name}],
                "nodeInfo": {"kubeletVersion": "v1.33.0-sim", "containerRuntimeVersion": "sim://1",
                             "operatingSystem": node_labels_os(claim), "architecture": node_labels_arch(claim),
                             "machineID": instance.instance_id, "systemUUID": instance.instance_id,
                             "bootID": instance.instance_id, "kernelVersion": "sim", "osImage": "sim",
                             "kubeProxyVersion": ""},
            },
        });
        match self.api.create_internal(&objects::nodes(), node) {
            Ok(_) => {}
            Err(e) => tracing::warn!("sim kubelet: registering node {name}: {e}"),
        }
        self.nodes.insert(
            instance.provider_id.clone(),
            NodeRecord {
                name,
                registered_at: now,
                ready: false,
                lost_at: None,
                deleted: false,
            },
        );
        self.due(after(now, self.options.ready_delay));
    }

    /// Sets the Node's Ready condition, dropping `remove_taints` from its taints.
    fn set_ready(
        &self,
        name: &str,
        status: &str,
        reason: &str,
        message: &str,
        now: Timestamp,
        remove_taints: &[String],
    ) {
        let Some(node) = self.api.get_internal(&objects::nodes(), "", name) else {
            return;
        };
        if !remove_taints.is_empty() {
            let taints: Vec<Value> = node["spec"]["taints"]
                .as_array()
                .map(|t| {
                    t.iter()
                        .filter(|t| !remove_taints.iter().any(|k| t["key"] == k.as_str()))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            let patch = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                               "spec": {"taints": taints}});
            if let Err(e) = self.api.apply_internal(&objects::nodes(), patch) {
                tracing::debug!("sim kubelet: removing startup taints of {name}: {e}");
            }
        }
        let mut node_status = node["status"].clone();
        set_condition(
            &mut node_status["conditions"],
            "Ready",
            status,
            reason,
            message,
            now,
            true,
        );
        if let Err(e) = self
            .api
            .update_status_internal(&objects::nodes(), "", name, node_status)
        {
            tracing::debug!("sim kubelet: node {name} status: {e}");
        }
    }

    fn step_pods(&mut self, now: Timestamp) {
        let nodes: BTreeMap<String, bool> = self
            .api
            .list_internal(&objects::nodes(), None)
            .iter()
            .map(|n| (objects::name(n).to_string(), objects::node_is_ready(n)))
            .collect();
        let mut live = BTreeSet::new();
        for pod in self.api.list_internal(&objects::pods(), None) {
            let Some(node) = objects::node_name(&pod) else {
                continue;
            };
            let (ns, name) = (objects::namespace(&pod), objects::name(&pod));
            let Some(&ready) = nodes.get(node) else {
                // Pod GC: the node is gone, so nothing will ever finish this pod.
                if let Err(e) = self.api.delete_internal(&objects::pods(), ns, name, Some(0)) {
                    tracing::debug!("sim pod gc: {ns}/{name}: {e}");
                }
                continue;
            };
            if !ready {
                continue;
            }
            if objects::is_deleting(&pod) {
                self.finish_deletion(&pod, now);
                continue;
            }
            if objects::phase(&pod) != "Pending" {
                continue;
            }
            let key = (ns.to_string(), name.to_string(), objects::uid(&pod).to_string());
            let at = *self
                .starting
                .entry(key.clone())
                .or_insert_with(|| after(now, self.options.pod_start_delay));
            live.insert(key);
            if now < at {
                self.due(at);
                continue;
            }
            self.start_pod(&pod, node, now);
        }
        self.starting.retain(|k, _| live.contains(k));
    }

    /// Finishes a graceful deletion once the containers have had `min(grace, container_stop_time)` to stop.
    fn finish_deletion(&mut self, pod: &Value, now: Timestamp) {
        let grace = pod["metadata"]["deletionGracePeriodSeconds"]
            .as_u64()
            .unwrap_or(0);
        let stop = Duration::from_secs(grace).min(self.options.container_stop_time);
        let requested = objects::time_at(pod, "/metadata/deletionTimestamp")
            .map(|t| t - jiff::SignedDuration::from_secs(i64::try_from(grace).unwrap_or(0)))
            .unwrap_or(now);
        let at = after(requested, stop);
        if now < at {
            self.due(at);
            return;
        }
        let (ns, name) = (objects::namespace(pod), objects::name(pod));
        if let Err(e) = self.api.delete_internal(&objects::pods(), ns, name, Some(0)) {
            tracing::debug!("sim kubelet: finishing deletion of {ns}/{name}: {e}");
        }
    }

    fn start_pod(&mut self, pod: &Value, node: &str, now: Timestamp) {
        let (ns, name) = (objects::namespace(pod), objects::name(pod));
        let host_ip = self
            .api
            .get_internal(&objects::nodes(), "", node)
            .and_then(|n| {
                n["status"]["addresses"]
                    .as_array()?
                    .iter()
                    .find(|a| a["type"] == "InternalIP")
                    .and_then(|a| a["address"].as_str().map(str::to_string))
            })
            .unwrap_or_default();
        let mut status = pod["status"].clone();
        if !status.is_object() {
            status = json!({});
        }
        status["phase"] = json!("Running");
        status["startTime"] = json!(format_time(now));
        status["hostIP"] = json!(host_ip);
        self.pod_ips += 1;
        status["podIP"] = json!(format!(
            "100.64.{}.{}",
            (self.pod_ips >> 8) & 255,
            self.pod_ips & 255
        ));
        for kind in ["Initialized", "ContainersReady", "Ready"] {
            set_condition(&mut status["conditions"], kind, "True", "", "", now, false);
        }
        if let Err(e) = self
            .api
            .update_status_internal(&objects::pods(), ns, name, status)
        {
            tracing::debug!("sim kubelet: starting {ns}/{name}: {e}");
        }
    }
}

fn node_labels_os(claim: &karpenter_api::nodeclaim::NodeClaim) -> String {
    claim_label(claim, labels::OS_LABEL).unwrap_or_else(|| "linux".into())
}

fn node_labels_arch(claim: &karpenter_api::nodeclaim::NodeClaim) -> String {
    claim_label(claim, labels::ARCH_LABEL).unwrap_or_else(|| "amd64".into())
}

fn claim_label(claim: &karpenter_api::nodeclaim::NodeClaim, key: &str) -> Option<String> {
    claim.metadata.labels.as_ref()?.get(key).cloned()
}
