//! The AWS provider's settings (upstream's AWS options, §3.2 of the feature inventory): a plain struct the
//! binary fills from its flags and environment, and [`AwsSettings::validate`], whose errors name the setting by
//! its upstream environment variable so a user can find it in the chart's values.

use std::time::Duration;

use crate::error::AwsError;

/// Upstream's default share of memory the hypervisor keeps (`VM_MEMORY_OVERHEAD_PERCENT`).
pub const DEFAULT_VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
/// The shortest AMI and subnet refresh interval upstream accepts.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// Everything the AWS provider is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsSettings {
    /// `CLUSTER_NAME`: required; tags every instance and scopes listing and garbage collection.
    pub cluster_name: String,
    /// `CLUSTER_ENDPOINT`: the API server URL nodes join; must be absolute when set.
    pub cluster_endpoint: Option<String>,
    /// `ISOLATED_VPC`: no calls to public-only endpoints (the Pricing API).
    pub isolated_vpc: bool,
    /// `VM_MEMORY_OVERHEAD_PERCENT`: a fraction (0.075 = 7.5%), at least 0.
    pub vm_memory_overhead_percent: f64,
    /// `INTERRUPTION_QUEUE`: the SQS queue name; None disables interruption handling.
    pub interruption_queue: Option<String>,
    /// `RESERVED_ENIS`: ENIs kept from the VPC CNI when computing max pods; at least 0.
    pub reserved_enis: i64,
    /// `AMI_REFRESH_INTERVAL`: how often EC2NodeClass AMIs are re-resolved; at least one minute.
    pub ami_refresh_interval: Duration,
    /// `SUBNET_REFRESH_INTERVAL`: how often subnets (and security groups) are re-resolved; at least one minute.
    pub subnet_refresh_interval: Duration,
    /// How often instance types and prices are refreshed (upstream: 12 hours).
    pub instance_type_refresh_interval: Duration,
    /// The AWS region; None takes it from the environment (`AWS_REGION`, profile, IMDS).
    pub region: Option<String>,
    /// One endpoint for every AWS service (tests point it at a local emulator); None uses AWS's.
    pub endpoint_override: Option<String>,
    /// The Kubernetes minor version AMI aliases resolve for (`1.33`); None asks the API server.
    pub kubernetes_version: Option<String>,
}

impl Default for AwsSettings {
    fn default() -> Self {
        Self {
            cluster_name: String::new(),
            cluster_endpoint: None,
            isolated_vpc: false,
            vm_memory_overhead_percent: DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
            interruption_queue: None,
            reserved_enis: 0,
            ami_refresh_interval: MIN_REFRESH_INTERVAL,
            subnet_refresh_interval: MIN_REFRESH_INTERVAL,
            instance_type_refresh_interval: Duration::from_secs(12 * 3600),
            region: None,
            endpoint_override: None,
            kubernetes_version: None,
        }
    }
}

/// Whether `url` is absolute: a scheme, `://` and a host.
fn is_absolute_url(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let scheme_ok = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    scheme_ok && !host.is_empty()
}

impl AwsSettings {
    /// Every problem at once, one per line, each naming its environment variable.
    pub fn validate(&self) -> Result<(), AwsError> {
        let mut problems = Vec::new();
        if self.cluster_name.trim().is_empty() {
            problems.push("CLUSTER_NAME is required".to_string());
        }
        if let Some(endpoint) = &self.cluster_endpoint
            && !is_absolute_url(endpoint)
        {
            problems.push(format!("CLUSTER_ENDPOINT {endpoint:?} is not an absolute URL"));
        }
        let overhead = self.vm_memory_overhead_percent;
        if !overhead.is_finite() || overhead < 0.0 {
            problems.push(format!(
                "VM_MEMORY_OVERHEAD_PERCENT {overhead} must be at least 0"
            ));
        }
        if self.reserved_enis < 0 {
            problems.push(format!("RESERVED_ENIS {} must be at least 0", self.reserved_enis));
        }
        if self
            .interruption_queue
            .as_deref()
            .is_some_and(|q| q.trim().is_empty())
        {
            problems.push("INTERRUPTION_QUEUE must not be empty when set".to_string());
        }
        for (name, interval) in [
            ("AMI_REFRESH_INTERVAL", self.ami_refresh_interval),
            ("SUBNET_REFRESH_INTERVAL", self.subnet_refresh_interval),
        ] {
            if interval < MIN_REFRESH_INTERVAL {
                problems.push(format!("{name} {interval:?} must be at least 1m"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(AwsError::Config(problems.join("\n")))
        }
    }

    /// RESERVED_ENIS as core's capacity settings take it.
    pub fn reserved_enis_u32(&self) -> u32 {
        u32::try_from(self.reserved_enis.max(0)).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_need_only_a_cluster_name() {
        let settings = AwsSettings {
            cluster_name: "prod".into(),
            ..AwsSettings::default()
        };
        assert_eq!(settings.validate().map_err(|e| e.to_string()), Ok(()));
        assert_eq!(settings.vm_memory_overhead_percent, 0.075);
    }

    #[test]
    fn every_problem_names_its_setting() {
        let settings = AwsSettings {
            cluster_name: " ".into(),
            cluster_endpoint: Some("cluster.example.com".into()),
            vm_memory_overhead_percent: -0.1,
            reserved_enis: -1,
            interruption_queue: Some(String::new()),
            ami_refresh_interval: Duration::from_secs(30),
            subnet_refresh_interval: Duration::from_secs(59),
            ..AwsSettings::default()
        };
        let err = settings.validate().unwrap_err();
        assert_eq!(err.category(), "Configuration");
        assert_eq!(
            err.to_string(),
            "configuration: CLUSTER_NAME is required\n\
             CLUSTER_ENDPOINT \"cluster.example.com\" is not an absolute URL\n\
             VM_MEMORY_OVERHEAD_PERCENT -0.1 must be at least 0\n\
             RESERVED_ENIS -1 must be at least 0\n\
             INTERRUPTION_QUEUE must not be empty when set\n\
             AMI_REFRESH_INTERVAL 30s must be at least 1m\n\
             SUBNET_REFRESH_INTERVAL 59s must be at least 1m"
        );
    }

    #[test]
    fn absolute_urls() {
        assert!(is_absolute_url("https://ABC.gr7.us-west-2.eks.amazonaws.com"));
        assert!(is_absolute_url("http://127.0.0.1:6443/"));
        assert!(!is_absolute_url("https://"));
        assert!(!is_absolute_url("://host"));
        assert!(!is_absolute_url("/relative"));
    }
}
