//! Feeding a [`ProjectedStore`] from a kube-runtime watcher.

use std::fmt::Debug;

use futures::StreamExt;
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use serde::de::DeserializeOwned;

use crate::{Keyed, ObjectKey, ProjectedStore, StateError};

/// `namespace/name`, or `name` for a cluster-scoped object.
pub(crate) fn key_of<K: Resource>(obj: &K) -> ObjectKey {
    match obj.namespace() {
        Some(ns) => format!("{ns}/{}", obj.name_any()),
        None => obj.name_any(),
    }
}

/// Lists and watches `api` for as long as the returned future runs, keeping `store` up to date with each
/// object's projection. Errors are logged and the watcher retries with kube-runtime's default backoff
/// (relisting when the API server answers 410 Gone), so the future only ends if the stream does.
pub async fn reflect<K, P>(api: Api<K>, store: ProjectedStore<P>, kind: &'static str, project: fn(K) -> P)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
    P: Keyed,
{
    let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => store.relist_start(),
            Ok(watcher::Event::InitApply(obj)) => store.relist_item(project(obj)),
            Ok(watcher::Event::InitDone) => store.relist_done(),
            Ok(watcher::Event::Apply(obj)) => store.apply(project(obj)),
            Ok(watcher::Event::Delete(obj)) => store.delete(&key_of(&obj)),
            Err(source) => {
                let error = StateError::Watch { kind, source };
                tracing::warn!(kind, category = error.category(), %error, "watch failed; retrying");
            }
        }
    }
}

/// [`reflect`] for pods, also showing each pod version to `timing` (startup and bind durations) and
/// forgetting there the pods that are deleted.
pub(crate) async fn reflect_pods<P: Keyed>(
    api: Api<k8s_openapi::api::core::v1::Pod>,
    store: ProjectedStore<P>,
    timing: crate::PodTiming,
    project: fn(k8s_openapi::api::core::v1::Pod) -> P,
) {
    let kind = "Pod";
    let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => store.relist_start(),
            Ok(watcher::Event::InitApply(obj)) => {
                timing.observe(&obj);
                store.relist_item(project(obj));
            }
            Ok(watcher::Event::InitDone) => {
                store.relist_done();
                timing.retain(|key| store.get(key).is_some());
            }
            Ok(watcher::Event::Apply(obj)) => {
                timing.observe(&obj);
                store.apply(project(obj));
            }
            Ok(watcher::Event::Delete(obj)) => {
                let key = key_of(&obj);
                timing.forget(&key);
                store.delete(&key);
            }
            Err(source) => {
                let error = StateError::Watch { kind, source };
                tracing::warn!(kind, category = error.category(), %error, "watch failed; retrying");
            }
        }
    }
}
