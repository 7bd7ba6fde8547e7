//! Every NodeOverlay rule, as a table of invalid objects: `validate()` must reject each one at the named field,
//! and the CRD (schema or CEL) must reject it too when the rule lives in the CRD.

// The shared harness unwraps and nests `if`s; keep this crate's clippy run about these tests.
mod support;

use karpenter_api::{
    label_policy::LabelPolicy,
    nodeoverlay::{self, NodeOverlay},
};
use serde_json::{Value, json};

/// Where the CRD enforces a rule.
#[derive(Debug, Clone, Copy)]
enum Crd {
    /// A CEL rule of `nodeoverlay::crd()` with this message.
    Cel(&'static str),
    /// An OpenAPI keyword (pattern, range, maxItems) of `nodeoverlay::crd()`.
    Schema,
    /// The CRD has no such field, so the API server's strict field validation rejects it.
    NoField(&'static str),
    /// A runtime check of the controller: the CRD accepts the object.
    Runtime,
    /// A label-key/requirement rule `crate::crd::nodeoverlay` injects into the shipped CRD (a CEL rule or a
    /// pattern): the shipped CRD must reject it at the field or an ancestor, and `nodeoverlay::crd()` alone need
    /// not.
    Injected,
    /// Not expressed in the generated schema yet (see the case's note).
    NotInSchema,
}

struct Case {
    name: &'static str,
    spec: Value,
    policy: LabelPolicy,
    /// The field path `validate()` must report.
    path: &'static str,
    /// A part of the message `validate()` must report.
    message: &'static str,
    crd: Crd,
}

fn case(name: &'static str, spec: Value, path: &'static str, message: &'static str, crd: Crd) -> Case {
    Case {
        name,
        spec,
        policy: LabelPolicy::Core,
        path,
        message,
        crd,
    }
}

fn object(spec: Value) -> Value {
    json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "discount"}, "spec": spec})
}

fn req(r: Value) -> Value {
    json!({"requirements": [r]})
}

fn valid_spec() -> Value {
    json!({
        "requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-west-2d"]},
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["4"]},
            {"key": "example.com/team", "operator": "Exists"}
        ],
        "priceAdjustment": "-10%",
        "capacity": {"smarter-devices/fuse": "1", "example.com/license": "2"},
        "weight": 10
    })
}

fn cases() -> Vec<Case> {
    let too_many: Vec<Value> = (0..101)
        .map(|i| json!({"key": format!("example.com/k{i}"), "operator": "Exists"}))
        .collect();
    let mut cases = vec![
        // spec: price XOR priceAdjustment (CEL)
        case(
            "price and priceAdjustment together",
            json!({"requirements": [], "price": "0.5", "priceAdjustment": "+1"}),
            "spec",
            "'price' and 'priceAdjustment' are mutually exclusive",
            Crd::Cel("'price' and 'priceAdjustment' are mutually exclusive"),
        ),
        // price pattern
        case(
            "price not a number",
            json!({"requirements": [], "price": "cheap"}),
            "spec.price",
            "non-negative decimal",
            Crd::Schema,
        ),
        case(
            "price negative",
            json!({"requirements": [], "price": "-1"}),
            "spec.price",
            "non-negative decimal",
            Crd::Schema,
        ),
        case(
            "price with exponent",
            json!({"requirements": [], "price": "1e3"}),
            "spec.price",
            "non-negative decimal",
            Crd::Schema,
        ),
        case(
            "price trailing dot",
            json!({"requirements": [], "price": "1."}),
            "spec.price",
            "non-negative decimal",
            Crd::Schema,
        ),
        // priceAdjustment pattern
        case(
            "priceAdjustment without sign",
            json!({"requirements": [], "priceAdjustment": "10"}),
            "spec.priceAdjustment",
            "signed amount",
            Crd::Schema,
        ),
        case(
            "priceAdjustment percent without sign",
            json!({"requirements": [], "priceAdjustment": "10%"}),
            "spec.priceAdjustment",
            "signed amount",
            Crd::Schema,
        ),
        case(
            "priceAdjustment below -100%",
            json!({"requirements": [], "priceAdjustment": "-150%"}),
            "spec.priceAdjustment",
            "at most 100%",
            Crd::Schema,
        ),
        case(
            "priceAdjustment -100.5%",
            json!({"requirements": [], "priceAdjustment": "-100.5%"}),
            "spec.priceAdjustment",
            "at most 100%",
            Crd::Schema,
        ),
        case(
            "priceAdjustment garbage",
            json!({"requirements": [], "priceAdjustment": "+1.x"}),
            "spec.priceAdjustment",
            "signed amount",
            Crd::Schema,
        ),
        // capacity: standard resources (CEL)
        case(
            "capacity cpu",
            json!({"requirements": [], "capacity": {"cpu": "1"}}),
            "spec.capacity",
            "only extended resources",
            Crd::Cel("only extended resources"),
        ),
        case(
            "capacity memory",
            json!({"requirements": [], "capacity": {"memory": "1Gi"}}),
            "spec.capacity",
            "only extended resources",
            Crd::Cel("only extended resources"),
        ),
        case(
            "capacity ephemeral-storage",
            json!({"requirements": [], "capacity": {"ephemeral-storage": "1Gi"}}),
            "spec.capacity",
            "only extended resources",
            Crd::Cel("only extended resources"),
        ),
        case(
            "capacity pods",
            json!({"requirements": [], "capacity": {"pods": "10", "example.com/x": "1"}}),
            "spec.capacity",
            "only extended resources",
            Crd::Cel("only extended resources"),
        ),
        // capacity quantities: the shared ResourceList schema carries no quantity pattern yet.
        case(
            "capacity not a quantity",
            json!({"requirements": [], "capacity": {"example.com/x": "lots"}}),
            "spec.capacity[\"example.com/x\"]",
            "quantity",
            Crd::NotInSchema,
        ),
        // weight range
        case(
            "weight 0",
            json!({"requirements": [], "weight": 0}),
            "spec.weight",
            "between 1 and 10000",
            Crd::Schema,
        ),
        case(
            "weight 10001",
            json!({"requirements": [], "weight": 10001}),
            "spec.weight",
            "between 1 and 10000",
            Crd::Schema,
        ),
        case(
            "weight negative",
            json!({"requirements": [], "weight": -5}),
            "spec.weight",
            "between 1 and 10000",
            Crd::Schema,
        ),
        // requirements: overlay-specific rules
        case(
            "NotIn without values",
            req(json!({"key": "topology.kubernetes.io/zone", "operator": "NotIn"})),
            "spec.requirements[0]",
            "'NotIn' must list at least one value",
            Crd::Cel("'NotIn' must list at least one value"),
        ),
        case(
            "NotIn with empty values",
            req(json!({"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": []})),
            "spec.requirements[0]",
            "'NotIn' must list at least one value",
            Crd::Cel("'NotIn' must list at least one value"),
        ),
        case(
            "minValues on an overlay requirement",
            req(
                json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"], "minValues": 2}),
            ),
            "spec.requirements[0].minValues",
            "do not support minValues",
            Crd::NoField("minValues"),
        ),
        case(
            "more than 100 requirements",
            json!({"requirements": too_many}),
            "spec.requirements",
            "at most 100",
            Crd::Schema,
        ),
        // requirements: rules shared with NodePools and NodeClaims, injected into the shipped CRD by crate::crd
        case(
            "In without values",
            req(json!({"key": "topology.kubernetes.io/zone", "operator": "In"})),
            "spec.requirements[0]",
            "'In' must have a value",
            Crd::Injected,
        ),
        case(
            "Gt with a negative value",
            req(json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["-1"]})),
            "spec.requirements[0]",
            "single non-negative integer",
            Crd::Injected,
        ),
        case(
            "Lte with two values",
            req(json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lte", "values": ["1", "2"]})),
            "spec.requirements[0]",
            "single non-negative integer",
            Crd::Injected,
        ),
        case(
            "Gte with a word",
            req(json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["many"]})),
            "spec.requirements[0]",
            "single non-negative integer",
            Crd::Injected,
        ),
        case(
            "key with an upper-case prefix",
            req(json!({"key": "Test.com/x", "operator": "Exists"})),
            "spec.requirements[0].key",
            "invalid label key",
            Crd::Injected,
        ),
        case(
            "key with two slashes",
            req(json!({"key": "a/b/c", "operator": "Exists"})),
            "spec.requirements[0].key",
            "invalid label key",
            Crd::Injected,
        ),
        case(
            "key too long",
            req(json!({"key": format!("example.com/{}", "a".repeat(310)), "operator": "Exists"})),
            "spec.requirements[0].key",
            "at most 316",
            Crd::Injected,
        ),
        case(
            "key in the karpenter.sh domain",
            req(json!({"key": "karpenter.sh/something", "operator": "Exists"})),
            "spec.requirements[0].key",
            "\"karpenter.sh\" is restricted",
            Crd::Injected,
        ),
        case(
            "key kubernetes.io/hostname",
            req(json!({"key": "kubernetes.io/hostname", "operator": "Exists"})),
            "spec.requirements[0].key",
            "\"kubernetes.io/hostname\" is restricted",
            Crd::Injected,
        ),
        case(
            "invalid value",
            req(json!({"key": "example.com/team", "operator": "In", "values": ["bad value"]})),
            "spec.requirements[0].values[0]",
            "invalid label value",
            // Upstream's injected maxLength and pattern sit on the values array, where the API server ignores them.
            Crd::Runtime,
        ),
        // requirements: runtime (the controller's RuntimeValidation)
        case(
            "capacity-type with no known value",
            req(json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["cheap"]})),
            "spec.requirements[0]",
            "has no valid values",
            Crd::Runtime,
        ),
    ];
    cases.push(Case {
        name: "aws: capacity-reservation keys are not overlay keys",
        spec: req(json!({"key": "karpenter.k8s.aws/capacity-reservation-id", "operator": "Exists"})),
        policy: LabelPolicy::Aws,
        path: "spec.requirements[0].key",
        message: "\"karpenter.k8s.aws\" is restricted",
        crd: Crd::Injected,
    });
    cases
}

/// True when the CEL error `m` (`path: message`) is at `path` or at one of its ancestors (a rule on a list reports
/// at the list, as the API server does).
fn at_or_above(m: &str, path: &str) -> bool {
    let Some((p, _)) = m.split_once(": ") else {
        return false;
    };
    path == p || path.starts_with(&format!("{p}[")) || path.starts_with(&format!("{p}."))
}

fn schema_has_field(crd: &Value, parent_pointer: &str, field: &str) -> bool {
    crd.pointer(parent_pointer)
        .and_then(|p| p.get("properties"))
        .is_some_and(|p| p.get(field).is_some())
}

#[test]
fn valid_overlay_passes_validate_and_crd() {
    let crd = nodeoverlay::crd();
    let obj = object(valid_spec());
    let o: NodeOverlay = serde_json::from_value(obj.clone()).unwrap();
    assert_eq!(o.validate(LabelPolicy::Core), Ok(()));
    assert_eq!(o.validate(LabelPolicy::Aws), Ok(()));
    assert_eq!(support::cel_errors(&crd, &obj, None), Vec::<String>::new());
    assert_eq!(support::schema_errors(&crd, &obj), Vec::<String>::new());
    for policy in [LabelPolicy::Core, LabelPolicy::Aws] {
        let shipped = karpenter_api::crd::nodeoverlay(policy).expect("shipped CRD");
        assert_eq!(
            support::cel_errors(&shipped, &obj, None),
            Vec::<String>::new(),
            "{policy:?}"
        );
        assert_eq!(
            support::schema_errors(&shipped, &obj),
            Vec::<String>::new(),
            "{policy:?}"
        );
    }
    // An absolute price instead of an adjustment, no optional fields.
    for spec in [
        json!({"requirements": [], "price": "0.25"}),
        json!({"requirements": []}),
    ] {
        let obj = object(spec);
        let o: NodeOverlay = serde_json::from_value(obj.clone()).unwrap();
        assert_eq!(o.validate(LabelPolicy::Core), Ok(()));
        assert!(support::cel_errors(&crd, &obj, None).is_empty());
        assert!(support::schema_errors(&crd, &obj).is_empty());
        assert_eq!(
            serde_json::to_value(&o).unwrap(),
            obj,
            "round-trips without fields appearing"
        );
    }
}

#[test]
fn every_invalid_overlay_is_rejected_at_its_field() {
    let crd = nodeoverlay::crd();
    let crd_json = serde_json::to_value(&crd).unwrap();
    let mut failures = Vec::new();
    for c in cases() {
        let obj = object(c.spec.clone());
        let o: NodeOverlay = match serde_json::from_value(obj.clone()) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{}: does not deserialize: {e}", c.name));
                continue;
            }
        };
        match o.validate(c.policy) {
            Ok(()) => failures.push(format!("{}: validate() accepted it", c.name)),
            Err(e) => {
                let hit =
                    e.0.iter()
                        .any(|fe| fe.path == c.path && fe.message.contains(c.message));
                if !hit {
                    failures.push(format!(
                        "{}: expected `{}: …{}…`, got `{e}`",
                        c.name, c.path, c.message
                    ));
                }
                if !e.to_string().starts_with("NodeOverlay discount: ") {
                    failures.push(format!("{}: message does not name the object: {e}", c.name));
                }
            }
        }
        let cel = support::cel_errors(&crd, &obj, None);
        let schema = support::schema_errors(&crd, &obj);
        match c.crd {
            Crd::Cel(message) => {
                if !cel.iter().any(|m| at_or_above(m, c.path) && m.contains(message)) {
                    failures.push(format!(
                        "{}: CRD CEL did not reject it at {} (got {cel:?})",
                        c.name, c.path
                    ));
                }
            }
            Crd::Schema => {
                if !schema.iter().any(|m| m.starts_with(c.path)) {
                    failures.push(format!(
                        "{}: CRD schema did not reject it at {} (got {schema:?})",
                        c.name, c.path
                    ));
                }
            }
            Crd::NoField(field) => {
                let items =
                    "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/requirements/items";
                if schema_has_field(&crd_json, items, field) {
                    failures.push(format!("{}: CRD still declares {field}", c.name));
                }
            }
            Crd::Runtime => {
                if !cel.is_empty() || !schema.is_empty() {
                    failures.push(format!(
                        "{}: runtime-only rule, but the CRD rejects it: {cel:?} {schema:?}",
                        c.name
                    ));
                }
            }
            Crd::Injected => {
                let shipped = karpenter_api::crd::nodeoverlay(c.policy).expect("shipped CRD");
                let cel = support::cel_errors(&shipped, &obj, None);
                let schema = support::schema_errors(&shipped, &obj);
                let hit = cel.iter().chain(&schema).any(|m| at_or_above(m, c.path));
                if !hit {
                    failures.push(format!(
                        "{}: shipped CRD did not reject it at {} (got {cel:?} {schema:?})",
                        c.name, c.path
                    ));
                }
            }
            Crd::NotInSchema => {}
        }
        // The shipped CRD (with the injected rules) must reject whatever the bare CRD rejects.
        if matches!(c.crd, Crd::Cel(_) | Crd::Schema) {
            let shipped = karpenter_api::crd::nodeoverlay(c.policy).expect("shipped CRD");
            let n = support::cel_errors(&shipped, &obj, None).len()
                + support::schema_errors(&shipped, &obj).len();
            if n == 0 {
                failures.push(format!("{}: the shipped CRD accepts it", c.name));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn unknown_operator_is_rejected_by_decoding_and_schema() {
    let obj = object(req(
        json!({"key": "example.com/team", "operator": "Near", "values": ["x"]}),
    ));
    let e = karpenter_api::manifest::decode::<NodeOverlay>(&obj).unwrap_err();
    assert_eq!(e.path, "spec.requirements[0].operator");
    let schema = support::schema_errors(&nodeoverlay::crd(), &obj);
    assert!(
        schema
            .iter()
            .any(|m| m.starts_with("spec.requirements[0].operator")),
        "{schema:?}"
    );
}

#[test]
fn requirements_are_required() {
    let obj = object(json!({"price": "1"}));
    assert!(serde_json::from_value::<NodeOverlay>(obj.clone()).is_err());
    let schema = support::schema_errors(&nodeoverlay::crd(), &obj);
    assert!(
        schema.iter().any(|m| m.contains("spec.requirements: required")),
        "{schema:?}"
    );
}

/// The schema patterns and the Rust parsers agree on a spread of inputs.
#[test]
fn price_patterns_agree_with_parsers() {
    let price = regex::Regex::new(nodeoverlay::PRICE_PATTERN).unwrap();
    for s in [
        "0", "12", "0.5", "10.25", "", "-1", "+1", ".5", "1.", "1e3", "1.2.3", "abc", " 1",
    ] {
        assert_eq!(
            price.is_match(s),
            nodeoverlay::price_problem(s).is_none(),
            "price {s:?}"
        );
    }
    let adjustment = regex::Regex::new(nodeoverlay::PRICE_ADJUSTMENT_PATTERN).unwrap();
    for s in [
        "+1", "-1", "+0.5", "-.5", "+.5", "+10%", "+123.5%", "+.5%", "-15%", "-99.99%", "-0%", "-100%", "1",
        "10%", "-101%", "-100.0%", "-150%", "-.5%", "+1.", "+", "-", "%", "++1", "+1%%", "+ 1", "-1e3", "",
    ] {
        assert_eq!(
            adjustment.is_match(s),
            nodeoverlay::PriceAdjustment::parse(s).is_ok(),
            "priceAdjustment {s:?}"
        );
    }
}

/// What upstream v1.14.1 does with a NodeOverlay requirement key.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    Accepted,
    /// The CRD rejects it, with this message fragment.
    Rejected(&'static str),
    /// The CRD accepts it and the controller rejects it at run time (`IsRestrictedLabel`), with this fragment.
    RuntimeOnly(&'static str),
}

/// NodeOverlay requirement keys, accepted and rejected exactly as upstream v1.14.1 does (kubernetes-sigs/karpenter
/// `hack/validation/requirements.sh` and `IsRestrictedLabel`; aws/karpenter-provider-aws
/// `hack/validation/requirements.sh`, whose NodeOverlay allow-list is the NodePool one without the tenancy,
/// capacity-reservation and placement-group keys): `validate()` and the shipped CRD must agree on each.
#[test]
fn overlay_requirement_keys_match_upstream() {
    use Verdict::*;
    let restricted = "is restricted; specify a well known label";
    let cases: [(LabelPolicy, &str, Verdict); 12] = [
        (LabelPolicy::Aws, "karpenter.k8s.aws/ec2nodeclass", Accepted),
        (LabelPolicy::Aws, "karpenter.k8s.aws/instance-family", Accepted),
        (LabelPolicy::Core, "node-role.kubernetes.io/worker", Accepted),
        (LabelPolicy::Core, "node.kubernetes.io/instance-type", Accepted),
        (LabelPolicy::Core, "kubernetes.io/custom", RuntimeOnly(restricted)),
        (LabelPolicy::Core, "node.k8s.io/x", RuntimeOnly(restricted)),
        (LabelPolicy::Core, "karpenter.sh/nodepool", Accepted),
        (
            LabelPolicy::Aws,
            "karpenter.k8s.aws/capacity-reservation-id",
            Rejected("\"karpenter.k8s.aws\" is restricted"),
        ),
        (
            LabelPolicy::Aws,
            "karpenter.k8s.aws/placement-group-id",
            Rejected("\"karpenter.k8s.aws\" is restricted"),
        ),
        (
            LabelPolicy::Core,
            "kubernetes.io/hostname",
            Rejected("\"kubernetes.io/hostname\" is restricted"),
        ),
        (
            LabelPolicy::Core,
            "karpenter.sh/custom",
            Rejected("label domain \"karpenter.sh\" is restricted"),
        ),
        (LabelPolicy::Core, "example.com/custom", Accepted),
    ];
    let mut failures = Vec::new();
    for (policy, key, expected) in cases {
        let obj = object(req(json!({"key": key, "operator": "Exists"})));
        let overlay: NodeOverlay = serde_json::from_value(obj.clone()).unwrap();
        let rust = overlay.validate(policy).map_err(|e| e.to_string());
        let shipped = karpenter_api::crd::nodeoverlay(policy).expect("shipped CRD");
        let crd = support::cel_errors(&shipped, &obj, None)
            .into_iter()
            .chain(support::schema_errors(&shipped, &obj))
            .collect::<Vec<_>>();
        let ok = match expected {
            Accepted => rust.is_ok() && crd.is_empty(),
            Rejected(m) => rust.as_ref().is_err_and(|e| e.contains(m)) && crd.iter().any(|e| e.contains(m)),
            RuntimeOnly(m) => rust.as_ref().is_err_and(|e| e.contains(m)) && crd.is_empty(),
        };
        if !ok {
            failures.push(format!(
                "{key} ({policy:?}): expected {expected:?}; validate(): {rust:?}; CRD: {crd:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
