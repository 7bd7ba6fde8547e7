//! The AWS provider's flags and environment variables (upstream's names), parsed here so the settings
//! reference and `--help` cover them without the AWS SDK; the binary maps them onto `karpenter_aws::AwsSettings`,
//! whose `validate()` checks them (an empty CLUSTER_NAME, a relative CLUSTER_ENDPOINT, ... stop start-up).

use std::time::Duration;

use clap::{ArgAction, Args};
use karpenter_api::duration::parse_go_duration;

fn parse_duration(raw: &str) -> Result<Duration, String> {
    parse_go_duration(raw).map_err(|e| e.to_string())
}

#[derive(Debug, Clone, Args)]
pub struct AwsArgs {
    /// The EKS cluster's name: tags every instance and scopes listing and garbage collection (required with
    /// --cloud-provider aws).
    #[arg(long, env = "CLUSTER_NAME", default_value = "")]
    pub cluster_name: String,
    /// The API server URL nodes join (absolute URL); default: discovered once at start-up with
    /// eks:DescribeCluster of the cluster (start-up fails, naming this setting, when that fails).
    #[arg(long, env = "CLUSTER_ENDPOINT", default_value = "")]
    pub cluster_endpoint: String,
    /// The cluster's CA bundle (base64 of the PEM) nodes trust; default: from the controller's configuration
    /// when --cluster-endpoint is set, else discovered with the endpoint (eks:DescribeCluster).
    #[arg(long, env = "CLUSTER_CA_BUNDLE", default_value = "")]
    pub cluster_ca_bundle: String,
    /// No calls to endpoints only reachable from the internet (the Pricing API): static prices are used.
    #[arg(long, env = "ISOLATED_VPC", action = ArgAction::Set, default_value_t = false,
          num_args = 0..=1, default_missing_value = "true")]
    pub isolated_vpc: bool,
    /// Share of an instance's memory the hypervisor keeps (0.075 = 7.5%).
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value_t = 0.075)]
    pub vm_memory_overhead_percent: f64,
    /// SQS queue of EC2 interruption events (spot interruptions, rebalance, scheduled changes, state
    /// changes); empty turns interruption handling off.
    #[arg(long, env = "INTERRUPTION_QUEUE", default_value = "")]
    pub interruption_queue: String,
    /// ENIs kept from the VPC CNI when computing ENI-limited max pods.
    #[arg(long, env = "RESERVED_ENIS", default_value_t = 0)]
    pub reserved_enis: i64,
    /// Skip the EC2 dry-run authorization checks (CreateFleet, CreateLaunchTemplate, RunInstances) of
    /// EC2NodeClasses; their ValidationSucceeded is then True with reason DryRunDisabled.
    #[arg(long, env = "DISABLE_DRY_RUN", action = ArgAction::Set, default_value_t = false,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_dry_run: bool,
    /// How often EC2NodeClass AMIs are resolved again (at least 1m).
    #[arg(long, env = "AMI_REFRESH_INTERVAL", default_value = "1m", value_parser = parse_duration)]
    pub ami_refresh_interval: Duration,
    /// How often EC2NodeClass subnets and security groups are resolved again (at least 1m).
    #[arg(long, env = "SUBNET_REFRESH_INTERVAL", default_value = "1m", value_parser = parse_duration)]
    pub subnet_refresh_interval: Duration,
    /// The AWS region; default: AWS_REGION, the profile, then instance metadata.
    #[arg(long, env = "AWS_REGION")]
    pub aws_region: Option<String>,
    /// One endpoint for every AWS service (a local emulator, a VPC endpoint proxy).
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub aws_endpoint_url: Option<String>,
}
