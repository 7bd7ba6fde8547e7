//! A JSON value as block YAML (hand-written; nodeadm's NodeConfig is the only YAML Karpenter writes).

use std::fmt::Write as _;

use serde_json::Value;

fn yaml_scalar(value: &Value) -> String {
    match value {
        Value::String(s) => {
            let plain = !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '-' | '_' | ':' | '%'))
                && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && !s.contains(": ")
                && !s.ends_with(':')
                && !matches!(
                    s.to_ascii_lowercase().as_str(),
                    "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
                );
            if plain {
                s.clone()
            } else {
                Value::String(s.clone()).to_string()
            }
        }
        other => other.to_string(),
    }
}

fn yaml_key(key: &str) -> String {
    yaml_scalar(&Value::String(key.to_string()))
}

fn write_yaml(out: &mut String, value: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            // Sorted, whatever order serde_json keeps (its `preserve_order` feature may be on elsewhere).
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(key, _)| *key);
            for (key, item) in entries {
                match item {
                    Value::Object(inner) if !inner.is_empty() => {
                        let _ = writeln!(out, "{pad}{}:", yaml_key(key));
                        write_yaml(out, item, indent + 2);
                    }
                    Value::Array(inner) if !inner.is_empty() => {
                        let _ = writeln!(out, "{pad}{}:", yaml_key(key));
                        write_yaml(out, item, indent);
                    }
                    Value::Object(_) => {
                        let _ = writeln!(out, "{pad}{}: {{}}", yaml_key(key));
                    }
                    Value::Array(_) => {
                        let _ = writeln!(out, "{pad}{}: []", yaml_key(key));
                    }
                    scalar => {
                        let _ = writeln!(out, "{pad}{}: {}", yaml_key(key), yaml_scalar(scalar));
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::Object(map) if !map.is_empty() => {
                        let mut nested = String::new();
                        write_yaml(&mut nested, item, indent + 2);
                        // The first key goes on the dash's line.
                        let nested = nested.trim_start_matches(' ');
                        let _ = write!(out, "{pad}- {nested}");
                    }
                    scalar => {
                        let _ = writeln!(out, "{pad}- {}", yaml_scalar(scalar));
                    }
                }
            }
        }
        scalar => {
            let _ = writeln!(out, "{pad}{}", yaml_scalar(scalar));
        }
    }
}

/// A JSON value as block YAML (strings quoted when they are not plainly safe).
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    write_yaml(&mut out, value, 0);
    out
}
