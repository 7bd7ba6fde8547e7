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
    /// `CLUSTER_ENDPOINT`: the API server URL nodes join; must be absolute when set. When unset,
    /// [`crate::AwsProvider::start`] asks EKS (DescribeCluster of `cluster_name`) once, and fails naming the
    /// setting when EKS cannot answer.
    pub cluster_endpoint: Option<String>,
    /// `CLUSTER_CA_BUNDLE`: the cluster CA (base64 of the PEM) nodes trust the API server with. When unset,
    /// [`crate::AwsProvider::start`] takes it from the kubeconfig or in-cluster configuration it finds when
    /// the endpoint is set, else from DescribeCluster with the endpoint.
    pub cluster_ca_bundle: Option<String>,
    /// The cluster's Service CIDR (`10.100.0.0/16`), which AL2023's nodeadm requires. When unset it is derived
    /// from the cluster DNS address (the /16 of an IPv4 address, the /108 of an IPv6 one, as EKS assigns them).
    pub cluster_cidr: Option<String>,
    /// The cluster DNS Service address nodes use (`10.100.0.10`). When unset, [`crate::AwsProvider::start`]
    /// reads the `kube-system/kube-dns` Service's ClusterIP, as upstream does.
    pub cluster_dns_ip: Option<String>,
    /// `ISOLATED_VPC`: no calls to public-only endpoints (the Pricing API).
    pub isolated_vpc: bool,
    /// `VM_MEMORY_OVERHEAD_PERCENT`: a fraction (0.075 = 7.5%), at least 0.
    pub vm_memory_overhead_percent: f64,
    /// `INTERRUPTION_QUEUE`: the SQS queue name; None disables interruption handling.
    pub interruption_queue: Option<String>,
    /// `RESERVED_ENIS`: ENIs kept from the VPC CNI when computing max pods; at least 0.
    pub reserved_enis: i64,
    /// `DISABLE_DRY_RUN`: skip the EC2 dry-run authorization checks of EC2NodeClasses (their
    /// ValidationSucceeded is then True with reason DryRunDisabled).
    pub disable_dry_run: bool,
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
    /// The `ReservedCapacity` feature gate of `FEATURE_GATES` (on by default, as upstream's beta gate):
    /// EC2NodeClasses resolve their `capacityReservationSelectorTerms` (and get a CapacityReservationsReady
    /// condition), and their reservations become `reserved` offerings that launches use first.
    pub reserved_capacity: bool,
}

impl Default for AwsSettings {
    fn default() -> Self {
        Self {
            cluster_name: String::new(),
            cluster_endpoint: None,
            cluster_ca_bundle: None,
            cluster_cidr: None,
            cluster_dns_ip: None,
            isolated_vpc: false,
            vm_memory_overhead_percent: DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
            interruption_queue: None,
            reserved_enis: 0,
            disable_dry_run: false,
            ami_refresh_interval: MIN_REFRESH_INTERVAL,
            subnet_refresh_interval: MIN_REFRESH_INTERVAL,
            instance_type_refresh_interval: Duration::from_secs(12 * 3600),
            region: None,
            endpoint_override: None,
            kubernetes_version: None,
            reserved_capacity: true,
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

/// The Service CIDR EKS assigns around a cluster DNS address: the /16 of an IPv4 address
/// (`10.100.0.10` → `10.100.0.0/16`), the /108 of an IPv6 one.
pub fn service_cidr_from_dns_ip(ip: &str) -> Option<String> {
    match ip.trim().parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(v4) => {
            let [a, b, _, _] = v4.octets();
            Some(format!("{a}.{b}.0.0/16"))
        }
        std::net::IpAddr::V6(v6) => {
            let network = u128::from(v6) & !((1u128 << 20) - 1);
            Some(format!("{}/108", std::net::Ipv6Addr::from(network)))
        }
    }
}

/// A cluster's IP family. Upstream takes it from the cluster DNS address and so does this: IPv6 when that
/// address is an IPv6 one (an IPv4-mapped address counts as IPv4, as Go's `To4` has it), IPv4 otherwise,
/// also when the address is unknown or unparsable. On an IPv6 cluster the launch templates give each
/// instance an IPv6 address on its primary interface and delegate IPv6 prefixes instead of IPv4 ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IpFamily {
    #[default]
    Ipv4,
    Ipv6,
}

impl IpFamily {
    /// The family of a cluster whose DNS Service has address `dns_ip`.
    pub fn of_dns_ip(dns_ip: Option<&str>) -> Self {
        match dns_ip.and_then(|ip| ip.trim().parse::<std::net::IpAddr>().ok()) {
            Some(std::net::IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_none() => Self::Ipv6,
            _ => Self::Ipv4,
        }
    }

    pub fn is_ipv4(&self) -> bool {
        *self == Self::Ipv4
    }
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

    /// The Service CIDR: [`AwsSettings::cluster_cidr`], else derived from the cluster DNS address.
    pub fn service_cidr(&self) -> Option<String> {
        self.cluster_cidr
            .clone()
            .or_else(|| self.cluster_dns_ip.as_deref().and_then(service_cidr_from_dns_ip))
    }

    /// The cluster's IP family, from [`AwsSettings::cluster_dns_ip`] as upstream derives it.
    pub fn cluster_ip_family(&self) -> IpFamily {
        IpFamily::of_dns_ip(self.cluster_dns_ip.as_deref())
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
    fn the_service_cidr_is_derived_from_the_dns_address() {
        assert_eq!(
            service_cidr_from_dns_ip("10.100.0.10").as_deref(),
            Some("10.100.0.0/16")
        );
        assert_eq!(
            service_cidr_from_dns_ip("172.20.0.10").as_deref(),
            Some("172.20.0.0/16")
        );
        assert_eq!(
            service_cidr_from_dns_ip("fd30:1c53:5f8a::a").as_deref(),
            Some("fd30:1c53:5f8a::/108")
        );
        assert_eq!(service_cidr_from_dns_ip("nope"), None);
        let settings = AwsSettings {
            cluster_dns_ip: Some("10.100.0.10".into()),
            ..AwsSettings::default()
        };
        assert_eq!(settings.service_cidr().as_deref(), Some("10.100.0.0/16"));
        let explicit = AwsSettings {
            cluster_cidr: Some("192.168.0.0/20".into()),
            ..settings
        };
        assert_eq!(explicit.service_cidr().as_deref(), Some("192.168.0.0/20"));
    }

    #[test]
    fn the_ip_family_follows_the_dns_address() {
        assert_eq!(IpFamily::of_dns_ip(Some("10.100.0.10")), IpFamily::Ipv4);
        assert_eq!(IpFamily::of_dns_ip(Some("fd30:1c53:5f8a::a")), IpFamily::Ipv6);
        assert_eq!(IpFamily::of_dns_ip(Some("::ffff:10.100.0.10")), IpFamily::Ipv4);
        assert_eq!(IpFamily::of_dns_ip(Some("kube-dns")), IpFamily::Ipv4);
        assert_eq!(IpFamily::of_dns_ip(None), IpFamily::Ipv4);
        let ipv6 = AwsSettings {
            cluster_dns_ip: Some("fd4b:121b:812b::a".into()),
            ..AwsSettings::default()
        };
        assert_eq!(ipv6.cluster_ip_family(), IpFamily::Ipv6);
        assert_eq!(AwsSettings::default().cluster_ip_family(), IpFamily::Ipv4);
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
