//! Request parsing: which resource a URL names and which RBAC verb a request is.

use std::{collections::HashMap, sync::Arc};

use http::Method;

use super::resources::{Registry, ResourceInfo};
use crate::error::ApiStatus;

/// The Kubernetes RBAC verb of a request (authorization docs, "Determine the Request Verb").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decoded query parameters.
#[derive(Debug, Clone, Default)]
pub struct Query(HashMap<String, String>);

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Percent-decoding with `+` as space, as form-encoded query strings use.
pub fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Query {
    pub fn parse(query: Option<&str>) -> Self {
        let mut map = HashMap::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            map.insert(decode(k), decode(v));
        }
        Self(map)
    }

    pub fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), value);
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }

    pub fn flag(&self, key: &str) -> bool {
        matches!(self.0.get(key).map(String::as_str), Some("true" | "1"))
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(|v| v.parse().ok())
    }
}

/// A request for a resource (as opposed to discovery and other non-resource paths).
#[derive(Debug, Clone)]
pub struct ResourceRequest {
    pub info: Arc<ResourceInfo>,
    pub verb: Verb,
    /// "" for cluster-scoped resources and for requests across all namespaces.
    pub namespace: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// What a path is.
#[derive(Debug, Clone)]
pub enum Route {
    Resource(ResourceRequest),
    /// Discovery, version, OpenAPI, health: answered without touching the store.
    NonResource(String),
}

/// Works out the resource and verb of a request. `/api/v1/...` and `/apis/GROUP/VERSION/...`, with optional
/// `namespaces/NS/`, then `PLURAL[/NAME[/SUBRESOURCE]]`; the legacy `/watch/` prefix is accepted.
pub fn route(registry: &Registry, method: &Method, path: &str, query: &Query) -> Result<Route, ApiStatus> {
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let (group, version, rest): (&str, &str, &[String]) = match segments.as_slice() {
        [api, version, rest @ ..] if api == "api" && !rest.is_empty() => ("", version, rest),
        [apis, group, version, rest @ ..] if apis == "apis" && !rest.is_empty() => (group, version, rest),
        _ => return Ok(Route::NonResource(path.to_string())),
    };
    let (legacy_watch, rest) = match rest {
        [w, rest @ ..] if w == "watch" => (true, rest),
        _ => (false, rest),
    };
    let not_found = || ApiStatus {
        code: 404,
        reason: "NotFound",
        message: "the server could not find the requested resource".into(),
        details: None,
    };
    // `namespaces/NS/PLURAL...` names a namespaced resource; `namespaces/NAME[/status]` is the Namespace itself.
    let namespaced = match rest {
        [ns_word, ns, plural, tail @ ..] if ns_word == "namespaces" => registry
            .lookup(group, version, plural)
            .filter(|info| info.namespaced)
            .map(|info| (info, ns.clone(), tail)),
        _ => None,
    };
    let (info, namespace, tail) = match namespaced {
        Some(found) => found,
        None => {
            let [plural, tail @ ..] = rest else {
                return Err(not_found());
            };
            let info = registry.lookup(group, version, plural).ok_or_else(not_found)?;
            (info, String::new(), tail)
        }
    };
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some(name.clone()), None),
        [name, sub] => (Some(name.clone()), Some(sub.clone())),
        _ => return Err(not_found()),
    };
    if let Some(sub) = &subresource {
        let known = (sub == "status" && info.status_subresource)
            || (sub == "scale" && info.scale.is_some())
            || info.extra_subresources().contains(&sub.as_str());
        if !known {
            return Err(not_found());
        }
    }
    let watch = legacy_watch || query.flag("watch");
    let verb = match (method.clone(), name.is_some()) {
        (Method::GET, _) if watch => Verb::Watch,
        (Method::GET, true) => Verb::Get,
        (Method::GET, false) => Verb::List,
        (Method::POST, _) => Verb::Create,
        (Method::PUT, true) => Verb::Update,
        (Method::PATCH, true) => Verb::Patch,
        (Method::DELETE, true) => Verb::Delete,
        (Method::DELETE, false) => Verb::DeleteCollection,
        (other, _) => {
            return Err(ApiStatus::method_not_allowed(format!(
                "the server does not allow this method on the requested resource: {other}"
            )));
        }
    };
    Ok(Route::Resource(ResourceRequest {
        info,
        verb,
        namespace,
        name,
        subresource,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(method: Method, path: &str, query: &str) -> Result<ResourceRequest, ApiStatus> {
        let registry = Registry::with_builtins();
        match route(&registry, &method, path, &Query::parse(Some(query)))? {
            Route::Resource(r) => Ok(r),
            Route::NonResource(p) => Err(ApiStatus::bad_request(p)),
        }
    }

    #[test]
    fn verbs_and_scopes() -> Result<(), ApiStatus> {
        let r = resource(
            Method::GET,
            "/api/v1/namespaces/default/pods",
            "watch=true&resourceVersion=5",
        )?;
        assert_eq!(
            (r.verb, r.namespace.as_str(), r.info.plural.as_str()),
            (Verb::Watch, "default", "pods")
        );
        let r = resource(Method::GET, "/api/v1/namespaces/default", "")?;
        assert_eq!(
            (r.verb, r.info.plural.as_str(), r.name.as_deref()),
            (Verb::Get, "namespaces", Some("default"))
        );
        let r = resource(Method::PUT, "/api/v1/namespaces/kube-system/status", "")?;
        assert_eq!((r.verb, r.subresource.as_deref()), (Verb::Update, Some("status")));
        let r = resource(Method::POST, "/api/v1/namespaces/d/pods/p/eviction", "")?;
        assert_eq!(
            (r.verb, r.subresource.as_deref()),
            (Verb::Create, Some("eviction"))
        );
        let r = resource(Method::DELETE, "/apis/apps/v1/namespaces/d/deployments", "")?;
        assert_eq!(r.verb, Verb::DeleteCollection);
        assert!(resource(Method::GET, "/api/v1/nodes/n/scale", "").is_err());
        Ok(())
    }

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some("labelSelector=app%3Dweb%2Ctier+in+(a)&watch=1"));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a)"));
        assert!(q.flag("watch"));
    }
}
