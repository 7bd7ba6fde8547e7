//! The controller's IAM policies in deploy/cloudformation.yaml grant every AWS action the provider calls, and
//! grant nothing else without a reason: a call added without its grant crash-loops the controller on EKS
//! (DescribeAvailabilityZones at start-up) or silently breaks a feature (AMI aliases with GetParameters).
//!
//! The provider's actions are `karpenter_aws::permissions::AWS_ACTIONS`. This test proves that list complete by
//! scanning the crate's sources for SDK operation calls (`.describe_subnets()`: an operation method takes no
//! arguments and starts with an AWS verb), and the clients' interceptor refuses an unlisted action at run time in
//! debug builds. The moto tests then run the provider as a principal holding exactly these policies.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use karpenter_aws::permissions::AWS_ACTIONS;

/// Granted but not called by the provider, each for a reason.
const KEEP_GRANTED: &[(&str, &str)] = &[
    // AWS authorizes the instance profile a launch names as iam:PassRole of its role (CreateFleet,
    // RunInstances), and AddRoleToInstanceProfile of the node role needs it too.
    (
        "iam:PassRole",
        "authorized inside CreateFleet and AddRoleToInstanceProfile",
    ),
    // Upstream's ZonalShiftPolicy, kept so a stack migrated from upstream's template keeps a policy a
    // controller role may still attach; zonal shift is not implemented, so nothing calls it.
    (
        "arc-zonal-shift:GetManagedResource",
        "upstream compatibility (ZonalShiftPolicy)",
    ),
];

/// Zero-argument methods in the sources that start like an AWS operation but are not SDK calls.
const NOT_SDK_CALLS: &[&str] = &[
    "create_time",       // LaunchTemplate's creation time (a DescribeLaunchTemplates output getter)
    "delete_handed_out", // the interruption source's own bookkeeping
    "tag_ledger",        // the provider's record of NodeClaim tags to write
];

/// The verbs AWS operation names start with (snake_case, as the SDK's fluent builders spell them).
const OPERATION_VERBS: &[&str] = &[
    "accept",
    "add",
    "allocate",
    "apply",
    "assign",
    "associate",
    "attach",
    "authorize",
    "batch",
    "cancel",
    "change",
    "create",
    "delete",
    "deregister",
    "describe",
    "detach",
    "disable",
    "disassociate",
    "enable",
    "get",
    "import",
    "list",
    "modify",
    "purge",
    "put",
    "reboot",
    "receive",
    "register",
    "reject",
    "release",
    "remove",
    "replace",
    "request",
    "reset",
    "revoke",
    "run",
    "search",
    "send",
    "start",
    "stop",
    "tag",
    "terminate",
    "unassign",
    "untag",
    "update",
];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// snake_case of an operation name: `DescribeAvailabilityZones` → `describe_availability_zones`.
fn snake_case(operation: &str) -> String {
    let mut out = String::new();
    for (i, c) in operation.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `.verb_object()` call (no arguments) in the non-test code of `src/`: (method, "file:line").
fn operation_like_calls() -> Vec<(String, String)> {
    let src = crate_dir().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut calls = Vec::new();
    for file in files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(crate_dir()).unwrap().display().to_string();
        for (number, line) in text.lines().enumerate() {
            // Unit tests sit at the end of a file, behind #[cfg(test)].
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let code = line.split("//").next().unwrap_or("");
            let mut i = 0;
            while let Some(found) = code[i..].find('.') {
                let start = i + found + 1;
                let end = start
                    + code[start..]
                        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(code.len() - start);
                i = start;
                let name = &code[start..end];
                let zero_args = code[end..].starts_with("()");
                let verb = name.split('_').next().unwrap_or("");
                if zero_args && name.contains('_') && OPERATION_VERBS.contains(&verb) {
                    calls.push((name.to_string(), format!("{shown}:{}", number + 1)));
                }
            }
        }
    }
    calls
}

/// The actions each controller policy of the template allows: {action: [policy logical ids]}.
fn granted_actions() -> BTreeMap<String, Vec<String>> {
    let path = crate_dir().join("../../deploy/cloudformation.yaml");
    granted_actions_in(&std::fs::read_to_string(&path).unwrap())
}

/// [`granted_actions`] of a template's text.
fn granted_actions_in(text: &str) -> BTreeMap<String, Vec<String>> {
    // The CloudFormation tags (!Sub, !Ref, !GetAtt) are dropped: only actions matter here, and they are never
    // built by an intrinsic.
    let template: serde_json::Value = serde_saphyr::from_str(text).unwrap();
    let mut granted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let resources = template["Resources"].as_object().expect("Resources");
    for (id, resource) in resources {
        if resource["Type"] != "AWS::IAM::ManagedPolicy" {
            continue;
        }
        let document = &resource["Properties"]["PolicyDocument"];
        // A JSON document under !Sub (condition keys name the cluster), or a YAML mapping.
        let document: serde_json::Value = match document {
            serde_json::Value::String(json) => {
                serde_json::from_str(json).unwrap_or_else(|e| panic!("{id}: PolicyDocument is not JSON: {e}"))
            }
            other => other.clone(),
        };
        let statements = match &document["Statement"] {
            serde_json::Value::Array(statements) => statements.clone(),
            single => vec![single.clone()],
        };
        for statement in statements {
            assert!(
                statement.get("NotAction").is_none(),
                "{id}: NotAction grants more than this test can see"
            );
            if statement["Effect"] != "Allow" {
                continue;
            }
            let actions = match &statement["Action"] {
                serde_json::Value::String(action) => vec![action.clone()],
                serde_json::Value::Array(actions) => actions
                    .iter()
                    .map(|a| a.as_str().expect("action").to_string())
                    .collect(),
                other => panic!("{id}: Action {other}"),
            };
            for action in actions {
                assert!(
                    !action.contains('*'),
                    "{id}: {action}: a wildcard grants actions nobody reviewed; list them"
                );
                granted.entry(action).or_default().push(id.clone());
            }
        }
    }
    assert!(!granted.is_empty(), "no controller policies in the template");
    granted
}

/// The provider's actions `granted` lacks.
fn missing_grants(granted: &BTreeMap<String, Vec<String>>) -> Vec<&'static str> {
    AWS_ACTIONS
        .iter()
        .copied()
        .filter(|a| !granted.contains_key(*a))
        .collect()
}

#[test]
fn every_sdk_call_in_the_sources_is_a_declared_action_and_every_declared_action_is_called() {
    let declared: BTreeMap<String, &str> = AWS_ACTIONS
        .iter()
        .map(|action| (snake_case(action.split_once(':').unwrap().1), *action))
        .collect();
    let mut undeclared = Vec::new();
    let mut called = BTreeSet::new();
    for (method, at) in operation_like_calls() {
        match declared.get(&method) {
            Some(action) => {
                called.insert(*action);
            }
            None if NOT_SDK_CALLS.contains(&method.as_str()) => {}
            None => undeclared.push(format!("{at}: .{method}()")),
        }
    }
    assert!(
        undeclared.is_empty(),
        "SDK operation calls whose action is not in karpenter_aws::permissions::AWS_ACTIONS (declare them there \
         and grant them in deploy/cloudformation.yaml; a method that is no SDK call goes in NOT_SDK_CALLS):\n{}",
        undeclared.join("\n")
    );
    let uncalled: Vec<&&str> = AWS_ACTIONS.iter().filter(|a| !called.contains(*a)).collect();
    assert!(
        uncalled.is_empty(),
        "declared in karpenter_aws::permissions::AWS_ACTIONS but called nowhere in src/: {uncalled:?}"
    );
}

#[test]
fn every_action_the_provider_calls_is_granted_by_the_controller_policies() {
    let missing = missing_grants(&granted_actions());
    assert!(
        missing.is_empty(),
        "the provider calls these actions, but no controller policy in deploy/cloudformation.yaml grants them \
         (the controller would fail on AWS): {missing:?}"
    );
}

#[test]
fn every_granted_action_is_called_or_kept_for_a_reason() {
    let unneeded: Vec<(String, Vec<String>)> = granted_actions()
        .into_iter()
        .filter(|(action, _)| {
            !AWS_ACTIONS.contains(&action.as_str()) && !KEEP_GRANTED.iter().any(|(kept, _)| kept == action)
        })
        .collect();
    assert!(
        unneeded.is_empty(),
        "deploy/cloudformation.yaml grants actions the provider never calls (remove them, or keep them in \
         KEEP_GRANTED with the reason): {unneeded:?}"
    );
}

#[test]
fn the_scan_sees_an_sdk_call_as_the_provider_writes_them() {
    // The scanner itself: a multi-line builder chain and a paginator are found, a getter is not.
    assert_eq!(
        snake_case("DescribeAvailabilityZones"),
        "describe_availability_zones"
    );
    let calls = operation_like_calls();
    let found = |name: &str| calls.iter().any(|(method, _)| method == name);
    assert!(found("describe_availability_zones"), "{calls:?}");
    assert!(found("describe_instance_types"));
    assert!(found("get_parameters"));
    assert!(!found("role_name"));
}

#[test]
fn a_template_that_drops_a_grant_fails_the_check() {
    // The regression this file exists for: the template of 5190a4e lacked both of these.
    let text = std::fs::read_to_string(crate_dir().join("../../deploy/cloudformation.yaml")).unwrap();
    let dropped: String = text
        .lines()
        .filter(|l| {
            !l.contains("ec2:DescribeAvailabilityZones") && !l.trim_end().ends_with("- ssm:GetParameters")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(dropped, text, "the template grants both as a YAML list item");
    assert_eq!(
        missing_grants(&granted_actions_in(&dropped)),
        ["ec2:DescribeAvailabilityZones", "ssm:GetParameters"]
    );
}

#[path = "support/iam_eval.rs"]
mod iam_eval;

use iam_eval::{Check, Decision, Policies};
use serde_json::{Value, json};

/// The account, region and cluster the template is instantiated for here (as the moto harness does).
const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-west-2";
const CLUSTER: &str = "test-cluster";

/// The template's controller policies with CloudFormation's substitutions made: `${X}` in strings, and a
/// string that is exactly the name of a `!Ref`/`!GetAtt` (serde_saphyr drops the tag and keeps its argument).
fn controller_policy_documents() -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(crate_dir().join("../../deploy/cloudformation.yaml")).unwrap();
    let template: Value = serde_saphyr::from_str(&text).unwrap();
    let names = [
        ("AWS::Partition", "aws".to_string()),
        ("AWS::Region", REGION.to_string()),
        ("AWS::AccountId", ACCOUNT.to_string()),
        ("AWS::URLSuffix", "amazonaws.com".to_string()),
        ("ClusterName", CLUSTER.to_string()),
        (
            "KarpenterNodeRole.Arn",
            format!("arn:aws:iam::{ACCOUNT}:role/KarpenterNodeRole-{CLUSTER}"),
        ),
        (
            "KarpenterInterruptionQueue.Arn",
            format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{CLUSTER}"),
        ),
    ];
    fn substitute(value: &Value, names: &[(&str, String)]) -> Value {
        match value {
            Value::String(s) => {
                if let Some((_, v)) = names.iter().find(|(n, _)| n == s) {
                    return Value::String(v.clone());
                }
                let mut out = s.clone();
                for (name, v) in names {
                    out = out.replace(&format!("${{{name}}}"), v);
                }
                Value::String(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(|i| substitute(i, names)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), substitute(v, names)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let mut documents = BTreeMap::new();
    for (id, resource) in template["Resources"].as_object().unwrap() {
        if resource["Type"] != "AWS::IAM::ManagedPolicy" {
            continue;
        }
        let document = match &resource["Properties"]["PolicyDocument"] {
            Value::String(json) => {
                let resolved = substitute(&Value::String(json.clone()), &names);
                serde_json::from_str(resolved.as_str().unwrap()).unwrap()
            }
            other => substitute(other, &names),
        };
        documents.insert(id.clone(), document);
    }
    documents
}

fn controller_policies() -> Policies {
    Policies::from_documents(&controller_policy_documents()).unwrap()
}

fn tags(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn check(action: &str, resource: &str) -> Check {
    Check {
        action: action.into(),
        resource: resource.into(),
        context: BTreeMap::from([("aws:RequestedRegion".to_string(), REGION.to_string())]),
        ..Check::default()
    }
}

/// The keys the moto harness puts in a check's context (tests/moto/harness.py, authorization_checks), besides
/// the tag keys; a condition on any other key could never hold there.
const HARNESS_CONTEXT_KEYS: &[&str] = &[
    "aws:TagKeys",
    "aws:RequestedRegion",
    "iam:PassedToService",
    "ec2:CreateAction",
];

#[test]
fn the_evaluator_supports_every_operator_and_key_of_the_policies_the_provider_needs() {
    let documents = controller_policy_documents();
    // Reading them validates every operator and refuses policy variables.
    Policies::from_documents(&documents).unwrap();
    let mut unknown = Vec::new();
    for (id, document) in &documents {
        for statement in document["Statement"].as_array().unwrap() {
            let actions = match &statement["Action"] {
                Value::String(a) => vec![a.clone()],
                Value::Array(a) => a.iter().map(|a| a.as_str().unwrap().to_string()).collect(),
                _ => Vec::new(),
            };
            if !actions
                .iter()
                .any(|a| AWS_ACTIONS.contains(&a.as_str()) || a == "iam:PassRole")
            {
                continue; // ZonalShiftPolicy: nothing the provider calls
            }
            for keys in statement["Condition"]
                .as_object()
                .into_iter()
                .flat_map(|c| c.values())
            {
                for key in keys.as_object().unwrap().keys() {
                    let lower = key.to_ascii_lowercase();
                    let tag = ["aws:requesttag/", "aws:resourcetag/"]
                        .iter()
                        .any(|p| lower.starts_with(p));
                    if !tag && !HARNESS_CONTEXT_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key)) {
                        unknown.push(format!("{id}/{}: {key}", statement["Sid"]));
                    }
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "conditions on keys the moto harness does not record (teach authorization_checks): {unknown:?}"
    );
}

#[test]
fn iam_eval_answers_as_iam_does() {
    // (case, policy statements, check, allowed?)
    let allow = |condition: Value| {
        json!([{"Sid": "S", "Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "arn:aws:ec2:*:*:instance/*",
                "Condition": condition}])
    };
    let instance = "arn:aws:ec2:us-west-2:1:instance/i-1";
    let with =
        |request: Option<BTreeMap<String, String>>, resource: Option<BTreeMap<String, String>>| Check {
            request_tags: request,
            resource_tags: resource,
            ..check("ec2:CreateTags", instance)
        };
    let context = |key: &str, value: &str| Check {
        context: BTreeMap::from([(key.to_string(), value.to_string())]),
        ..check("ec2:CreateTags", instance)
    };
    let cases: Vec<(&str, Value, Check, bool)> = vec![
        ("no condition", allow(json!({})), with(None, None), true),
        (
            "StringEquals request tag matches",
            allow(json!({"StringEquals": {"aws:RequestTag/a": "1"}})),
            with(tags(&[("a", "1")]), None),
            true,
        ),
        (
            "StringEquals request tag differs",
            allow(json!({"StringEquals": {"aws:RequestTag/a": "1"}})),
            with(tags(&[("a", "2")]), None),
            false,
        ),
        (
            "StringEquals request tag absent",
            allow(json!({"StringEquals": {"aws:RequestTag/a": "1"}})),
            with(tags(&[("b", "1")]), None),
            false,
        ),
        (
            "StringEquals is case-sensitive in values",
            allow(json!({"StringEquals": {"aws:RequestTag/a": "x"}})),
            with(tags(&[("a", "X")]), None),
            false,
        ),
        (
            "key names are case-insensitive",
            allow(json!({"StringEquals": {"AWS:requesttag/A": "1"}})),
            with(tags(&[("a", "1")]), None),
            true,
        ),
        (
            "StringEquals any of the values",
            allow(json!({"StringEquals": {"aws:RequestTag/a": ["1", "2"]}})),
            with(tags(&[("a", "2")]), None),
            true,
        ),
        (
            "every key of an operator must hold",
            allow(json!({"StringEquals": {"aws:RequestTag/a": "1", "aws:RequestTag/b": "2"}})),
            with(tags(&[("a", "1")]), None),
            false,
        ),
        (
            "every operator must hold",
            allow(
                json!({"StringEquals": {"aws:RequestTag/a": "1"}, "StringLike": {"aws:ResourceTag/b": "*"}}),
            ),
            with(tags(&[("a", "1")]), tags(&[])),
            false,
        ),
        (
            "StringEqualsIgnoreCase",
            allow(json!({"StringEqualsIgnoreCase": {"aws:RequestTag/a": "x"}})),
            with(tags(&[("a", "X")]), None),
            true,
        ),
        (
            "StringLike * matches an empty value",
            allow(json!({"StringLike": {"aws:RequestTag/a": "*"}})),
            with(tags(&[("a", "")]), None),
            true,
        ),
        (
            "StringLike * needs the key",
            allow(json!({"StringLike": {"aws:RequestTag/a": "*"}})),
            with(tags(&[("b", "")]), None),
            false,
        ),
        (
            "StringLike ?",
            allow(json!({"StringLike": {"aws:RequestTag/a": "v?"}})),
            with(tags(&[("a", "v1")]), None),
            true,
        ),
        (
            "StringLike ? is one character",
            allow(json!({"StringLike": {"aws:RequestTag/a": "v?"}})),
            with(tags(&[("a", "v12")]), None),
            false,
        ),
        (
            "StringNotEquals on an absent key holds",
            allow(json!({"StringNotEquals": {"aws:RequestTag/a": "1"}})),
            with(None, None),
            true,
        ),
        (
            "StringNotEquals on an equal value fails",
            allow(json!({"StringNotEquals": {"aws:RequestTag/a": ["0", "1"]}})),
            with(tags(&[("a", "1")]), None),
            false,
        ),
        (
            "StringNotLike",
            allow(json!({"StringNotLike": {"aws:RequestTag/a": "x*"}})),
            with(tags(&[("a", "y")]), None),
            true,
        ),
        (
            "StringEqualsIfExists on an absent key holds",
            allow(json!({"StringEqualsIfExists": {"aws:RequestTag/a": "1"}})),
            with(tags(&[("b", "2")]), None),
            true,
        ),
        (
            "StringEqualsIfExists on a present key compares",
            allow(json!({"StringEqualsIfExists": {"aws:RequestTag/a": "1"}})),
            with(tags(&[("a", "2")]), None),
            false,
        ),
        (
            "aws:ResourceTag",
            allow(json!({"StringEquals": {"aws:ResourceTag/o": "owned"}})),
            with(None, tags(&[("o", "owned")])),
            true,
        ),
        (
            "aws:ResourceTag is not a request tag",
            allow(json!({"StringEquals": {"aws:ResourceTag/o": "owned"}})),
            with(tags(&[("o", "owned")]), None),
            false,
        ),
        (
            "ec2:ResourceTag is aws:ResourceTag",
            allow(json!({"StringEquals": {"ec2:ResourceTag/o": "owned"}})),
            with(None, tags(&[("o", "owned")])),
            true,
        ),
        (
            "ForAllValues: a subset holds",
            allow(json!({"ForAllValues:StringEquals": {"aws:TagKeys": ["a", "b"]}})),
            with(tags(&[("a", "1")]), None),
            true,
        ),
        (
            "ForAllValues: an extra key fails",
            allow(json!({"ForAllValues:StringEquals": {"aws:TagKeys": ["a", "b"]}})),
            with(tags(&[("a", "1"), ("c", "3")]), None),
            false,
        ),
        (
            "ForAllValues: no tags at all holds",
            allow(json!({"ForAllValues:StringEquals": {"aws:TagKeys": ["a"]}})),
            with(None, None),
            true,
        ),
        (
            "ForAllValues:StringLike",
            allow(json!({"ForAllValues:StringLike": {"aws:TagKeys": ["k*"]}})),
            with(tags(&[("k1", ""), ("k2", "")]), None),
            true,
        ),
        (
            "ForAnyValue: one matching key holds",
            allow(json!({"ForAnyValue:StringEquals": {"aws:TagKeys": ["a"]}})),
            with(tags(&[("a", "1"), ("z", "")]), None),
            true,
        ),
        (
            "ForAnyValue: none matching fails",
            allow(json!({"ForAnyValue:StringEquals": {"aws:TagKeys": ["a"]}})),
            with(tags(&[("z", "")]), None),
            false,
        ),
        (
            "ForAnyValue: an absent key fails",
            allow(json!({"ForAnyValue:StringEquals": {"aws:TagKeys": ["a"]}})),
            with(None, None),
            false,
        ),
        (
            "Null true: absent",
            allow(json!({"Null": {"aws:RequestTag/a": "true"}})),
            with(None, None),
            true,
        ),
        (
            "Null true: present fails",
            allow(json!({"Null": {"aws:RequestTag/a": "true"}})),
            with(tags(&[("a", "")]), None),
            false,
        ),
        (
            "Null false: present",
            allow(json!({"Null": {"aws:RequestTag/a": "false"}})),
            with(tags(&[("a", "")]), None),
            true,
        ),
        (
            "Null false: absent fails",
            allow(json!({"Null": {"aws:RequestTag/a": "false"}})),
            with(None, None),
            false,
        ),
        (
            "Bool",
            allow(json!({"Bool": {"aws:SecureTransport": "true"}})),
            context("aws:SecureTransport", "true"),
            true,
        ),
        (
            "Bool differs",
            allow(json!({"Bool": {"aws:SecureTransport": "true"}})),
            context("aws:SecureTransport", "false"),
            false,
        ),
        (
            "aws:RequestedRegion",
            allow(json!({"StringEquals": {"aws:RequestedRegion": "us-west-2"}})),
            with(None, None),
            true,
        ),
        (
            "aws:RequestedRegion elsewhere",
            allow(json!({"StringEquals": {"aws:RequestedRegion": "eu-west-1"}})),
            with(None, None),
            false,
        ),
        (
            "iam:PassedToService",
            allow(
                json!({"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}}),
            ),
            context("iam:PassedToService", "ec2.amazonaws.com"),
            true,
        ),
        (
            "iam:PassedToService absent",
            allow(json!({"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}})),
            with(None, None),
            false,
        ),
        (
            "ec2:CreateAction",
            allow(json!({"StringEquals": {"ec2:CreateAction": ["RunInstances", "CreateFleet"]}})),
            context("ec2:CreateAction", "CreateFleet"),
            true,
        ),
        (
            "ec2:CreateAction absent (a plain CreateTags)",
            allow(json!({"StringEquals": {"ec2:CreateAction": "CreateFleet"}})),
            with(None, None),
            false,
        ),
        (
            "ArnLike per part",
            allow(json!({"ArnLike": {"ec2:InstanceProfile": "arn:aws:iam::*:instance-profile/p*"}})),
            context("ec2:InstanceProfile", "arn:aws:iam::1:instance-profile/prod"),
            true,
        ),
        (
            "ArnLike * does not cross a part",
            allow(json!({"ArnLike": {"ec2:InstanceProfile": "arn:aws:iam::1*"}})),
            context("ec2:InstanceProfile", "arn:aws:iam::1:instance-profile/prod"),
            false,
        ),
        (
            "ArnEquals",
            allow(json!({"ArnEquals": {"ec2:InstanceProfile": "arn:aws:iam::1:instance-profile/prod"}})),
            context("ec2:InstanceProfile", "arn:aws:iam::1:instance-profile/prod"),
            true,
        ),
        (
            "ArnNotLike",
            allow(json!({"ArnNotLike": {"ec2:InstanceProfile": "arn:aws:iam::2:*"}})),
            context("ec2:InstanceProfile", "arn:aws:iam::1:instance-profile/prod"),
            true,
        ),
        (
            "actions are case-insensitive",
            json!([{"Effect": "Allow", "Action": "EC2:createtags", "Resource": "*"}]),
            with(None, None),
            true,
        ),
        (
            "action wildcards",
            json!([{"Effect": "Allow", "Action": "ec2:Create*", "Resource": "*"}]),
            with(None, None),
            true,
        ),
        (
            "another action is an implicit deny",
            json!([{"Effect": "Allow", "Action": "ec2:DeleteTags", "Resource": "*"}]),
            with(None, None),
            false,
        ),
        (
            "NotAction",
            json!([{"Effect": "Allow", "NotAction": "ec2:DeleteTags", "Resource": "*"}]),
            with(None, None),
            true,
        ),
        (
            "resources are case-sensitive",
            json!([{"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "arn:aws:ec2:*:*:Instance/*"}]),
            with(None, None),
            false,
        ),
        (
            "another resource is an implicit deny",
            json!([{"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "arn:aws:ec2:*:*:volume/*"}]),
            with(None, None),
            false,
        ),
        (
            "NotResource",
            json!([{"Effect": "Allow", "Action": "ec2:CreateTags", "NotResource": "arn:aws:ec2:*:*:volume/*"}]),
            with(None, None),
            true,
        ),
        (
            "an explicit deny wins",
            json!([{"Effect": "Allow", "Action": "*", "Resource": "*"},
                                          {"Effect": "Deny", "Action": "ec2:CreateTags", "Resource": "*", "Condition": {"StringNotEquals": {"aws:RequestedRegion": "eu-west-1"}}}]),
            with(None, None),
            false,
        ),
        (
            "a deny whose condition fails does not apply",
            json!([{"Effect": "Allow", "Action": "*", "Resource": "*"},
                                          {"Effect": "Deny", "Action": "ec2:CreateTags", "Resource": "*", "Condition": {"StringEquals": {"aws:RequestedRegion": "eu-west-1"}}}]),
            with(None, None),
            true,
        ),
        (
            "one allowing statement is enough",
            json!([{"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*", "Condition": {"StringEquals": {"aws:RequestTag/a": "1"}}},
                                          {"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*"}]),
            with(None, None),
            true,
        ),
    ];
    let mut wrong = Vec::new();
    for (name, statements, check, allowed) in &cases {
        let policies = Policies::from_documents(&BTreeMap::from([(
            "P".to_string(),
            json!({"Version": "2012-10-17", "Statement": statements}),
        )]))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let decision = policies.evaluate(check);
        if decision.allowed() != *allowed {
            wrong.push(format!("{name}: {decision}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");

    // What it cannot evaluate it refuses to read, rather than guess.
    for (condition, problem) in [
        (
            json!({"NumericLessThan": {"ec2:VolumeSize": "100"}}),
            "NumericLessThan is not supported",
        ),
        (
            json!({"StringEquals": {"aws:RequestTag/user": "${aws:username}"}}),
            "policy variable",
        ),
        (
            json!({"ForEveryValue:StringEquals": {"aws:TagKeys": "a"}}),
            "unknown set qualifier",
        ),
    ] {
        let err = Policies::from_documents(&BTreeMap::from([(
            "P".to_string(),
            json!({"Statement": allow(condition.clone())}),
        )]))
        .unwrap_err();
        assert!(err.contains(problem), "{condition}: {err}");
    }

    // A refusal names the statements considered and the condition that failed.
    let policies = Policies::from_documents(&BTreeMap::from([(
        "P".to_string(),
        json!({"Statement": allow(json!({"StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}))}),
    )]))
    .unwrap();
    assert_eq!(
        policies.evaluate(&with(tags(&[("a", "1")]), None)),
        Decision::ImplicitDeny {
            considered: vec![
                "P/S: StringLike aws:RequestTag/karpenter.sh/nodepool [\"*\"] fails: absent from the request"
                    .into()
            ]
        }
    );
}

/// A class resolved enough to make its launch template.
fn resolved_class(tags: Option<BTreeMap<String, String>>) -> karpenter_api::ec2nodeclass::EC2NodeClass {
    use karpenter_api::ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus, SecurityGroup};
    let mut class = EC2NodeClass::new(
        "default",
        EC2NodeClassSpec {
            tags,
            ..EC2NodeClassSpec::default()
        },
    );
    class.status = Some(EC2NodeClassStatus {
        security_groups: vec![SecurityGroup {
            id: "sg-1".into(),
            ..SecurityGroup::default()
        }],
        instance_profile: Some("profile".into()),
        ..EC2NodeClassStatus::default()
    });
    class
}

fn refusals(policies: &Policies, checks: &[Check]) -> Vec<String> {
    checks
        .iter()
        .map(|c| (c, policies.evaluate(c)))
        .filter(|(_, d)| !d.allowed())
        .map(|(c, d)| format!("{} on {}: {d}", c.action, c.resource))
        .collect()
}

#[test]
fn the_template_allows_the_provider_to_create_and_delete_its_launch_templates() {
    use karpenter_aws::launch_template::LaunchTemplateSpec;
    let policies = controller_policies();
    let class_tags = tags(&[("team", "ml")]);
    let template = |node_pool: &str| {
        LaunchTemplateSpec::from_node_class(&resolved_class(class_tags.clone()), "ami-1", CLUSTER, node_pool)
            .unwrap()
            .tags
    };
    let new = format!("arn:aws:ec2:{REGION}:{ACCOUNT}:launch-template/*");
    let existing = format!("arn:aws:ec2:{REGION}:{ACCOUNT}:launch-template/lt-0123456789abcdef0");
    // A launch's template, and the EC2NodeClass dry run's (no NodePool: an empty value).
    for node_pool in ["default", ""] {
        let tags = template(node_pool);
        let checks = [
            Check {
                request_tags: Some(tags.clone()),
                ..check("ec2:CreateLaunchTemplate", &new)
            },
            Check {
                request_tags: Some(tags.clone()),
                context: BTreeMap::from([
                    ("aws:RequestedRegion".to_string(), REGION.to_string()),
                    ("ec2:CreateAction".to_string(), "CreateLaunchTemplate".to_string()),
                ]),
                ..check("ec2:CreateTags", &new)
            },
            Check {
                resource_tags: Some(tags.clone()),
                ..check("ec2:DeleteLaunchTemplate", &existing)
            },
            Check {
                resource_tags: Some(tags.clone()),
                ..check("ec2:CreateFleet", &existing)
            },
        ];
        let refused = refusals(&policies, &checks);
        assert!(refused.is_empty(), "NodePool {node_pool:?}: {refused:#?}");
    }

    // The tags of the templates before issue 38 (no karpenter.sh/nodepool) are refused, naming the condition.
    let mut old = template("default");
    old.remove("karpenter.sh/nodepool");
    let refused = refusals(
        &policies,
        &[
            Check {
                request_tags: Some(old.clone()),
                ..check("ec2:CreateLaunchTemplate", &new)
            },
            Check {
                resource_tags: Some(old),
                ..check("ec2:DeleteLaunchTemplate", &existing)
            },
        ],
    );
    assert_eq!(refused.len(), 2, "{refused:#?}");
    assert!(
        refused
            .iter()
            .all(|r| r.contains("karpenter.sh/nodepool") && r.contains("absent from the request")),
        "{refused:#?}"
    );
}

#[test]
fn the_template_allows_the_provider_to_manage_its_instance_profiles() {
    use karpenter_aws::instance_profile::InstanceProfiles;
    let policies = controller_policies();
    let config = aws_sdk_iam::Config::builder()
        .behavior_version(aws_sdk_iam::config::BehaviorVersion::latest())
        .region(aws_sdk_iam::config::Region::new(REGION))
        .build();
    let profiles = InstanceProfiles::new(aws_sdk_iam::Client::from_conf(config), CLUSTER, REGION);
    let tags = profiles.tags("default", tags(&[("team", "ml")]).as_ref());
    let arn = format!(
        "arn:aws:iam::{ACCOUNT}:instance-profile{}{}",
        profiles.path(),
        profiles.name("default")
    );
    let mut checks = vec![Check {
        request_tags: Some(tags.clone()),
        ..check("iam:CreateInstanceProfile", &arn)
    }];
    for action in [
        "iam:GetInstanceProfile",
        "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile",
        "iam:DeleteInstanceProfile",
    ] {
        checks.push(Check {
            resource_tags: Some(tags.clone()),
            ..check(action, &arn)
        });
    }
    checks.push(Check {
        request_tags: Some(tags.clone()),
        resource_tags: Some(tags.clone()),
        ..check("iam:TagInstanceProfile", &arn)
    });
    checks.push(Check {
        context: BTreeMap::from([("iam:PassedToService".to_string(), "ec2.amazonaws.com".to_string())]),
        ..check(
            "iam:PassRole",
            &format!("arn:aws:iam::{ACCOUNT}:role/KarpenterNodeRole-{CLUSTER}"),
        )
    });
    let refused = refusals(&policies, &checks);
    assert!(refused.is_empty(), "{refused:#?}");

    // Without topology.kubernetes.io/region (the tags before issue 38) every statement but the reads refuses.
    let mut old = tags;
    old.remove("topology.kubernetes.io/region");
    let refused = refusals(
        &policies,
        &[
            Check {
                request_tags: Some(old.clone()),
                ..check("iam:CreateInstanceProfile", &arn)
            },
            Check {
                resource_tags: Some(old),
                ..check("iam:AddRoleToInstanceProfile", &arn)
            },
        ],
    );
    assert_eq!(refused.len(), 2, "{refused:#?}");
    assert!(
        refused
            .iter()
            .all(|r| r.contains("topology.kubernetes.io/region")),
        "{refused:#?}"
    );
}
