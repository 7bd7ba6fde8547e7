//! The crate's one error type, and [`ApiStatus`]: a failed API call as the server reports it.

use std::{fmt, net::SocketAddr, path::PathBuf};

use serde_json::{Value, json};

/// Everything that can go wrong in the simulator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused a request (the same answer a client would get over HTTP).
    #[error("{0}")]
    Api(ApiStatus),
    /// The HTTP listener could not be bound.
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The kubeconfig for kubectl could not be written.
    #[error("writing kubeconfig {path}: {source}")]
    Kubeconfig { path: PathBuf, source: std::io::Error },
    /// A CRD embedded in the crate does not parse (a build problem, not a runtime one).
    #[error("embedded CRD {file} is not a valid CustomResourceDefinition: {reason}")]
    EmbeddedCrd { file: &'static str, reason: String },
}

impl From<ApiStatus> for Error {
    fn from(status: ApiStatus) -> Self {
        Error::Api(status)
    }
}

/// A metav1.Status failure: the HTTP code, the machine-readable reason, a message and optional details.
///
/// Shapes follow api-conventions "Response Status Kind": `{"kind":"Status","apiVersion":"v1","metadata":{},
/// "status":"Failure","message":..,"reason":..,"details":{"name":..,"group":..,"kind":..},"code":..}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiStatus {
    /// HTTP status code, repeated in the body as `code`.
    pub code: u16,
    /// `StatusReason`, such as `NotFound`, `Conflict`, `Expired`.
    pub reason: &'static str,
    /// Human-readable description, worded like the real API server's.
    pub message: String,
    /// `details` (name, group, kind, causes), when the real server sends them.
    pub details: Option<Value>,
}

impl fmt::Display for ApiStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

/// `resource` or `resource.group`, as the real server names a resource in messages.
pub(crate) fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn object_details(group: &str, resource: &str, name: &str) -> Value {
    let mut details = json!({"name": name, "kind": resource});
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    details
}

impl ApiStatus {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The metav1.Status object for the response body.
    pub fn to_json(&self) -> Value {
        let mut status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }

    pub(crate) fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(object_details(group, resource, name))
    }

    pub(crate) fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with_details(object_details(group, resource, name))
    }

    /// api-conventions "Concurrency Control and Consistency": a write against a stale resourceVersion.
    pub(crate) fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        )
        .with_details(object_details(group, resource, name))
    }

    pub(crate) fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with the offending field, like the real server's field validation errors.
    pub(crate) fn invalid(group: &str, kind: &str, name: &str, field: &str, detail: &str) -> Self {
        let kind_q = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        Self::new(
            422,
            "Invalid",
            format!("{kind_q} \"{name}\" is invalid: {field}: {detail}"),
        )
        .with_details(json!({"name": name, "group": group, "kind": kind,
                   "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}]}))
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// api-concepts "Efficient detection of changes": a resourceVersion older than the retained history.
    pub(crate) fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub(crate) fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub(crate) fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub(crate) fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub(crate) fn too_many_requests(message: impl Into<String>, details: Option<Value>) -> Self {
        Self {
            code: 429,
            reason: "TooManyRequests",
            message: message.into(),
            details,
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({"causes": [{"message": message}]}))
    }

    /// The status an injected fault answers with.
    pub(crate) fn injected(code: u16) -> Self {
        match code {
            409 => Self::new(409, "Conflict", "injected fault: conflict"),
            429 => Self::new(429, "TooManyRequests", "injected fault: too many requests")
                .with_details(json!({"retryAfterSeconds": 1})),
            500 => Self::internal("injected fault"),
            503 => Self::new(503, "ServiceUnavailable", "injected fault: service unavailable"),
            other => Self::new(other, "Unknown", format!("injected fault: {other}")),
        }
    }
}
