//! kube-runtime's watcher, reflector and Controller run unmodified against the in-memory API server.

mod support;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{
        Controller, WatchStreamExt,
        controller::Action,
        finalizer::{Event as Finalizer, finalizer},
        reflector, watcher,
    },
};
use serde_json::json;
use support::{TestResult, eventually, server, server_with_history};

fn config_map(name: &str) -> Result<ConfigMap, serde_json::Error> {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "sim"}}, "data": {"k": "v"}}))
}

// api-conventions "Concurrency Control and Consistency": replace with a stale resourceVersion is a 409 Conflict
// carrying a metav1.Status.
#[tokio::test]
async fn typed_crud_and_conflict_on_stale_resource_version() -> TestResult {
    let server = server();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let created = api.create(&PostParams::default(), &config_map("a")?).await?;
    assert!(created.uid().is_some());
    assert_eq!(created.metadata.generation, Some(1));
    let fetched = api.get("a").await?;
    assert_eq!(fetched.resource_version(), created.resource_version());

    let mut edit = fetched.clone();
    edit.data = Some([("k".to_string(), "w".to_string())].into());
    let replaced = api.replace("a", &PostParams::default(), &edit).await?;
    assert_ne!(replaced.resource_version(), fetched.resource_version());

    match api.replace("a", &PostParams::default(), &edit).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
            assert!(
                status.message.contains("the object has been modified"),
                "{}",
                status.message
            );
        }
        other => return Err(format!("expected a conflict, got {other:?}").into()),
    }

    let listed = api.list(&ListParams::default().labels("app=sim")).await?;
    assert_eq!(listed.items.len(), 1);
    assert!(listed.metadata.resource_version.is_some());
    api.delete("a", &DeleteParams::default()).await?;
    match api.get("a").await {
        Err(kube::Error::Api(status)) => assert_eq!((status.code, status.reason.as_str()), (404, "NotFound")),
        other => return Err(format!("expected 404, got {other:?}").into()),
    }
    Ok(())
}

// api-concepts "Efficient detection of changes": events arrive in order, ADDED, MODIFIED, DELETED.
#[tokio::test(start_paused = true)]
async fn watcher_sees_added_modified_deleted_in_order() -> TestResult {
    let server = server();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    // The initial list: Init, InitDone (empty namespace).
    assert!(matches!(events.try_next().await?, Some(watcher::Event::Init)));
    assert!(matches!(events.try_next().await?, Some(watcher::Event::InitDone)));

    api.create(&PostParams::default(), &config_map("a")?).await?;
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await?;
    api.delete("a", &DeleteParams::default()).await?;

    let mut seen = Vec::new();
    while seen.len() < 3 {
        match events.try_next().await? {
            Some(watcher::Event::Apply(cm)) => {
                seen.push(format!("apply {}", cm.data.unwrap_or_default()["k"]))
            }
            Some(watcher::Event::Delete(cm)) => seen.push(format!("delete {}", cm.name_any())),
            Some(_) => {}
            None => return Err("watch stream ended".into()),
        }
    }
    assert_eq!(seen, ["apply v", "apply 2", "delete a"]);
    Ok(())
}

// kube-runtime's reflector resumes after a dropped watch from its last resourceVersion without relisting.
#[tokio::test(start_paused = true)]
async fn reflector_resumes_after_dropped_watch() -> TestResult {
    let server = server();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &config_map("before")?).await?;
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await?;
    assert_eq!(reader.len(), 1);
    eventually(Duration::from_secs(5), || async { server.open_watches() == 1 }).await?;

    server.faults().drop_watches();
    api.create(&PostParams::default(), &config_map("after")?).await?;
    eventually(Duration::from_secs(30), || async { reader.len() == 2 }).await?;
    let lists = server
        .audit()
        .iter()
        .filter(|r| r.verb == "list" && r.resource == "configmaps")
        .count();
    assert_eq!(lists, 1, "a dropped watch resumes from the last resourceVersion");
    let watches = server
        .audit()
        .iter()
        .filter(|r| r.verb == "watch" && r.resource == "configmaps")
        .count();
    assert!(watches >= 2);
    task.abort();
    Ok(())
}

// api-concepts "Efficient detection of changes": a watch from a resourceVersion older than the retained history
// gets 410 Gone (an ERROR event with an Expired Status); the watcher relists and the store catches up.
#[tokio::test(start_paused = true)]
async fn reflector_relists_after_410_gone() -> TestResult {
    let server = server_with_history(5);
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &config_map("first")?).await?;
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await?;
    eventually(Duration::from_secs(5), || async { server.open_watches() == 1 }).await?;

    // Drop the watch and, before the watcher can come back, push the history past its resourceVersion.
    server.faults().drop_watches();
    let configmaps = karpenter_sim::apiserver::ResourceId::core("configmaps");
    for i in 0..10 {
        server.create_internal(
            &configmaps,
            json!({"metadata": {"namespace": "default", "name": format!("burst-{i}")}}),
        )?;
    }
    eventually(Duration::from_secs(60), || async { reader.len() == 11 }).await?;
    let lists = server
        .audit()
        .iter()
        .filter(|r| r.verb == "list" && r.resource == "configmaps")
        .count();
    assert_eq!(lists, 2, "410 Gone makes the watcher relist");
    task.abort();
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn watch_from_old_resource_version_answers_410_event() -> TestResult {
    let server = server_with_history(2);
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    for name in ["a", "b", "c", "d"] {
        api.create(&PostParams::default(), &config_map(name)?).await?;
    }
    let mut stream = api.watch(&kube::api::WatchParams::default(), "1").await?.boxed();
    match stream.try_next().await? {
        Some(kube::api::WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status.message.starts_with("too old resource version"),
                "{}",
                status.message
            );
        }
        other => return Err(format!("expected a 410 ERROR event, got {other:?}").into()),
    }
    Ok(())
}

// api-concepts "Watch bookmarks": with allowWatchBookmarks the server sends BOOKMARK events with the current
// resourceVersion.
#[tokio::test(start_paused = true)]
async fn bookmarks_carry_the_current_resource_version() -> TestResult {
    let server = server();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &config_map("a")?).await?;
    let rv = server.resource_version().to_string();
    let mut stream = api.watch(&kube::api::WatchParams::default(), &rv).await?.boxed();
    // Something else changes (another kind), then a minute of virtual time passes.
    server.create_internal(
        &karpenter_sim::apiserver::ResourceId::core("secrets"),
        json!({"metadata": {"namespace": "default", "name": "s"}}),
    )?;
    match stream.try_next().await? {
        Some(kube::api::WatchEvent::Bookmark(bookmark)) => {
            assert_eq!(
                bookmark.metadata.resource_version,
                server.resource_version().to_string()
            );
            assert_eq!(bookmark.types.kind, "ConfigMap");
        }
        other => return Err(format!("expected a bookmark, got {other:?}").into()),
    }
    Ok(())
}

// api-concepts "Streaming lists": sendInitialEvents=true streams the current objects, then a bookmark annotated
// k8s.io/initial-events-end.
#[tokio::test(start_paused = true)]
async fn streaming_list_watcher_works() -> TestResult {
    let server = server();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &config_map("a")?).await?;
    let config = watcher::Config::default().streaming_lists();
    let mut events = watcher(api.clone(), config).boxed();
    let mut initial = Vec::new();
    loop {
        match events.try_next().await? {
            Some(watcher::Event::InitApply(cm)) => initial.push(cm.name_any()),
            Some(watcher::Event::InitDone) => break,
            Some(_) => {}
            None => return Err("stream ended".into()),
        }
    }
    assert_eq!(initial, ["a"]);
    Ok(())
}

#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, s: String) {
        if let Ok(mut v) = self.0.lock() {
            v.push(s);
        }
    }

    fn contains(&self, s: &str) -> bool {
        self.0.lock().map(|v| v.iter().any(|x| x == s)).unwrap_or(false)
    }
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ReconcileError(#[from] Box<kube::runtime::finalizer::Error<kube::Error>>);

const FINALIZER: &str = "sim.karpenter.sh/test";

async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<(Api<ConfigMap>, Seen)>) -> Result<Action, ReconcileError> {
    let (api, seen) = (&ctx.0, ctx.1.clone());
    finalizer(api, FINALIZER, cm, |event| async move {
        match event {
            Finalizer::Apply(cm) => {
                seen.push(format!("apply {}", cm.name_any()));
                let patch = Patch::Merge(json!({"metadata": {"annotations": {"reconciled": "yes"}}}));
                api.patch(&cm.name_any(), &PatchParams::default(), &patch).await?;
                Ok(Action::await_change())
            }
            Finalizer::Cleanup(cm) => {
                seen.push(format!("cleanup {}", cm.name_any()));
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| ReconcileError(Box::new(e)))
}

fn error_policy(_cm: Arc<ConfigMap>, _error: &ReconcileError, _ctx: Arc<(Api<ConfigMap>, Seen)>) -> Action {
    Action::requeue(Duration::from_secs(1))
}

// A kube-runtime Controller with the finalizer helper (JSON patch with a test op, deletionTimestamp, removal of
// the last finalizer) and an owned-object watch.
#[tokio::test(start_paused = true)]
async fn controller_reconciles_and_cleans_up_with_finalizer() -> TestResult {
    let server = server();
    let client = server.client();
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let seen = Seen::default();
    let ctx = Arc::new((api.clone(), seen.clone()));
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .owns(
            Api::<Pod>::default_namespaced(client.clone()),
            watcher::Config::default(),
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    api.create(&PostParams::default(), &config_map("web")?).await?;
    eventually(Duration::from_secs(30), || async {
        api.get("web")
            .await
            .is_ok_and(|cm| cm.annotations().get("reconciled").is_some_and(|v| v == "yes"))
    })
    .await?;
    let cm = api.get("web").await?;
    assert_eq!(cm.finalizers(), [FINALIZER]);

    api.delete("web", &DeleteParams::default()).await?;
    eventually(Duration::from_secs(30), || async {
        matches!(api.get_opt("web").await, Ok(None))
    })
    .await?;
    assert!(seen.contains("apply web") && seen.contains("cleanup web"));
    task.abort();
    Ok(())
}
