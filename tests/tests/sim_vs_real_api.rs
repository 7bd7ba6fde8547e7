//! A differential test of karpenter-sim's API server against a real kube-apiserver: the same requests, in the same
//! order, sent to both, compared by HTTP status code and by the fields a client notices (never resourceVersion
//! values, uids or timestamps).
//!
//! The real server is the shared control plane of `karpenter_e2e::control_plane` (etcd, kube-apiserver,
//! kube-controller-manager with the disruption controller, ...), reached through `kubectl proxy` so one plain-HTTP
//! kube::Client reaches both servers with raw requests (`Client::send`: status codes, headers and bodies as sent).
//! The sim is an `ApiServer` on the system clock, reached in-process (the same request path as its HTTP listener).
//!
//! Each step is a row: method, path, content type, Accept, body and a view of the response. Rows named in
//! [`KNOWN_DIFFERENCES`] must differ (the test fails when one stops differing, so the list stays true); every other
//! row must agree.
//!
//! Needs Go (to build the control plane once), `openssl` and `kubectl`; fails, never skips, when one is missing.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Stdio},
    time::Duration,
};

use karpenter_e2e::control_plane::{self, ControlPlane};
use karpenter_sim::{ApiServer, ApiServerOptions, SystemClock};
use kube::client::Body;
use serde_json::{Value, json};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Rows the sim answers differently from kube-apiserver, with the reason. Each must still differ.
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[
    (
        "watch: sendInitialEvents with bookmarks",
        "the sim serves streaming lists (sendInitialEvents, then an initial-events-end BOOKMARK); this kube-apiserver \
         build refuses them with 422 (WatchList feature gate off). Periodic bookmarks come at the real server's \
         discretion, so no row compares them",
    ),
    (
        "create: pod without containers (422)",
        "the sim does not validate built-in kinds (it stores a Pod without containers)",
    ),
    (
        "list: a bad labelSelector (400)",
        "the sim's label selector parser accepts `===`",
    ),
    (
        "eviction: the web PDB's status",
        "the sim has no disruption controller: a PDB's status stays empty (its eviction computes the budget itself)",
    ),
    (
        "eviction: the db PDB's status",
        "the sim has no disruption controller: a PDB's status stays empty (its eviction computes the budget itself)",
    ),
    (
        "crd validation: a NodePool with a wrong kind in the body (400)",
        "the sim stores a body whose kind is not the resource's",
    ),
    (
        "apply: a second field manager's conflicting value",
        "the sim does not track managedFields, so server-side apply never reports a 409 conflict",
    ),
    (
        "crd validation: NodePool consolidationPolicy Sometimes (enum)",
        "the sim stores custom resources as sent: no OpenAPI schema validation",
    ),
    (
        "crd validation: NodePool weight 101 (maximum)",
        "the sim stores custom resources as sent: no OpenAPI schema validation",
    ),
    (
        "crd validation: NodePool requirement key kubernetes.io/hostname (CEL rule)",
        "the sim does not evaluate the CRDs' x-kubernetes-validations (CEL)",
    ),
];

/// `kubectl proxy` to the real server: plain HTTP on 127.0.0.1, killed on drop.
struct Proxy {
    child: Child,
    url: String,
}

impl Proxy {
    fn start(cp: &ControlPlane) -> Result<Self, Error> {
        let mut child = cp
            .kubectl()
            .args(["proxy", "--port=0", "--address=127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("kubectl proxy has no stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        // "Starting to serve on 127.0.0.1:PORT"
        let Some(addr) = line.trim().rsplit(' ').next().filter(|a| a.contains(':')) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("unexpected kubectl proxy output {line:?}").into());
        };
        let url = format!("http://{addr}");
        Ok(Self { child, url })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one server answered.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    body: Value,
}

/// A raw request: kube::Client would turn statuses into errors and hide the body.
async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    accept: Option<&str>,
    body: Option<&Value>,
) -> Result<Answer, Error> {
    let mut request = kube::core::Request::new("/").create(&kube::api::PostParams::default(), Vec::new())?;
    *request.method_mut() = method.parse()?;
    *request.uri_mut() = path.parse()?;
    *request.body_mut() = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let headers = request.headers_mut();
    headers.remove("content-type");
    if let Some(ct) = content_type {
        headers.insert("content-type", ct.parse()?);
    }
    if let Some(accept) = accept {
        headers.insert("accept", accept.parse()?);
    }
    let response = tokio::time::timeout(Duration::from_secs(30), client.send(request.map(Body::from)))
        .await
        .map_err(|_| format!("{method} {path}: no answer within 30s"))??;
    let status = response.status().as_u16();
    let bytes = tokio::time::timeout(Duration::from_secs(30), response.into_body().collect_bytes())
        .await
        .map_err(|_| format!("{method} {path}: the body did not end within 30s"))??;
    let text = String::from_utf8_lossy(&bytes);
    let body = serde_json::from_str(&text).unwrap_or_else(|_| {
        // A watch: one JSON object a line.
        let lines: Option<Vec<Value>> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).ok())
            .collect();
        lines
            .map(Value::Array)
            .unwrap_or_else(|| Value::String(text.to_string()))
    });
    Ok(Answer { status, body })
}

type View = fn(&Value) -> Value;

/// One request sent to both servers.
struct Step {
    name: String,
    method: &'static str,
    /// `{ns}` is the test namespace; `{rv}` the resourceVersion a `save_rv` step saw on the same server.
    path: String,
    content_type: Option<&'static str>,
    accept: Option<&'static str>,
    body: Option<Value>,
    view: View,
    /// Poll (every 250 ms, up to 60 s) until the view of the answer satisfies this, then compare.
    until: Option<fn(&Value) -> bool>,
    save_rv: bool,
}

fn step(name: impl Into<String>, method: &'static str, path: impl Into<String>) -> Step {
    Step {
        name: name.into(),
        method,
        path: path.into(),
        content_type: None,
        accept: None,
        body: None,
        view: whole_status,
        until: None,
        save_rv: false,
    }
}

impl Step {
    fn body(mut self, content_type: &'static str, body: Value) -> Self {
        self.content_type = Some(content_type);
        self.body = Some(body);
        self
    }
    fn json(self, body: Value) -> Self {
        self.body("application/json", body)
    }
    fn accept(mut self, accept: &'static str) -> Self {
        self.accept = Some(accept);
        self
    }
    fn view(mut self, view: View) -> Self {
        self.view = view;
        self
    }
    fn until(mut self, until: fn(&Value) -> bool) -> Self {
        self.until = Some(until);
        self
    }
    fn save_rv(mut self) -> Self {
        self.save_rv = true;
        self
    }
}

const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// Only the status code.
fn whole_status(_: &Value) -> Value {
    Value::Null
}

fn name_of(o: &Value) -> Value {
    o["metadata"]["name"].clone()
}

/// The sorted names of a list's items.
fn item_names(v: &Value) -> Value {
    let mut names: Vec<String> = v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    json!(names)
}

fn labels_and_data(o: &Value) -> Value {
    json!({"name": name_of(o), "labels": o["metadata"]["labels"], "data": o["data"]})
}

fn pod_view(o: &Value) -> Value {
    json!({
        "name": name_of(o),
        "labels": o["metadata"]["labels"],
        "containers": o["spec"]["containers"].as_array().map(|cs| cs.iter().map(|c| json!({"name": c["name"], "image": c["image"]})).collect::<Vec<_>>()),
    })
}

/// Watch lines: (type, name), with a bookmark's initial-events-end annotation, and an ERROR's code and reason.
fn watch_view(v: &Value) -> Value {
    json!(
        v.as_array()
            .into_iter()
            .flatten()
            .map(|e| match e["type"].as_str() {
                Some("BOOKMARK") => json!([
                    "BOOKMARK",
                    e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"]
                ]),
                Some("ERROR") => json!(["ERROR", e["object"]["code"], e["object"]["reason"]]),
                t => json!([t, e["object"]["metadata"]["name"]]),
            })
            .collect::<Vec<_>>()
    )
}

/// A Table's kind, column names and rows' cells, without the columns that depend on when the objects were made
/// (Age) or on the real server's controllers (`skip`).
fn table_view(v: &Value, skip: &[&str]) -> Value {
    let names: Vec<&str> = v["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["name"].as_str().unwrap_or(""))
        .collect();
    let kept = |i: &usize| names.get(*i).is_some_and(|n| *n != "Age" && !skip.contains(n));
    let mut rows: Vec<Value> = v["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let cells = r["cells"].as_array().cloned().unwrap_or_default();
            json!(
                (0..cells.len())
                    .filter(kept)
                    .map(|i| cells[i].clone())
                    .collect::<Vec<_>>()
            )
        })
        .collect();
    rows.sort_by_key(Value::to_string);
    json!({"kind": v["kind"], "columns": names, "cells": rows})
}

fn table_cells(v: &Value) -> Value {
    table_view(v, &[])
}

/// A Node's Status comes from the real server's node lifecycle controller (Unknown, then NotReady without a
/// kubelet).
fn node_table_cells(v: &Value) -> Value {
    table_view(v, &["Status"])
}

fn finalizer_view(o: &Value) -> Value {
    json!({
        "finalizers": o["metadata"]["finalizers"],
        "deletionTimestamp set": o["metadata"]["deletionTimestamp"].is_string(),
    })
}

fn non_empty(v: &Value) -> Value {
    if v == "" { Value::Null } else { v.clone() }
}

fn core_event_view(o: &Value) -> Value {
    json!({
        "apiVersion": o["apiVersion"], "kind": o["kind"],
        "message": o["message"], "reason": o["reason"], "type": o["type"], "action": o["action"],
        "involvedObject": {"kind": o["involvedObject"]["kind"], "name": o["involvedObject"]["name"], "namespace": o["involvedObject"]["namespace"]},
        "source": o["source"], "count": o["count"],
        // The real server stores "" where a core Event leaves them out; a client sees no difference.
        "reportingComponent": non_empty(&o["reportingComponent"]), "reportingInstance": non_empty(&o["reportingInstance"]),
        "firstTimestamp set": o["firstTimestamp"].is_string(), "eventTime set": o["eventTime"].is_string(),
    })
}

fn events_event_view(o: &Value) -> Value {
    json!({
        "apiVersion": o["apiVersion"], "kind": o["kind"],
        "note": o["note"], "reason": o["reason"], "type": o["type"], "action": o["action"],
        "regarding": {"kind": o["regarding"]["kind"], "name": o["regarding"]["name"], "namespace": o["regarding"]["namespace"]},
        "deprecatedSource": o["deprecatedSource"], "deprecatedCount": o["deprecatedCount"],
        "reportingController": non_empty(&o["reportingController"]), "reportingInstance": non_empty(&o["reportingInstance"]),
        "deprecatedFirstTimestamp set": o["deprecatedFirstTimestamp"].is_string(), "eventTime set": o["eventTime"].is_string(),
    })
}

/// The list's kind and its items' views, without the items' apiVersion and kind: the real server leaves them out
/// of list items, the sim keeps them (no client reads them there).
fn list_of(view: fn(&Value) -> Value) -> impl Fn(&Value) -> Value {
    move |v: &Value| {
        let items: Vec<Value> = v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|item| {
                let mut item = view(item);
                if let Some(fields) = item.as_object_mut() {
                    fields.remove("apiVersion");
                    fields.remove("kind");
                }
                item
            })
            .collect();
        json!({"kind": v["kind"], "items": items})
    }
}

fn core_event_list(v: &Value) -> Value {
    list_of(core_event_view)(v)
}

fn events_event_list(v: &Value) -> Value {
    list_of(events_event_view)(v)
}

fn pod(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            // A Node no kubelet or kwok serves: the scheduler leaves the pod alone and nothing runs it.
            "nodeName": "svr-node",
            "containers": [{"name": "app", "image": "example.invalid/app:1"}]
        }
    })
}

fn nodepool(name: &str, spec_patch: Value) -> Value {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {
            "template": {"spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }},
            "disruption": {"consolidateAfter": "1m"}
        }
    });
    if let (Some(spec), Some(patch)) = (pool["spec"].as_object_mut(), spec_patch.as_object()) {
        for (k, v) in patch {
            spec.insert(k.clone(), v.clone());
        }
    }
    pool
}

fn running_ready() -> Value {
    json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn steps() -> Vec<Step> {
    let ns = "/api/v1/namespaces/{ns}";
    let evns = "/api/v1/namespaces/{ns}-events";
    let apps = "/apis/apps/v1/namespaces/{ns}";
    let policy = "/apis/policy/v1/namespaces/{ns}";
    let pools = "/apis/karpenter.sh/v1/nodepools";
    vec![
        // --- create, get, list with selectors
        step("create: a Node", "POST", "/api/v1/nodes")
            .json(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "svr-node", "labels": {"svr": "yes"}}}))
            .view(name_of),
        step("create: pod a", "POST", format!("{ns}/pods"))
            .json(pod("a", json!({"app": "web", "tier": "front"})))
            .view(pod_view),
        step("create: pod b", "POST", format!("{ns}/pods"))
            .json(pod("b", json!({"app": "web", "tier": "back"})))
            .view(pod_view),
        step("create: pod c", "POST", format!("{ns}/pods"))
            .json(pod("c", json!({"app": "db"})))
            .view(pod_view),
        step("create: pod a again (409)", "POST", format!("{ns}/pods")).json(pod("a", json!({}))),
        // In `default`, so the sim's copy stays out of the lists below.
        step("create: pod without containers (422)", "POST", "/api/v1/namespaces/default/pods")
            .json(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"}, "spec": {"containers": []}})),
        step("get: pod a", "GET", format!("{ns}/pods/a")).view(pod_view),
        step("get: a missing pod (404)", "GET", format!("{ns}/pods/missing")),
        step("list: labelSelector app=web", "GET", format!("{ns}/pods?labelSelector=app%3Dweb")).view(item_names),
        step("list: labelSelector tier in (front)", "GET", format!("{ns}/pods?labelSelector=tier+in+%28front%29"))
            .view(item_names),
        step("list: labelSelector !tier", "GET", format!("{ns}/pods?labelSelector=%21tier")).view(item_names),
        step("list: labelSelector app!=web", "GET", format!("{ns}/pods?labelSelector=app%21%3Dweb")).view(item_names),
        step("list: fieldSelector metadata.name=b", "GET", format!("{ns}/pods?fieldSelector=metadata.name%3Db"))
            .view(item_names),
        step("list: fieldSelector spec.nodeName", "GET", format!("{ns}/pods?fieldSelector=spec.nodeName%3Dsvr-node"))
            .view(item_names),
        step("list: fieldSelector on an unsupported field (400)", "GET", format!("{ns}/pods?fieldSelector=spec.hostname%3Dx")),
        step("list: a bad labelSelector (400)", "GET", format!("{ns}/pods?labelSelector=%3D%3D%3D")),
        step("list: limit 2 returns a continue token", "GET", format!("{ns}/pods?limit=2"))
            .view(|v| json!({"names": item_names(v), "continue": v["metadata"]["continue"].is_string()})),
        // --- watch
        step("list: configmaps, for a resourceVersion", "GET", format!("{ns}/configmaps?labelSelector=svr")).save_rv().view(item_names),
        step("create: configmap w1", "POST", format!("{ns}/configmaps"))
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w1", "labels": {"svr": "w"}}, "data": {"k": "v"}}))
            .view(labels_and_data),
        step("watch: from the list's resourceVersion", "GET", format!("{ns}/configmaps?watch=true&labelSelector=svr&resourceVersion={{rv}}&timeoutSeconds=2"))
            .view(watch_view),
        step("watch: sendInitialEvents with bookmarks", "GET", format!("{ns}/configmaps?watch=true&labelSelector=svr&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2"))
            .view(watch_view),
        // --- patches
        step("patch: merge adds a label", "PATCH", format!("{ns}/configmaps/w1"))
            .body(MERGE, json!({"metadata": {"labels": {"m": "1"}}, "data": {"k2": "v2"}}))
            .view(labels_and_data),
        step("patch: merge with null removes", "PATCH", format!("{ns}/configmaps/w1"))
            .body(MERGE, json!({"data": {"k": null}}))
            .view(labels_and_data),
        step("patch: JSON patch add and replace", "PATCH", format!("{ns}/configmaps/w1"))
            .body(JSON_PATCH, json!([{"op": "add", "path": "/data/k3", "value": "v3"}, {"op": "replace", "path": "/data/k2", "value": "x"}]))
            .view(labels_and_data),
        step("patch: JSON patch test fails (422)", "PATCH", format!("{ns}/configmaps/w1"))
            .body(JSON_PATCH, json!([{"op": "test", "path": "/data/k2", "value": "not-x"}])),
        step("patch: strategic merge on a pod", "PATCH", format!("{ns}/pods/a"))
            .body(STRATEGIC, json!({"metadata": {"labels": {"s": "1"}}, "spec": {"activeDeadlineSeconds": 600}}))
            .view(pod_view),
        step("patch: strategic merge on a custom resource (415)", "PATCH", format!("{pools}/missing"))
            .body(STRATEGIC, json!({"metadata": {"labels": {"a": "b"}}})),
        step("patch: a missing object (404)", "PATCH", format!("{ns}/configmaps/missing"))
            .body(MERGE, json!({"data": {"a": "b"}})),
        // --- server-side apply
        step("apply: field manager a creates", "PATCH", format!("{ns}/configmaps/ssa?fieldManager=a"))
            .body(APPLY, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"key": "1"}}))
            .view(labels_and_data),
        step("apply: a second field manager's conflicting value", "PATCH", format!("{ns}/configmaps/ssa?fieldManager=b"))
            .body(APPLY, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"key": "2"}})),
        step("apply: the same with force", "PATCH", format!("{ns}/configmaps/ssa?fieldManager=b&force=true"))
            .body(APPLY, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"key": "2"}}))
            .view(labels_and_data),
        step("apply: without a fieldManager (422)", "PATCH", format!("{ns}/configmaps/ssa"))
            .body(APPLY, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"key": "3"}})),
        // --- status and scale subresources
        step("create: a NodePool", "POST", pools).json(nodepool("svr-pool", json!({}))).view(name_of),
        step("status: a main-resource patch ignores status", "PATCH", format!("{pools}/svr-pool"))
            .body(MERGE, json!({"status": {"nodes": 7}}))
            .view(|o| json!({"status.nodes": o["status"]["nodes"]})),
        step("status: the status subresource writes it", "PATCH", format!("{pools}/svr-pool/status"))
            .body(MERGE, json!({"status": {"nodes": 7}, "spec": {"weight": 5}}))
            .view(|o| json!({"status.nodes": o["status"]["nodes"], "spec.weight": o["spec"]["weight"]})),
        step("create: a Deployment", "POST", format!("{apps}/deployments"))
            .json(json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"d": "web"}},
                         "template": {"metadata": {"labels": {"d": "web"}}, "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]}}}
            }))
            .view(|o| json!({"replicas": o["spec"]["replicas"]})),
        step("scale: get a Deployment's scale", "GET", format!("{apps}/deployments/web/scale"))
            .view(|o| json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": name_of(o), "replicas": o["spec"]["replicas"], "selector": o["status"]["selector"]})),
        step("scale: patch replicas to 3", "PATCH", format!("{apps}/deployments/web/scale"))
            .body(MERGE, json!({"spec": {"replicas": 3}}))
            .view(|o| json!({"kind": o["kind"], "replicas": o["spec"]["replicas"]})),
        step("scale: the Deployment has 3 replicas", "GET", format!("{apps}/deployments/web"))
            .view(|o| json!({"replicas": o["spec"]["replicas"]})),
        step("scale: a missing Deployment (404)", "GET", format!("{apps}/deployments/missing/scale")),
        // --- finalizers and deletion
        step("finalizer: create with a finalizer", "POST", format!("{ns}/configmaps"))
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fin", "finalizers": ["svr.example.com/hold"]}}))
            .view(finalizer_view),
        step("finalizer: delete answers the terminating object", "DELETE", format!("{ns}/configmaps/fin")).view(finalizer_view),
        step("finalizer: the object stays, terminating", "GET", format!("{ns}/configmaps/fin")).view(finalizer_view),
        step("finalizer: adding a finalizer while terminating (422)", "PATCH", format!("{ns}/configmaps/fin"))
            .body(JSON_PATCH, json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "svr.example.com/new"}])),
        step("finalizer: removing the finalizer", "PATCH", format!("{ns}/configmaps/fin"))
            .body(MERGE, json!({"metadata": {"finalizers": null}})),
        step("finalizer: then the object is gone (404)", "GET", format!("{ns}/configmaps/fin")),
        // --- eviction against a PodDisruptionBudget
        step("eviction: pod a Running and Ready", "PATCH", format!("{ns}/pods/a/status"))
            .body(MERGE, running_ready())
            .view(|o| o["status"]["phase"].clone()),
        step("eviction: pod c Running and Ready", "PATCH", format!("{ns}/pods/c/status"))
            .body(MERGE, running_ready())
            .view(|o| o["status"]["phase"].clone()),
        step("eviction: a PDB minAvailable 1 over app=web", "POST", format!("{policy}/poddisruptionbudgets"))
            .json(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
                         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}))
            .view(name_of),
        step("eviction: a PDB minAvailable 0 over app=db", "POST", format!("{policy}/poddisruptionbudgets"))
            .json(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "db"},
                         "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "db"}}}}))
            .view(name_of),
        step("eviction: the web PDB's status", "GET", format!("{policy}/poddisruptionbudgets/web"))
            .view(|o| json!({"currentHealthy": o["status"]["currentHealthy"], "desiredHealthy": o["status"]["desiredHealthy"], "disruptionsAllowed": o["status"]["disruptionsAllowed"], "expectedPods": o["status"]["expectedPods"]}))
            .until(|v| v["currentHealthy"] == 1 && v["expectedPods"] == 2),
        step("eviction: the db PDB's status", "GET", format!("{policy}/poddisruptionbudgets/db"))
            .view(|o| json!({"currentHealthy": o["status"]["currentHealthy"], "disruptionsAllowed": o["status"]["disruptionsAllowed"]}))
            .until(|v| v["disruptionsAllowed"] == 1),
        step("eviction: pod a would break its PDB (429)", "POST", format!("{ns}/pods/a/eviction"))
            .json(json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a", "namespace": "{ns}"}}))
            .view(|o| json!({"reason": o["reason"]})),
        step("eviction: pod c is allowed (201)", "POST", format!("{ns}/pods/c/eviction"))
            .json(json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "c", "namespace": "{ns}"}}))
            .view(|o| json!({"kind": o["kind"], "status": o["status"]})),
        step("eviction: pod c is terminating or gone", "GET", format!("{ns}/pods/c"))
            .view(|o| json!({"terminating or gone": o["metadata"]["deletionTimestamp"].is_string() || o["code"] == 404})),
        // --- Table output for kubectl
        step("table: pods", "GET", format!("{ns}/pods?labelSelector=app%3Dweb")).accept(TABLE).view(table_cells),
        step("table: nodes", "GET", "/api/v1/nodes?labelSelector=svr").accept(TABLE).view(node_table_cells),
        step("table: one pod", "GET", format!("{ns}/pods/a")).accept(TABLE).view(table_cells),
        step("table: nodepools", "GET", pools).accept(TABLE).view(table_cells),
        step("table: nodeclaims", "GET", "/apis/karpenter.sh/v1/nodeclaims").accept(TABLE).view(table_cells),
        // --- CRD schema validation
        step("crd validation: NodePool consolidationPolicy Sometimes (enum)", "POST", pools)
            .json(nodepool("bad-enum", json!({"disruption": {"consolidateAfter": "1m", "consolidationPolicy": "Sometimes"}}))),
        step("crd validation: NodePool weight 101 (maximum)", "POST", pools).json(nodepool("bad-weight", json!({"weight": 101}))),
        step("crd validation: NodePool requirement key kubernetes.io/hostname (CEL rule)", "POST", pools).json(nodepool(
            "bad-cel",
            json!({"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }}}),
        )),
        step("crd validation: a NodePool with a wrong kind in the body (400)", "POST", pools)
            .json(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "x"}})),
        // --- Events through both APIs
        step("events: create an events.k8s.io/v1 Event", "POST", "/apis/events.k8s.io/v1/namespaces/{ns}-events/events")
            .json(json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "new-style"},
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "reportingController": "karpenter.sh/controller", "reportingInstance": "karpenter-0",
                "action": "Disrupting", "reason": "DisruptionBlocked", "type": "Normal",
                "note": "Cannot disrupt Node",
                "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "a", "namespace": "{ns}-events"}
            }))
            .view(events_event_view),
        step("events: the new Event through core/v1", "GET", format!("{evns}/events/new-style")).view(core_event_view),
        step("events: create a core/v1 Event", "POST", format!("{evns}/events"))
            .json(json!({
                "apiVersion": "v1", "kind": "Event", "metadata": {"name": "old-style"},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "a", "namespace": "{ns}-events"},
                "reason": "Nominated", "message": "Pod should schedule on svr-node", "type": "Normal",
                "source": {"component": "karpenter"}, "count": 3,
                "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z"
            }))
            .view(core_event_view),
        step("events: the core Event through events.k8s.io/v1", "GET", "/apis/events.k8s.io/v1/namespaces/{ns}-events/events/old-style")
            .view(events_event_view),
        step("events: kubectl get events lists both", "GET", format!("{evns}/events")).view(core_event_list),
        step("events: events.k8s.io/v1 lists both", "GET", "/apis/events.k8s.io/v1/namespaces/{ns}-events/events").view(events_event_list),
        step("events: core fieldSelector involvedObject.name=a", "GET", format!("{evns}/events?fieldSelector=involvedObject.name%3Da"))
            .view(item_names),
        step("events: deleting through core/v1", "DELETE", format!("{evns}/events/new-style")),
        step("events: then gone from events.k8s.io/v1 (404)", "GET", "/apis/events.k8s.io/v1/namespaces/{ns}-events/events/new-style"),
    ]
}

/// One server under test.
struct Target {
    name: &'static str,
    client: kube::Client,
    rv: String,
    /// Whether `until` rows poll (only the real server's controllers change what they wait for).
    polls: bool,
}

impl Target {
    async fn run(&mut self, s: &Step, ns: &str) -> Result<(u16, Value), Error> {
        let path = s.path.replace("{ns}", ns).replace("{rv}", &self.rv);
        let body = s
            .body
            .as_ref()
            .map(|b| serde_json::from_str::<Value>(&b.to_string().replace("{ns}", ns)))
            .transpose()?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let answer = send(
                &self.client,
                s.method,
                &path,
                s.content_type,
                s.accept,
                body.as_ref(),
            )
            .await?;
            // kube-apiserver answers 429 while a resource's watch cache is (re)initializing (after a CRD is
            // created or updated, as other tests on the shared control plane do) and when priority and
            // fairness sheds load; client-go and kube-runtime retry both, so a real client never sees them.
            // The eviction 429 of a PDB is an answer, not load: it is compared.
            if answer.status == 429 && tokio::time::Instant::now() < deadline {
                let message = answer.body["message"].as_str().unwrap_or_default();
                if message.contains("storage is (re)initializing") || message.starts_with("Too many requests")
                {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
            }
            let view = (s.view)(&answer.body);
            if !self.polls || s.until.is_none_or(|u| u(&view)) || tokio::time::Instant::now() > deadline {
                if s.save_rv {
                    self.rv = answer.body["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                }
                if answer.status >= 400 {
                    eprintln!(
                        "{} on {}: {} {}",
                        s.name, self.name, answer.status, answer.body["message"]
                    );
                }
                return Ok((answer.status, view));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn control_plane() -> &'static ControlPlane {
    match control_plane::shared() {
        Ok(cp) => cp,
        Err(e) => panic!("cannot start the test control plane: {e}"),
    }
}

#[tokio::test]
async fn the_sim_answers_like_kube_apiserver() -> Result<(), Error> {
    let cp = control_plane();
    let proxy = Proxy::start(cp)?;
    let sim = ApiServer::with_options(
        SystemClock,
        ApiServerOptions {
            // Small, so a watch from resourceVersion 1 is refused as the real server's watch cache refuses it.
            history_per_resource: 4,
            ..ApiServerOptions::default()
        },
    );
    let ns = format!("svr-{}", std::process::id());
    let mut targets = [
        Target {
            name: "sim",
            client: sim.client(),
            polls: false,
            rv: String::new(),
        },
        Target {
            name: "kube-apiserver",
            client: {
                let mut config = kube::Config::new(proxy.url.parse()?);
                // The raw answer, not a retried one: kube retries 429 (the eviction rows) by default.
                config.default_retry = false;
                kube::Client::try_from(config)?
            },
            polls: true,
            rv: String::new(),
        },
    ];
    for t in &mut targets {
        for name in [ns.clone(), format!("{ns}-events")] {
            let created = send(
                &t.client,
                "POST",
                "/api/v1/namespaces",
                Some("application/json"),
                None,
                Some(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
            )
            .await?;
            assert_eq!(
                created.status, 201,
                "{}: creating namespace {name}: {:?}",
                t.name, created.body
            );
        }
    }

    let mut agree = Vec::new();
    let mut unexpected = Vec::new();
    let mut stale = Vec::new();
    let steps = steps();
    for s in &steps {
        let mut answers = Vec::new();
        for t in &mut targets {
            let started = tokio::time::Instant::now();
            let answer = t
                .run(s, &ns)
                .await
                .unwrap_or_else(|e| (0, json!(format!("request failed: {e}"))));
            let took = started.elapsed();
            if took > Duration::from_secs(5) {
                eprintln!("{}: {:?} on {}", s.name, took, t.name);
            }
            answers.push(answer);
        }
        let (sim_answer, real_answer) = (&answers[0], &answers[1]);
        let same = sim_answer == real_answer;
        let known = KNOWN_DIFFERENCES.iter().find(|(n, _)| *n == s.name);
        let line = format!(
            "{}:\n    sim:            {} {}\n    kube-apiserver: {} {}",
            s.name, sim_answer.0, sim_answer.1, real_answer.0, real_answer.1
        );
        match (same, known) {
            (true, None) => agree.push(s.name.clone()),
            (false, None) => unexpected.push(line),
            (true, Some((_, why))) => {
                stale.push(format!("{line}\n    (listed as a known difference: {why})"))
            }
            (false, Some(_)) => eprintln!("known difference, as listed: {line}"),
        }
    }
    for (name, _) in KNOWN_DIFFERENCES {
        assert!(
            steps.iter().any(|s| s.name == *name),
            "known difference {name:?} names no row"
        );
    }
    drop(proxy);
    eprintln!("{} of {} rows agree", agree.len(), steps.len());
    assert!(
        unexpected.is_empty() && stale.is_empty(),
        "{} row(s) differ unexpectedly:\n{}\n\n{} known difference(s) no longer differ (remove them from \
         KNOWN_DIFFERENCES):\n{}",
        unexpected.len(),
        unexpected.join("\n"),
        stale.len(),
        stale.join("\n")
    );
    Ok(())
}
