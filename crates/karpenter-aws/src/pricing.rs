//! Instance prices: on-demand from the AWS Pricing API, spot from EC2 DescribeSpotPriceHistory, and a static
//! on-demand table compiled into the crate that is used from start-up until the first successful update, in
//! isolated VPCs (no Pricing endpoint), and whenever an update fails.
//!
//! The static table is `data/on-demand-prices.json`, a verbatim copy of the shared reference data
//! (`shared/data/aws/on-demand-prices.json`, itself extracted from upstream Karpenter's generated initial price
//! tables; its `generated_from` and `region_sources` fields name the exact files and commit). A test checks the
//! copy against the reference when the reference is present; `data/README.md` says how to refresh it. Like
//! upstream, a region without its own table uses us-east-1's prices, and until spot prices have been fetched
//! once every zone's spot price is the on-demand price (so spot never looks cheaper than it is).

use std::collections::{BTreeMap, HashMap};
use std::sync::{OnceLock, PoisonError, RwLock};

use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_pricing::types::{Filter, FilterType};
use serde::Deserialize;
use serde_json::Value;

use crate::error::AwsError;

/// The static on-demand table, compiled in.
pub const FALLBACK_PRICES_JSON: &str = include_str!("../data/on-demand-prices.json");
/// The table used for regions that have none of their own.
pub const FALLBACK_DEFAULT_REGION: &str = "us-east-1";

#[derive(Debug, Deserialize)]
struct FallbackFile {
    generated_from: String,
    currency: BTreeMap<String, String>,
    regions: BTreeMap<String, BTreeMap<String, f64>>,
}

fn fallback_file() -> Result<&'static FallbackFile, AwsError> {
    static FILE: OnceLock<Result<FallbackFile, String>> = OnceLock::new();
    FILE.get_or_init(|| serde_json::from_str(FALLBACK_PRICES_JSON).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| AwsError::Config(format!("embedded on-demand price table is corrupt: {e}")))
}

/// The static on-demand table for `region`: the region's own, or the partition's (a China region uses
/// cn-north-1's, a GovCloud region the other GovCloud region's), or us-east-1's. Returns the table's region,
/// its currency and the prices.
pub fn fallback_on_demand_prices(
    region: &str,
) -> Result<(&'static str, &'static str, &'static BTreeMap<String, f64>), AwsError> {
    let file = fallback_file()?;
    let candidates = [
        region,
        if region.starts_with("cn-") {
            "cn-north-1"
        } else if region.starts_with("us-gov-") {
            "us-gov-west-1"
        } else {
            FALLBACK_DEFAULT_REGION
        },
        FALLBACK_DEFAULT_REGION,
    ];
    for candidate in candidates {
        if let Some((name, prices)) = file.regions.get_key_value(candidate) {
            let currency = file.currency.get(candidate).map_or("USD", String::as_str);
            return Ok((name.as_str(), currency, prices));
        }
    }
    Err(AwsError::Config(format!(
        "embedded on-demand price table ({}) has no {FALLBACK_DEFAULT_REGION} prices",
        file.generated_from
    )))
}

/// Where the prices in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceSource {
    /// The compiled-in table (on-demand), or on-demand prices standing in for spot.
    Fallback,
    /// The Pricing API (on-demand) or DescribeSpotPriceHistory (spot).
    Api,
}

/// What the pricing provider is using, for the controller's log lines and metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct PricingStatus {
    pub on_demand_source: PriceSource,
    /// The region whose static table is in use when `on_demand_source` is Fallback.
    pub fallback_table_region: String,
    pub spot_source: PriceSource,
    pub on_demand_types: usize,
    pub spot_types: usize,
    /// Why the fallback is in use (the last update's error, or "isolated VPC").
    pub note: Option<String>,
}

#[derive(Debug)]
struct PriceState {
    on_demand: HashMap<String, f64>,
    on_demand_source: PriceSource,
    /// Instance type to zone to price, from the last spot update.
    spot: HashMap<String, HashMap<String, f64>>,
    spot_source: PriceSource,
    note: Option<String>,
}

/// Prices for one region. Reads never wait on AWS; the controller calls the `update_*` methods periodically
/// (upstream: every 12 hours) and logs their errors.
#[derive(Debug)]
pub struct PricingProvider {
    region: String,
    isolated_vpc: bool,
    fallback_table_region: &'static str,
    state: RwLock<PriceState>,
}

impl PricingProvider {
    /// A provider holding the static prices for `region`. With `isolated_vpc`, the Pricing API is never called.
    pub fn new(region: impl Into<String>, isolated_vpc: bool) -> Result<Self, AwsError> {
        let region = region.into();
        let (table_region, _, prices) = fallback_on_demand_prices(&region)?;
        Ok(Self {
            region,
            isolated_vpc,
            fallback_table_region: table_region,
            state: RwLock::new(PriceState {
                on_demand: prices.iter().map(|(t, p)| (t.clone(), *p)).collect(),
                on_demand_source: PriceSource::Fallback,
                spot: HashMap::new(),
                spot_source: PriceSource::Fallback,
                note: isolated_vpc.then(|| "isolated VPC: the Pricing API is not called".to_string()),
            }),
        })
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, PriceState> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, PriceState> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The on-demand price per hour, if known.
    pub fn on_demand_price(&self, instance_type: &str) -> Option<f64> {
        self.read().on_demand.get(instance_type).copied()
    }

    /// The spot price per hour in `zone`. Before the first spot update this is the on-demand price; after it,
    /// only zones with spot price history have a price.
    pub fn spot_price(&self, instance_type: &str, zone: &str) -> Option<f64> {
        let state = self.read();
        match state.spot_source {
            PriceSource::Fallback => state.on_demand.get(instance_type).copied(),
            PriceSource::Api => state.spot.get(instance_type)?.get(zone).copied(),
        }
    }

    pub fn status(&self) -> PricingStatus {
        let state = self.read();
        PricingStatus {
            on_demand_source: state.on_demand_source,
            fallback_table_region: self.fallback_table_region.to_string(),
            spot_source: state.spot_source,
            on_demand_types: state.on_demand.len(),
            spot_types: state.spot.len(),
            note: state.note.clone(),
        }
    }

    /// Replaces the on-demand prices with what the Pricing API lists for this region. On error (or in an
    /// isolated VPC) the prices in use stay, the reason is kept in [`PricingStatus::note`], and the error is
    /// returned for the caller to log and count. Returns how many types got a price.
    pub async fn update_on_demand(&self, client: &aws_sdk_pricing::Client) -> Result<usize, AwsError> {
        if self.isolated_vpc {
            return Ok(0);
        }
        let result = fetch_on_demand_prices(client, &self.region)
            .await
            .and_then(|prices| {
                if prices.is_empty() {
                    Err(AwsError::InvalidResponse {
                        what: "GetProducts".into(),
                        message: format!("no on-demand prices for {}", self.region),
                    })
                } else {
                    Ok(prices)
                }
            });
        let mut state = self.write();
        match result {
            Ok(prices) => {
                let count = prices.len();
                state.on_demand = prices;
                state.on_demand_source = PriceSource::Api;
                state.note = None;
                Ok(count)
            }
            Err(err) => {
                state.note = Some(format!(
                    "on-demand prices from the static {} table: {err}",
                    self.fallback_table_region
                ));
                Err(err)
            }
        }
    }

    /// Replaces the spot prices with the latest DescribeSpotPriceHistory entry per type and zone. On error the
    /// prices in use stay. Returns how many types got a price.
    pub async fn update_spot(&self, ec2: &aws_sdk_ec2::Client) -> Result<usize, AwsError> {
        let prices = fetch_spot_prices(ec2).await?;
        let count = prices.len();
        let mut state = self.write();
        state.spot = prices;
        state.spot_source = PriceSource::Api;
        Ok(count)
    }
}

/// Every Linux, shared-tenancy, on-demand instance price the Pricing API lists for `region`.
pub async fn fetch_on_demand_prices(
    client: &aws_sdk_pricing::Client,
    region: &str,
) -> Result<HashMap<String, f64>, AwsError> {
    let mut prices = HashMap::new();
    // Bare-metal types are a product family of their own.
    for product_family in ["Compute Instance", "Compute Instance (bare metal)"] {
        let filters = [
            ("regionCode", region),
            ("productFamily", product_family),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
        ]
        .into_iter()
        .map(|(field, value)| {
            Filter::builder()
                .r#type(FilterType::TermMatch)
                .field(field)
                .value(value)
                .build()
                .map_err(|e| AwsError::Config(format!("pricing filter {field}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
        let mut pages = client
            .get_products()
            .service_code("AmazonEC2")
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::from_sdk("GetProducts", e))?;
            for item in page.price_list() {
                if let Some((instance_type, price)) = parse_price_list_item(item)? {
                    prices.insert(instance_type, price);
                }
            }
        }
    }
    Ok(prices)
}

/// One GetProducts PriceList entry (a JSON document as a string): the instance type and its on-demand hourly
/// price, or None when the entry has no positive USD or CNY price.
pub fn parse_price_list_item(item: &str) -> Result<Option<(String, f64)>, AwsError> {
    let invalid = |message: String| AwsError::InvalidResponse {
        what: "GetProducts PriceList".into(),
        message,
    };
    let doc: Value = serde_json::from_str(item).map_err(|e| invalid(e.to_string()))?;
    let Some(instance_type) = doc
        .pointer("/product/attributes/instanceType")
        .and_then(Value::as_str)
    else {
        return Err(invalid("product.attributes.instanceType is missing".into()));
    };
    let Some(terms) = doc.pointer("/terms/OnDemand").and_then(Value::as_object) else {
        return Ok(None);
    };
    for term in terms.values() {
        let Some(dimensions) = term.get("priceDimensions").and_then(Value::as_object) else {
            continue;
        };
        for dimension in dimensions.values() {
            for currency in ["USD", "CNY"] {
                let Some(text) = dimension
                    .pointer(&format!("/pricePerUnit/{currency}"))
                    .and_then(Value::as_str)
                else {
                    continue;
                };
                let price: f64 = text
                    .parse()
                    .map_err(|_| invalid(format!("{instance_type}: price {text:?} is not a number")))?;
                if price > 0.0 {
                    return Ok(Some((instance_type.to_string(), price)));
                }
            }
        }
    }
    Ok(None)
}

/// The latest spot price per instance type and zone for Linux.
pub async fn fetch_spot_prices(
    ec2: &aws_sdk_ec2::Client,
) -> Result<HashMap<String, HashMap<String, f64>>, AwsError> {
    // Starting "now" returns the price in effect now for each type and zone.
    let now = DateTime::from_secs(jiff::Timestamp::now().as_second());
    let mut latest: HashMap<(String, String), (DateTime, f64)> = HashMap::new();
    let mut pages = ec2
        .describe_spot_price_history()
        .product_descriptions("Linux/UNIX")
        .product_descriptions("Linux/UNIX (Amazon VPC)")
        .start_time(now)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsError::from_sdk("DescribeSpotPriceHistory", e))?;
        for entry in page.spot_price_history() {
            let (Some(instance_type), Some(zone), Some(text), Some(timestamp)) = (
                entry.instance_type(),
                entry.availability_zone(),
                entry.spot_price(),
                entry.timestamp(),
            ) else {
                continue;
            };
            let Ok(price) = text.parse::<f64>() else {
                continue;
            };
            let key = (instance_type.as_str().to_string(), zone.to_string());
            match latest.get(&key) {
                Some((seen, _)) if seen.secs() >= timestamp.secs() => {}
                _ => {
                    latest.insert(key, (*timestamp, price));
                }
            }
        }
    }
    let mut prices: HashMap<String, HashMap<String, f64>> = HashMap::new();
    for ((instance_type, zone), (_, price)) in latest {
        prices.entry(instance_type).or_default().insert(zone, price);
    }
    Ok(prices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_table_covers_the_documented_regions() {
        let (region, currency, prices) = fallback_on_demand_prices("us-east-1").unwrap();
        assert_eq!((region, currency), ("us-east-1", "USD"));
        assert_eq!(prices["m5.large"], 0.096);
        assert!(prices.len() > 1300);
        assert_eq!(fallback_on_demand_prices("us-west-2").unwrap().0, "us-east-1");
        assert_eq!(
            fallback_on_demand_prices("us-gov-east-1").unwrap().0,
            "us-gov-east-1"
        );
        let (region, currency, _) = fallback_on_demand_prices("cn-northwest-1").unwrap();
        assert_eq!((region, currency), ("cn-north-1", "CNY"));
    }

    #[test]
    fn static_table_is_the_shared_reference_data() {
        // The reference data lives beside the repository on development machines and in CI; a clone without
        // it skips this check (the CI's catalog step says so too).
        let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/aws/on-demand-prices.json");
        let Ok(reference) = std::fs::read_to_string(&shared) else {
            eprintln!("{} not present; skipping the staleness check", shared.display());
            return;
        };
        assert_eq!(
            FALLBACK_PRICES_JSON, reference,
            "data/on-demand-prices.json differs from the shared reference; refresh it as data/README.md says"
        );
    }

    #[test]
    fn prices_start_static_and_spot_stands_in_with_on_demand() {
        let pricing = PricingProvider::new("us-west-2", false).unwrap();
        assert_eq!(pricing.on_demand_price("m5.large"), Some(0.096));
        assert_eq!(pricing.spot_price("m5.large", "us-west-2a"), Some(0.096));
        assert_eq!(pricing.on_demand_price("no.such"), None);
        let status = pricing.status();
        assert_eq!(status.on_demand_source, PriceSource::Fallback);
        assert_eq!(status.fallback_table_region, "us-east-1");
        assert_eq!(status.note, None);
        let isolated = PricingProvider::new("us-west-2", true).unwrap();
        assert_eq!(
            isolated.status().note.as_deref(),
            Some("isolated VPC: the Pricing API is not called")
        );
    }

    #[test]
    fn price_list_items_are_read() {
        let item = r#"{"product": {"productFamily": "Compute Instance",
            "attributes": {"instanceType": "m5.large", "regionCode": "us-west-2", "operatingSystem": "Linux"}},
            "serviceCode": "AmazonEC2",
            "terms": {"OnDemand": {"ABC.JRTCKXETXF": {"priceDimensions": {"ABC.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs", "pricePerUnit": {"USD": "0.0960000000"}}}}}}}"#;
        assert_eq!(
            parse_price_list_item(item).unwrap(),
            Some(("m5.large".into(), 0.096))
        );
        let free = item.replace("0.0960000000", "0.0000000000");
        assert_eq!(parse_price_list_item(&free).unwrap(), None);
        let err = parse_price_list_item(r#"{"product": {}}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "GetProducts PriceList: product.attributes.instanceType is missing"
        );
        assert_eq!(err.category(), "InvalidResponse");
    }
}
