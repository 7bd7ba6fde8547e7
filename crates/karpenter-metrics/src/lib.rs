//! Karpenter's Prometheus metrics with upstream's names and labels, so existing dashboards and alerts work.
//!
//! One process-wide [`Metrics`] ([`metrics()`]) that every controller records into and the operator serves on
//! `:8080/metrics`. Counters are registered without their `_total` suffix: the OpenMetrics encoder adds it
//! (`nodeclaims_created` is exported as `karpenter_nodeclaims_created_total`). Gauges that describe the cluster
//! (nodes, NodePool usage, cluster-state sync) are refreshed by the operator from its state cache before each
//! scrape; the rest are recorded where the thing happens.

mod classic_text;
mod describe;
mod labels;
mod node_gauges;
mod pod_gauge;
mod process;
mod registry;
mod summary;

pub use classic_text::{CLASSIC_CONTENT_TYPE, ClassicText, accepts_openmetrics};
pub use describe::Descriptor;
pub use labels::*;
pub use node_gauges::{NODE_LABEL_NAMES, NodeResourceGauge, NodeSeries};
pub use pod_gauge::{POD_LABEL_NAMES, PodEntry, PodNodeLabels, PodRows, PodSource, PodStateGauge, PodTable};
pub use process::set_heap_probe;
pub use registry::{Metrics, ReconcileTimer, metrics};
pub use summary::{NodePoolSummary, SUMMARY_MAX_AGE, SUMMARY_QUANTILES, Summary};

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
