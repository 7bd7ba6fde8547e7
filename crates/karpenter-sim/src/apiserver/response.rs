//! HTTP responses: JSON bodies, metav1.Status errors, and the body type both transports share.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use serde_json::{Value, json};

use super::store::Stored;
use crate::error::ApiStatus;

/// The response body of every answer: a full JSON document or a watch stream.
pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into()).boxed_unsync()
}

pub fn bytes(code: u16, content_type: &str, body: impl Into<Bytes>) -> Response<ResponseBody> {
    let mut response = Response::new(full(body));
    *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

pub fn json(code: u16, body: &Value) -> Response<ResponseBody> {
    bytes(
        code,
        "application/json",
        serde_json::to_vec(body).unwrap_or_default(),
    )
}

/// A stored object, its JSON text as it is.
pub fn object(code: u16, object: &Stored) -> Response<ResponseBody> {
    bytes(
        code,
        "application/json",
        Bytes::copy_from_slice(object.json().as_bytes()),
    )
}

pub fn error(status: &ApiStatus) -> Response<ResponseBody> {
    let mut response = json(status.code, &status.to_json());
    // Like the real server, a Retry-After header only when the Status asks for a wait (rate limiting does,
    // eviction's 429 does not).
    let retry_after = status
        .details
        .as_ref()
        .and_then(|d| d["retryAfterSeconds"].as_u64())
        .filter(|s| *s > 0);
    if let Some(seconds) = retry_after
        && let Ok(value) = header::HeaderValue::from_str(&seconds.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// metav1.Status with status Success, as eviction, binding and completed deletes answer.
pub fn success(code: u16, details: Option<Value>) -> Response<ResponseBody> {
    let mut status =
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code});
    if let Some(details) = details {
        status["details"] = details;
    }
    json(code, &status)
}
