//! Stable hashes of object specs for drift detection: FNV-1a-64 over a canonical JSON rendering, so field order,
//! list order and empty-versus-unset never change a hash.

use serde_json::Value;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(FNV_OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME))
}

/// A canonical rendering of a JSON value: object keys sorted, array elements sorted by their own rendering
/// (arrays are hashed as sets, so reordering a list does not drift nodes), and `null`s, empty arrays and empty
/// objects dropped from objects (an empty list or map means the same as an unset one).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, String)> = map
                .iter()
                .filter(|(_, v)| !is_empty(v))
                .map(|(k, v)| (k, canonical_json(v)))
                .filter(|(_, rendered)| rendered != "{}" && rendered != "[]")
                .collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                out.push_str(v);
            }
            out.push('}');
        }
        Value::Array(items) => {
            let mut rendered: Vec<String> = items.iter().map(canonical_json).collect();
            rendered.sort();
            out.push('[');
            out.push_str(&rendered.join(","));
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}
