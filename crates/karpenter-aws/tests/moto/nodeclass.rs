//! The EC2NodeClass controller against moto and the in-memory API server: status and conditions, a selector
//! that matches nothing, AMI selector terms, the finalizer, and the runtime that runs it all.

use std::sync::Arc;

use karpenter_api::common::ConditionStatus;
use karpenter_api::ec2nodeclass::EC2NodeClass;
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_aws::nodeclass::controller::{Context, reconcile};
use karpenter_aws::runtime::{AwsProvider, kubernetes_version};
use karpenter_aws::{AwsCloudProvider, AwsSettings};
use karpenter_core::cloudprovider::CloudProvider;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::fixtures::{
    CLUSTER, NODE_ROLE, create_node_class, network, node_claim, node_class, provider, settings,
};
use crate::moto;

async fn reconciled(api: &Api<EC2NodeClass>, name: &str, ctx: &Arc<Context>) -> EC2NodeClass {
    let class = api.get(name).await.unwrap();
    let _ = reconcile(Arc::new(class), Arc::clone(ctx)).await;
    api.get(name).await.unwrap()
}

fn condition(class: &EC2NodeClass, type_: &str) -> (ConditionStatus, String, String) {
    let c = class.condition(type_).unwrap_or_else(|| panic!("no {type_}"));
    (c.status, c.reason.clone(), c.message.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_resolves_status_conditions_and_holds_the_finalizer() {
    let moto = moto!(&["m5.large", "c6g.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let net = network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    let ctx = Arc::new(Context {
        client: server.client(),
        provider: provider.clone(),
    });
    let api: Api<EC2NodeClass> = Api::all(server.client());

    create_node_class(
        &server,
        &node_class("default", json!([{"alias": "al2023@latest"}])),
    )
    .await;
    let class = reconciled(&api, "default", &ctx).await;
    assert!(
        class
            .finalizers()
            .contains(&"karpenter.k8s.aws/termination".to_string())
    );
    let status = class.status.as_ref().unwrap();
    assert_eq!(status.amis.len(), 5, "AL2023 variants for both architectures");
    let mut subnet_ids: Vec<&str> = status.subnets.iter().map(|s| s.id.as_str()).collect();
    subnet_ids.sort();
    let mut expected = net.subnet_ids.iter().map(String::as_str).collect::<Vec<_>>();
    expected.sort();
    assert_eq!(subnet_ids, expected);
    assert_eq!(class.zones(), ["us-west-2a", "us-west-2b"]);
    assert_eq!(status.security_groups[0].id, net.security_group_id);
    assert_eq!(
        status.instance_profile.as_deref(),
        Some("KarpenterNodeInstanceProfile")
    );
    for type_ in [
        "AMIsReady",
        "SubnetsReady",
        "SecurityGroupsReady",
        "InstanceProfileReady",
        "ValidationSucceeded",
        "Ready",
    ] {
        assert_eq!(condition(&class, type_).0, ConditionStatus::True, "{type_}");
    }
    assert!(class.is_ready());
    let annotations = class.annotations();
    assert_eq!(annotations["karpenter.k8s.aws/ec2nodeclass-hash"], class.hash());
    // The provider now knows the class: only the subnets' zones are available.
    let pool: karpenter_api::nodepool::NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    }))
    .unwrap();
    let types = provider.instance_types(&pool).await.unwrap();
    let zones: std::collections::BTreeSet<&str> = types
        .iter()
        .flat_map(|t| {
            t.offerings
                .iter()
                .filter(|o| o.available)
                .map(|o| o.zone.as_str())
        })
        .collect();
    assert_eq!(zones, ["us-west-2a", "us-west-2b"].into());

    // Selectors that match nothing: named in the condition, Ready False.
    let mut nowhere = node_class("nowhere", json!([{"id": "ami-0000000000000dead"}]));
    nowhere.spec.ami_family = Some("AL2023".into());
    nowhere.spec.subnet_selector_terms[0].tags =
        Some([("karpenter.sh/discovery".to_string(), "nobody".to_string())].into());
    create_node_class(&server, &nowhere).await;
    let nowhere = reconciled(&api, "nowhere", &ctx).await;
    let (status, reason, message) = condition(&nowhere, "SubnetsReady");
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "SubnetsNotFound")
    );
    assert_eq!(
        message,
        r#"SubnetSelector did not match any Subnets: [{"tags":{"karpenter.sh/discovery":"nobody"}}]"#
    );
    let (status, reason, message) = condition(&nowhere, "AMIsReady");
    assert_eq!((status, reason.as_str()), (ConditionStatus::False, "AMINotFound"));
    assert!(message.contains("ami-0000000000000dead"), "{message}");
    assert_eq!(
        condition(&nowhere, "SecurityGroupsReady").0,
        ConditionStatus::True
    );
    let (status, reason, message) = condition(&nowhere, "Ready");
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "UnhealthyDependents")
    );
    // Nothing to dry-run with: ValidationSucceeded waits for them.
    assert_eq!(
        condition(&nowhere, "ValidationSucceeded"),
        (
            ConditionStatus::False,
            "DependenciesNotReady".to_string(),
            "awaiting AMIsReady, SubnetsReady".to_string()
        )
    );
    assert_eq!(
        message,
        "AMIsReady=False (AMINotFound), SubnetsReady=False (SubnetsNotFound), \
         ValidationSucceeded=False (DependenciesNotReady)"
    );
    // Launching with it says why.
    let err = provider
        .create(&node_claim("nowhere-x", "nowhere", json!([])))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NodeClassNotReady");
    assert!(err.to_string().contains("UnhealthyDependents"), "{err}");

    // AMI selector terms by name and owner: moto's Amazon Linux 2023 images, with their architectures.
    create_node_class(
        &server,
        &serde_json::from_value::<EC2NodeClass>(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "by-name"},
            "spec": {"amiFamily": "AL2023",
                     "amiSelectorTerms": [{"name": "al2023-ami-2023.*", "owner": "amazon"}],
                     "subnetSelectorTerms": [{"id": net.subnet_ids[0]}],
                     "securityGroupSelectorTerms": [{"id": net.security_group_id}],
                     "instanceProfile": "KarpenterNodeInstanceProfile"}
        }))
        .unwrap(),
    )
    .await;
    let by_name = reconciled(&api, "by-name", &ctx).await;
    let status = by_name.status.as_ref().unwrap();
    assert!(!status.amis.is_empty());
    assert!(status.amis.iter().all(|a| {
        a.name
            .as_deref()
            .unwrap_or_default()
            .starts_with("al2023-ami-2023")
    }));
    let arches: std::collections::BTreeSet<String> = status
        .amis
        .iter()
        .flat_map(|a| a.requirements[0].values.clone().unwrap_or_default())
        .collect();
    assert_eq!(arches, ["amd64".to_string(), "arm64".to_string()].into());
    assert_eq!(status.subnets.len(), 1);
    assert!(by_name.is_ready());

    // Deletion waits for the class's NodeClaims.
    let claims: Api<NodeClaim> = Api::all(server.client());
    claims
        .create(
            &PostParams::default(),
            &node_claim("default-abcde", "default", json!([])),
        )
        .await
        .unwrap();
    api.delete("default", &DeleteParams::default()).await.unwrap();
    let deleting = reconciled(&api, "default", &ctx).await;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert!(
        deleting
            .finalizers()
            .contains(&"karpenter.k8s.aws/termination".to_string())
    );
    claims
        .delete("default-abcde", &DeleteParams::default())
        .await
        .unwrap();
    let _ = reconcile(Arc::new(deleting), Arc::clone(&ctx)).await;
    assert!(
        api.get_opt("default").await.unwrap().is_none(),
        "the finalizer is gone, and the class with it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_starts_the_provider_the_queue_and_the_controller() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let server = karpenter_sim::apiserver::ApiServer::new(karpenter_sim::clock::SystemClock);
    assert_eq!(kubernetes_version(&server.client()).await.unwrap(), "1.33");

    let invalid = AwsProvider::start_with_clients(AwsSettings::default(), clients.clone(), server.client())
        .await
        .unwrap_err();
    assert_eq!(invalid.to_string(), "configuration: CLUSTER_NAME is required");
    // The queue the controller policies allow, before it exists: the provider starts anyway (the source looks
    // the queue up when it polls, and retries; see the interruption source's tests).
    let missing_queue = AwsProvider::start_with_clients(
        AwsSettings {
            interruption_queue: Some(CLUSTER.into()),
            ..settings()
        },
        clients.clone(),
        server.client(),
    )
    .await
    .unwrap();
    assert!(missing_queue.interruption_source_dyn().is_some());
    // Without a queue the controller still reads the instance status poller (upstream runs it regardless).
    let no_queue = AwsProvider::start_with_clients(settings(), clients.clone(), server.client())
        .await
        .unwrap();
    assert!(no_queue.interruption_source.is_none());
    assert!(no_queue.interruption_source_dyn().is_some());

    admin.sqs.create_queue().queue_name(CLUSTER).send().await.unwrap();
    let runtime = AwsProvider::start_with_clients(
        AwsSettings {
            interruption_queue: Some(CLUSTER.into()),
            kubernetes_version: None,
            ..settings()
        },
        clients.clone(),
        server.client(),
    )
    .await
    .unwrap();
    assert_eq!(runtime.cloud_provider.settings().cluster_name, CLUSTER);
    assert_eq!(runtime.cloud_provider.kubernetes_version(), "1.33");
    assert!(runtime.interruption_source_dyn().is_some());
    assert_eq!(runtime.cloud_provider_dyn().name(), "aws");
    let names: Vec<&str> = runtime.tasks.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "ec2nodeclass",
            "instancetype-and-pricing-refresh",
            "launchtemplate-garbage-collection",
            "nodeclaim-tagging",
            "instanceprofile-garbage-collection",
            "capacityreservation-lifecycle",
            "kubernetes-version-refresh"
        ]
    );
    // The capacity reservation lifecycle runs only with the ReservedCapacity gate.
    let without_reserved_capacity = AwsProvider::start_with_clients(
        AwsSettings {
            reserved_capacity: false,
            ..settings()
        },
        clients.clone(),
        server.client(),
    )
    .await
    .unwrap();
    assert!(
        without_reserved_capacity
            .tasks
            .iter()
            .all(|t| t.name != "capacityreservation-lifecycle")
    );

    // The controller task reconciles a new class to Ready.
    let provider: Arc<AwsCloudProvider> = Arc::clone(&runtime.cloud_provider);
    let handles: Vec<_> = runtime
        .tasks
        .into_iter()
        .map(|t| tokio::spawn(t.future))
        .collect();
    create_node_class(
        &server,
        &node_class("default", json!([{"alias": "al2023@latest"}])),
    )
    .await;
    let api: Api<EC2NodeClass> = Api::all(server.client());
    let mut ready = false;
    for _ in 0..600 {
        if api.get("default").await.unwrap().is_ready()
            && provider.node_class_cache().get("default").is_some()
        {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for handle in handles {
        handle.abort();
    }
    assert!(ready, "the EC2NodeClass controller never made the class Ready");
}

/// The roles and tags of instance profile `name`, or None when it does not exist.
async fn instance_profile(
    iam: &aws_sdk_iam::Client,
    name: &str,
) -> Option<(Vec<String>, std::collections::BTreeMap<String, String>)> {
    let output = iam
        .get_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
        .ok()?;
    let profile = output.instance_profile()?;
    Some((
        profile
            .roles()
            .iter()
            .map(|r| r.role_name().to_string())
            .collect(),
        profile
            .tags()
            .iter()
            .map(|t| (t.key().to_string(), t.value().to_string()))
            .collect(),
    ))
}

async fn create_role(iam: &aws_sdk_iam::Client, name: &str) {
    iam.create_role()
        .role_name(name)
        .assume_role_policy_document(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
        )
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_gets_an_instance_profile_that_goes_with_its_class() {
    use karpenter_aws::nodeclass::controller::garbage_collect_instance_profiles;

    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let iam = admin.iam.clone();
    create_role(&iam, NODE_ROLE).await;
    create_role(&iam, "OtherNodeRole").await;
    // The controller policies let it pass only the template's node role; a class naming another role is
    // refused on AWS until the user grants iam:PassRole for it, as with upstream's template.
    moto.expect_refusal("IAM refuses iam:PassRole on arn:aws:iam::123456789012:role/OtherNodeRole");
    let (server, provider) = provider(clients.clone()).await;
    let ctx = Arc::new(Context {
        client: server.client(),
        provider: provider.clone(),
    });
    let api: Api<EC2NodeClass> = Api::all(server.client());

    let mut class = node_class("role-based", json!([{"alias": "al2023@latest"}]));
    class.spec.instance_profile = None;
    class.spec.role = Some(NODE_ROLE.into());
    create_node_class(&server, &class).await;
    let class = reconciled(&api, "role-based", &ctx).await;
    let name = provider.instance_profiles().name("role-based");
    assert!(name.starts_with("test-cluster_"), "{name}");
    assert_eq!(
        class.status.as_ref().unwrap().instance_profile.as_deref(),
        Some(name.as_str())
    );
    assert_eq!(condition(&class, "InstanceProfileReady").0, ConditionStatus::True);
    assert!(class.is_ready());
    let (roles, tags) = instance_profile(&iam, &name).await.unwrap();
    assert_eq!(roles, [NODE_ROLE]);
    assert_eq!(tags["karpenter.k8s.aws/ec2nodeclass"], "role-based");
    assert_eq!(tags["kubernetes.io/cluster/test-cluster"], "owned");
    assert_eq!(tags["topology.kubernetes.io/region"], "us-west-2");
    assert_eq!(tags["eks:eks-cluster-name"], CLUSTER);
    let path = "/karpenter/us-west-2/test-cluster/";
    let listed = iam
        .list_instance_profiles()
        .path_prefix(path)
        .send()
        .await
        .unwrap();
    // moto ignores PathPrefix (and the fixture's own profile has the default path).
    assert_eq!(
        listed
            .instance_profiles()
            .iter()
            .filter(|p| p.path() == path)
            .map(|p| p.instance_profile_name())
            .collect::<Vec<_>>(),
        [name.as_str()]
    );

    // A different role replaces the old one in the same profile (adopted, not recreated).
    let mut changed = class.clone();
    changed.spec.role = Some("arn:aws:iam::123456789012:role/OtherNodeRole".into());
    api.replace("role-based", &PostParams::default(), &changed)
        .await
        .unwrap();
    let class = reconciled(&api, "role-based", &ctx).await;
    assert_eq!(
        class.status.as_ref().unwrap().instance_profile.as_deref(),
        Some(name.as_str())
    );
    assert_eq!(instance_profile(&iam, &name).await.unwrap().0, ["OtherNodeRole"]);

    // A missing role: InstanceProfileReady False, saying why.
    let mut missing = node_class("missing-role", json!([{"alias": "al2023@latest"}]));
    missing.spec.instance_profile = None;
    missing.spec.role = Some("NoSuchRole".into());
    create_node_class(&server, &missing).await;
    let missing = reconciled(&api, "missing-role", &ctx).await;
    let (status, reason, message) = condition(&missing, "InstanceProfileReady");
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "InstanceProfileCreationFailed")
    );
    assert!(message.contains("NoSuchRole"), "{message}");

    // A profile whose class is gone is garbage-collected; those of existing classes stay.
    provider
        .instance_profiles()
        .ensure("deleted-while-down", None, NODE_ROLE)
        .await
        .unwrap();
    let stray = provider.instance_profiles().name("deleted-while-down");
    assert!(instance_profile(&iam, &stray).await.is_some());
    let deleted = garbage_collect_instance_profiles(&server.client(), provider.as_ref())
        .await
        .unwrap();
    assert_eq!(deleted, std::slice::from_ref(&stray));
    assert!(instance_profile(&iam, &stray).await.is_none());
    assert!(instance_profile(&iam, &name).await.is_some());

    // Deleting the class deletes its profile, then releases the finalizer.
    api.delete("role-based", &DeleteParams::default()).await.unwrap();
    let deleting = api.get("role-based").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    reconcile(Arc::new(deleting), Arc::clone(&ctx)).await.unwrap();
    assert!(instance_profile(&iam, &name).await.is_none());
    assert!(api.get_opt("role-based").await.unwrap().is_none());
}

/// What the template without ec2:DescribeAvailabilityZones did on EKS: start-up fails, naming the action, as it
/// does here because the controller signs as a principal holding exactly the template's policies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_fails_naming_an_action_the_controller_policies_do_not_grant() {
    let moto = crate::support::MotoServer::start_without(&["m5.large"], &["ec2:DescribeAvailabilityZones"]);
    let clients = moto.clients("us-west-2").await;
    let server = karpenter_sim::apiserver::ApiServer::new(karpenter_sim::clock::SystemClock);
    let err = AwsProvider::start_with_clients(settings(), clients, server.client())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("UnauthorizedOperation"), "{err}");
    assert!(err.to_string().contains("ec2:DescribeAvailabilityZones"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_upstream_annotated_rehashes_its_node_claims_before_taking_the_current_version() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    let ctx = Arc::new(Context {
        client: server.client(),
        provider: provider.clone(),
    });
    let api: Api<EC2NodeClass> = Api::all(server.client());
    let claims: Api<NodeClaim> = Api::all(server.client());
    // What upstream Karpenter left: the class and its NodeClaims hashed under version v6.
    let upstream = json!({
        "karpenter.k8s.aws/ec2nodeclass-hash": "upstream-hash",
        "karpenter.k8s.aws/ec2nodeclass-hash-version": "v6",
    });
    let mut class = node_class("default", json!([{"alias": "al2023@latest"}]));
    class.metadata.annotations = Some(serde_json::from_value(upstream.clone()).unwrap());
    create_node_class(&server, &class).await;
    for (name, class_name) in [("default-a", "default"), ("other-a", "other")] {
        let mut claim = node_claim(name, class_name, json!([]));
        claim.metadata.annotations = Some(serde_json::from_value(upstream.clone()).unwrap());
        claims.create(&PostParams::default(), &claim).await.unwrap();
    }

    let class = reconciled(&api, "default", &ctx).await;
    let version = karpenter_api::ec2nodeclass::EC2NODECLASS_HASH_VERSION;
    assert_eq!(
        class.annotations()["karpenter.k8s.aws/ec2nodeclass-hash-version"],
        version
    );
    let migrated = claims.get("default-a").await.unwrap();
    assert_eq!(
        migrated.annotations()["karpenter.k8s.aws/ec2nodeclass-hash-version"],
        version
    );
    assert_eq!(
        migrated.annotations()["karpenter.k8s.aws/ec2nodeclass-hash"],
        class.hash(),
        "re-hashed with the class's current hash, so a later class change drifts it"
    );
    let other = claims.get("other-a").await.unwrap();
    assert_eq!(
        other.annotations()["karpenter.k8s.aws/ec2nodeclass-hash-version"],
        "v6",
        "another class's NodeClaim is left to its own class"
    );
}
