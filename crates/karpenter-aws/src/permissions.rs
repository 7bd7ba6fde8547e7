//! Every AWS API action the provider calls, as IAM names it (`ec2:DescribeAvailabilityZones`): the list the
//! controller's IAM policies in deploy/cloudformation.yaml must grant.
//!
//! The list is kept honest three ways:
//! - every client [`crate::client::AwsClients`] builds carries the [`crate::sdk_metrics::SdkMetricsInterceptor`],
//!   which in debug builds (every test) refuses a call whose action is not listed, naming it;
//! - tests/iam_policy.rs scans this crate's sources for SDK operation calls and fails on one that is not
//!   listed, or on a listed action nothing calls, and checks every listed action against the template's
//!   controller policies (and every granted action against this list or its commented keep-list);
//! - the moto tests sign the provider's calls as a principal holding exactly those policies, so a call the
//!   template does not allow fails there as it would on AWS.

/// The actions, by service. Each one is the SDK operation's name with the service's IAM prefix.
pub const AWS_ACTIONS: &[&str] = &[
    // Instance types, offerings and zones (start-up and the periodic refresh).
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    // Spot prices; on-demand prices come from the Pricing API (not called with settings.isolatedVPC).
    "ec2:DescribeSpotPriceHistory",
    "pricing:GetProducts",
    // What EC2NodeClass selectors select.
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeImages",
    "ec2:DescribePlacementGroups",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    // AMI aliases (al2023@latest, bottlerocket@..., ...) through the public SSM parameters: batched for the
    // launch path, one at a time for the EC2NodeClass status.
    "ssm:GetParameter",
    "ssm:GetParameters",
    // Launch templates and launches (CreateFleet; RunInstances only as a dry run behind ValidationSucceeded).
    "ec2:CreateFleet",
    "ec2:CreateLaunchTemplate",
    "ec2:DeleteLaunchTemplate",
    "ec2:DescribeLaunchTemplates",
    "ec2:RunInstances",
    // Instances: listing, tagging (karpenter.sh/nodeclaim, Name), termination.
    "ec2:CreateTags",
    "ec2:DescribeInstances",
    "ec2:TerminateInstances",
    // The instance status poller: instances failing their status checks or with a scheduled event.
    "ec2:DescribeInstanceStatus",
    // Instance profiles for `spec.role`.
    "iam:AddRoleToInstanceProfile",
    "iam:CreateInstanceProfile",
    "iam:DeleteInstanceProfile",
    "iam:GetInstanceProfile",
    "iam:ListInstanceProfiles",
    "iam:RemoveRoleFromInstanceProfile",
    "iam:TagInstanceProfile",
    // The interruption queue.
    "sqs:DeleteMessage",
    "sqs:GetQueueUrl",
    "sqs:ReceiveMessage",
    // The cluster endpoint and CA bundle nodes join with, when settings.clusterEndpoint is not set.
    "eks:DescribeCluster",
];

/// The IAM action of an SDK call: the client's service name (`EC2`, `SSM`, `Pricing`, ...) lowercased, and
/// the operation's name.
pub fn iam_action(service: &str, operation: &str) -> String {
    format!("{}:{operation}", service.to_ascii_lowercase())
}

/// Whether `action` is one of [`AWS_ACTIONS`].
pub fn is_declared(action: &str) -> bool {
    AWS_ACTIONS.contains(&action)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_named_as_iam_names_them_and_listed_once() {
        assert_eq!(iam_action("EC2", "CreateFleet"), "ec2:CreateFleet");
        assert_eq!(iam_action("Pricing", "GetProducts"), "pricing:GetProducts");
        let mut seen = std::collections::BTreeSet::new();
        for action in AWS_ACTIONS {
            let (service, operation) = action.split_once(':').unwrap();
            assert!(
                ["ec2", "ssm", "sqs", "iam", "pricing", "eks"].contains(&service),
                "{action}"
            );
            assert!(
                operation.starts_with(|c: char| c.is_ascii_uppercase()),
                "{action}"
            );
            assert!(seen.insert(action), "{action} is listed twice");
        }
        assert!(is_declared("ec2:DescribeAvailabilityZones"));
        assert!(!is_declared("ec2:CreateVpc"));
    }
}
