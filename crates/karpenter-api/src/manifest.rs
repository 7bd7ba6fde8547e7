//! Reading manifests the way `kubectl apply --validate=strict` does: YAML or JSON, one or many documents or a
//! `kind: List`, every field the types do not know reported by its path instead of silently dropped, and a bad
//! object reported by name and field without losing the rest.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why an object could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {path}: {message}")]
pub struct DecodeError {
    /// `Kind name`, or the document's position when it has none.
    pub object: String,
    /// The field that failed, as a JSON path (`.` when the document itself is wrong).
    pub path: String,
    pub message: String,
}

/// A decoded object and the fields the types do not know.
#[derive(Debug, Clone)]
pub struct Decoded<T> {
    pub object: T,
    /// Paths of unknown fields, for example `spec.template.spec.requirment`.
    pub unknown_fields: Vec<String>,
}

/// `Kind name` for messages.
pub fn describe(value: &Value) -> String {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("object");
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>");
    match value.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Decodes `value` into `T`, collecting unknown fields and naming the field of a type error.
pub fn decode<T: DeserializeOwned>(value: &Value) -> Result<Decoded<T>, DecodeError> {
    let mut unknown_fields = Vec::new();
    let mut track = serde_path_to_error::Track::new();
    let result = {
        let tracked = serde_path_to_error::Deserializer::new(value, &mut track);
        serde_ignored::deserialize(tracked, |path| {
            let path = path.to_string();
            // The kube-derived root types consume apiVersion and kind without storing them.
            if path != "apiVersion" && path != "kind" {
                unknown_fields.push(path);
            }
        })
    };
    match result {
        Ok(object) => Ok(Decoded {
            object,
            unknown_fields,
        }),
        Err(e) => {
            let path = track.path().to_string();
            Err(DecodeError {
                object: describe(value),
                path,
                message: e.to_string(),
            })
        }
    }
}

/// Decodes `value` into `T` and fails when it has a field `T` does not know (strict validation).
pub fn decode_strict<T: DeserializeOwned>(value: &Value) -> Result<T, DecodeError> {
    let decoded = decode::<T>(value)?;
    match decoded.unknown_fields.first() {
        None => Ok(decoded.object),
        Some(first) => Err(DecodeError {
            object: describe(value),
            path: first.clone(),
            message: format!(
                "unknown field (all unknown: {})",
                decoded.unknown_fields.join(", ")
            ),
        }),
    }
}

/// Splits YAML or JSON text into documents, flattening `kind: List`. A document that does not parse is returned
/// as an error in its place; the others are kept.
pub fn split_documents(text: &str) -> Vec<Result<Value, DecodeError>> {
    let trimmed = text.trim_start();
    let docs: Vec<Result<Value, DecodeError>> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => items.into_iter().map(Ok).collect(),
            Ok(v) => vec![Ok(v)],
            Err(e) => vec![Err(DecodeError {
                object: "JSON document".into(),
                path: ".".into(),
                message: e.to_string(),
            })],
        }
    } else {
        split_yaml(text)
    };
    let mut out = Vec::with_capacity(docs.len());
    for doc in docs {
        match doc {
            Ok(Value::Null) => {}
            Ok(mut v)
                if v.get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List"))
                    && v.get("items").is_some() =>
            {
                // Move the items out rather than copy them: a List from kubectl can hold every object.
                if let Some(Value::Array(items)) = v.get_mut("items").map(Value::take) {
                    out.extend(items.into_iter().map(Ok));
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// Splits a YAML stream on document markers and parses each document on its own, so one bad document does not
/// hide the others.
fn split_yaml(text: &str) -> Vec<Result<Value, DecodeError>> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start_line = 1;
    for (i, line) in text.lines().enumerate() {
        if line == "---" || line.starts_with("--- ") {
            docs.push((start_line, std::mem::take(&mut current)));
            start_line = i + 2;
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    docs.push((start_line, current));
    docs.into_iter()
        .filter(|(_, d)| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .map(|(line, d)| {
            serde_saphyr::from_str::<Value>(&d).map_err(|e| DecodeError {
                object: format!("YAML document at line {line}"),
                path: ".".into(),
                message: e.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodepool::NodePool;
    use serde_json::json;

    fn pool(extra: Value) -> Value {
        let mut v = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
        });
        if let (Some(spec), Some(extra)) = (v.pointer_mut("/spec/template/spec"), extra.as_object()) {
            for (k, x) in extra {
                spec[k] = x.clone();
            }
        }
        v
    }

    #[test]
    fn unknown_fields_are_reported_by_path() {
        let d = decode::<NodePool>(&pool(json!({"requirment": []}))).unwrap();
        assert_eq!(d.unknown_fields, vec!["spec.template.spec.requirment"]);
        let e = decode_strict::<NodePool>(&pool(json!({"requirment": []}))).unwrap_err();
        assert_eq!(e.path, "spec.template.spec.requirment");
        assert_eq!(e.object, "NodePool default");
    }

    #[test]
    fn type_errors_name_the_field() {
        let e = decode::<NodePool>(&pool(json!({"expireAfter": "tomorrow"}))).unwrap_err();
        assert_eq!(e.path, "spec.template.spec.expireAfter");
        assert!(e.message.contains("invalid duration"), "{}", e.message);
    }

    #[test]
    fn one_bad_yaml_document_does_not_hide_the_others() {
        let docs = split_documents("a: 1\n---\nb: [unclosed\n---\nc: 3\n");
        assert_eq!(docs.len(), 3);
        assert!(docs[0].is_ok() && docs[1].is_err() && docs[2].is_ok());
        let list = split_documents(r#"{"kind": "List", "items": [{"kind": "Pod"}, {"kind": "Node"}]}"#);
        assert_eq!(list.len(), 2);
    }
}
