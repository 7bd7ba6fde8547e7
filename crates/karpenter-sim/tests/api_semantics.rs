//! Request semantics through kube's clients: selectors, filtered watches, status and scale subresources,
//! server-side apply, CRDs created through the API, generateName, dryRun, pagination.

mod support;

use futures::TryStreamExt;
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Pod},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, ResourceExt,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams, WatchEvent,
        WatchParams,
    },
};
use serde_json::json;
use support::{TestResult, server};

fn pod(name: &str, labels: serde_json::Value, node: Option<&str>) -> Result<Pod, serde_json::Error> {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}))
}

fn names(list: &[Pod]) -> Vec<String> {
    list.iter().map(|p| p.name_any()).collect()
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> Result<Box<kube::core::Status>, String> {
    match result {
        Err(kube::Error::Api(status)) => Ok(status),
        other => Err(format!("expected an API error, got {other:?}")),
    }
}

// concepts "Labels and Selectors" and "Field Selectors".
#[tokio::test]
async fn label_and_field_selectors() -> TestResult {
    let server = server();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    pods.create(
        &PostParams::default(),
        &pod("a", json!({"app": "web", "tier": "1"}), Some("n1"))?,
    )
    .await?;
    pods.create(
        &PostParams::default(),
        &pod("b", json!({"app": "db"}), Some("n2"))?,
    )
    .await?;
    pods.create(&PostParams::default(), &pod("c", json!({"app": "batch"}), None)?)
        .await?;
    let list = |lp: ListParams| {
        let pods = pods.clone();
        async move { pods.list(&lp).await.map(|l| names(&l.items)) }
    };
    assert_eq!(list(ListParams::default().labels("app=web")).await?, ["a"]);
    assert_eq!(list(ListParams::default().labels("app==web")).await?, ["a"]);
    assert_eq!(list(ListParams::default().labels("app!=web")).await?, ["b", "c"]);
    assert_eq!(
        list(ListParams::default().labels("app in (web,db)")).await?,
        ["a", "b"]
    );
    assert_eq!(
        list(ListParams::default().labels("app notin (web,db)")).await?,
        ["c"]
    );
    assert_eq!(list(ListParams::default().labels("tier")).await?, ["a"]);
    assert_eq!(list(ListParams::default().labels("!tier")).await?, ["b", "c"]);
    assert_eq!(
        list(ListParams::default().fields("spec.nodeName=n2")).await?,
        ["b"]
    );
    assert_eq!(list(ListParams::default().fields("spec.nodeName=")).await?, ["c"]);
    assert_eq!(
        list(ListParams::default().fields("metadata.name=a,status.phase=Pending")).await?,
        ["a"]
    );
    assert_eq!(
        list(ListParams::default().fields("metadata.namespace!=default")).await?,
        Vec::<String>::new()
    );
    let status = api_error(pods.list(&ListParams::default().fields("spec.bogus=1")).await)?;
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    assert!(
        status.message.contains("field label not supported"),
        "{}",
        status.message
    );
    Ok(())
}

// api-concepts "Retrieving large results sets in chunks".
#[tokio::test]
async fn limit_and_continue() -> TestResult {
    let server = server();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    for i in 0..5 {
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": format!("c{i}")}}))?,
        )
        .await?;
    }
    let first = cms.list(&ListParams::default().limit(2)).await?;
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().ok_or("no continue token")?;
    let second = cms
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await?;
    assert_eq!(
        second.items.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
        ["c2", "c3"]
    );
    assert_eq!(second.metadata.resource_version, first.metadata.resource_version);
    Ok(())
}

// A watch with a field selector sees a pod that starts matching (bound to the node) as ADDED and one that stops
// matching as DELETED, like the real watch cache.
#[tokio::test(start_paused = true)]
async fn filtered_watch_reports_entering_and_leaving() -> TestResult {
    let server = server();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    pods.create(&PostParams::default(), &pod("p", json!({"app": "web"}), None)?)
        .await?;
    let rv = server.resource_version().to_string();
    let mut on_n1 = Box::pin(
        pods.watch(&WatchParams::default().fields("spec.nodeName=n1"), &rv)
            .await?,
    );
    server.bind_pod_internal("default", "p", "n1")?;
    match on_n1.try_next().await? {
        Some(WatchEvent::Added(p)) => assert_eq!(p.spec.and_then(|s| s.node_name).as_deref(), Some("n1")),
        other => return Err(format!("expected ADDED, got {other:?}").into()),
    }
    // GET .../pods/NAME?watch=true (the legacy single-object watch) sees only that object.
    pods.create(
        &PostParams::default(),
        &pod("other", json!({"app": "web"}), None)?,
    )
    .await?;
    let request = http::Request::get(format!(
        "/api/v1/namespaces/default/pods/p?watch=true&resourceVersion={rv}"
    ))
    .body(Vec::new())?;
    let mut single = Box::pin(server.client().request_events::<Pod>(request).await?);
    match single.try_next().await? {
        Some(WatchEvent::Modified(p)) => assert_eq!(p.name_any(), "p"),
        other => return Err(format!("expected the binding of p, got {other:?}").into()),
    }
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"x": "y"}}})),
    )
    .await?;
    match single.try_next().await? {
        Some(WatchEvent::Modified(p)) => assert_eq!(p.annotations().get("x").map(String::as_str), Some("y")),
        other => return Err(format!("expected p's annotation, not another pod: {other:?}").into()),
    }
    let mut web = Box::pin(
        pods.watch(
            &WatchParams::default().labels("app=web"),
            &server.resource_version().to_string(),
        )
        .await?,
    );
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await?;
    assert!(matches!(web.try_next().await?, Some(WatchEvent::Deleted(_))));
    Ok(())
}

// api-conventions "Spec and Status": /status writes change only status; main writes keep the stored status.
#[tokio::test]
async fn status_subresource_separates_spec_and_status() -> TestResult {
    let server = server();
    let deployments: Api<Deployment> = Api::default_namespaced(server.client());
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "d"}, "spec": {"replicas": 1,
        "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}}))?;
    deployments.create(&PostParams::default(), &d).await?;
    let mut with_status = deployments.get("d").await?;
    with_status.status = Some(serde_json::from_value(
        json!({"replicas": 1, "readyReplicas": 1}),
    )?);
    with_status.spec.as_mut().ok_or("spec")?.replicas = Some(9);
    let updated = deployments
        .replace_status("d", &PostParams::default(), &with_status)
        .await?;
    assert_eq!(
        updated.spec.as_ref().and_then(|s| s.replicas),
        Some(1),
        "status writes ignore spec"
    );
    assert_eq!(updated.status.as_ref().and_then(|s| s.ready_replicas), Some(1));
    assert_eq!(updated.metadata.generation, Some(1));

    let mut main = updated.clone();
    main.status = None;
    main.spec.as_mut().ok_or("spec")?.replicas = Some(3);
    let replaced = deployments.replace("d", &PostParams::default(), &main).await?;
    assert_eq!(
        replaced.status.and_then(|s| s.ready_replicas),
        Some(1),
        "main writes keep status"
    );
    assert_eq!(replaced.metadata.generation, Some(2));
    Ok(())
}

// The scale subresource of a built-in workload and of a CRD declaring it (NodePool: .spec.replicas/.status.nodes).
#[tokio::test]
async fn scale_subresource() -> TestResult {
    let server = server();
    let client = server.client();
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "d"}, "spec": {"replicas": 1,
        "selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": []}}}}))?;
    deployments.create(&PostParams::default(), &d).await?;
    let scale = deployments.get_scale("d").await?;
    assert_eq!(
        scale.status.as_ref().and_then(|s| s.selector.as_deref()),
        Some("app=d")
    );
    deployments
        .patch_scale(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await?;
    assert_eq!(deployments.get("d").await?.spec.and_then(|s| s.replicas), Some(4));

    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
    let nodepools: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let mut pool = DynamicObject::new("default", &ApiResource::from_gvk(&gvk));
    pool.data = json!({"spec": {"replicas": 2, "template": {"spec": {"requirements": []}}}});
    nodepools.create(&PostParams::default(), &pool).await?;
    nodepools
        .patch_status(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nodes": 1}})),
        )
        .await?;
    let scale = nodepools.get_scale("default").await?;
    assert_eq!(
        (
            scale.spec.and_then(|s| s.replicas),
            scale.status.map(|s| s.replicas)
        ),
        (Some(2), Some(1))
    );
    let mut wanted = nodepools.get_scale("default").await?;
    wanted.spec = Some(k8s_openapi::api::autoscaling::v1::ScaleSpec { replicas: Some(5) });
    nodepools
        .replace_scale("default", &PostParams::default(), &wanted)
        .await?;
    assert_eq!(nodepools.get("default").await?.data["spec"]["replicas"], 5);
    // The scale's resourceVersion is the object's: a stale one conflicts.
    let status = api_error(
        nodepools
            .replace_scale("default", &PostParams::default(), &wanted)
            .await,
    )?;
    assert_eq!(status.code, 409);
    Ok(())
}

// Server-side apply as kube's Patch::Apply uses it: create if absent, merge otherwise, on status too.
#[tokio::test]
async fn server_side_apply_creates_then_merges() -> TestResult {
    let server = server();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let params = PatchParams::apply("sim-test").force();
    let applied = cms
        .patch(
            "ssa",
            &params,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ssa", "labels": {"a": "1"}}, "data": {"x": "1"}})),
        )
        .await?;
    assert_eq!(applied.metadata.generation, Some(1));
    let merged = cms
        .patch(
            "ssa",
            &params,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ssa", "labels": {"b": "2"}}, "data": {"y": "2"}})),
        )
        .await?;
    assert_eq!(merged.labels().len(), 2);
    assert_eq!(merged.data.map(|d| d.len()), Some(2));
    let status = api_error(
        cms.patch("ssa", &PatchParams::default(), &Patch::Apply(json!({"data": {}})))
            .await,
    )?;
    assert_eq!(
        status.code, 422,
        "apply needs a fieldManager (422 Invalid, as kube-apiserver answers)"
    );

    let pods: Api<Pod> = Api::default_namespaced(server.client());
    pods.create(&PostParams::default(), &pod("p", json!({}), Some("n1"))?)
        .await?;
    let patched = pods
        .patch_status(
            "p",
            &params,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod",
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await?;
    assert_eq!(patched.status.and_then(|s| s.phase).as_deref(), Some("Running"));
    Ok(())
}

// A CustomResourceDefinition created through the API is served at once, with its status subresource.
#[tokio::test]
async fn crd_created_through_the_api_is_served() -> TestResult {
    let server = server();
    let client = server.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))?;
    let created = crds.create(&PostParams::default(), &crd).await?;
    let established = created.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        established
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets: Api<DynamicObject> =
        Api::default_namespaced_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let mut widget = DynamicObject::new("w", &ApiResource::from_gvk(&gvk));
    widget.data = json!({"spec": {"size": 1}, "status": {"ignored": true}});
    let stored = widgets.create(&PostParams::default(), &widget).await?;
    assert!(
        stored.data.get("status").is_none(),
        "status is dropped on create when the subresource exists"
    );
    // Custom resources need a resourceVersion on update.
    let mut edit = stored.clone();
    edit.metadata.resource_version = None;
    let status = api_error(widgets.replace("w", &PostParams::default(), &edit).await)?;
    assert_eq!(status.code, 422);
    // Strategic merge patch is for built-in kinds only.
    let status = api_error(
        widgets
            .patch(
                "w",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"size": 2}})),
            )
            .await,
    )?;
    assert_eq!(status.code, 415);

    crds.delete("widgets.example.com", &Default::default()).await?;
    let status = api_error(widgets.get("w").await)?;
    assert_eq!(status.code, 404);
    Ok(())
}

#[tokio::test]
async fn generate_name_and_dry_run() -> TestResult {
    let server = server();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let generated = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"generateName": "cfg-"}}))?,
        )
        .await?;
    assert!(generated.name_any().starts_with("cfg-") && generated.name_any().len() == 9);
    let dry = cms
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &serde_json::from_value(json!({"metadata": {"name": "dry"}}))?,
        )
        .await?;
    assert!(dry.uid().is_some());
    assert!(cms.get_opt("dry").await?.is_none(), "dryRun=All stores nothing");
    let status = api_error(
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": generated.name_any()}}))?,
        )
        .await,
    )?;
    assert_eq!((status.code, status.reason.as_str()), (409, "AlreadyExists"));
    Ok(())
}
