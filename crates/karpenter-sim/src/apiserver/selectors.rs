//! Label and field selectors (api-concepts / "Labels and Selectors" and "Field Selectors" in the concepts docs).
//!
//! Label selectors support `=`, `==`, `!=`, `in`, `notin`, `key` (exists), `!key` (does not exist) and the
//! numeric `>`/`<`. Field selectors support `=`, `==` and `!=` on the fields a resource declares selectable;
//! any other field is refused with 400, as the real server does.

use std::{borrow::Cow, collections::BTreeMap};

use serde_json::Value;

use crate::error::ApiStatus;

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq)]
struct LabelRequirement {
    key: String,
    op: LabelOp,
}

/// What selectors read from an object: a label's value and a field's value as a field selector compares it.
/// Implemented by a parsed object and by a stored one, which has both without parsing its JSON.
pub trait Selectable {
    /// The value of `metadata.labels[key]`, if it is a string.
    fn label(&self, key: &str) -> Option<&str>;
    /// See [`field_value`].
    fn field(&self, path: &str) -> Cow<'_, str>;
}

impl Selectable for Value {
    fn label(&self, key: &str) -> Option<&str> {
        self["metadata"]["labels"].get(key).and_then(Value::as_str)
    }

    fn field(&self, path: &str) -> Cow<'_, str> {
        Cow::Owned(field_value(self, path))
    }
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

/// Splits on commas that are not inside `( )`.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn set_values(rest: &str, whole: &str) -> Result<Vec<String>, ApiStatus> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| ApiStatus::bad_request(format!("unable to parse requirement: {whole}")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_requirement(part: &str) -> Result<LabelRequirement, ApiStatus> {
    let bad = || ApiStatus::bad_request(format!("unable to parse requirement: {part}"));
    if let Some(key) = part.strip_prefix('!') {
        return Ok(LabelRequirement {
            key: key.trim().to_string(),
            op: LabelOp::DoesNotExist,
        });
    }
    for (token, negated) in [(" notin ", true), (" in ", false)] {
        if let Some(idx) = part.find(token) {
            let values = set_values(&part[idx + token.len()..], part)?;
            let op = if negated {
                LabelOp::NotIn(values)
            } else {
                LabelOp::In(values)
            };
            return Ok(LabelRequirement {
                key: part[..idx].trim().to_string(),
                op,
            });
        }
    }
    type MakeOp = fn(String) -> Option<LabelOp>;
    let ops: [(&str, MakeOp); 5] = [
        ("!=", |v| Some(LabelOp::NotIn(vec![v]))),
        ("==", |v| Some(LabelOp::In(vec![v]))),
        ("=", |v| Some(LabelOp::In(vec![v]))),
        (">", |v| v.parse().ok().map(LabelOp::Gt)),
        ("<", |v| v.parse().ok().map(LabelOp::Lt)),
    ];
    for (token, make) in ops {
        if let Some(idx) = part.find(token) {
            let value = part[idx + token.len()..].trim().to_string();
            let op = make(value).ok_or_else(bad)?;
            return Ok(LabelRequirement {
                key: part[..idx].trim().to_string(),
                op,
            });
        }
    }
    if part.contains(' ') || part.contains('(') {
        return Err(bad());
    }
    Ok(LabelRequirement {
        key: part.to_string(),
        op: LabelOp::Exists,
    })
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(s: &str) -> Result<Self, ApiStatus> {
        let requirements = split_top_level(s)
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<_, _>>()?;
        Ok(Self { requirements })
    }

    /// Builds a selector from a metav1.LabelSelector object (matchLabels and matchExpressions).
    /// `None` means the object is malformed; a null/absent selector is the empty one.
    pub fn from_object(selector: &Value) -> Option<Self> {
        let mut requirements = Vec::new();
        if let Some(labels) = selector["matchLabels"].as_object() {
            for (k, v) in labels {
                requirements.push(LabelRequirement {
                    key: k.clone(),
                    op: LabelOp::In(vec![v.as_str()?.into()]),
                });
            }
        }
        for expr in selector["matchExpressions"].as_array().into_iter().flatten() {
            let key = expr["key"].as_str()?.to_string();
            let values: Vec<String> = expr["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(Into::into))
                .collect();
            let op = match expr["operator"].as_str()? {
                "In" => LabelOp::In(values),
                "NotIn" => LabelOp::NotIn(values),
                "Exists" => LabelOp::Exists,
                "DoesNotExist" => LabelOp::DoesNotExist,
                _ => return None,
            };
            requirements.push(LabelRequirement { key, op });
        }
        Some(Self { requirements })
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches<T: Selectable + ?Sized>(&self, object: &T) -> bool {
        self.requirements
            .iter()
            .all(|r| match (&r.op, object.label(&r.key)) {
                (LabelOp::In(values), Some(v)) => values.iter().any(|x| x == v),
                (LabelOp::In(_), None) => false,
                (LabelOp::NotIn(values), Some(v)) => !values.iter().any(|x| x == v),
                (LabelOp::NotIn(_), None) => true,
                (LabelOp::Exists, found) => found.is_some(),
                (LabelOp::DoesNotExist, found) => found.is_none(),
                (LabelOp::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v > *n),
                (LabelOp::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v < *n),
                (LabelOp::Gt(_) | LabelOp::Lt(_), None) => false,
            })
    }
}

impl std::fmt::Display for LabelSelector {
    /// The canonical string form, as the scale subresource reports `status.selector`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sorted: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for r in &self.requirements {
            let text = match &r.op {
                LabelOp::In(v) if v.len() == 1 => format!("{}={}", r.key, v[0]),
                LabelOp::In(v) => format!("{} in ({})", r.key, v.join(",")),
                LabelOp::NotIn(v) if v.len() == 1 => format!("{}!={}", r.key, v[0]),
                LabelOp::NotIn(v) => format!("{} notin ({})", r.key, v.join(",")),
                LabelOp::Exists => r.key.clone(),
                LabelOp::DoesNotExist => format!("!{}", r.key),
                LabelOp::Gt(n) => format!("{}>{n}", r.key),
                LabelOp::Lt(n) => format!("{}<{n}", r.key),
            };
            sorted.entry(r.key.as_str()).or_default().push(text);
        }
        let all: Vec<String> = sorted.into_values().flatten().collect();
        write!(f, "{}", all.join(","))
    }
}

#[derive(Debug, Clone, PartialEq)]
struct FieldRequirement {
    path: String,
    value: String,
    equal: bool,
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// The string a field selector compares against: strings as they are, numbers and booleans printed, absent as "".
pub fn field_value(object: &Value, path: &str) -> String {
    let mut current = object;
    for part in path.split('.') {
        current = &current[part];
    }
    match current {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter, refusing fields the resource does not declare selectable.
    pub fn parse(s: &str, selectable: &[String]) -> Result<Self, ApiStatus> {
        let mut requirements = Vec::new();
        for part in split_top_level(s) {
            let (path, value, equal) = if let Some((p, v)) = part.split_once("!=") {
                (p, v, false)
            } else if let Some((p, v)) = part.split_once("==") {
                (p, v, true)
            } else if let Some((p, v)) = part.split_once('=') {
                (p, v, true)
            } else {
                return Err(ApiStatus::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let path = path.trim();
            let known = path == "metadata.name"
                || path == "metadata.namespace"
                || selectable.iter().any(|f| f == path);
            if !known {
                return Err(ApiStatus::bad_request(format!(
                    "field label not supported: {path}"
                )));
            }
            requirements.push(FieldRequirement {
                path: path.to_string(),
                value: value.trim().to_string(),
                equal,
            });
        }
        Ok(Self { requirements })
    }

    /// The value `metadata.name` must equal, when the selector pins it (kubectl wait and delete do).
    pub fn pinned_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.equal && r.path == "metadata.name")
            .map(|r| r.value.as_str())
    }

    pub fn matches<T: Selectable + ?Sized>(&self, object: &T) -> bool {
        self.requirements
            .iter()
            .all(|r| (object.field(&r.path) == r.value.as_str()) == r.equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn label_selector_operators() -> Result<(), ApiStatus> {
        let obj = labelled(json!({"app": "web", "tier": "front", "n": "5"}));
        for (selector, expected) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, db)", true),
            ("app notin (web,db)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("missing!=x", true),
            ("app=web,tier in (back)", false),
            ("n>4,n<6", true),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(selector)?.matches(&obj),
                expected,
                "{selector}"
            );
        }
        Ok(())
    }

    #[test]
    fn label_selector_object_form_and_display() {
        let selector = LabelSelector::from_object(&json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}));
        let selector = selector.unwrap_or_default();
        assert_eq!(selector.to_string(), "app=web,tier in (a,b)");
        assert!(selector.matches(&labelled(json!({"app": "web", "tier": "b"}))));
    }

    #[test]
    fn field_selector_refuses_unknown_fields_with_400() {
        let fields = vec!["spec.nodeName".to_string()];
        assert!(FieldSelector::parse("spec.nodeName=n1,metadata.name!=x", &fields).is_ok());
        assert!(matches!(FieldSelector::parse("spec.bogus=1", &fields), Err(s) if s.code == 400));
    }

    #[test]
    fn field_selector_matches_missing_as_empty() -> Result<(), ApiStatus> {
        let fields = vec!["spec.nodeName".to_string()];
        let pending = json!({"metadata": {"name": "p"}, "spec": {}});
        assert!(FieldSelector::parse("spec.nodeName=", &fields)?.matches(&pending));
        assert!(!FieldSelector::parse("spec.nodeName!=", &fields)?.matches(&pending));
        Ok(())
    }
}
