//! Every NodePool and NodeClaim validation rule, proven three ways: the Rust `validate()` rejects the object and
//! names the field, and the generated CRD rejects it too, through its CEL rules or its OpenAPI keywords.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use karpenter_api::{
    crd, label_policy::LabelPolicy, manifest::decode, nodeclaim::NodeClaim, nodepool::NodePool,
};
use serde_json::{Value, json};
use support::{cel_errors, schema_errors};

fn valid_pool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "web"}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"], "minValues": 2},
                        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["2"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}
                    ],
                    "taints": [{"key": "example.com/dedicated", "value": "web", "effect": "NoSchedule"}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h"
                }
            },
            "disruption": {"consolidateAfter": "1m", "budgets": [{"nodes": "10%"}, {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}]},
            "limits": {"cpu": "1000"},
            "weight": 10
        }
    })
}

/// Replaces the value at a JSON pointer (creating nothing): the mutation that makes a row invalid.
fn with(mut v: Value, pointer: &str, new: Value) -> Value {
    let (parent, last) = pointer.rsplit_once('/').unwrap();
    let parent = v.pointer_mut(parent).unwrap_or_else(|| panic!("no {parent}"));
    match parent {
        Value::Object(map) => {
            if new.is_null() {
                map.remove(last);
            } else {
                map.insert(last.to_string(), new);
            }
        }
        Value::Array(items) => items[last.parse::<usize>().unwrap()] = new,
        _ => panic!("not a container at {pointer}"),
    }
    v
}

#[derive(Clone, Copy)]
enum Crd {
    /// The rule is a CEL rule: the CRD's CEL must reject the object with this message fragment.
    Cel(&'static str),
    /// The rule is an OpenAPI keyword (pattern, enum, range, length): the schema must reject the object.
    Schema,
    /// The rule is checked only by the controller at runtime (ValidationSucceeded=False), as upstream.
    RuntimeOnly,
}

struct Row {
    name: &'static str,
    object: Value,
    path: &'static str,
    message: &'static str,
    crd: Crd,
}

fn pool_rows() -> Vec<Row> {
    let req = "/spec/template/spec/requirements";
    let p = valid_pool;
    vec![
        Row {
            name: "In without values",
            object: with(p(), &format!("{req}/0"), json!({"key": "a", "operator": "In"})),
            path: "spec.template.spec.requirements[0]",
            message: "must have a value defined",
            crd: Crd::Cel("must have a value defined"),
        },
        Row {
            name: "Gt with two values",
            object: with(
                p(),
                &format!("{req}/1"),
                json!({"key": "a", "operator": "Gt", "values": ["1", "2"]}),
            ),
            path: "spec.template.spec.requirements[1]",
            message: "single non-negative integer",
            crd: Crd::Cel("single non-negative integer"),
        },
        Row {
            name: "Lte with a negative value",
            object: with(
                p(),
                &format!("{req}/1"),
                json!({"key": "a", "operator": "Lte", "values": ["-1"]}),
            ),
            path: "spec.template.spec.requirements[1]",
            message: "single non-negative integer",
            crd: Crd::Cel("single non-negative integer"),
        },
        Row {
            name: "Lt with a word",
            object: with(
                p(),
                &format!("{req}/1"),
                json!({"key": "a", "operator": "Lt", "values": ["ten"]}),
            ),
            path: "spec.template.spec.requirements[1]",
            message: "single non-negative integer",
            crd: Crd::Cel(""),
        },
        Row {
            name: "minValues above the In values",
            object: with(p(), &format!("{req}/0/minValues"), json!(3)),
            path: "spec.template.spec.requirements[0]",
            message: "at least that many values",
            crd: Crd::Cel("at least that many values"),
        },
        Row {
            name: "minValues above 50",
            object: with(p(), &format!("{req}/0/minValues"), json!(51)),
            path: "spec.template.spec.requirements[0].minValues",
            message: "between 1 and 50",
            crd: Crd::Schema,
        },
        Row {
            name: "unknown operator",
            object: with(p(), &format!("{req}/0/operator"), json!("Near")),
            path: "spec.template.spec.requirements[0].operator",
            message: "unknown variant",
            crd: Crd::Schema,
        },
        Row {
            name: "requirement key with a space",
            object: with(p(), &format!("{req}/0/key"), json!("bad key")),
            path: "spec.template.spec.requirements[0].key",
            message: "invalid label key",
            crd: Crd::Schema,
        },
        Row {
            name: "requirement value too long",
            object: with(p(), &format!("{req}/0/values/0"), json!("x".repeat(64))),
            path: "spec.template.spec.requirements[0].values[0]",
            message: "at most 63",
            // Upstream's CRD puts maxLength on the array, where the API server ignores it.
            crd: Crd::RuntimeOnly,
        },
        Row {
            name: "requirement on karpenter.sh/nodepool",
            object: with(p(), &format!("{req}/0/key"), json!("karpenter.sh/nodepool")),
            path: "spec.template.spec.requirements[0].key",
            message: "label \"karpenter.sh/nodepool\" is restricted",
            crd: Crd::Cel("karpenter.sh/nodepool\" is restricted"),
        },
        Row {
            name: "requirement on kubernetes.io/hostname",
            object: with(p(), &format!("{req}/0/key"), json!("kubernetes.io/hostname")),
            path: "spec.template.spec.requirements[0].key",
            message: "\"kubernetes.io/hostname\" is restricted",
            crd: Crd::Cel("is restricted"),
        },
        Row {
            name: "requirement in the karpenter.sh domain",
            object: with(p(), &format!("{req}/0/key"), json!("karpenter.sh/custom")),
            path: "spec.template.spec.requirements[0].key",
            message: "label domain \"karpenter.sh\" is restricted",
            crd: Crd::Cel("label domain \"karpenter.sh\" is restricted"),
        },
        Row {
            name: "requirement on an AWS key not in the allow-list",
            object: with(
                p(),
                &format!("{req}/0/key"),
                json!("karpenter.k8s.aws/instance-made-up"),
            ),
            path: "spec.template.spec.requirements[0].key",
            message: "label domain \"karpenter.k8s.aws\" is restricted",
            crd: Crd::Cel("karpenter.k8s.aws\" is restricted"),
        },
        Row {
            name: "label in the kubernetes.io domain",
            object: with(
                p(),
                "/spec/template/metadata/labels",
                json!({"kubernetes.io/custom": "x"}),
            ),
            path: "spec.template.metadata.labels[\"kubernetes.io/custom\"]",
            message: "label kubernetes.io/custom is restricted; specify a well known label",
            crd: Crd::RuntimeOnly,
        },
        Row {
            name: "requirement in the k8s.io domain",
            object: with(
                p(),
                &format!("{req}/0"),
                json!({"key": "example.k8s.io/tier", "operator": "Exists"}),
            ),
            path: "spec.template.spec.requirements[0].key",
            message: "label example.k8s.io/tier is restricted",
            crd: Crd::RuntimeOnly,
        },
        Row {
            name: "capacity-type with no known value",
            object: with(p(), &format!("{req}/2/values"), json!(["cheap"])),
            path: "spec.template.spec.requirements[2]",
            message: "has no valid values",
            crd: Crd::RuntimeOnly,
        },
        Row {
            name: "more than 100 requirements",
            object: with(
                p(),
                req,
                Value::Array(vec![json!({"key": "a", "operator": "Exists"}); 101]),
            ),
            path: "spec.template.spec.requirements",
            message: "at most 100",
            crd: Crd::Schema,
        },
        Row {
            name: "template label nodepool",
            object: with(
                p(),
                "/spec/template/metadata/labels",
                json!({"karpenter.sh/nodepool": "x"}),
            ),
            path: "spec.template.metadata.labels[\"karpenter.sh/nodepool\"]",
            message: "is restricted",
            crd: Crd::Cel("is restricted"),
        },
        Row {
            name: "template label hostname",
            object: with(
                p(),
                "/spec/template/metadata/labels",
                json!({"kubernetes.io/hostname": "x"}),
            ),
            path: "spec.template.metadata.labels[\"kubernetes.io/hostname\"]",
            message: "is restricted",
            crd: Crd::Cel("is restricted"),
        },
        Row {
            name: "template label in karpenter.sh",
            object: with(
                p(),
                "/spec/template/metadata/labels",
                json!({"karpenter.sh/registered": "true"}),
            ),
            path: "spec.template.metadata.labels[\"karpenter.sh/registered\"]",
            message: "label domain \"karpenter.sh\" is restricted",
            crd: Crd::Cel("karpenter.sh\" is restricted"),
        },
        Row {
            name: "template label value with a space",
            object: with(p(), "/spec/template/metadata/labels", json!({"team": "a b"})),
            path: "spec.template.metadata.labels[\"team\"]",
            message: "invalid label value",
            crd: Crd::Schema,
        },
        Row {
            name: "template label AWS key not allowed",
            object: with(
                p(),
                "/spec/template/metadata/labels",
                json!({"karpenter.k8s.aws/foo": "x"}),
            ),
            path: "spec.template.metadata.labels[\"karpenter.k8s.aws/foo\"]",
            message: "karpenter.k8s.aws\" is restricted",
            crd: Crd::Cel("karpenter.k8s.aws\" is restricted"),
        },
        Row {
            name: "more than 100 template labels",
            object: with(
                p(),
                "/spec/template/metadata/labels",
                Value::Object((0..101).map(|i| (format!("l{i}"), json!("v"))).collect()),
            ),
            path: "spec.template.metadata.labels",
            message: "at most 100",
            crd: Crd::Schema,
        },
        Row {
            name: "taint with a bad effect",
            object: with(p(), "/spec/template/spec/taints/0/effect", json!("NoWay")),
            path: "spec.template.spec.taints[0].effect",
            message: "unknown variant",
            crd: Crd::Schema,
        },
        Row {
            name: "taint with an empty key",
            object: with(p(), "/spec/template/spec/taints/0/key", json!("")),
            path: "spec.template.spec.taints[0].key",
            message: "must not be empty",
            crd: Crd::Schema,
        },
        Row {
            name: "taint key with a space",
            object: with(p(), "/spec/template/spec/taints/0/key", json!("a b")),
            path: "spec.template.spec.taints[0].key",
            message: "invalid taint key",
            crd: Crd::Schema,
        },
        Row {
            name: "taint value with a space",
            object: with(p(), "/spec/template/spec/taints/0/value", json!("a b")),
            path: "spec.template.spec.taints[0].value",
            message: "invalid taint value",
            crd: Crd::Schema,
        },
        Row {
            name: "explicitly empty taint value",
            object: with(p(), "/spec/template/spec/taints/0/value", json!("")),
            path: "spec.template.spec.taints[0].value",
            message: "invalid taint value",
            crd: Crd::Schema,
        },
        Row {
            name: "taint value with an upper-case prefix",
            object: with(
                p(),
                "/spec/template/spec/taints/0/value",
                json!("Example.com/gpu"),
            ),
            path: "spec.template.spec.taints[0].value",
            message: "invalid taint value",
            crd: Crd::Schema,
        },
        Row {
            name: "the same taint twice",
            object: with(
                p(),
                "/spec/template/spec/startupTaints",
                json!([{"key": "example.com/dedicated", "value": "x", "effect": "NoSchedule"}]),
            ),
            path: "spec.template.spec.startupTaints[0]",
            message: "duplicate taint",
            crd: Crd::RuntimeOnly,
        },
        Row {
            name: "nodeClassRef with an empty name",
            object: with(p(), "/spec/template/spec/nodeClassRef/name", json!("")),
            path: "spec.template.spec.nodeClassRef.name",
            message: "name may not be empty",
            crd: Crd::Cel("name may not be empty"),
        },
        Row {
            name: "nodeClassRef with an empty kind",
            object: with(p(), "/spec/template/spec/nodeClassRef/kind", json!("")),
            path: "spec.template.spec.nodeClassRef.kind",
            message: "kind may not be empty",
            crd: Crd::Cel("kind may not be empty"),
        },
        Row {
            name: "nodeClassRef group with a version",
            object: with(
                p(),
                "/spec/template/spec/nodeClassRef/group",
                json!("karpenter.k8s.aws/v1"),
            ),
            path: "spec.template.spec.nodeClassRef.group",
            message: "must not contain '/'",
            crd: Crd::Schema,
        },
        Row {
            name: "expireAfter in days",
            object: with(p(), "/spec/template/spec/expireAfter", json!("30d")),
            path: "spec.template.spec.expireAfter",
            message: "invalid duration",
            crd: Crd::Schema,
        },
        Row {
            name: "terminationGracePeriod Never",
            object: with(p(), "/spec/template/spec/terminationGracePeriod", json!("Never")),
            path: "spec.template.spec.terminationGracePeriod",
            message: "invalid duration",
            crd: Crd::Schema,
        },
        Row {
            name: "consolidateAfter garbage",
            object: with(p(), "/spec/disruption/consolidateAfter", json!("soon")),
            path: "spec.disruption.consolidateAfter",
            message: "invalid duration",
            crd: Crd::Schema,
        },
        Row {
            name: "unknown consolidation policy",
            object: with(p(), "/spec/disruption/consolidationPolicy", json!("Always")),
            path: "spec.disruption.consolidationPolicy",
            message: "unknown variant",
            crd: Crd::Schema,
        },
        Row {
            name: "budget schedule without duration",
            object: with(p(), "/spec/disruption/budgets/1/duration", Value::Null),
            path: "spec.disruption.budgets[1]",
            message: "schedule and duration must be set together",
            crd: Crd::Cel("'schedule' must be set with 'duration'"),
        },
        Row {
            name: "budget duration without schedule",
            object: with(p(), "/spec/disruption/budgets/1/schedule", Value::Null),
            path: "spec.disruption.budgets[1]",
            message: "schedule and duration must be set together",
            crd: Crd::Cel("'schedule' must be set with 'duration'"),
        },
        Row {
            name: "budget nodes above 100%",
            object: with(p(), "/spec/disruption/budgets/0/nodes", json!("101%")),
            path: "spec.disruption.budgets[0].nodes",
            message: "percentage from 0% to 100%",
            crd: Crd::Schema,
        },
        Row {
            name: "budget nodes negative",
            object: with(p(), "/spec/disruption/budgets/0/nodes", json!("-1")),
            path: "spec.disruption.budgets[0].nodes",
            message: "count or a percentage",
            crd: Crd::Schema,
        },
        Row {
            name: "budget duration in seconds",
            object: with(p(), "/spec/disruption/budgets/1/duration", json!("30s")),
            path: "spec.disruption.budgets[1].duration",
            message: "hours and minutes",
            crd: Crd::Schema,
        },
        Row {
            name: "budget schedule with four fields",
            object: with(p(), "/spec/disruption/budgets/1/schedule", json!("0 9 * *")),
            path: "spec.disruption.budgets[1].schedule",
            message: "5 fields",
            crd: Crd::Schema,
        },
        Row {
            name: "budget schedule out of range",
            object: with(p(), "/spec/disruption/budgets/1/schedule", json!("0 25 * * *")),
            path: "spec.disruption.budgets[1].schedule",
            message: "invalid cron schedule",
            crd: Crd::RuntimeOnly,
        },
        Row {
            name: "budget with an unknown reason",
            object: with(p(), "/spec/disruption/budgets/0/reasons", json!(["Expired"])),
            path: "spec.disruption.budgets[0].reasons[0]",
            message: "unknown variant",
            crd: Crd::Schema,
        },
        Row {
            name: "more than 50 budgets",
            object: with(
                p(),
                "/spec/disruption/budgets",
                Value::Array(vec![json!({"nodes": "1"}); 51]),
            ),
            path: "spec.disruption.budgets",
            message: "at most 50",
            crd: Crd::Schema,
        },
        Row {
            name: "weight above 100",
            object: with(p(), "/spec/weight", json!(101)),
            path: "spec.weight",
            message: "between 1 and 100",
            crd: Crd::Schema,
        },
        Row {
            name: "weight zero",
            object: with(p(), "/spec/weight", json!(0)),
            path: "spec.weight",
            message: "between 1 and 100",
            crd: Crd::Schema,
        },
        Row {
            name: "limit that is not a quantity",
            object: with(p(), "/spec/limits/cpu", json!("lots")),
            path: "spec.limits[\"cpu\"]",
            message: "quantity",
            crd: Crd::Schema,
        },
        Row {
            name: "static pool with weight",
            object: with(
                with(p(), "/spec/replicas", json!(3)),
                "/spec/limits",
                json!({"nodes": "5"}),
            ),
            path: "spec",
            message: "'weight' is not supported on static NodePools",
            crd: Crd::Cel("'weight' is not supported"),
        },
        Row {
            name: "static pool with a cpu limit",
            object: with(with(p(), "/spec/replicas", json!(3)), "/spec/weight", Value::Null),
            path: "spec",
            message: "only 'limits.nodes'",
            crd: Crd::Cel("only 'limits.nodes'"),
        },
        Row {
            name: "negative replicas",
            object: with(
                with(
                    with(p(), "/spec/replicas", json!(-1)),
                    "/spec/weight",
                    Value::Null,
                ),
                "/spec/limits",
                Value::Null,
            ),
            path: "spec.replicas",
            message: "greater than or equal to 0",
            crd: Crd::Schema,
        },
    ]
}

fn check_rows(
    rows: Vec<Row>,
    validate: impl Fn(&Value) -> Result<(), String>,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    let mut failures = Vec::new();
    for row in rows {
        // 1. Rust: decoding or validate() must reject it, naming the field.
        match validate(&row.object) {
            Ok(()) => failures.push(format!("{}: validate() accepted it", row.name)),
            Err(e) => {
                let expected = format!("{}: ", row.path);
                if !(e.contains(&expected) && e.contains(row.message)) {
                    failures.push(format!(
                        "{}: expected `{}` with `{}`, got `{e}`",
                        row.name, row.path, row.message
                    ));
                }
            }
        }
        // 2. The CRD must reject it the same way the API server would.
        let cel = cel_errors(crd, &row.object, None);
        let schema = schema_errors(crd, &row.object);
        match row.crd {
            Crd::Cel(fragment) => {
                if !cel.iter().any(|m| m.contains(fragment)) {
                    failures.push(format!(
                        "{}: CEL did not reject it with `{fragment}` (CEL: {cel:?})",
                        row.name
                    ));
                }
            }
            Crd::Schema => {
                if schema.is_empty() && cel.is_empty() {
                    failures.push(format!("{}: the CRD schema accepted it", row.name));
                }
            }
            Crd::RuntimeOnly => {}
        }
    }
    assert!(
        failures.is_empty(),
        "{} rule(s) disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn validate_pool(v: &Value) -> Result<(), String> {
    let decoded = decode::<NodePool>(v).map_err(|e| e.to_string())?;
    decoded
        .object
        .validate(LabelPolicy::Aws)
        .map_err(|e| e.to_string())
}

#[test]
fn valid_nodepool_passes_everywhere() {
    let crd = crd::nodepool(LabelPolicy::Aws).unwrap();
    let pool = valid_pool();
    assert_eq!(validate_pool(&pool), Ok(()));
    assert_eq!(cel_errors(&crd, &pool, None), Vec::<String>::new());
    assert_eq!(schema_errors(&crd, &pool), Vec::<String>::new());
}

#[test]
fn every_nodepool_rule_is_enforced_by_rust_and_by_the_crd() {
    check_rows(
        pool_rows(),
        validate_pool,
        &crd::nodepool(LabelPolicy::Aws).unwrap(),
    );
}

#[test]
fn core_flavour_does_not_restrict_the_aws_domain() {
    let pool = with(
        valid_pool(),
        "/spec/template/spec/requirements/0/key",
        json!("karpenter.k8s.aws/instance-made-up"),
    );
    let decoded = decode::<NodePool>(&pool).unwrap().object;
    assert!(decoded.validate(LabelPolicy::Core).is_ok());
    assert!(cel_errors(&crd::nodepool(LabelPolicy::Core).unwrap(), &pool, None).is_empty());
    assert!(decoded.validate(LabelPolicy::Aws).is_err());
}

#[test]
fn nodepool_transition_rules() {
    let crd = crd::nodepool(LabelPolicy::Aws).unwrap();
    let old = valid_pool();
    let new_group = with(
        old.clone(),
        "/spec/template/spec/nodeClassRef/group",
        json!("karpenter.example.com"),
    );
    assert!(
        cel_errors(&crd, &new_group, Some(&old))
            .iter()
            .any(|m| m.contains("nodeClassRef.group is immutable"))
    );
    let new_kind = with(
        old.clone(),
        "/spec/template/spec/nodeClassRef/kind",
        json!("OtherNodeClass"),
    );
    assert!(
        cel_errors(&crd, &new_kind, Some(&old))
            .iter()
            .any(|m| m.contains("nodeClassRef.kind is immutable"))
    );
    let to_static = with(
        with(
            with(old.clone(), "/spec/replicas", json!(2)),
            "/spec/weight",
            Value::Null,
        ),
        "/spec/limits",
        Value::Null,
    );
    assert!(
        cel_errors(&crd, &to_static, Some(&old))
            .iter()
            .any(|m| m.contains("between static"))
    );

    let decode_pool = |v: &Value| decode::<NodePool>(v).unwrap().object;
    let err = decode_pool(&new_group)
        .validate_update(&decode_pool(&old), LabelPolicy::Aws)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.template.spec.nodeClassRef: nodeClassRef.group is immutable"),
        "{err}"
    );
    let err = decode_pool(&to_static)
        .validate_update(&decode_pool(&old), LabelPolicy::Aws)
        .unwrap_err()
        .to_string();
    assert!(err.contains("NodePool default: spec: Cannot transition"), "{err}");
    // A name change of the node class is allowed.
    let renamed = with(
        old.clone(),
        "/spec/template/spec/nodeClassRef/name",
        json!("other"),
    );
    assert!(cel_errors(&crd, &renamed, Some(&old)).is_empty());
}

#[test]
fn schema_defaults_match_the_accessors() {
    let crd = serde_json::to_value(crd::nodepool(LabelPolicy::Aws).unwrap()).unwrap();
    let spec = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
        .unwrap();
    assert_eq!(
        spec.pointer("/template/properties/spec/properties/expireAfter/default"),
        Some(&json!("720h"))
    );
    assert_eq!(
        spec.pointer("/disruption/default"),
        Some(&json!({"consolidateAfter": "0s"}))
    );
    assert_eq!(
        spec.pointer("/disruption/properties/consolidationPolicy/default"),
        Some(&json!("WhenEmptyOrUnderutilized"))
    );
    assert_eq!(
        spec.pointer("/disruption/properties/budgets/default"),
        Some(&json!([{"nodes": "10%"}]))
    );
    let pool = decode::<NodePool>(&with(valid_pool(), "/spec/disruption", Value::Null))
        .unwrap()
        .object;
    assert_eq!(
        pool.spec.disruption.consolidate_after(),
        Some(std::time::Duration::ZERO)
    );
    assert_eq!(
        pool.spec.disruption.budgets()[0].nodes.as_deref(),
        None,
        "the default budget's nodes default to 10%"
    );
    assert_eq!(
        pool.spec.template.spec.expire_after(),
        Some(std::time::Duration::from_secs(720 * 3600))
    );
}

#[test]
fn nodepool_has_scale_and_status_subresources_and_printer_columns() {
    let crd = serde_json::to_value(crd::nodepool(LabelPolicy::Aws).unwrap()).unwrap();
    let version = crd.pointer("/spec/versions/0").unwrap();
    assert_eq!(
        version.pointer("/subresources/scale/specReplicasPath"),
        Some(&json!(".spec.replicas"))
    );
    assert_eq!(
        version.pointer("/subresources/scale/statusReplicasPath"),
        Some(&json!(".status.nodes"))
    );
    assert!(version.pointer("/subresources/status").is_some());
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        ["NodeClass", "Nodes", "Ready", "Age", "Weight", "CPU", "Memory"]
    );
    assert_eq!(crd.pointer("/spec/scope"), Some(&json!("Cluster")));
    assert_eq!(crd.pointer("/spec/names/categories"), Some(&json!(["karpenter"])));
}

fn valid_claim() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "default-abcde"},
        "spec": {
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]}
            ],
            "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}},
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }
    })
}

fn validate_claim(v: &Value) -> Result<(), String> {
    let decoded = decode::<NodeClaim>(v).map_err(|e| e.to_string())?;
    decoded
        .object
        .validate(LabelPolicy::Aws)
        .map_err(|e| e.to_string())
}

#[test]
fn nodeclaim_rules() {
    let crd = crd::nodeclaim(LabelPolicy::Aws).unwrap();
    assert_eq!(
        validate_claim(&valid_claim()),
        Ok(()),
        "NodeClaims may name their NodePool"
    );
    assert!(cel_errors(&crd, &valid_claim(), None).is_empty());
    assert!(schema_errors(&crd, &valid_claim()).is_empty());
    let c = valid_claim;
    check_rows(
        vec![
            Row {
                name: "claim requirement on hostname",
                object: with(c(), "/spec/requirements/1/key", json!("kubernetes.io/hostname")),
                path: "spec.requirements[1].key",
                message: "is restricted",
                crd: Crd::Cel("is restricted"),
            },
            Row {
                name: "claim In without values",
                object: with(c(), "/spec/requirements/1/values", Value::Null),
                path: "spec.requirements[1]",
                message: "must have a value defined",
                crd: Crd::Cel("must have a value defined"),
            },
            Row {
                name: "claim request that is not a quantity",
                object: with(c(), "/spec/resources/requests/cpu", json!("x")),
                path: "spec.resources.requests[\"cpu\"]",
                message: "quantity",
                crd: Crd::Schema,
            },
            Row {
                name: "claim taint bad effect",
                object: with(c(), "/spec/taints", json!([{"key": "a", "effect": "Sometimes"}])),
                path: "spec.taints[0].effect",
                message: "unknown variant",
                crd: Crd::Schema,
            },
        ],
        validate_claim,
        &crd,
    );
    // The spec is immutable.
    let changed = with(valid_claim(), "/spec/requirements/1/values", json!(["m5.large"]));
    assert!(
        cel_errors(&crd, &changed, Some(&valid_claim()))
            .iter()
            .any(|m| m.contains("spec is immutable"))
    );
    let decode_claim = |v: &Value| decode::<NodeClaim>(v).unwrap().object;
    let err = decode_claim(&changed)
        .validate_update(&decode_claim(&valid_claim()), LabelPolicy::Aws)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "NodeClaim default-abcde: spec: spec is immutable"
    );
}

/// What upstream v1.14.1 accepts, per rule, against what it rejects: every object must get the same verdict from
/// `validate()` and from the generated CRD (CEL and OpenAPI), except the rows upstream accepts at the API server
/// and rejects only in the controller (ValidationSucceeded=False), which `validate()` rejects and the CRD accepts.
///
/// Upstream sources: kubernetes-sigs/karpenter `hack/validation/labels.sh`, `requirements.sh`, `taint.sh` (the CEL
/// rules and patterns injected into `pkg/apis/crds/*.yaml`) and `pkg/apis/v1/labels.go` (`IsRestrictedLabel`:
/// `RestrictedLabelDomains` are `kubernetes.io`, `k8s.io` and `karpenter.sh`, less the well-known keys and the
/// `LabelDomainExceptions` `node-role.kubernetes.io`, `kops.k8s.io`, `node-restriction.kubernetes.io`, and the
/// kubelet's own `node.kubernetes.io`), `pkg/apis/v1/nodeclaim_validation.go` (`ValidateRequirement` normalizes
/// the key, checks it with `IsRestrictedLabel` and values with `IsValidLabelValue`; taint values are qualified
/// names).
#[test]
fn keys_and_values_are_exactly_as_strict_as_upstream() {
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Verdict {
        Accepted,
        /// The CRD rejects it, and so does `validate()`, with this message fragment.
        Rejected(&'static str),
        /// The CRD accepts it; the controller (and `validate()`) reject it with this message fragment.
        RuntimeRejected(&'static str),
    }
    use Verdict::{Accepted, Rejected, RuntimeRejected};
    let label = |key: &str| with(valid_pool(), "/spec/template/metadata/labels", json!({key: "x"}));
    let requirement = |key: &str| {
        with(
            valid_pool(),
            "/spec/template/spec/requirements/0",
            json!({"key": key, "operator": "Exists"}),
        )
    };
    let value = |v: &str| {
        with(
            valid_pool(),
            "/spec/template/spec/requirements/0",
            json!({"key": "example.com/team", "operator": "In", "values": [v]}),
        )
    };
    let taint = |v: &str| with(valid_pool(), "/spec/template/spec/taints/0/value", json!(v));
    let cases: Vec<(&str, Value, Verdict)> = vec![
        // template label keys
        (
            "label node-role.kubernetes.io/worker",
            label("node-role.kubernetes.io/worker"),
            Accepted,
        ),
        (
            "label node.kubernetes.io/pool",
            label("node.kubernetes.io/pool"),
            Accepted,
        ),
        (
            "label node-restriction.kubernetes.io/pool",
            label("node-restriction.kubernetes.io/pool"),
            Accepted,
        ),
        (
            "label kops.k8s.io/instancegroup",
            label("kops.k8s.io/instancegroup"),
            Accepted,
        ),
        (
            "label topology.kubernetes.io/zone",
            label("topology.kubernetes.io/zone"),
            Accepted,
        ),
        (
            "label kubernetes.io/role",
            label("kubernetes.io/role"),
            RuntimeRejected("is restricted; specify a well known label"),
        ),
        (
            "label node.k8s.io/pool",
            label("node.k8s.io/pool"),
            RuntimeRejected("is restricted; specify a well known label"),
        ),
        (
            "label app.kubernetes.io/name",
            label("app.kubernetes.io/name"),
            RuntimeRejected("is restricted; specify a well known label"),
        ),
        (
            "label beta.kubernetes.io/arch",
            label("beta.kubernetes.io/arch"),
            RuntimeRejected("is restricted; specify a well known label"),
        ),
        (
            "label karpenter.sh/capacity-type",
            label("karpenter.sh/capacity-type"),
            Accepted,
        ),
        (
            "label karpenter.sh/nodepool",
            label("karpenter.sh/nodepool"),
            Rejected("\"karpenter.sh/nodepool\" is restricted"),
        ),
        (
            "label kubernetes.io/hostname",
            label("kubernetes.io/hostname"),
            Rejected("\"kubernetes.io/hostname\" is restricted"),
        ),
        (
            "label karpenter.sh/registered",
            label("karpenter.sh/registered"),
            Rejected("label domain \"karpenter.sh\" is restricted"),
        ),
        (
            "label team.karpenter.sh/x",
            label("team.karpenter.sh/x"),
            Rejected("label domain \"karpenter.sh\" is restricted"),
        ),
        // requirement keys
        (
            "requirement node-role.kubernetes.io/worker",
            requirement("node-role.kubernetes.io/worker"),
            Accepted,
        ),
        (
            "requirement kubernetes.io/custom",
            requirement("kubernetes.io/custom"),
            RuntimeRejected("is restricted; specify a well known label"),
        ),
        (
            "requirement node.k8s.io/x",
            requirement("node.k8s.io/x"),
            RuntimeRejected("is restricted; specify a well known label"),
        ),
        // Deprecated aliases are normalized first, as upstream's ValidateRequirement does.
        (
            "requirement beta.kubernetes.io/arch",
            requirement("beta.kubernetes.io/arch"),
            Accepted,
        ),
        (
            "requirement node.kubernetes.io/instance-type",
            requirement("node.kubernetes.io/instance-type"),
            Accepted,
        ),
        (
            "requirement karpenter.k8s.aws/ec2nodeclass",
            requirement("karpenter.k8s.aws/ec2nodeclass"),
            Accepted,
        ),
        (
            "requirement karpenter.sh/nodepool",
            requirement("karpenter.sh/nodepool"),
            Rejected("\"karpenter.sh/nodepool\" is restricted"),
        ),
        (
            "requirement kubernetes.io/hostname",
            requirement("kubernetes.io/hostname"),
            Rejected("\"kubernetes.io/hostname\" is restricted"),
        ),
        (
            "requirement karpenter.sh/custom",
            requirement("karpenter.sh/custom"),
            Rejected("label domain \"karpenter.sh\" is restricted"),
        ),
        (
            "requirement karpenter.k8s.aws/made-up",
            requirement("karpenter.k8s.aws/made-up"),
            Rejected("label domain \"karpenter.k8s.aws\" is restricted"),
        ),
        // requirement values: the CRD does not check them; the controller does (IsValidLabelValue)
        ("requirement value web", value("web"), Accepted),
        (
            "requirement value a/b",
            value("a/b"),
            RuntimeRejected("invalid label value"),
        ),
        (
            "requirement value of 64 characters",
            value(&"x".repeat(64)),
            RuntimeRejected("at most 63"),
        ),
        // taint values: qualified names
        ("taint value example.com/gpu", taint("example.com/gpu"), Accepted),
        (
            "taint value nvidia.com/gpu.A100",
            taint("nvidia.com/gpu.A100"),
            Accepted,
        ),
        ("taint value true", taint("true"), Accepted),
        (
            "taint value a/b/c",
            taint("a/b/c"),
            Rejected("invalid taint value"),
        ),
        ("taint value a b", taint("a b"), Rejected("invalid taint value")),
    ];
    let crd = crd::nodepool(LabelPolicy::Aws).unwrap();
    let mut failures = Vec::new();
    for (name, object, verdict) in cases {
        let rust = validate_pool(&object);
        let cel = cel_errors(&crd, &object, None);
        let schema = schema_errors(&crd, &object);
        let crd_rejects = !cel.is_empty() || !schema.is_empty();
        let (rust_ok, crd_ok) = match verdict {
            Accepted => (rust.is_ok(), !crd_rejects),
            Rejected(fragment) => (rust.as_ref().is_err_and(|e| e.contains(fragment)), crd_rejects),
            RuntimeRejected(fragment) => (rust.as_ref().is_err_and(|e| e.contains(fragment)), !crd_rejects),
        };
        if !rust_ok || !crd_ok {
            failures.push(format!(
                "{name}: expected {verdict:?}; validate(): {rust:?}; CEL: {cel:?}; schema: {schema:?}"
            ));
        }
    }
    // NodeClaims may name their NodePool and, like NodePools, keys in the kubernetes.io and k8s.io domains.
    let claim_crd = crd::nodeclaim(LabelPolicy::Aws).unwrap();
    for key in [
        "node-role.kubernetes.io/worker",
        "kubernetes.io/custom",
        "example.k8s.io/x",
    ] {
        let claim = with(valid_claim(), "/spec/requirements/1/key", json!(key));
        let cel = cel_errors(&claim_crd, &claim, None);
        if validate_claim(&claim).is_err() || !cel.is_empty() {
            failures.push(format!(
                "NodeClaim requirement {key}: {:?}; CEL: {cel:?}",
                validate_claim(&claim)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) disagree with upstream:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
