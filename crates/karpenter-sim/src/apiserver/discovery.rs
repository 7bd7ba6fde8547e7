//! Discovery and the other non-resource paths kubectl and client-go read: /api, /api/v1, /apis,
//! /apis/GROUP, /apis/GROUP/VERSION, /version, health endpoints. Only the unaggregated discovery documents are
//! served; clients that ask for aggregated discovery fall back to them when the answer's Content-Type is plain
//! JSON. OpenAPI: the minimal v3 documents of `openapi.rs`; /openapi/v2 is not served (404).

use std::collections::BTreeMap;

use http::Response;
use serde_json::{Value, json};

use super::{openapi, resources::ResourceInfo, response, response::ResponseBody, store::State};

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource_entries(info: &ResourceInfo) -> Vec<Value> {
    let mut main = json!({
        "name": info.plural, "singularName": info.singular, "namespaced": info.namespaced,
        "kind": info.kind, "verbs": VERBS,
    });
    if !info.short_names.is_empty() {
        main["shortNames"] = json!(info.short_names);
    }
    if !info.categories.is_empty() {
        main["categories"] = json!(info.categories);
    }
    let sub = |name: &str, group: Option<(&str, &str)>, kind: &str, verbs: &[&str]| {
        let mut entry = json!({"name": format!("{}/{name}", info.plural), "singularName": "",
                               "namespaced": info.namespaced, "kind": kind, "verbs": verbs});
        if let Some((group, version)) = group {
            entry["group"] = json!(group);
            entry["version"] = json!(version);
        }
        entry
    };
    let mut entries = vec![main];
    if info.status_subresource {
        entries.push(sub("status", None, &info.kind, &["get", "patch", "update"]));
    }
    if info.scale.is_some() {
        entries.push(sub(
            "scale",
            Some(("autoscaling", "v1")),
            "Scale",
            &["get", "patch", "update"],
        ));
    }
    for extra in info.extra_subresources() {
        let (group, kind) = if *extra == "eviction" {
            (Some(("policy", "v1")), "Eviction")
        } else {
            (None, "Binding")
        };
        entries.push(sub(extra, group, kind, &["create"]));
    }
    entries
}

fn resource_list(state: &State, group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = state
        .registry
        .all()
        .iter()
        .filter(|r| r.group == group && r.versions.iter().any(|v| v == version))
        .flat_map(|r| resource_entries(r))
        .collect();
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

fn groups(state: &State) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for info in state.registry.all().iter().filter(|r| !r.group.is_empty()) {
        let versions = groups.entry(info.group.clone()).or_default();
        for version in &info.versions {
            if !versions.contains(version) {
                versions.push(version.clone());
            }
        }
    }
    groups
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": entries, "preferredVersion": entries.first()})
}

fn version() -> Value {
    json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-karpenter-sim", "gitCommit": "0000000000000000000000000000000000000000",
           "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
           "platform": "linux/amd64"})
}

fn not_found() -> Response<ResponseBody> {
    response::error(&crate::error::ApiStatus {
        code: 404,
        reason: "NotFound",
        message: "the server could not find the requested resource".into(),
        details: None,
    })
}

/// Answers a non-resource GET.
pub fn answer(state: &State, path: &str) -> Response<ResponseBody> {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        ["api"] => response::json(
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}),
        ),
        ["api", version] => {
            resource_list(state, "", version).map_or_else(not_found, |l| response::json(200, &l))
        }
        ["apis"] => {
            let groups: Vec<Value> = groups(state)
                .iter()
                .map(|(name, versions)| group_json(name, versions))
                .collect();
            response::json(
                200,
                &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
            )
        }
        ["apis", group] => match groups(state).get(*group) {
            Some(versions) => {
                let mut body = group_json(group, versions);
                body["kind"] = json!("APIGroup");
                body["apiVersion"] = json!("v1");
                response::json(200, &body)
            }
            None => not_found(),
        },
        ["apis", group, version] => {
            resource_list(state, group, version).map_or_else(not_found, |l| response::json(200, &l))
        }
        ["version"] => response::json(200, &version()),
        ["openapi", "v3"] => response::json(200, &openapi::root(state)),
        ["openapi", "v3", "api", version] => {
            openapi::group_version(state, "", version).map_or_else(not_found, |d| response::json(200, &d))
        }
        ["openapi", "v3", "apis", group, version] => {
            openapi::group_version(state, group, version).map_or_else(not_found, |d| response::json(200, &d))
        }
        ["healthz" | "readyz" | "livez"] => response::bytes(200, "text/plain", "ok"),
        _ => not_found(),
    }
}
