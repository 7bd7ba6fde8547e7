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
