//! The EC2NodeClass drift hash: FNV-1a-64 over a canonical JSON rendering of the hashed part of the spec.

use serde_json::{Map, Value};

pub use crate::hash::{canonical_json, fnv1a64};

use super::EC2NodeClassSpec;

/// Spec fields left out of the hash: the selector terms, the placement group selector and `amiFamily` are
/// resolved into status and drift on their own (AMIDrift, SubnetDrift, ...); `ipPrefixCount` must not replace
/// nodes; `amiFamily` is replaced by the resolved family.
const IGNORED: [&str; 7] = [
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "capacityReservationSelectorTerms",
    "amiSelectorTerms",
    "placementGroupSelector",
    "ipPrefixCount",
    "amiFamily",
];

/// The hash of a spec (see `EC2NodeClass::hash_with_ca_bundle`).
pub(super) fn hash_spec(spec: &EC2NodeClassSpec, ca_bundle: Option<&str>) -> String {
    let mut spec_value = {
        let mut defaulted = spec.clone();
        defaulted.metadata_options = Some(spec.metadata_options());
        serde_json::to_value(&defaulted).unwrap_or(Value::Null)
    };
    if let Value::Object(map) = &mut spec_value {
        for field in IGNORED {
            map.remove(field);
        }
    }
    let mut input = Map::new();
    input.insert("spec".into(), spec_value);
    input.insert(
        "amiFamily".into(),
        Value::String(spec.ami_family().as_str().to_string()),
    );
    if let Some(ca) = ca_bundle {
        input.insert("caBundle".into(), Value::String(ca.to_string()));
    }
    fnv1a64(canonical_json(&Value::Object(input)).as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fnv1a64_known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn canonical_json_sorts_keys_and_set_like_arrays_and_drops_empties() {
        let a = json!({"b": [2, 1], "a": {"y": null, "x": "1"}, "c": [], "d": {}});
        let b = json!({"a": {"x": "1"}, "b": [1, 2]});
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"1"},"b":[1,2]}"#);
        assert_ne!(
            canonical_json(&json!({"a": false})),
            canonical_json(&json!({})),
            "false is a value"
        );
    }
}
