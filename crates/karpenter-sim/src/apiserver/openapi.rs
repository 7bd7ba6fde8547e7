//! Just enough OpenAPI v3 for kubectl.
//!
//! kubectl apply/create/replace validate by default; kubectl first asks the OpenAPI v3 document of the object's
//! group-version whether the PATCH operation of that kind takes the `fieldValidation` query parameter. If it
//! does, kubectl leaves validation to the server (which this server does not do) and never downloads the full
//! OpenAPI v2 schema; without any OpenAPI, kubectl refuses to apply unless `--validate=false` is given. So every
//! group-version gets a document with one PATCH operation per kind, tagged with
//! `x-kubernetes-group-version-kind` and declaring `fieldValidation`. There are no schemas: kubectl then builds
//! apply patches from its compiled-in types (strategic merge) or as JSON merge patches (custom resources).

use serde_json::{Map, Value, json};

use super::{resources::ResourceInfo, store::State};

fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// GET /openapi/v3: where each group-version's document is.
pub fn root(state: &State) -> Value {
    let mut paths = Map::new();
    for info in state.registry.all() {
        for version in &info.versions {
            let path = group_version_path(&info.group, version);
            let url = format!("/openapi/v3/{path}?hash={}", state.rv);
            paths.insert(path, json!({"serverRelativeURL": url}));
        }
    }
    json!({"paths": paths})
}

fn patch_operation(info: &ResourceInfo, version: &str) -> Value {
    json!({
        "patch": {
            "operationId": format!("patch{}", info.kind),
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": info.group, "version": version, "kind": info.kind},
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            ],
            "responses": {"200": {"description": "OK"}},
        }
    })
}

/// GET /openapi/v3/api/v1 or /openapi/v3/apis/GROUP/VERSION.
pub fn group_version(state: &State, group: &str, version: &str) -> Option<Value> {
    let mut paths = Map::new();
    for info in state
        .registry
        .all()
        .iter()
        .filter(|r| r.group == group && r.versions.iter().any(|v| v == version))
    {
        let prefix = format!("/{}", group_version_path(group, version));
        let path = if info.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", info.plural)
        } else {
            format!("{prefix}/{}/{{name}}", info.plural)
        };
        paths.insert(path, patch_operation(info, version));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
