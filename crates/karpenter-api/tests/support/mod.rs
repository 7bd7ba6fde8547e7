//! Test harness: check an object against a generated CRD the way the API server would, so tests can prove the
//! CRD schema and the Rust `validate()` reject the same objects.
//!
//! `cel_errors` evaluates the CRD's `x-kubernetes-validations` with kube-cel (defaults applied first, as the API
//! server does); `schema_errors` checks the OpenAPI keywords our CRDs use (type, required, enum, pattern,
//! lengths, ranges, item and property counts).
#![allow(dead_code, clippy::unwrap_used)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

pub fn schema_of(crd: &CustomResourceDefinition) -> Value {
    let v = serde_json::to_value(crd).unwrap();
    v.pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .unwrap()
}

/// Messages of the CEL rules `obj` breaks (with `old` for transition rules).
pub fn cel_errors(crd: &CustomResourceDefinition, obj: &Value, old: Option<&Value>) -> Vec<String> {
    let schema = schema_of(crd);
    match kube_cel::Validator::new().validate(&schema, obj, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| format!("{}: {}", e.field_path, e.message))
            .collect(),
    }
}

/// Violations of the structural OpenAPI keywords.
pub fn schema_errors(crd: &CustomResourceDefinition, obj: &Value) -> Vec<String> {
    let schema = schema_of(crd);
    let mut out = Vec::new();
    check(&schema, obj, "", &mut out);
    out
}

fn type_ok(schema: &Value, v: &Value) -> bool {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return v.is_string() || v.is_i64() || v.is_u64();
    }
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        && schema.get("type").is_none()
    {
        return true;
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        _ => true,
    }
}

fn check(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    if v.is_null() && schema.get("nullable") == Some(&Value::Bool(true)) {
        return;
    }
    if !type_ok(schema, v) {
        out.push(format!(
            "{path}: expected {}",
            schema.get("type").unwrap_or(&Value::Null)
        ));
        return;
    }
    if let Some(options) = schema.get("anyOf").and_then(Value::as_array)
        && !options.iter().any(|o| type_ok(o, v))
    {
        out.push(format!("{path}: matches none of anyOf"));
    }
    if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = options
            .iter()
            .filter(|o| {
                let mut e = Vec::new();
                check(o, v, path, &mut e);
                e.is_empty()
            })
            .count();
        if matching != 1 {
            out.push(format!("{path}: must match exactly one of oneOf"));
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(v)
    {
        out.push(format!(
            "{path}: {v} is not one of {}",
            Value::Array(values.clone())
        ));
    }
    match v {
        Value::String(s) => {
            if let Some(p) = schema.get("pattern").and_then(Value::as_str)
                && !regex::Regex::new(p).unwrap().is_match(s)
            {
                out.push(format!("{path}: {s:?} does not match {p}"));
            }
            let len = s.chars().count() as u64;
            if schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| len > m)
            {
                out.push(format!("{path}: longer than maxLength"));
            }
            if schema
                .get("minLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| len < m)
            {
                out.push(format!("{path}: shorter than minLength"));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap();
            if schema
                .get("maximum")
                .and_then(Value::as_f64)
                .is_some_and(|m| x > m)
            {
                out.push(format!("{path}: above maximum"));
            }
            if schema
                .get("minimum")
                .and_then(Value::as_f64)
                .is_some_and(|m| x < m)
            {
                out.push(format!("{path}: below minimum"));
            }
        }
        Value::Array(items) => {
            if schema
                .get("maxItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| items.len() as u64 > m)
            {
                out.push(format!("{path}: more than maxItems"));
            }
            if schema
                .get("minItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| (items.len() as u64) < m)
            {
                out.push(format!("{path}: fewer than minItems"));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for r in required.iter().filter_map(Value::as_str) {
                    let has_default = schema.pointer(&format!("/properties/{r}/default")).is_some();
                    if !map.contains_key(r) && !has_default {
                        out.push(format!("{path}.{r}: required"));
                    }
                }
            }
            if schema
                .get("maxProperties")
                .and_then(Value::as_u64)
                .is_some_and(|m| map.len() as u64 > m)
            {
                out.push(format!("{path}: more than maxProperties"));
            }
            if schema
                .get("minProperties")
                .and_then(Value::as_u64)
                .is_some_and(|m| (map.len() as u64) < m)
            {
                out.push(format!("{path}: fewer than minProperties"));
            }
            let props = schema.get("properties").and_then(Value::as_object);
            for (k, item) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if let Some(s) = props.and_then(|props| props.get(k)) {
                    check(s, item, &p, out);
                } else if let Some(s) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                    check(s, item, &p, out);
                }
            }
        }
        _ => {}
    }
}
