//! The one request-handling path: the in-process tower Service and the HTTP server both end here.
//!
//! Order: route, fault delay, fault errors, dispatch by verb and subresource, audit record.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, header};
use serde_json::{Value, json};

use super::{
    Shared,
    audit::AuditRecord,
    delete::{self, DeleteOptions, Deleted, Propagation},
    discovery, events,
    objects::{self, Part, WriteOptions, not_found},
    patch::{self, PatchKind},
    read::{self, ListParams},
    resources::ResourceInfo,
    response::{self, ResponseBody},
    route::{self, Query, ResourceRequest, Route, Verb},
    selectors::{FieldSelector, LabelSelector},
    store::{ObjectKey, Stored, WatchStart},
    subresources, table, watch,
};
use crate::error::ApiStatus;

/// Serves one request.
pub async fn handle(shared: &Arc<Shared>, request: Request<Bytes>) -> Response<ResponseBody> {
    let (parts, body) = request.into_parts();
    let query = Query::parse(parts.uri.query());
    let routed = route::route(&shared.state().registry, &parts.method, parts.uri.path(), &query);
    let request = match routed {
        Err(status) => return response::error(&status),
        Ok(Route::NonResource(path)) => return discovery::answer(&shared.state(), &path),
        Ok(Route::Resource(request)) => request,
    };
    let delay = shared.faults().delay();
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let info = &request.info;
    let fault = shared.faults().fire(
        request.verb,
        &info.group,
        &info.plural,
        request.subresource.as_deref(),
    );
    let response = match fault {
        Some(code) => response::error(&ApiStatus::injected(code)),
        None => dispatch(shared, &request, &query, &parts.headers, &body)
            .unwrap_or_else(|status| response::error(&status)),
    };
    shared.record(AuditRecord {
        verb: request.verb.as_str(),
        group: info.group.clone(),
        resource: info.plural.clone(),
        subresource: request.subresource.clone(),
        namespace: Some(request.namespace.clone()).filter(|ns| !ns.is_empty()),
        name: request.name.clone(),
        code: response.status().as_u16(),
    });
    response
}

fn parse_body(body: &[u8]) -> Result<Value, ApiStatus> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiStatus::bad_request(format!("error decoding request body: {e}")))
}

fn dry_run(query: &Query) -> WriteOptions {
    WriteOptions {
        dry_run: query.get("dryRun") == Some("All"),
    }
}

fn list_params(request: &ResourceRequest, query: &Query) -> Result<ListParams, ApiStatus> {
    Ok(ListParams {
        namespace: Some(request.namespace.clone()).filter(|ns| !ns.is_empty()),
        labels: LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?,
        fields: FieldSelector::parse(
            query.get("fieldSelector").unwrap_or(""),
            &request.info.selectable_fields,
        )?,
        limit: query.int("limit").and_then(|l| usize::try_from(l).ok()),
        continue_token: query.get("continue").map(str::to_string),
    })
}

fn delete_options(query: &Query, body: &Value) -> Result<DeleteOptions, ApiStatus> {
    let policy = body["propagationPolicy"]
        .as_str()
        .or(query.get("propagationPolicy"));
    let propagation = match policy {
        Some(p) => Some(
            Propagation::parse(p)
                .ok_or_else(|| ApiStatus::bad_request(format!("unsupported propagationPolicy {p:?}")))?,
        ),
        // The deprecated orphanDependents flag still means Orphan.
        None if body["orphanDependents"].as_bool() == Some(true) || query.flag("orphanDependents") => {
            Some(Propagation::Orphan)
        }
        None => None,
    };
    let dry_run = body["dryRun"]
        .as_array()
        .is_some_and(|d| d.iter().any(|v| v == "All"))
        || query.get("dryRun") == Some("All");
    Ok(DeleteOptions {
        grace_period: body["gracePeriodSeconds"]
            .as_i64()
            .or(query.int("gracePeriodSeconds")),
        propagation,
        precondition_uid: body["preconditions"]["uid"].as_str().map(str::to_string),
        precondition_rv: body["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
        dry_run,
    })
}

fn object_key(request: &ResourceRequest) -> ObjectKey {
    ObjectKey::new(&request.namespace, request.name.as_deref().unwrap_or(""))
}

fn part(request: &ResourceRequest) -> Part {
    if request.subresource.as_deref() == Some("status") {
        Part::Status
    } else {
        Part::Main
    }
}

fn dispatch(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response<ResponseBody>, ApiStatus> {
    if events::is_events_v1(&request.info) {
        return dispatch_events_v1(shared, request, query, headers, body);
    }
    let info = &request.info;
    let key = object_key(request);
    let sub = request.subresource.as_deref();
    match (request.verb, sub) {
        (Verb::Get, None | Some("status")) => {
            let object = shared
                .state()
                .get(&info.id(), &key)
                .ok_or_else(|| not_found(info, &key.name))?;
            if sub.is_none() && table::wanted(headers) && table::printable(info) {
                let now = shared.state().clock.now();
                let object = object.value();
                let metadata = json!({"resourceVersion": object["metadata"]["resourceVersion"]});
                let table = table::table(info, &[&object], metadata, query.get("includeObject"), now);
                return Ok(response::json(200, &table));
            }
            Ok(response::object(200, &object))
        }
        (Verb::Get, Some("scale")) => {
            let object = shared
                .state()
                .get(&info.id(), &key)
                .ok_or_else(|| not_found(info, &key.name))?;
            Ok(response::json(
                200,
                &subresources::scale_of(info, &object.value())?,
            ))
        }
        (Verb::List, None) => {
            let params = list_params(request, query)?;
            let page = read::list(&shared.state(), info, &params)?;
            if table::wanted(headers) && table::printable(info) {
                let now = shared.state().clock.now();
                let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
                if let Some(token) = &page.continue_token {
                    metadata["continue"] = json!(token);
                }
                let parsed: Vec<Value> = page.items.iter().map(|o| o.value()).collect();
                let objects: Vec<&Value> = parsed.iter().collect();
                let table = table::table(info, &objects, metadata, query.get("includeObject"), now);
                return Ok(response::json(200, &table));
            }
            Ok(response::bytes(
                200,
                "application/json",
                read::list_json(info, &info.api_version(), &page),
            ))
        }
        (Verb::Watch, None) => watch(shared, request, query, info, None),
        (Verb::Create, None) => {
            let mut object = parse_body(body)?;
            let mut namespace = request.namespace.clone();
            if info.namespaced && namespace.is_empty() {
                namespace = object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_string();
            }
            if object.is_object() && !object["metadata"].is_object() {
                object["metadata"] = json!({});
            }
            let created = objects::create(&mut shared.state(), info, &namespace, object, dry_run(query))?;
            Ok(response::object(201, &created))
        }
        (Verb::Create, Some("eviction")) => {
            subresources::evict(&mut shared.state(), info, &key, &parse_body(body)?)?;
            Ok(response::success(201, None))
        }
        (Verb::Create, Some("binding")) => {
            subresources::bind(&mut shared.state(), info, &key, &parse_body(body)?)?;
            Ok(response::success(201, None))
        }
        (Verb::Update, None | Some("status")) => {
            let object = parse_body(body)?;
            let updated = objects::update(
                &mut shared.state(),
                info,
                &key,
                object,
                part(request),
                dry_run(query),
            )?;
            Ok(response::object(200, &updated))
        }
        (Verb::Update, Some("scale")) => {
            let wanted = parse_body(body)?;
            let scale =
                subresources::write_scale(&mut shared.state(), info, &key, dry_run(query), |scale| {
                    scale["spec"] = wanted["spec"].clone();
                    scale["metadata"]["resourceVersion"] = wanted["metadata"]["resourceVersion"].clone();
                    Ok(())
                })?;
            Ok(response::json(200, &scale))
        }
        (Verb::Patch, _) => {
            let kind = patch_kind(headers)?;
            require_field_manager(kind, query)?;
            if sub == Some("scale") {
                let scale =
                    subresources::write_scale(&mut shared.state(), info, &key, dry_run(query), |scale| {
                        patch::apply_patch(kind, scale, body)
                    })?;
                return Ok(response::json(200, &scale));
            }
            let (object, created) = objects::patch(
                &mut shared.state(),
                info,
                &key,
                kind,
                body,
                part(request),
                dry_run(query),
            )?;
            Ok(response::object(if created { 201 } else { 200 }, &object))
        }
        (Verb::Delete, None) => {
            let opts = delete_options(query, &parse_body(body)?)?;
            match delete::delete(&mut shared.state(), info, &key, &opts)? {
                Deleted::Pending(object) => Ok(response::object(200, &object)),
                Deleted::Gone(object) => {
                    let mut details = json!({"name": key.name, "kind": info.plural, "uid": object.uid()});
                    if !info.group.is_empty() {
                        details["group"] = json!(info.group);
                    }
                    Ok(response::success(200, Some(details)))
                }
            }
        }
        (Verb::DeleteCollection, None) => {
            let params = list_params(request, query)?;
            let opts = delete_options(query, &parse_body(body)?)?;
            let mut state = shared.state();
            let page = read::list(
                &state,
                info,
                &ListParams {
                    limit: None,
                    continue_token: None,
                    ..params
                },
            )?;
            let mut deleted = Vec::new();
            for object in &page.items {
                if let Ok(Deleted::Gone(o) | Deleted::Pending(o)) =
                    delete::delete(&mut state, info, &ObjectKey::of_stored(object), &opts)
                {
                    deleted.push(o);
                }
            }
            let page = read::ListPage {
                items: deleted,
                resource_version: state.rv,
                continue_token: None,
            };
            Ok(response::bytes(
                200,
                "application/json",
                read::list_json(info, &info.api_version(), &page),
            ))
        }
        _ => Err(ApiStatus::method_not_allowed(format!(
            "{} is not supported on {}",
            request.verb, request.info.plural
        ))),
    }
}

fn patch_kind(headers: &HeaderMap) -> Result<PatchKind, ApiStatus> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    PatchKind::from_content_type(content_type).ok_or_else(|| {
        ApiStatus::unsupported_media_type(format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type:?})"))
    })
}

fn require_field_manager(kind: PatchKind, query: &Query) -> Result<(), ApiStatus> {
    if kind == PatchKind::Apply && query.get("fieldManager").is_none() {
        return Err(ApiStatus::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            "fieldManager",
            "Required value: is required for apply patch",
        ));
    }
    Ok(())
}

/// events.k8s.io/v1: the stored core v1 Events, converted in and out (see `events.rs`).
fn dispatch_events_v1(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response<ResponseBody>, ApiStatus> {
    let core_info = shared
        .state()
        .registry
        .by_id(&events::core_id())
        .ok_or_else(|| ApiStatus::not_found("", "events", ""))?;
    let core = ResourceRequest {
        info: Arc::clone(&core_info),
        ..request.clone()
    };
    let mut query = query.clone();
    if let Some(fields) = query.get("fieldSelector") {
        let fields = events::core_field_selector(fields);
        query.set("fieldSelector", fields);
    }
    let info = &core_info;
    let key = object_key(request);
    let shown = |code: u16, object: &Stored| Ok(response::json(code, &events::from_core(&object.value())));
    match (request.verb, request.subresource.as_deref()) {
        (Verb::Get, None) => {
            let object = shared
                .state()
                .get(&info.id(), &key)
                .ok_or_else(|| not_found(&request.info, &key.name))?;
            shown(200, &object)
        }
        (Verb::List, None) => {
            let params = list_params(&core, &query)?;
            let mut page = read::list(&shared.state(), info, &params)?;
            page.items = page.items.iter().map(events::from_core_stored).collect();
            Ok(response::bytes(
                200,
                "application/json",
                read::list_json(&request.info, &request.info.api_version(), &page),
            ))
        }
        (Verb::Watch, None) => watch(shared, &core, &query, &request.info, Some(events::from_core)),
        (Verb::Create, None) => {
            let mut object = events::to_core(&parse_body(body)?);
            if !object["metadata"].is_object() {
                object["metadata"] = json!({});
            }
            let namespace = if request.namespace.is_empty() {
                object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_string()
            } else {
                request.namespace.clone()
            };
            let created = objects::create(&mut shared.state(), info, &namespace, object, dry_run(&query))?;
            shown(201, &created)
        }
        (Verb::Update, None) => {
            let object = events::to_core(&parse_body(body)?);
            let updated = objects::update(
                &mut shared.state(),
                info,
                &key,
                object,
                Part::Main,
                dry_run(&query),
            )?;
            shown(200, &updated)
        }
        (Verb::Patch, None) => {
            let kind = patch_kind(headers)?;
            require_field_manager(kind, &query)?;
            let mut state = shared.state();
            let current = state
                .get(&info.id(), &key)
                .ok_or_else(|| not_found(&request.info, &key.name))?;
            let mut object = events::from_core(&current.value());
            patch::apply_patch(kind, &mut object, body)?;
            let updated = objects::update(
                &mut state,
                info,
                &key,
                events::to_core(&object),
                Part::Main,
                dry_run(&query),
            )?;
            shown(200, &updated)
        }
        _ => dispatch(shared, &core, &query, headers, body),
    }
}

fn watch(
    shared: &Arc<Shared>,
    request: &ResourceRequest,
    query: &Query,
    shown_as: &ResourceInfo,
    convert: Option<fn(&Value) -> Value>,
) -> Result<Response<ResponseBody>, ApiStatus> {
    let mut params = list_params(request, query)?;
    if let Some(name) = &request.name {
        // GET .../NAME?watch=true watches that one object.
        let pinned = match query.get("fieldSelector") {
            Some(fields) => format!("metadata.name={name},{fields}"),
            None => format!("metadata.name={name}"),
        };
        params.fields = FieldSelector::parse(&pinned, &request.info.selectable_fields)?;
    }
    let start = match query.get("resourceVersion") {
        _ if query.flag("sendInitialEvents") => WatchStart::Now {
            initial_end_bookmark: true,
        },
        None | Some("0") => WatchStart::Now {
            initial_end_bookmark: false,
        },
        Some(rv) => WatchStart::After(
            rv.parse()
                .map_err(|_| ApiStatus::bad_request(format!("invalid resource version: {rv}")))?,
        ),
    };
    let info = &request.info;
    let timeout = query
        .int("timeoutSeconds")
        .and_then(|t| u64::try_from(t).ok())
        .unwrap_or(1800);
    let spec = watch::WatchSpec {
        id: info.id(),
        kind: shown_as.kind.clone(),
        api_version: shown_as.api_version(),
        namespace: params.namespace,
        labels: params.labels,
        fields: params.fields,
        bookmarks: query.flag("allowWatchBookmarks"),
        timeout: Duration::from_secs(timeout),
        convert,
    };
    let (watcher, rx) = shared
        .state()
        .watch(&info.id(), start)
        .ok_or_else(|| ApiStatus::not_found(&info.group, &info.plural, ""))?;
    let mut response = Response::new(watch::body(Arc::clone(shared), spec, watcher, rx));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}
