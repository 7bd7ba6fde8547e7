//! Every CapacityBuffer rule, as a table of invalid objects: `validate()` must reject each one at the named field,
//! and the CRD (schema or CEL) must reject it too when the rule lives in the CRD.

// The shared harness unwraps and nests `if`s; keep this crate's clippy run about these tests.
mod support;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::capacitybuffer::{self, CapacityBuffer};
use serde_json::{Value, json};

/// Where the CRD enforces a rule.
#[derive(Debug, Clone, Copy)]
enum Crd {
    /// A CEL rule of the CRD with this message.
    Cel(&'static str),
    /// An OpenAPI keyword (minLength, minimum) of the CRD.
    Schema,
    /// A runtime check of the buffer controller: the CRD accepts the object.
    Runtime,
    /// Not expressed in the generated schema yet (see the case's note).
    NotInSchema,
}

struct Case {
    name: &'static str,
    spec: Value,
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
        path,
        message,
        crd,
    }
}

fn object(spec: Value) -> Value {
    json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "spare", "namespace": "team"}, "spec": spec
    })
}

const NEEDS_SIZE: &str = "'podTemplateRef' needs 'replicas' or 'limits'";
const EXCLUSIVE: &str = "'podTemplateRef' and 'scalableRef' are mutually exclusive";

fn cases() -> Vec<Case> {
    vec![
        // CEL: podTemplateRef needs replicas or limits
        case(
            "podTemplateRef alone",
            json!({"podTemplateRef": {"name": "t"}}),
            "spec",
            NEEDS_SIZE,
            Crd::Cel(NEEDS_SIZE),
        ),
        case(
            "podTemplateRef with only a percentage",
            json!({"podTemplateRef": {"name": "t"}, "percentage": 20}),
            "spec",
            NEEDS_SIZE,
            Crd::Cel(NEEDS_SIZE),
        ),
        // CEL: the references are mutually exclusive
        case(
            "both references",
            json!({"podTemplateRef": {"name": "t"}, "replicas": 1, "scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}}),
            "spec",
            EXCLUSIVE,
            Crd::Cel(EXCLUSIVE),
        ),
        // runtime: a reference is required (the controller marks the buffer ReadyForProvisioning=False)
        case(
            "no reference",
            json!({"replicas": 3}),
            "spec",
            "one of 'podTemplateRef' or 'scalableRef' must be set",
            Crd::Runtime,
        ),
        case(
            "no reference, limits only",
            json!({"limits": {"cpu": "4"}}),
            "spec",
            "must be set",
            Crd::Runtime,
        ),
        // schema: names and kinds are not empty
        case(
            "empty podTemplateRef name",
            json!({"podTemplateRef": {"name": ""}, "replicas": 1}),
            "spec.podTemplateRef.name",
            "must not be empty",
            Crd::Schema,
        ),
        case(
            "empty scalableRef kind",
            json!({"scalableRef": {"kind": "", "name": "web"}}),
            "spec.scalableRef.kind",
            "must not be empty",
            Crd::Schema,
        ),
        case(
            "empty scalableRef name",
            json!({"scalableRef": {"kind": "Deployment", "name": ""}}),
            "spec.scalableRef.name",
            "must not be empty",
            Crd::Schema,
        ),
        // runtime: only Deployment, StatefulSet and ReplicaSet of the apps group resolve
        case(
            "unsupported scalable kind",
            json!({"scalableRef": {"apiGroup": "apps", "kind": "DaemonSet", "name": "agent"}}),
            "spec.scalableRef.kind",
            "unsupported kind",
            Crd::Runtime,
        ),
        case(
            "unsupported scalable group",
            json!({"scalableRef": {"apiGroup": "argoproj.io", "kind": "Deployment", "name": "web"}}),
            "spec.scalableRef.apiGroup",
            "unsupported API group",
            Crd::Runtime,
        ),
        // schema: counts are not negative
        case(
            "negative replicas",
            json!({"podTemplateRef": {"name": "t"}, "replicas": -1}),
            "spec.replicas",
            "greater than or equal to 0",
            Crd::Schema,
        ),
        case(
            "negative percentage",
            json!({"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": -10}),
            "spec.percentage",
            "greater than or equal to 0",
            Crd::Schema,
        ),
        // limits quantities: the shared ResourceList schema carries no quantity pattern yet.
        case(
            "limit not a quantity",
            json!({"podTemplateRef": {"name": "t"}, "limits": {"cpu": "lots"}}),
            "spec.limits[\"cpu\"]",
            "quantity",
            Crd::NotInSchema,
        ),
    ]
}

/// True when the CEL error `m` (`path: message`) is at `path` or at one of its ancestors.
fn at_or_above(m: &str, path: &str) -> bool {
    let Some((p, _)) = m.split_once(": ") else {
        return false;
    };
    path == p || path.starts_with(&format!("{p}[")) || path.starts_with(&format!("{p}."))
}

#[test]
fn valid_buffers_pass_validate_and_crd() {
    for crd in crds() {
        valid_buffers_pass(&crd);
    }
}

/// The bare CRD of the types and the shipped one `crate::crd` builds from it.
fn crds() -> [CustomResourceDefinition; 2] {
    [
        capacitybuffer::crd(),
        karpenter_api::crd::capacitybuffer().unwrap_or_else(|e| panic!("shipped CRD: {e}")),
    ]
}

fn valid_buffers_pass(crd: &CustomResourceDefinition) {
    for spec in [
        json!({"podTemplateRef": {"name": "shape"}, "replicas": 3, "limits": {"cpu": "10", "memory": "20Gi"}}),
        json!({"podTemplateRef": {"name": "shape"}, "limits": {"cpu": "10"}}),
        json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}, "percentage": 20, "replicas": 1}),
        json!({"scalableRef": {"kind": "StatefulSet", "name": "db"}, "replicas": 0}),
        json!({"provisioningStrategy": "buffer.x-k8s.io/active-capacity", "scalableRef": {"apiGroup": "", "kind": "ReplicaSet", "name": "rs"}}),
    ] {
        let obj = object(spec);
        let b: CapacityBuffer = serde_json::from_value(obj.clone()).unwrap_or_else(|e| panic!("{obj}: {e}"));
        assert_eq!(b.validate(), Ok(()), "{obj}");
        assert_eq!(
            support::cel_errors(crd, &obj, None),
            Vec::<String>::new(),
            "{obj}"
        );
        assert_eq!(support::schema_errors(crd, &obj), Vec::<String>::new(), "{obj}");
        assert_eq!(
            serde_json::to_value(&b).ok().as_ref(),
            Some(&obj),
            "round-trips without fields appearing"
        );
    }
}

#[test]
fn every_invalid_buffer_is_rejected_at_its_field() {
    for crd in crds() {
        invalid_buffers_are_rejected(&crd);
    }
}

fn invalid_buffers_are_rejected(crd: &CustomResourceDefinition) {
    let mut failures = Vec::new();
    for c in cases() {
        let obj = object(c.spec.clone());
        let b: CapacityBuffer = match serde_json::from_value(obj.clone()) {
            Ok(b) => b,
            Err(e) => {
                failures.push(format!("{}: does not deserialize: {e}", c.name));
                continue;
            }
        };
        match b.validate() {
            Ok(()) => failures.push(format!("{}: validate() accepted it", c.name)),
            Err(e) => {
                if !e
                    .0
                    .iter()
                    .any(|fe| fe.path == c.path && fe.message.contains(c.message))
                {
                    failures.push(format!(
                        "{}: expected `{}: …{}…`, got `{e}`",
                        c.name, c.path, c.message
                    ));
                }
                if !e.to_string().starts_with("CapacityBuffer team/spare: ") {
                    failures.push(format!("{}: message does not name the object: {e}", c.name));
                }
            }
        }
        let cel = support::cel_errors(crd, &obj, None);
        let schema = support::schema_errors(crd, &obj);
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
            Crd::Runtime => {
                if !cel.is_empty() || !schema.is_empty() {
                    failures.push(format!(
                        "{}: runtime-only rule, but the CRD rejects it: {cel:?} {schema:?}",
                        c.name
                    ));
                }
            }
            Crd::NotInSchema => {}
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn required_reference_fields_are_required() {
    let crd = capacitybuffer::crd();
    for (spec, field) in [
        (
            json!({"podTemplateRef": {}, "replicas": 1}),
            "spec.podTemplateRef.name",
        ),
        (json!({"scalableRef": {"name": "web"}}), "spec.scalableRef.kind"),
        (
            json!({"scalableRef": {"kind": "Deployment"}}),
            "spec.scalableRef.name",
        ),
    ] {
        let obj = object(spec);
        let e = karpenter_api::manifest::decode::<CapacityBuffer>(&obj).unwrap_err();
        assert!(e.message.contains("missing field"), "{e}");
        let schema = support::schema_errors(&crd, &obj);
        assert!(
            schema.iter().any(|m| m == &format!("{field}: required")),
            "{schema:?}"
        );
    }
    let no_spec = json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer", "metadata": {"name": "x"}});
    assert!(serde_json::from_value::<CapacityBuffer>(no_spec.clone()).is_err());
    assert!(
        support::schema_errors(&crd, &no_spec)
            .iter()
            .any(|m| m.contains("spec: required"))
    );
}

#[test]
fn provisioning_strategy_defaults_in_crd_and_accessor() {
    let crd = serde_json::to_value(capacitybuffer::crd()).unwrap();
    let default = crd.pointer(
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/provisioningStrategy/default",
    );
    assert_eq!(default, Some(&json!(capacitybuffer::ACTIVE_CAPACITY_STRATEGY)));
    let b: CapacityBuffer = serde_json::from_value(object(
        json!({"scalableRef": {"kind": "Deployment", "name": "w"}}),
    ))
    .unwrap();
    assert_eq!(
        b.spec.provisioning_strategy(),
        capacitybuffer::ACTIVE_CAPACITY_STRATEGY
    );
}
