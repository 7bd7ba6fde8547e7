//! Metrics of every AWS API call the provider makes, recorded by an SDK interceptor ([`SdkMetricsInterceptor`])
//! that [`crate::client::AwsClients`] registers on each client:
//!
//! - `karpenter_cloudprovider_aws_sdk_requests_total{service, operation, code}`: one per call (retries
//!   included in the one call). `code` is `OK` on success; AWS's error code when AWS answered with one
//!   (`InvalidLaunchTemplateName.NotFoundException`, `RequestLimitExceeded`, ...); otherwise the HTTP status,
//!   or `Timeout` / `ConnectionError` / `ClientError` when no answer came.
//! - `karpenter_cloudprovider_aws_sdk_request_duration_seconds{service, operation}`: how long each call took,
//!   retries and backoff included.
//!
//! Upstream exports similar series (`aws_sdk_go_request_*`) through a Go SDK middleware. They live in their own
//! registry ([`sdk_metrics`]) because the process-wide one in karpenter-metrics has a fixed set of metrics; the
//! operator's `/metrics` serves them by appending [`SdkMetrics::encode_series`].

use std::sync::OnceLock;
use std::time::Instant;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, Metadata};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// A call's service (`EC2`, `SSM`, ...) and operation (`CreateFleet`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SdkOperationLabels {
    pub service: String,
    pub operation: String,
}

/// A call and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SdkRequestLabels {
    pub service: String,
    pub operation: String,
    pub code: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// 10 ms to about 80 s, doubling: API calls take tens of milliseconds, CreateFleet and retried calls seconds.
fn duration_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.01, 2.0, 14,
    ))
}

/// The SDK request metrics and their registry.
pub struct SdkMetrics {
    registry: Registry,
    pub requests: Family<SdkRequestLabels, Counter>,
    pub duration_seconds: HistogramFamily<SdkOperationLabels>,
}

impl std::fmt::Debug for SdkMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SdkMetrics").finish_non_exhaustive()
    }
}

impl SdkMetrics {
    fn new() -> Self {
        let requests = Family::default();
        let duration_seconds = Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        let mut registry = Registry::default();
        // Counters are registered without `_total`; the encoder adds it.
        registry.register(
            "karpenter_cloudprovider_aws_sdk_requests",
            "AWS API calls by service, operation and outcome code (OK or AWS's error code).",
            requests.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_aws_sdk_request_duration_seconds",
            "Duration of AWS API calls, retries included, by service and operation.",
            duration_seconds.clone(),
        );
        Self {
            registry,
            requests,
            duration_seconds,
        }
    }

    /// The OpenMetrics text of these metrics, ending in `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// [`SdkMetrics::encode`] without the final `# EOF`, to be placed before another registry's.
    pub fn encode_series(&self) -> String {
        let text = self.encode();
        text.strip_suffix("# EOF\n").unwrap_or(&text).to_string()
    }

    /// How many calls of `service`'s `operation` ended with `code`.
    pub fn request_count(&self, service: &str, operation: &str, code: &str) -> u64 {
        self.requests
            .get_or_create(&SdkRequestLabels {
                service: service.into(),
                operation: operation.into(),
                code: code.into(),
            })
            .get()
    }
}

/// The process's SDK request metrics.
pub fn sdk_metrics() -> &'static SdkMetrics {
    static METRICS: OnceLock<SdkMetrics> = OnceLock::new();
    METRICS.get_or_init(SdkMetrics::new)
}

/// When the call started, kept in the call's config bag between the interceptor's hooks.
#[derive(Debug, Clone, Copy)]
struct CallStarted(Instant);

impl Storable for CallStarted {
    type Storer = StoreReplace<Self>;
}

/// AWS's error code in an error response: the query-compatibility and error-type headers of the JSON
/// protocols (SQS, SSM, Pricing), else `__type`/`code` in a JSON body, else the first `<Code>` of an XML body
/// (EC2, IAM).
pub fn error_code(response: &HttpResponse) -> Option<String> {
    let headers = response.headers();
    if let Some(value) = headers.get("x-amzn-query-error") {
        return value.split(';').next().map(str::to_string);
    }
    if let Some(value) = headers.get("x-amzn-errortype") {
        return value.split(':').next().map(str::to_string);
    }
    error_code_in_body(response.body().bytes()?)
}

fn error_code_in_body(body: &[u8]) -> Option<String> {
    if let Ok(serde_json::Value::Object(object)) = serde_json::from_slice(body) {
        let code = object.get("__type").or_else(|| object.get("code"))?.as_str()?;
        // `com.amazonaws.ssm#ParameterNotFound` → `ParameterNotFound`.
        return code.rsplit('#').next().map(str::to_string);
    }
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Code>")? + "<Code>".len();
    let end = start + text[start..].find("</Code>")?;
    Some(text[start..end].trim().to_string()).filter(|c| !c.is_empty())
}

/// The `code` label of a finished call.
fn outcome(context: &FinalizerInterceptorContextRef<'_>) -> String {
    match context.output_or_error() {
        Some(Ok(_)) => "OK".into(),
        Some(Err(err)) => match context.response() {
            Some(response) => error_code(response).unwrap_or_else(|| response.status().as_u16().to_string()),
            None if err.is_timeout_error() => "Timeout".into(),
            None if err.is_connector_error() => "ConnectionError".into(),
            None => "ClientError".into(),
        },
        None => "ClientError".into(),
    }
}

/// Records [`SdkMetrics`] for every call of the client it is registered on.
#[derive(Debug, Clone, Copy, Default)]
pub struct SdkMetricsInterceptor;

impl Intercept for SdkMetricsInterceptor {
    fn name(&self) -> &'static str {
        "KarpenterSdkMetrics"
    }

    fn read_before_execution(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        cfg.interceptor_state().store_put(CallStarted(Instant::now()));
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (service, operation) = cfg.load::<Metadata>().map_or_else(
            || ("unknown".to_string(), "unknown".to_string()),
            |m| (m.service().to_string(), m.name().to_string()),
        );
        let metrics = sdk_metrics();
        if let Some(CallStarted(started)) = cfg.load::<CallStarted>() {
            metrics
                .duration_seconds
                .get_or_create(&SdkOperationLabels {
                    service: service.clone(),
                    operation: operation.clone(),
                })
                .observe(started.elapsed().as_secs_f64());
        }
        metrics
            .requests
            .get_or_create(&SdkRequestLabels {
                service,
                operation,
                code: outcome(context),
            })
            .inc();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;

    use super::*;

    fn response(status: u16, headers: &[(&'static str, &'static str)], body: &'static str) -> HttpResponse {
        let mut response = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::from(body));
        for (name, value) in headers {
            response.headers_mut().insert(*name, *value);
        }
        response
    }

    #[test]
    fn error_codes_are_read_from_every_protocols_error_responses() {
        let ec2 = response(
            400,
            &[],
            "<?xml version=\"1.0\"?><Response><Errors><Error><Code>InvalidLaunchTemplateName.NotFoundException</Code><Message>gone</Message></Error></Errors><RequestID>1</RequestID></Response>",
        );
        assert_eq!(
            error_code(&ec2).as_deref(),
            Some("InvalidLaunchTemplateName.NotFoundException")
        );
        let iam = response(
            404,
            &[],
            "<ErrorResponse><Error><Type>Sender</Type><Code>NoSuchEntity</Code></Error></ErrorResponse>",
        );
        assert_eq!(error_code(&iam).as_deref(), Some("NoSuchEntity"));
        let ssm = response(
            400,
            &[],
            r#"{"__type":"com.amazonaws.ssm#ParameterNotFound","message":"no"}"#,
        );
        assert_eq!(error_code(&ssm).as_deref(), Some("ParameterNotFound"));
        let sqs = response(
            400,
            &[(
                "x-amzn-query-error",
                "AWS.SimpleQueueService.NonExistentQueue;Sender",
            )],
            r#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist"}"#,
        );
        assert_eq!(
            error_code(&sqs).as_deref(),
            Some("AWS.SimpleQueueService.NonExistentQueue"),
            "the query-compatible code upstream's alerts know"
        );
        let typed = response(
            400,
            &[(
                "x-amzn-errortype",
                "ThrottlingException:http://internal.amazon.com/",
            )],
            "",
        );
        assert_eq!(error_code(&typed).as_deref(), Some("ThrottlingException"));
        assert_eq!(error_code(&response(500, &[], "<html>oops</html>")), None);
    }

    #[test]
    fn the_registry_exports_upstream_style_names() {
        let metrics = sdk_metrics();
        metrics
            .requests
            .get_or_create(&SdkRequestLabels {
                service: "EC2".into(),
                operation: "UnitTestOperation".into(),
                code: "OK".into(),
            })
            .inc();
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"karpenter_cloudprovider_aws_sdk_requests_total{service="EC2",operation="UnitTestOperation",code="OK"} 1"#
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
        assert!(!metrics.encode_series().contains("# EOF"));
    }
}
