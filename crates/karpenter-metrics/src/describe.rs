//! What each metric is (name, type, help, label names), kept at registration so the metrics reference in docs/
//! is generated from the code that registers them.

use std::{fmt::Debug, hash::Hash};

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeMetric},
    metrics::{
        MetricType, TypedMetric,
        counter::Counter,
        family::{Family, MetricConstructor},
    },
    registry::{Metric, Registry},
};

/// One exported metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// The exported name (counters with `_total`).
    pub name: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    pub help: &'static str,
    pub labels: Vec<String>,
}

/// A metric the builder can describe: its type and label names are known without a sample.
pub trait Describe {
    fn kind() -> MetricType;
    fn label_names() -> Vec<String>;
    /// The type as the reference names it; only a summary, which prometheus-client has no type for, differs.
    fn kind_name() -> &'static str {
        match Self::kind() {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            _ => "unknown",
        }
    }
}

impl<L, M, C> Describe for Family<L, M, C>
where
    L: EncodeLabelSet + Default + Clone + Hash + Eq + Debug + Send + Sync + 'static,
    M: EncodeMetric + TypedMetric + Debug + Send + Sync + 'static,
    C: MetricConstructor<M> + Clone + Debug + Send + Sync + 'static,
{
    fn kind() -> MetricType {
        M::TYPE
    }

    fn label_names() -> Vec<String> {
        // Encode one sample with the default (empty) label values and read the names back.
        let family = Family::<L, Counter>::default();
        family.get_or_create(&L::default()).inc();
        let mut registry = Registry::default();
        registry.register("probe", "", family);
        let mut text = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text.lines()
            .find_map(|line| line.strip_prefix("probe_total{"))
            .and_then(|rest| rest.split_once('}'))
            .map(|(labels, _)| {
                labels
                    .split(',')
                    .filter_map(|pair| pair.split_once('=').map(|(name, _)| name.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

macro_rules! unlabelled {
    ($($ty:ty),*) => {$(
        impl Describe for $ty {
            fn kind() -> MetricType {
                <$ty as TypedMetric>::TYPE
            }
            fn label_names() -> Vec<String> {
                Vec::new()
            }
        }
    )*};
}
unlabelled!(
    Counter,
    prometheus_client::metrics::gauge::Gauge,
    prometheus_client::metrics::histogram::Histogram
);

impl Describe for crate::node_gauges::NodeResourceGauge {
    fn kind() -> MetricType {
        MetricType::Gauge
    }

    fn label_names() -> Vec<String> {
        crate::node_gauges::NODE_LABEL_NAMES
            .iter()
            .map(|n| (*n).to_string())
            .collect()
    }
}

impl Describe for crate::summary::NodePoolSummary {
    fn kind() -> MetricType {
        MetricType::Unknown
    }

    fn kind_name() -> &'static str {
        "summary"
    }

    fn label_names() -> Vec<String> {
        vec!["nodepool".to_string()]
    }
}

impl Describe for crate::summary::Summary {
    fn kind() -> MetricType {
        MetricType::Unknown
    }

    fn kind_name() -> &'static str {
        "summary"
    }

    fn label_names() -> Vec<String> {
        Vec::new()
    }
}

impl Describe for crate::pod_gauge::PodStateGauge {
    fn kind() -> MetricType {
        MetricType::Gauge
    }

    fn label_names() -> Vec<String> {
        crate::pod_gauge::POD_LABEL_NAMES
            .iter()
            .map(|n| (*n).to_string())
            .collect()
    }
}

/// Registers metrics and remembers their descriptors.
#[derive(Default)]
pub(crate) struct Builder {
    pub(crate) registry: Registry,
    pub(crate) descriptors: Vec<Descriptor>,
}

impl Builder {
    /// Registers `metric` as `name` (a counter's name without `_total`: the encoder adds it).
    pub(crate) fn add<M: Describe + Metric + Clone>(
        &mut self,
        name: &'static str,
        help: &'static str,
        metric: &M,
    ) {
        self.describe::<M>(name, help);
        // The registry ends every help text with a period itself.
        self.registry
            .register(name, help.strip_suffix('.').unwrap_or(help), metric.clone());
    }

    /// Lists `name` among the exported metrics without registering it: for a metric the `/metrics` handler
    /// writes itself (the per-node gauges, streamed).
    pub(crate) fn describe<M: Describe>(&mut self, name: &'static str, help: &'static str) {
        let kind = M::kind();
        let exported = if matches!(kind, MetricType::Counter) {
            format!("{name}_total")
        } else {
            name.to_string()
        };
        self.descriptors.push(Descriptor {
            name: exported,
            kind: M::kind_name(),
            help,
            labels: M::label_names(),
        });
    }
}
