//! An in-memory Kubernetes API server, so controllers are proven with the real kube-runtime machinery
//! (`watcher`, `reflector`, `Controller`) and kubectl without kube-apiserver, etcd or a container runtime.
//!
//! # Design
//! - One [`ApiServer`] holds all state behind one mutex: objects as their JSON text plus the fields selectors
//!   and the write path read (`stored.rs`; a quarter of a `serde_json::Value`'s memory or less, and lists and
//!   watches copy the text as it is) in one ordered map per resource (so a namespace is a range, a list is
//!   linear), a global resourceVersion counter like etcd's revision, a bounded per-resource event history
//!   (10,000 by default) and the open watches. A request never holds the lock across an await.
//! - Two transports share one request path (`handler.rs`): an in-process tower Service for
//!   `kube::Client::new(service, "default")` ([`ApiServer::client`]) and HTTP/1.1 on 127.0.0.1
//!   ([`ApiServer::serve_http`]) with a kubeconfig writer for kubectl.
//! - Timestamps come from a [`crate::clock::Clock`]; with [`crate::clock::VirtualClock`] under a paused tokio
//!   runtime, grace periods, bookmarks and watch timeouts all run on virtual time.
//! - Every resource request is recorded as an [`AuditRecord`] (RBAC verb, group, resource, subresource,
//!   namespace); [`Faults`] injects errors, delays and dropped watches.
//! - Other sim modules (kubelets, scheduler) use the `*_internal` accessors, which take the same code paths as
//!   HTTP requests (resourceVersions, watch events, finalizers, GC) but skip routing, audit and faults.
//!
//! # Supported
//! - Resources: core v1 pods (+ eviction, binding), nodes, namespaces, events, persistentvolumes,
//!   persistentvolumeclaims, services, configmaps, secrets, serviceaccounts, podtemplates; apps/v1 deployments,
//!   replicasets, statefulsets (+ scale), daemonsets; batch/v1 jobs; policy/v1 poddisruptionbudgets; storage.k8s.io/v1 storageclasses,
//!   csinodes, csidrivers, volumeattachments; coordination.k8s.io/v1 leases; events.k8s.io/v1 events (a converted
//!   view of the core v1 events, as kube-apiserver serves them: see `events.rs`); scheduling.k8s.io/v1 priorityclasses;
//!   apiextensions.k8s.io/v1 customresourcedefinitions, with the project's CRDs pre-registered and any CRD
//!   created through the API served at once (status and scale subresources, selectableFields).
//! - Discovery (/api, /apis, /apis/G, /apis/G/V, /version) and a minimal OpenAPI v3 (PATCH operations that
//!   declare `fieldValidation`, no schemas) so kubectl apply validates server-side instead of needing OpenAPI v2.
//! - get, list (label and field selectors, `limit`/`continue`), watch (from a resourceVersion, bookmarks,
//!   `sendInitialEvents`, 410 Expired when older than the history, ADDED/DELETED for objects entering or leaving
//!   a filtered watch), create (generateName), update (409 on stale resourceVersion), patch (merge, JSON,
//!   strategic, apply: see `patch.rs`), delete (grace periods, finalizers, preconditions, propagation policies,
//!   synchronous garbage collection: see `delete.rs`), deletecollection, `dryRun=All`, status and scale
//!   subresources, eviction against PodDisruptionBudgets (see `subresources.rs`).
//!
//! # Not supported
//! - Authentication, authorization, admission webhooks, schema validation and defaulting (objects are stored as
//!   sent, CRD schemas and CEL rules are not checked), version conversion, protobuf, Table output for kinds other than Pods, Nodes and custom resources (`table.rs`),
//!   managedFields and server-side apply conflicts, lists at an exact older resourceVersion (answered with the
//!   current state), OpenAPI v2 and schemas in OpenAPI v3.
//! - Deleting a CRD stops serving it and drops its objects at once (no DELETED events, no
//!   customresourcecleanup finalizer).
//! - The audit log records resource requests only (not discovery, OpenAPI or health paths).

mod audit;
mod crds;
mod delete;
mod discovery;
mod events;
mod faults;
mod handler;
mod http;
mod kinds;
mod objects;
mod openapi;
mod patch;
mod read;
mod resources;
mod response;
mod route;
pub(crate) mod selectors;
mod service;
mod store;
mod stored;
mod subresources;
mod table;
mod watch;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use serde_json::Value;

pub use audit::AuditRecord;
pub use faults::{FaultRule, Faults};
pub use http::HttpHandle;
pub use resources::ResourceId;
pub use route::Verb;
pub use service::ApiService;
pub(crate) use subresources::pdb_desired_healthy;

use crate::{clock::Clock, error::Error};
use objects::{Part, WriteOptions};
use store::{ObjectKey, State};

/// Tunables of an [`ApiServer`].
#[derive(Debug, Clone)]
pub struct ApiServerOptions {
    /// Watch events kept per resource; a watch from an older resourceVersion gets 410 Expired.
    pub history_per_resource: usize,
    /// Seed of the generator behind uids, generateName suffixes and probabilistic faults.
    pub seed: u64,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        Self {
            history_per_resource: 10_000,
            seed: 1,
        }
    }
}

pub(crate) struct Shared {
    state: Mutex<State>,
    faults: Mutex<faults::FaultState>,
    audit: Mutex<Vec<AuditRecord>>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn faults(&self) -> MutexGuard<'_, faults::FaultState> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, record: AuditRecord) {
        self.audit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
    }
}

/// The in-memory API server. Cheap to clone; clones share the same state.
#[derive(Clone)]
pub struct ApiServer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl ApiServer {
    /// A server with the built-in resources, the project's CRDs and the usual namespaces.
    pub fn new(clock: impl Clock) -> Self {
        Self::with_options(clock, ApiServerOptions::default())
    }

    pub fn with_options(clock: impl Clock, options: ApiServerOptions) -> Self {
        let state = State::new(Arc::new(clock), options.history_per_resource, options.seed);
        let server = Self {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                faults: Mutex::new(faults::FaultState::new(options.seed)),
                audit: Mutex::new(Vec::new()),
            }),
        };
        for name in INITIAL_NAMESPACES {
            let namespace =
                serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            if let Err(e) = server.create_internal(&ResourceId::core("namespaces"), namespace) {
                tracing::error!("creating namespace {name}: {e}");
            }
        }
        match crds::project_crds() {
            Ok(crds) => {
                for crd in crds {
                    if let Err(e) = server.create_internal(
                        &ResourceId::new("apiextensions.k8s.io", "customresourcedefinitions"),
                        crd,
                    ) {
                        tracing::error!("registering a project CRD: {e}");
                    }
                }
            }
            Err(e) => tracing::error!("{e}"),
        }
        server
    }

    /// The in-process transport, for `kube::Client::new(service, namespace)`.
    pub fn service(&self) -> ApiService {
        ApiService {
            shared: Arc::clone(&self.shared),
        }
    }

    /// A kube client talking to this server in-process, default namespace "default". Needs a tokio runtime.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.service(), "default")
    }

    /// Serves HTTP on `addr` (port 0 picks a free port) until the handle is shut down or dropped.
    pub async fn serve_http(&self, addr: SocketAddr) -> Result<HttpHandle, Error> {
        http::serve(Arc::clone(&self.shared), addr).await
    }

    /// Every resource request so far, oldest first.
    pub fn audit(&self) -> Vec<AuditRecord> {
        self.shared
            .audit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_audit(&self) {
        self.shared
            .audit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The fault-injection switches.
    pub fn faults(&self) -> Faults {
        Faults {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.state().rv
    }

    /// The number of watches currently open.
    pub fn open_watches(&self) -> usize {
        self.shared.state().open_watches()
    }

    /// The server's current time.
    pub fn now(&self) -> jiff::Timestamp {
        self.shared.state().clock.now()
    }

    fn info(state: &State, id: &ResourceId) -> Result<Arc<resources::ResourceInfo>, Error> {
        state
            .registry
            .by_id(id)
            .ok_or_else(|| Error::Api(crate::error::ApiStatus::not_found(&id.group, &id.resource, "")))
    }

    fn key(info: &resources::ResourceInfo, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey::new(if info.namespaced { namespace } else { "" }, name)
    }

    /// One object, if it exists ("" namespace for cluster-scoped resources).
    pub fn get_internal(&self, id: &ResourceId, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let state = self.shared.state();
        let info = state.registry.by_id(id)?;
        state
            .get(id, &Self::key(&info, namespace, name))
            .map(|o| o.shared_value())
    }

    /// Every object of a resource, in one namespace or all (`None`), in (namespace, name) order.
    pub fn list_internal(&self, id: &ResourceId, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let state = self.shared.state();
        state
            .store(id)
            .map(|s| s.range(namespace).map(|(_, o)| o.shared_value()).collect())
            .unwrap_or_default()
    }

    /// Creates an object as a POST would (the namespace comes from `metadata.namespace`).
    pub fn create_internal(&self, id: &ResourceId, object: Value) -> Result<Arc<Value>, Error> {
        let mut state = self.shared.state();
        let info = Self::info(&state, id)?;
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let created = objects::create(&mut state, &info, &namespace, object, WriteOptions::default())?;
        Ok(Arc::new(created.value()))
    }

    /// Creates the object or merges it into the existing one, status included: what a simulated kubelet or
    /// controller does to make an object look a certain way. Watches see one event per part written.
    pub fn apply_internal(&self, id: &ResourceId, object: Value) -> Result<Arc<Value>, Error> {
        let mut state = self.shared.state();
        let info = Self::info(&state, id)?;
        let meta = &object["metadata"];
        let key = Self::key(
            &info,
            meta["namespace"].as_str().unwrap_or("default"),
            meta["name"].as_str().unwrap_or(""),
        );
        let body = serde_json::to_vec(&object).unwrap_or_default();
        let (mut stored, _) = objects::patch(
            &mut state,
            &info,
            &key,
            patch::PatchKind::Apply,
            &body,
            Part::Main,
            WriteOptions::default(),
        )?;
        if info.status_subresource && object.get("status").is_some() {
            let status =
                serde_json::to_vec(&serde_json::json!({"status": object["status"]})).unwrap_or_default();
            stored = objects::patch(
                &mut state,
                &info,
                &key,
                patch::PatchKind::Merge,
                &status,
                Part::Status,
                WriteOptions::default(),
            )?
            .0;
        }
        Ok(Arc::new(stored.value()))
    }

    /// Replaces an object's status (as PUT /status would, without a resourceVersion check).
    pub fn update_status_internal(
        &self,
        id: &ResourceId,
        namespace: &str,
        name: &str,
        status: Value,
    ) -> Result<Arc<Value>, Error> {
        let mut state = self.shared.state();
        let info = Self::info(&state, id)?;
        let key = Self::key(&info, namespace, name);
        let mut object = state
            .get_value(id, &key)
            .ok_or_else(|| Error::Api(objects::not_found(&info, name)))?;
        object["status"] = status;
        let updated = objects::update(
            &mut state,
            &info,
            &key,
            object,
            Part::Status,
            WriteOptions::default(),
        )?;
        Ok(Arc::new(updated.value()))
    }

    /// Deletes an object as DELETE would; `grace_period` `Some(0)` is how a kubelet finishes a terminating pod.
    pub fn delete_internal(
        &self,
        id: &ResourceId,
        namespace: &str,
        name: &str,
        grace_period: Option<i64>,
    ) -> Result<(), Error> {
        let mut state = self.shared.state();
        let info = Self::info(&state, id)?;
        let key = Self::key(&info, namespace, name);
        let opts = delete::DeleteOptions {
            grace_period,
            ..delete::DeleteOptions::default()
        };
        delete::delete(&mut state, &info, &key, &opts)?;
        Ok(())
    }

    /// Binds a pod to a node, as the scheduler's POST pods/NAME/binding does.
    pub fn bind_pod_internal(&self, namespace: &str, name: &str, node: &str) -> Result<Arc<Value>, Error> {
        let mut state = self.shared.state();
        let info = Self::info(&state, &ResourceId::core("pods"))?;
        let binding = serde_json::json!({"target": {"kind": "Node", "name": node}});
        let bound = subresources::bind(&mut state, &info, &ObjectKey::new(namespace, name), &binding)?;
        Ok(Arc::new(bound.value()))
    }
}
