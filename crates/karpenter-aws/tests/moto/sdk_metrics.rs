//! The SDK request metrics against moto: every client the provider builds counts its calls by operation and
//! outcome, and times them.

use karpenter_aws::sdk_metrics::request_count;

use crate::moto;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_calls_are_counted_by_operation_and_error_code_and_timed() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    // Other tests in this binary call the same operations concurrently, so only increases are asserted.
    let count = request_count;

    let ok = count("EC2", "DescribeLaunchTemplates", "OK");
    clients.ec2.describe_launch_templates().send().await.unwrap();
    assert!(count("EC2", "DescribeLaunchTemplates", "OK") > ok);

    let not_found = count(
        "EC2",
        "DescribeLaunchTemplates",
        "InvalidLaunchTemplateName.NotFoundException",
    );
    clients
        .ec2
        .describe_launch_templates()
        .launch_template_names("karpenter.k8s.aws/missing")
        .send()
        .await
        .unwrap_err();
    assert!(
        count(
            "EC2",
            "DescribeLaunchTemplates",
            "InvalidLaunchTemplateName.NotFoundException"
        ) > not_found
    );

    // A JSON-protocol service (SSM) and a query-compatible one (SQS) name their error codes too.
    let parameter = count("SSM", "GetParameter", "ParameterNotFound");
    clients
        .ssm
        .get_parameter()
        // Under /aws/service/, the only parameters the controller policies let it read.
        .name("/aws/service/karpenter-rs/no-such-parameter")
        .send()
        .await
        .unwrap_err();
    assert!(count("SSM", "GetParameter", "ParameterNotFound") > parameter);
    let queue = count("SQS", "GetQueueUrl", "AWS.SimpleQueueService.NonExistentQueue");
    clients
        .sqs
        .get_queue_url()
        // The queue the policies allow (named after the cluster), never created here.
        .queue_name(crate::support::POLICY_CLUSTER)
        .send()
        .await
        .unwrap_err();
    assert!(count("SQS", "GetQueueUrl", "AWS.SimpleQueueService.NonExistentQueue") > queue);

    let text = karpenter_metrics::metrics().encode();
    assert!(
        text.contains(
            r#"karpenter_cloudprovider_aws_sdk_request_duration_seconds_count{service="EC2",operation="DescribeLaunchTemplates"}"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"karpenter_cloudprovider_aws_sdk_requests_total{service="SSM",operation="GetParameter",code="ParameterNotFound"}"#),
        "{text}"
    );
}
