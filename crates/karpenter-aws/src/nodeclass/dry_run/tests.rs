use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use karpenter_api::ec2nodeclass::{
    AmiSelectorTerm, EC2NodeClassSpec, SecurityGroup, SecurityGroupSelectorTerm, Subnet, SubnetSelectorTerm,
};
use serde_json::json;

use super::*;
use crate::nodeclass::status::{Resolution, compute_status};

fn node_class() -> EC2NodeClass {
    EC2NodeClass::new(
        "default",
        EC2NodeClassSpec {
            ami_selector_terms: vec![AmiSelectorTerm {
                alias: Some("al2023@latest".into()),
                ..Default::default()
            }],
            subnet_selector_terms: vec![SubnetSelectorTerm {
                tags: None,
                id: Some("subnet-a".into()),
            }],
            security_group_selector_terms: vec![SecurityGroupSelectorTerm {
                id: Some("sg-1".into()),
                ..Default::default()
            }],
            instance_profile: Some("nodes".into()),
            tags: Some(BTreeMap::from([("team".into(), "ml".into())])),
            ..Default::default()
        },
    )
}

fn ami(id: &str, arch: &str, gpu: bool) -> Ami {
    let mut requirements = vec![NodeSelectorRequirement {
        key: "kubernetes.io/arch".into(),
        operator: "In".into(),
        values: Some(vec![arch.into()]),
    }];
    if gpu {
        requirements.push(NodeSelectorRequirement {
            key: "karpenter.k8s.aws/instance-gpu-count".into(),
            operator: "Exists".into(),
            values: None,
        });
    }
    Ami {
        id: id.into(),
        requirements,
        ..Default::default()
    }
}

/// The status the controller computes from a resolution of `amis`, one subnet and one security group.
fn resolved(class: &EC2NodeClass, amis: Vec<Ami>) -> EC2NodeClassStatus {
    let resolution = Resolution {
        amis: Ok(amis),
        subnets: Ok(vec![Subnet {
            id: "subnet-a".into(),
            zone: "us-west-2a".into(),
            zone_id: None,
        }]),
        subnet_addresses: None,
        security_groups: Ok(vec![SecurityGroup {
            id: "sg-1".into(),
            name: None,
        }]),
        capacity_reservations: None,
        instance_profile: None,
        placement_group: None,
        dry_run: None,
    };
    compute_status(class, &resolution, jiff::Timestamp::UNIX_EPOCH)
}

#[test]
fn the_calls_are_built_from_the_resolved_class_as_a_launch_would() {
    let class = node_class();
    let status = resolved(
        &class,
        vec![ami("ami-gpu", "amd64", true), ami("ami-arm", "arm64", false)],
    );
    let inputs = dry_run_inputs(&class, &status, "prod").unwrap();
    assert_eq!(
        inputs.template.image_id, "ami-arm",
        "the standard AMI before a GPU one"
    );
    assert_eq!(
        inputs.instance_type, "m6g.large",
        "a type of the AMI's architecture"
    );
    assert_eq!(
        (inputs.subnet_id.as_str(), inputs.zone.as_str()),
        ("subnet-a", "us-west-2a")
    );
    assert!(inputs.other_subnet_ids.is_empty());
    let mut two_subnets = status.clone();
    let mut second = two_subnets.subnets[0].clone();
    second.id = "subnet-b".into();
    two_subnets.subnets.push(second);
    let tried = dry_run_inputs(&class, &two_subnets, "prod").unwrap();
    assert_eq!(
        (tried.subnet_id.as_str(), tried.other_subnet_ids.as_slice()),
        ("subnet-a", ["subnet-b".to_string()].as_slice()),
        "RunInstances tries every subnet of the class, the first first"
    );
    assert_eq!(inputs.template.security_group_ids, ["sg-1"]);
    assert_eq!(inputs.template.instance_profile.as_deref(), Some("nodes"));
    assert_eq!(inputs.tags["team"], "ml");
    assert_eq!(inputs.tags["kubernetes.io/cluster/prod"], "owned");
    assert_eq!(inputs.tags["karpenter.k8s.aws/ec2nodeclass"], "default");
    assert_eq!(inputs.tags["karpenter.sh/nodepool"], "", "no NodePool yet");

    let gpu_only = resolved(&class, vec![ami("ami-gpu", "amd64", true)]);
    let inputs = dry_run_inputs(&class, &gpu_only, "prod").unwrap();
    assert_eq!(
        (inputs.template.image_id.as_str(), inputs.instance_type.as_str()),
        ("ami-gpu", "m5.large"),
        "the first AMI when none is standard"
    );

    let fleet = fleet_request(&inputs);
    assert_eq!(fleet.launch_template_name, inputs.template.name());
    assert_eq!(fleet.capacity_type, "on-demand");
    assert_eq!(fleet.overrides.len(), 1);
    assert_eq!(fleet.overrides[0].subnet_id, "subnet-a");
    assert_eq!(fleet.tags, inputs.tags);
}

#[test]
fn nothing_is_built_before_the_dependencies_are_ready() {
    let class = node_class();
    let no_amis = resolved(&class, Vec::new());
    assert_eq!(
        dry_run_inputs(&class, &no_amis, "prod").unwrap_err(),
        "awaiting AMIsReady"
    );
    let mut role_based = class.clone();
    role_based.spec.instance_profile = None;
    role_based.spec.role = Some("NodeRole".into());
    let not_created = resolved(&role_based, Vec::new());
    assert_eq!(
        dry_run_inputs(&role_based, &not_created, "prod").unwrap_err(),
        "awaiting AMIsReady, InstanceProfileReady"
    );
    assert!(
        dry_run_inputs(&class, &EC2NodeClassStatus::default(), "prod")
            .unwrap_err()
            .starts_with("awaiting AMIsReady, SubnetsReady"),
        "no status yet"
    );
}

#[test]
fn the_cache_key_follows_the_class_and_its_resolution() {
    let class = node_class();
    let status = resolved(&class, vec![ami("ami-1", "amd64", false)]);
    let inputs = dry_run_inputs(&class, &status, "prod").unwrap();
    let key = inputs.cache_key(&class.hash());
    assert_eq!(
        key,
        dry_run_inputs(&class, &status, "prod")
            .unwrap()
            .cache_key(&class.hash())
    );
    assert!(key.starts_with(&format!("{}:", class.hash())), "{key}");

    let mut retagged = class.clone();
    retagged.spec.tags = Some(BTreeMap::from([("team".into(), "web".into())]));
    let other = dry_run_inputs(&retagged, &status, "prod").unwrap();
    assert_ne!(other.cache_key(&retagged.hash()), key);
    let new_ami = resolved(&class, vec![ami("ami-2", "amd64", false)]);
    let other = dry_run_inputs(&class, &new_ami, "prod").unwrap();
    assert_ne!(other.cache_key(&class.hash()), key, "a new AMI is checked again");
}

fn error(operation: &'static str, code: &str, message: &str) -> Result<(), AwsError> {
    Err(AwsError::from_code(operation, code.into(), message.into()))
}

#[test]
fn each_answer_decides_as_upstream_reads_it() {
    for check in AuthCheck::ALL {
        assert_eq!(
            judge(
                check,
                error(check.operation(), DRY_RUN_OPERATION, "would have succeeded")
            ),
            None
        );
        assert_eq!(judge(check, Ok(())), None);
    }
    assert_eq!(
        judge(
            AuthCheck::CreateFleet,
            error(
                "CreateFleet",
                "UnauthorizedOperation",
                "You are not authorized to perform this operation."
            )
        ),
        Some(DryRunOutcome::Failed {
            reason: "CreateFleetAuthCheckFailed",
            message:
                "ec2:CreateFleet dry run failed: CreateFleet: UnauthorizedOperation: You are not authorized \
                      to perform this operation."
                    .into()
        })
    );
    let other = judge(
        AuthCheck::CreateLaunchTemplate,
        error(
            "CreateLaunchTemplate",
            "InvalidParameterValue",
            "bad block device",
        ),
    );
    assert!(
        matches!(&other, Some(DryRunOutcome::Inconclusive(message)) if message.contains("bad block device")),
        "any other error is asked again, not held against the class: {other:?}"
    );
    assert!(!other.unwrap().is_cacheable());
    let throttled = judge(
        AuthCheck::RunInstances,
        error("RunInstances", "RequestLimitExceeded", "slow down"),
    );
    assert!(
        matches!(throttled, Some(DryRunOutcome::Inconclusive(_))),
        "{throttled:?}"
    );
    let unreachable = judge(
        AuthCheck::CreateFleet,
        Err(AwsError::Unreachable {
            operation: "CreateFleet",
            message: "connection refused".into(),
        }),
    );
    assert!(matches!(unreachable, Some(DryRunOutcome::Inconclusive(_))));
    for (code, message) in [
        (
            "InvalidParameterValue",
            "Value (nodes) for parameter iamInstanceProfile.name is invalid.",
        ),
        ("NoSuchEntity", "Instance profile nodes not found"),
    ] {
        let young_profile = judge(AuthCheck::RunInstances, error("RunInstances", code, message));
        assert!(
            matches!(young_profile, Some(DryRunOutcome::Inconclusive(_))),
            "{code}: {young_profile:?}"
        );
    }
    assert!(DryRunOutcome::Authorized.is_cacheable());
    assert!(
        judge(
            AuthCheck::CreateFleet,
            error("CreateFleet", "UnauthorizedOperation", "no")
        )
        .unwrap()
        .is_cacheable()
    );
    assert!(!DryRunOutcome::Inconclusive("throttled".into()).is_cacheable());
    assert!(!DryRunOutcome::DependenciesNotReady("awaiting AMIsReady".into()).is_cacheable());
}

#[test]
fn the_verdict_becomes_validation_succeeded() {
    use karpenter_api::common::Condition;

    let class = node_class();
    let status_with = |class: &EC2NodeClass, outcome: Option<DryRunOutcome>| {
        let mut resolution = Resolution {
            amis: Ok(vec![ami("ami-1", "amd64", false)]),
            subnets: Ok(vec![Subnet {
                id: "subnet-a".into(),
                zone: "us-west-2a".into(),
                zone_id: None,
            }]),
            subnet_addresses: None,
            security_groups: Ok(vec![SecurityGroup {
                id: "sg-1".into(),
                name: None,
            }]),
            capacity_reservations: None,
            instance_profile: None,
            placement_group: None,
            dry_run: None,
        };
        resolution.dry_run = outcome;
        compute_status(class, &resolution, jiff::Timestamp::UNIX_EPOCH)
    };
    let validation = |status: &EC2NodeClassStatus| -> (ConditionStatus, String, String) {
        let c: &Condition = find_condition(&status.conditions, conditions::VALIDATION_SUCCEEDED).unwrap();
        (c.status, c.reason.clone(), c.message.clone())
    };
    let ready = |status: &EC2NodeClassStatus| {
        find_condition(&status.conditions, conditions::READY)
            .map(|c| (c.status, c.message.clone()))
            .unwrap()
    };

    let authorized = status_with(&class, Some(DryRunOutcome::Authorized));
    assert_eq!(
        validation(&authorized),
        (ConditionStatus::True, "ValidationSucceeded".into(), String::new())
    );
    let disabled = status_with(&class, Some(DryRunOutcome::Disabled));
    assert_eq!(
        validation(&disabled),
        (
            ConditionStatus::True,
            "DryRunDisabled".into(),
            "the EC2 dry-run authorization checks are disabled (DISABLE_DRY_RUN)".into()
        )
    );
    assert_eq!(ready(&disabled).0, ConditionStatus::True);
    let refused = DryRunOutcome::Failed {
        reason: "RunInstancesAuthCheckFailed",
        message: "ec2:RunInstances dry run failed: RunInstances: UnauthorizedOperation: no".into(),
    };
    let failed = status_with(&class, Some(refused.clone()));
    assert_eq!(
        validation(&failed),
        (
            ConditionStatus::False,
            "RunInstancesAuthCheckFailed".into(),
            "ec2:RunInstances dry run failed: RunInstances: UnauthorizedOperation: no".into()
        )
    );
    assert_eq!(
        ready(&failed),
        (
            ConditionStatus::False,
            "ValidationSucceeded=False (RunInstancesAuthCheckFailed)".into()
        )
    );
    let waiting = status_with(
        &class,
        Some(DryRunOutcome::DependenciesNotReady("awaiting AMIsReady".into())),
    );
    assert_eq!(
        validation(&waiting),
        (
            ConditionStatus::False,
            "DependenciesNotReady".into(),
            "awaiting AMIsReady".into()
        )
    );

    // Inconclusive: the previous verdict stays; before any it is Unknown, which keeps the class unready.
    let first = status_with(&class, Some(DryRunOutcome::Inconclusive("throttled".into())));
    assert_eq!(
        validation(&first),
        (
            ConditionStatus::Unknown,
            "DependenciesNotReady".into(),
            "throttled".into()
        )
    );
    assert_eq!(ready(&first).0, ConditionStatus::False);
    let mut validated = class.clone();
    validated.status = Some(failed.clone());
    let kept = status_with(&validated, Some(DryRunOutcome::Inconclusive("throttled".into())));
    assert_eq!(validation(&kept), validation(&failed));

    // An invalid spec wins over any verdict.
    let invalid: EC2NodeClass = serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "bad"},
        "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r", "instanceProfile": "p",
                 "subnetSelectorTerms": [{"id": "subnet-a"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]}
    }))
    .unwrap();
    let spec_failure = status_with(&invalid, Some(refused));
    let (status, reason, _) = validation(&spec_failure);
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "SpecValidationFailed")
    );
    // Once the spec is fixed, an inconclusive check does not keep the spec's failure.
    let mut fixed = class.clone();
    fixed.status = Some(spec_failure);
    let later = status_with(&fixed, Some(DryRunOutcome::Inconclusive("throttled".into())));
    assert_eq!(validation(&later).0, ConditionStatus::Unknown);
}
