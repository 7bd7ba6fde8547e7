//! Building the aws-sdk clients from aws-config: the region, an endpoint override (tests point every client at
//! a local emulator), static credentials for tests, and the retry policy. The SDK's adaptive retry mode backs
//! off exponentially with jitter on throttling and transient errors and rate-limits the client after
//! throttling, which is the behaviour upstream gets from its SDK; we only choose the limits. Every client
//! carries the [`SdkMetricsInterceptor`].

use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig, retry::RetryConfig, timeout::TimeoutConfig};

use crate::sdk_metrics::SdkMetricsInterceptor;

/// The default number of attempts per call (first try included).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// The first retry waits up to this long (jittered), doubling up to [`DEFAULT_MAX_BACKOFF`].
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(200);
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(20);
/// A whole call, retries included, gives up after this long.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(60);

/// How to build the clients.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The region; None takes it from the environment (`AWS_REGION`, profile, IMDS).
    pub region: Option<String>,
    /// One endpoint for every service (a local emulator); None uses AWS's endpoints (or `AWS_ENDPOINT_URL*`).
    pub endpoint_url: Option<String>,
    /// Static access key and secret (tests); None uses the default credential chain.
    pub static_credentials: Option<(String, String)>,
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub operation_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            region: None,
            endpoint_url: None,
            static_credentials: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        }
    }
}

impl ClientOptions {
    /// Options for a local emulator at `endpoint_url`: fixed test credentials and a single attempt (an
    /// emulator's 500 for an unimplemented API is "retryable"; waiting for retries only slows tests).
    pub fn emulator(endpoint_url: impl Into<String>, region: impl Into<String>) -> Self {
        Self {
            region: Some(region.into()),
            endpoint_url: Some(endpoint_url.into()),
            static_credentials: Some(("testing".into(), "testing".into())),
            max_attempts: 1,
            operation_timeout: Duration::from_secs(30),
            ..Self::default()
        }
    }

    pub fn retry_config(&self) -> RetryConfig {
        RetryConfig::adaptive()
            .with_max_attempts(self.max_attempts.max(1))
            .with_initial_backoff(self.initial_backoff)
            .with_max_backoff(self.max_backoff)
    }
}

/// The clients the provider uses, built from one [`SdkConfig`].
#[derive(Debug, Clone)]
pub struct AwsClients {
    pub region: String,
    pub ec2: aws_sdk_ec2::Client,
    pub ssm: aws_sdk_ssm::Client,
    pub sqs: aws_sdk_sqs::Client,
    /// Instance profiles for EC2NodeClasses with `spec.role` (IAM is global; the region only signs).
    pub iam: aws_sdk_iam::Client,
    /// The Pricing API lives in a few regions only; see [`pricing_api_region`].
    pub pricing: aws_sdk_pricing::Client,
    /// The cluster's endpoint and CA bundle when `CLUSTER_ENDPOINT` is not set (DescribeCluster).
    pub eks: aws_sdk_eks::Client,
}

/// Loads the shared SDK configuration.
pub async fn load_sdk_config(options: &ClientOptions) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(options.retry_config())
        .timeout_config(
            TimeoutConfig::builder()
                .operation_timeout(options.operation_timeout)
                .build(),
        );
    if let Some(region) = &options.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &options.endpoint_url {
        loader = loader.endpoint_url(url.clone());
    }
    if let Some((key, secret)) = &options.static_credentials {
        loader = loader.credentials_provider(aws_sdk_ec2::config::Credentials::new(
            key.clone(),
            secret.clone(),
            None,
            None,
            "karpenter-static",
        ));
    }
    loader.load().await
}

/// The region whose Pricing API endpoint serves `region`'s prices: the API has endpoints in us-east-1,
/// eu-central-1 and ap-south-1 (cn-northwest-1 for the China partition).
pub fn pricing_api_region(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("eu-") || region.starts_with("me-") || region.starts_with("af-") {
        "eu-central-1"
    } else if region.starts_with("ap-") {
        "ap-south-1"
    } else {
        "us-east-1"
    }
}

impl AwsClients {
    /// Builds every client from `options`; fails only when no region is configured anywhere.
    pub async fn new(options: &ClientOptions) -> Result<Self, crate::AwsError> {
        let config = load_sdk_config(options).await;
        Self::from_config(&config)
    }

    pub fn from_config(config: &SdkConfig) -> Result<Self, crate::AwsError> {
        let region = config
            .region()
            .map(|r| r.as_ref().to_string())
            .ok_or_else(|| crate::AwsError::Config("no AWS region configured (set AWS_REGION)".into()))?;
        // Every client records the SDK request metrics.
        let pricing_config = aws_sdk_pricing::config::Builder::from(config)
            .region(Region::new(pricing_api_region(&region)))
            .interceptor(SdkMetricsInterceptor)
            .build();
        Ok(Self {
            ec2: aws_sdk_ec2::Client::from_conf(
                aws_sdk_ec2::config::Builder::from(config)
                    .interceptor(SdkMetricsInterceptor)
                    .build(),
            ),
            ssm: aws_sdk_ssm::Client::from_conf(
                aws_sdk_ssm::config::Builder::from(config)
                    .interceptor(SdkMetricsInterceptor)
                    .build(),
            ),
            sqs: aws_sdk_sqs::Client::from_conf(
                aws_sdk_sqs::config::Builder::from(config)
                    .interceptor(SdkMetricsInterceptor)
                    .build(),
            ),
            iam: aws_sdk_iam::Client::from_conf(
                aws_sdk_iam::config::Builder::from(config)
                    .interceptor(SdkMetricsInterceptor)
                    .build(),
            ),
            pricing: aws_sdk_pricing::Client::from_conf(pricing_config),
            eks: aws_sdk_eks::Client::from_conf(
                aws_sdk_eks::config::Builder::from(config)
                    .interceptor(SdkMetricsInterceptor)
                    .build(),
            ),
            region,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pricing_endpoints_by_partition_and_continent() {
        assert_eq!(pricing_api_region("us-west-2"), "us-east-1");
        assert_eq!(pricing_api_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_api_region("ap-southeast-2"), "ap-south-1");
        assert_eq!(pricing_api_region("cn-north-1"), "cn-northwest-1");
    }

    #[tokio::test]
    async fn clients_take_the_region_and_endpoint_from_options() {
        let options = ClientOptions::emulator("http://127.0.0.1:1", "us-west-2");
        assert_eq!(options.retry_config().max_attempts(), 1);
        let clients = AwsClients::new(&options).await.unwrap();
        assert_eq!(clients.region, "us-west-2");
        assert_eq!(
            clients.pricing.config().region().map(|r| r.as_ref()),
            Some("us-east-1")
        );
        assert_eq!(ClientOptions::default().retry_config().max_attempts(), 3);
    }
}
