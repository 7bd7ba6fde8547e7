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
//! Upstream exports similar series (`aws_sdk_go_request_*`) through a Go SDK middleware. Both live in the
//! process-wide registry of karpenter-metrics, so `/metrics` and docs/reference/metrics.md carry them.

use std::time::Instant;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, Metadata};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use karpenter_metrics::{AwsSdkOperationLabels, AwsSdkRequestLabels, metrics};

/// How many calls of `service`'s `operation` ended with `code` in this process.
pub fn request_count(service: &str, operation: &str, code: &str) -> u64 {
    metrics()
        .cloudprovider_aws_sdk_requests
        .get_or_create(&AwsSdkRequestLabels {
            service: service.into(),
            operation: operation.into(),
            code: code.into(),
        })
        .get()
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

/// Records the SDK request metrics for every call of the client it is registered on.
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
        // Debug builds (every test) refuse an action the provider does not declare, so a new call cannot slip
        // past the list deploy/cloudformation.yaml is checked against.
        #[cfg(debug_assertions)]
        if let Some(metadata) = cfg.load::<Metadata>() {
            let action = crate::permissions::iam_action(metadata.service(), metadata.name());
            if !crate::permissions::is_declared(&action) {
                return Err(format!(
                    "{action} is not in karpenter_aws::permissions::AWS_ACTIONS: declare it there and grant it \
                     in deploy/cloudformation.yaml"
                )
                .into());
            }
        }
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
        let metrics = metrics();
        if let Some(CallStarted(started)) = cfg.load::<CallStarted>() {
            metrics
                .cloudprovider_aws_sdk_request_duration_seconds
                .get_or_create(&AwsSdkOperationLabels {
                    service: service.clone(),
                    operation: operation.clone(),
                })
                .observe(started.elapsed().as_secs_f64());
        }
        metrics
            .cloudprovider_aws_sdk_requests
            .get_or_create(&AwsSdkRequestLabels {
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
    fn calls_are_exported_under_upstream_style_names() {
        metrics()
            .cloudprovider_aws_sdk_requests
            .get_or_create(&AwsSdkRequestLabels {
                service: "EC2".into(),
                operation: "UnitTestOperation".into(),
                code: "OK".into(),
            })
            .inc();
        assert_eq!(request_count("EC2", "UnitTestOperation", "OK"), 1);
        let text = metrics().encode();
        assert!(
            text.contains(
                r#"karpenter_cloudprovider_aws_sdk_requests_total{service="EC2",operation="UnitTestOperation",code="OK"} 1"#
            ),
            "{text}"
        );
    }
}
