//! karpenter-aws against moto (tests/moto/harness.py): prices and their fallback, and error mapping. Each test
//! runs its own server.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use karpenter_aws::{PriceSource, PricingProvider};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pricing_falls_back_to_the_static_table_when_the_pricing_api_fails() {
    let moto = moto_or_skip!(&["m5.large", "c6g.large"]);
    let clients = moto.clients("us-west-2").await;
    let pricing = PricingProvider::new("us-west-2", false).unwrap();

    // moto has no Pricing backend: the update fails and the static us-east-1 prices stay in use.
    let err = pricing.update_on_demand(&clients.pricing).await.unwrap_err();
    assert_eq!(err.category(), "Unreachable", "{err}");
    let status = pricing.status();
    assert_eq!(status.on_demand_source, PriceSource::Fallback);
    let note = status.note.unwrap();
    assert!(
        note.starts_with("on-demand prices from the static us-east-1 table: GetProducts:"),
        "{note}"
    );
    assert_eq!(pricing.on_demand_price("m5.large"), Some(0.096));

    // Spot prices come from DescribeSpotPriceHistory (moto's are a constant).
    let spot_types = pricing.update_spot(&clients.ec2).await.unwrap();
    assert!(spot_types >= 1, "{spot_types}");
    assert_eq!(pricing.status().spot_source, PriceSource::Api);
    let price = pricing
        .spot_price("m5.large", "us-west-2a")
        .expect("m5.large has a spot price in us-west-2a");
    assert!(price > 0.0 && price < 0.096, "{price}");

    // In an isolated VPC the Pricing API is not called at all.
    let isolated = PricingProvider::new("us-west-2", true).unwrap();
    assert_eq!(isolated.update_on_demand(&clients.pricing).await.unwrap(), 0);
    assert_eq!(isolated.status().on_demand_source, PriceSource::Fallback);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_error_codes_map_to_stable_categories() {
    let moto = moto_or_skip!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let err = clients
        .ec2
        .describe_instances()
        .instance_ids("i-0123456789abcdef0")
        .send()
        .await
        .map_err(|e| karpenter_aws::AwsError::from_sdk("DescribeInstances", e))
        .unwrap_err();
    assert_eq!(err.category(), "NotFound");
    assert_eq!(err.code(), Some("InvalidInstanceID.NotFound"));
    let provider_error: karpenter_core::cloudprovider::CloudProviderError = err.into();
    assert!(provider_error.is_not_found());
}
