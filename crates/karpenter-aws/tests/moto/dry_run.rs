//! The EC2NodeClass dry-run authorization checks against moto: moto answers every dry run with
//! DryRunOperation (after checking that a RunInstances instance profile exists), and the harness refuses the
//! actions a test names with UnauthorizedOperation (harness.py), as EC2 does for a caller whose IAM policy
//! lacks them.

use karpenter_api::common::ConditionStatus;
use karpenter_api::ec2nodeclass::EC2NodeClass;
use karpenter_core::cloudprovider::{CloudProvider, CloudProviderError};
use karpenter_sim::apiserver::ApiServer;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::fixtures::{
    create_node_class, network, node_claim, node_class, provider, provider_on, reconciled, settings,
};
use crate::moto;

/// Makes the harness refuse `actions` (comma-separated EC2 actions; empty allows everything).
async fn refuse(clients: &karpenter_aws::AwsClients, actions: &str) {
    clients
        .ssm
        .put_parameter()
        .name("/moto-harness/unauthorized")
        .value(if actions.is_empty() { " " } else { actions })
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .send()
        .await
        .unwrap();
}

fn validation(class: &EC2NodeClass) -> (ConditionStatus, String, String) {
    let c = class.condition("ValidationSucceeded").unwrap();
    (c.status, c.reason.clone(), c.message.clone())
}

fn al2023(name: &str) -> EC2NodeClass {
    node_class(name, json!([{"alias": "al2023@latest"}]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_class_is_validated_once_and_a_refused_create_fleet_is_named() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();

    create_node_class(&server, &al2023("default")).await;
    let class = reconciled(&server, &provider, "default").await;
    assert_eq!(
        validation(&class),
        (ConditionStatus::True, "ValidationSucceeded".into(), String::new())
    );
    assert!(class.is_ready());
    // Dry runs create nothing.
    let templates = admin.ec2.describe_launch_templates().send().await.unwrap();
    assert!(templates.launch_templates().is_empty());
    let instances = admin.ec2.describe_instances().send().await.unwrap();
    assert!(instances.reservations().is_empty());

    // The verdict is cached: with CreateFleet now refused, the next reconcile does not ask EC2 again.
    refuse(&admin, "CreateFleet").await;
    let class = reconciled(&server, &provider, "default").await;
    assert_eq!(validation(&class).0, ConditionStatus::True);

    // A changed class (its tags are on every call) is checked again at once, and the refusal is named.
    let api: Api<EC2NodeClass> = Api::all(server.client());
    api.patch(
        "default",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"tags": {"team": "ml"}}})),
    )
    .await
    .unwrap();
    let class = reconciled(&server, &provider, "default").await;
    let (status, reason, message) = validation(&class);
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "CreateFleetAuthCheckFailed")
    );
    assert!(
        message.starts_with(
            "ec2:CreateFleet dry run failed: CreateFleet: UnauthorizedOperation: You are not authorized"
        ),
        "{message}"
    );
    assert!(!class.is_ready());
    assert_eq!(
        class.condition("Ready").unwrap().message,
        "ValidationSucceeded=False (CreateFleetAuthCheckFailed)"
    );
    // Launches wait for a Ready class.
    let err = provider
        .create(&node_claim("default-x", "default", json!([])))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CloudProviderError::NodeClassNotReady { .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refused_call_has_its_own_reason() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    for (action, reason) in [
        ("CreateLaunchTemplate", "CreateLaunchTemplateAuthCheckFailed"),
        ("RunInstances", "RunInstancesAuthCheckFailed"),
    ] {
        refuse(&admin, action).await;
        let name = action.to_ascii_lowercase();
        create_node_class(&server, &al2023(&name)).await;
        let class = reconciled(&server, &provider, &name).await;
        let (status, got, message) = validation(&class);
        assert_eq!(
            (status, got.as_str()),
            (ConditionStatus::False, reason),
            "{action}"
        );
        assert!(
            message.starts_with(&format!(
                "ec2:{action} dry run failed: {action}: UnauthorizedOperation:"
            )),
            "{message}"
        );
    }
    // CreateFleet is checked first: refusing everything names it.
    refuse(&admin, "CreateFleet,CreateLaunchTemplate,RunInstances").await;
    create_node_class(&server, &al2023("everything")).await;
    let class = reconciled(&server, &provider, "everything").await;
    assert_eq!(validation(&class).1, "CreateFleetAuthCheckFailed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependencies_and_spec_come_before_the_dry_runs() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    refuse(&admin, "CreateFleet,CreateLaunchTemplate,RunInstances").await;

    // No subnet selected: nothing to build the calls from.
    let mut nowhere = al2023("nowhere");
    nowhere.spec.subnet_selector_terms[0].tags =
        Some([("karpenter.sh/discovery".to_string(), "nobody".to_string())].into());
    create_node_class(&server, &nowhere).await;
    let class = reconciled(&server, &provider, "nowhere").await;
    assert_eq!(
        validation(&class),
        (
            ConditionStatus::False,
            "DependenciesNotReady".into(),
            "awaiting SubnetsReady".into()
        )
    );

    // A spec that breaks the CRD's rules keeps its own reason.
    let mut invalid = al2023("invalid");
    invalid.spec.role = Some("KarpenterNodeRole".into());
    create_node_class(&server, &invalid).await;
    let class = reconciled(&server, &provider, "invalid").await;
    let (status, reason, message) = validation(&class);
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "SpecValidationFailed")
    );
    assert!(
        message.contains("exactly one of 'role' or 'instanceProfile'"),
        "{message}"
    );

    // An instance profile EC2 does not know (yet): undecided, so the class waits without a verdict.
    refuse(&admin, "").await;
    let mut young = al2023("young-profile");
    young.spec.instance_profile = Some("CreatedASecondAgo".into());
    create_node_class(&server, &young).await;
    let class = reconciled(&server, &provider, "young-profile").await;
    let (status, reason, message) = validation(&class);
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::Unknown, "DependenciesNotReady")
    );
    assert!(
        message.starts_with("ec2:RunInstances dry run could not be judged:"),
        "{message}"
    );
    assert!(!class.is_ready());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_dry_run_skips_the_checks() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let server = ApiServer::new(karpenter_sim::clock::SystemClock);
    let mut disabled = settings();
    disabled.disable_dry_run = true;
    let provider = provider_on(&server, disabled, clients.clone());
    refuse(&admin, "CreateFleet,CreateLaunchTemplate,RunInstances").await;

    create_node_class(&server, &al2023("default")).await;
    let class = reconciled(&server, &provider, "default").await;
    assert_eq!(
        validation(&class),
        (
            ConditionStatus::True,
            "DryRunDisabled".into(),
            "the EC2 dry-run authorization checks are disabled (DISABLE_DRY_RUN)".into()
        )
    );
    assert!(class.is_ready());
}
