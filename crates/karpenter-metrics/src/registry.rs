//! The registry and the typed handles controllers record into.

use std::{
    sync::{
        OnceLock,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Instant,
};

use prometheus_client::{
    encoding::text::encode_registry,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::{
    describe::{Builder, Descriptor},
    labels::*,
    node_gauges::NodeResourceGauge,
    pod_gauge::PodStateGauge,
    process,
    summary::{NodePoolSummary, Summary},
};

type FloatGauge = Gauge<f64, AtomicU64>;
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Name and help of the per-node gauges, which [`Metrics::encode_chunks`] writes itself.
const NODES_ALLOCATABLE: (&str, &str) = (
    "karpenter_nodes_allocatable",
    "Node allocatable, by node and resource type.",
);
const NODES_TOTAL_POD_REQUESTS: (&str, &str) = (
    "karpenter_nodes_total_pod_requests",
    "Sum of the requests of the pods bound to a node, DaemonSet pods excepted, by node and resource type.",
);
const NODES_TOTAL_DAEMON_REQUESTS: (&str, &str) = (
    "karpenter_nodes_total_daemon_requests",
    "Sum of the requests of the DaemonSet pods bound to a node, by node and resource type.",
);

/// Name and help of the node termination summary, which [`Metrics::encode_chunks`] writes itself.
const NODES_TERMINATION_DURATION_SECONDS: (&str, &str) = (
    "karpenter_nodes_termination_duration_seconds",
    "The time taken between a node's deletion request and the removal of its finalizer, by nodepool.",
);

/// Name and help of the per-pod gauge and the pod startup summary, which [`Metrics::encode_chunks`] writes itself.
const PODS_STATE: (&str, &str) = (
    "karpenter_pods_state",
    "Pod state: 1 per pod, by pod name, namespace, owner, node, whether it is scheduled, the node's nodepool, zone, architecture, capacity type and instance type, pod phase, readiness and whether the node is Karpenter-managed.",
);
const PODS_STARTUP_DURATION_SECONDS: (&str, &str) = (
    "karpenter_pods_startup_duration_seconds",
    "The time from pod creation until the pod is running (Ready), for pods Karpenter saw pending.",
);

/// Node lifetimes: 15 minutes to 30 days.
const LIFETIME_BUCKETS: [f64; 21] = [
    900.0,
    1800.0,
    2700.0,
    3600.0,
    7200.0,
    14_400.0,
    21_600.0,
    28_800.0,
    36_000.0,
    43_200.0,
    57_600.0,
    72_000.0,
    86_400.0,
    172_800.0,
    259_200.0,
    432_000.0,
    864_000.0,
    1_296_000.0,
    1_728_000.0,
    2_160_000.0,
    2_592_000.0,
];

fn lifetime_histogram() -> Histogram {
    Histogram::new(LIFETIME_BUCKETS)
}

/// Controller-runtime style duration buckets, 5 ms to 10 minutes.
const DURATION_BUCKETS: [f64; 20] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0,
    180.0, 300.0, 600.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Termination durations: 1 s to about half an hour, doubling.
fn termination_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        1.0, 2.0, 12,
    ))
}

/// Reboot durations: 10 s to about 21 minutes, doubling (past the reboot's 20-minute observation window).
fn reboot_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        10.0, 2.0, 8,
    ))
}

/// Batch sizes: 1 to 1,000 requests (a CreateFleet batch holds at most 1,000 launches).
const BATCH_SIZE_BUCKETS: [f64; 21] = [
    1.0, 2.0, 4.0, 5.0, 10.0, 15.0, 20.0, 25.0, 50.0, 75.0, 100.0, 150.0, 200.0, 250.0, 300.0, 400.0, 500.0,
    600.0, 750.0, 900.0, 1000.0,
];

fn batch_size_histogram() -> Histogram {
    Histogram::new(BATCH_SIZE_BUCKETS)
}

/// Every metric Karpenter exports. Handles are atomic: record through `&self` from any task.
pub struct Metrics {
    registry: Registry,
    descriptors: Vec<Descriptor>,
    /// The length of the registry's part of the last scrape (see [`Metrics::encode_chunks`]).
    last_encoded_len: AtomicUsize,
    pub build_info: Family<BuildInfoLabels, Gauge>,
    pub nodeclaims_created: Family<NodeClaimCreatedLabels, Counter>,
    pub nodeclaims_terminated: Family<NodeClaimTerminatedLabels, Counter>,
    pub nodeclaims_disrupted: Family<NodeClaimDisruptedLabels, Counter>,
    pub nodeclaims_unhealthy_disrupted: Family<UnhealthyLabels, Counter>,
    pub nodeclaims_termination_duration_seconds: HistogramFamily<NodePoolLabels>,
    pub nodes_created: Family<NodeLabels, Counter>,
    pub nodes_terminated: Family<NodeLabels, Counter>,
    pub nodes_drained: Family<NodePoolLabels, Counter>,
    /// Reboots carried out, by terminal result (`succeeded`, `provider_error`, `recovery_timeout`,
    /// `invalid_request`).
    pub nodes_reboots: Family<ResultLabels, Counter>,
    /// Seconds from a reboot's request to its terminal result, by result.
    pub nodes_reboot_duration_seconds: HistogramFamily<ResultLabels>,
    /// Seconds from a reboot's issue to the node's return (new boot, Ready), for reboots that succeeded.
    pub nodes_reboot_recovery_duration_seconds: HistogramFamily<NoLabels>,
    pub nodes_termination_duration_seconds: NodePoolSummary,
    /// Seconds from a node's creation to the removal of its finalizer, by nodepool.
    pub nodes_lifetime_duration_seconds: HistogramFamily<NodePoolLabels>,
    pub pods_eviction_requests: Family<CodeLabels, Counter>,
    pub pods_drained: Family<ReasonLabels, Counter>,
    /// One series per pod, replaced whole before each scrape.
    pub pods_state: PodStateGauge,
    pub pods_startup_duration_seconds: Summary,
    /// Seconds from pod creation until the pod is bound (PodScheduled), for pods Karpenter saw unbound.
    pub pods_bound_duration_seconds: Histogram,
    /// Seconds from Karpenter's first scheduling decision placing a pod until the pod is bound.
    pub pods_provisioning_bound_duration_seconds: Histogram,
    pub cloudprovider_duration_seconds: HistogramFamily<CloudProviderLabels>,
    pub cloudprovider_errors: Family<CloudProviderErrorLabels, Counter>,
    pub cloudprovider_aws_sdk_requests: Family<AwsSdkRequestLabels, Counter>,
    pub cloudprovider_aws_sdk_request_duration_seconds: HistogramFamily<AwsSdkOperationLabels>,
    pub voluntary_disruption_decisions: Family<DecisionLabels, Counter>,
    pub voluntary_disruption_decision_evaluation_duration_seconds: HistogramFamily<EvaluationLabels>,
    pub voluntary_disruption_eligible_nodes: Family<ReasonLabels, Gauge>,
    pub voluntary_disruption_consolidation_timeouts: Family<ConsolidationTypeLabels, Counter>,
    pub voluntary_disruption_failed_validations: Family<EvaluationLabels, Counter>,
    pub voluntary_disruption_queue_failures: Family<DecisionLabels, Counter>,
    pub nodepools_allowed_disruptions: Family<NodePoolReasonLabels, Gauge>,
    pub scheduler_scheduling_duration_seconds: HistogramFamily<ControllerLabels>,
    pub scheduler_unschedulable_pods_count: Family<ControllerLabels, Gauge>,
    pub scheduler_queue_depth: Family<ControllerLabels, Gauge>,
    pub interruption_received_messages: Family<MessageTypeLabels, Counter>,
    pub interruption_deleted_messages: Counter,
    /// Seconds from an interruption event to its message's deletion (one series, no labels).
    pub interruption_message_queue_duration_seconds: HistogramFamily<NoLabels>,
    /// Instances of the cluster found unhealthy by DescribeInstanceStatus, counted once per instance and
    /// category while it stays unhealthy.
    pub interruption_instance_status_unhealthy: Family<StatusCategoryLabels, Counter>,
    pub cloudprovider_batcher_batch_time_seconds: HistogramFamily<BatcherLabels>,
    pub cloudprovider_batcher_batch_size: HistogramFamily<BatcherLabels>,
    pub cloudprovider_instance_type_offering_available: Family<InstanceTypeOfferingLabels, Gauge>,
    pub cloudprovider_instance_type_offering_price_estimate: Family<InstanceTypeOfferingLabels, FloatGauge>,
    pub cloudprovider_instance_type_cpu_cores: Family<InstanceTypeLabels, Gauge>,
    pub cloudprovider_instance_type_memory_bytes: Family<InstanceTypeLabels, Gauge>,
    pub cloudprovider_instance_launch_failures: Family<LaunchFailureLabels, Counter>,
    pub ec2nodeclasses_userdata_bytes: Family<NodeClassLabels, Gauge>,
    pub cluster_state_node_count: Gauge,
    pub cluster_state_synced: Gauge,
    pub nodepools_usage: Family<NodePoolResourceLabels, FloatGauge>,
    pub nodepools_limit: Family<NodePoolResourceLabels, FloatGauge>,
    /// The hourly price of a nodepool's nodes: the sum of their offerings' prices.
    pub nodepools_cost_total: Family<NodePoolLabels, FloatGauge>,
    pub nodes_allocatable: NodeResourceGauge,
    pub nodes_total_pod_requests: NodeResourceGauge,
    pub nodes_total_daemon_requests: NodeResourceGauge,
    pub cluster_utilization_percent: Family<ResourceTypeLabels, FloatGauge>,
    pub reconcile_total: Family<ReconcileLabels, Counter>,
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    pub reconcile_time_seconds: HistogramFamily<ControllerLabels>,
    pub leader_election_master_status: Family<LeaderLabels, Gauge>,
}

fn histograms<L>() -> HistogramFamily<L>
where
    L: Clone + std::hash::Hash + Eq,
{
    Family::new_with_constructor(duration_histogram as fn() -> Histogram)
}

impl Metrics {
    #[allow(clippy::too_many_lines)] // one registration per metric, in the order of the reference
    fn new() -> Self {
        let mut b = Builder::default();
        let m = Self {
            registry: Registry::default(),
            descriptors: Vec::new(),
            last_encoded_len: AtomicUsize::new(0),
            build_info: Family::default(),
            nodeclaims_created: Family::default(),
            nodeclaims_terminated: Family::default(),
            nodeclaims_disrupted: Family::default(),
            nodeclaims_unhealthy_disrupted: Family::default(),
            nodeclaims_termination_duration_seconds: Family::new_with_constructor(
                termination_histogram as fn() -> Histogram,
            ),
            nodes_created: Family::default(),
            nodes_terminated: Family::default(),
            nodes_drained: Family::default(),
            nodes_reboots: Family::default(),
            nodes_reboot_duration_seconds: Family::new_with_constructor(
                reboot_histogram as fn() -> Histogram,
            ),
            nodes_reboot_recovery_duration_seconds: Family::new_with_constructor(
                reboot_histogram as fn() -> Histogram,
            ),
            nodes_termination_duration_seconds: NodePoolSummary::default(),
            nodes_lifetime_duration_seconds: Family::new_with_constructor(
                lifetime_histogram as fn() -> Histogram,
            ),
            pods_eviction_requests: Family::default(),
            pods_drained: Family::default(),
            pods_state: PodStateGauge::default(),
            pods_startup_duration_seconds: Summary::default(),
            pods_bound_duration_seconds: duration_histogram(),
            pods_provisioning_bound_duration_seconds: duration_histogram(),
            cloudprovider_duration_seconds: histograms(),
            cloudprovider_errors: Family::default(),
            cloudprovider_aws_sdk_requests: Family::default(),
            cloudprovider_aws_sdk_request_duration_seconds: histograms(),
            voluntary_disruption_decisions: Family::default(),
            voluntary_disruption_decision_evaluation_duration_seconds: histograms(),
            voluntary_disruption_eligible_nodes: Family::default(),
            voluntary_disruption_consolidation_timeouts: Family::default(),
            voluntary_disruption_failed_validations: Family::default(),
            voluntary_disruption_queue_failures: Family::default(),
            nodepools_allowed_disruptions: Family::default(),
            scheduler_scheduling_duration_seconds: histograms(),
            scheduler_unschedulable_pods_count: Family::default(),
            scheduler_queue_depth: Family::default(),
            interruption_received_messages: Family::default(),
            interruption_deleted_messages: Counter::default(),
            interruption_message_queue_duration_seconds: histograms(),
            interruption_instance_status_unhealthy: Family::default(),
            cloudprovider_batcher_batch_time_seconds: histograms(),
            cloudprovider_batcher_batch_size: Family::new_with_constructor(
                batch_size_histogram as fn() -> Histogram,
            ),
            cloudprovider_instance_type_offering_available: Family::default(),
            cloudprovider_instance_type_offering_price_estimate: Family::default(),
            cloudprovider_instance_type_cpu_cores: Family::default(),
            cloudprovider_instance_type_memory_bytes: Family::default(),
            cloudprovider_instance_launch_failures: Family::default(),
            ec2nodeclasses_userdata_bytes: Family::default(),
            cluster_state_node_count: Gauge::default(),
            cluster_state_synced: Gauge::default(),
            nodepools_usage: Family::default(),
            nodepools_limit: Family::default(),
            nodepools_cost_total: Family::default(),
            nodes_allocatable: NodeResourceGauge::default(),
            nodes_total_pod_requests: NodeResourceGauge::default(),
            nodes_total_daemon_requests: NodeResourceGauge::default(),
            cluster_utilization_percent: Family::default(),
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time_seconds: histograms(),
            leader_election_master_status: Family::default(),
        };
        b.add("karpenter_build_info", "A metric with a constant '1' value labeled by version and commit of the binary it was built from.", &m.build_info);
        b.add(
            "karpenter_nodeclaims_created",
            "Number of nodeclaims created in total by Karpenter, by reason and nodepool.",
            &m.nodeclaims_created,
        );
        b.add(
            "karpenter_nodeclaims_terminated",
            "Number of nodeclaims terminated in total by Karpenter, by nodepool, capacity type and zone.",
            &m.nodeclaims_terminated,
        );
        b.add(
            "karpenter_nodeclaims_disrupted",
            "Number of nodeclaims disrupted in total by Karpenter, by reason, nodepool and capacity type.",
            &m.nodeclaims_disrupted,
        );
        b.add("karpenter_nodeclaims_unhealthy_disrupted", "Number of unhealthy nodeclaims disrupted by node repair, by condition, nodepool, capacity type and image.", &m.nodeclaims_unhealthy_disrupted);
        b.add(
            "karpenter_nodeclaims_termination_duration_seconds",
            "Duration of nodeclaim termination in seconds, from deletion to finalizer removal, by nodepool.",
            &m.nodeclaims_termination_duration_seconds,
        );
        b.add(
            "karpenter_nodes_created",
            "Number of nodes created in total by Karpenter, by nodepool and zone.",
            &m.nodes_created,
        );
        b.add(
            "karpenter_nodes_terminated",
            "Number of nodes terminated in total by Karpenter, by nodepool and zone.",
            &m.nodes_terminated,
        );
        b.add(
            "karpenter_nodes_drained",
            "Number of nodes drained in total by Karpenter, by nodepool.",
            &m.nodes_drained,
        );
        b.add(
            "karpenter_nodes_reboots",
            "Number of node reboots carried out by Karpenter, by terminal result (succeeded, provider_error, recovery_timeout, invalid_request).",
            &m.nodes_reboots,
        );
        b.add(
            "karpenter_nodes_reboot_duration_seconds",
            "Duration of the full reboot action from request to terminal outcome, by result.",
            &m.nodes_reboot_duration_seconds,
        );
        b.add(
            "karpenter_nodes_reboot_recovery_duration_seconds",
            "Time from issuing a reboot until the node proved a new boot and rejoined (boot ID changed and Ready). Recorded on successful reboots only.",
            &m.nodes_reboot_recovery_duration_seconds,
        );
        // Written by `encode_chunks` itself: prometheus-client has no summary type.
        b.describe::<NodePoolSummary>(
            NODES_TERMINATION_DURATION_SECONDS.0,
            NODES_TERMINATION_DURATION_SECONDS.1,
        );
        b.add(
            "karpenter_nodes_lifetime_duration_seconds",
            "The lifetime of nodes, from creation to the removal of their finalizer, by nodepool.",
            &m.nodes_lifetime_duration_seconds,
        );
        b.add(
            "karpenter_pods_eviction_requests",
            "Number of eviction requests sent to the Eviction API, by response code.",
            &m.pods_eviction_requests,
        );
        b.add(
            "karpenter_pods_drained",
            "Number of pods drained from nodes, by reason.",
            &m.pods_drained,
        );
        b.describe::<PodStateGauge>(PODS_STATE.0, PODS_STATE.1);
        b.describe::<Summary>(PODS_STARTUP_DURATION_SECONDS.0, PODS_STARTUP_DURATION_SECONDS.1);
        b.add(
            "karpenter_pods_bound_duration_seconds",
            "The time from pod creation until the pod is bound, for pods Karpenter saw unbound.",
            &m.pods_bound_duration_seconds,
        );
        b.add("karpenter_pods_provisioning_bound_duration_seconds", "The time from when Karpenter first decided where a pod can schedule until it is bound. Note: measured from a point in memory, not from the pod's creation.", &m.pods_provisioning_bound_duration_seconds);
        b.add(
            "karpenter_cloudprovider_duration_seconds",
            "Duration of cloud provider method calls, by controller, method and provider.",
            &m.cloudprovider_duration_seconds,
        );
        b.add("karpenter_cloudprovider_errors", "Number of errors returned by cloud provider method calls, by controller, method, provider and error.", &m.cloudprovider_errors);
        b.add(
            "karpenter_cloudprovider_aws_sdk_requests",
            "Number of AWS API calls, by service, operation and outcome code (OK or the AWS error code).",
            &m.cloudprovider_aws_sdk_requests,
        );
        b.add(
            "karpenter_cloudprovider_aws_sdk_request_duration_seconds",
            "Duration of AWS API calls, retries included, by service and operation.",
            &m.cloudprovider_aws_sdk_request_duration_seconds,
        );
        b.add(
            "karpenter_voluntary_disruption_decisions",
            "Number of disruption decisions performed, by decision, reason and consolidation type.",
            &m.voluntary_disruption_decisions,
        );
        b.add(
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            "Duration of the disruption decision evaluation, by reason and consolidation type.",
            &m.voluntary_disruption_decision_evaluation_duration_seconds,
        );
        b.add(
            "karpenter_voluntary_disruption_eligible_nodes",
            "Number of nodes eligible for disruption, by reason.",
            &m.voluntary_disruption_eligible_nodes,
        );
        b.add("karpenter_voluntary_disruption_consolidation_timeouts", "Number of times a consolidation search reached its timeout (multi-node 1 minute, single-node 3 minutes), by consolidation type.", &m.voluntary_disruption_consolidation_timeouts);
        b.add("karpenter_voluntary_disruption_failed_validations", "Number of disruption commands that failed validation before being executed, by reason and consolidation type.", &m.voluntary_disruption_failed_validations);
        b.add("karpenter_voluntary_disruption_queue_failures", "Number of disruption commands that failed while being executed (rolled back), by decision, reason and consolidation type.", &m.voluntary_disruption_queue_failures);
        b.add("karpenter_nodepools_allowed_disruptions", "Number of nodes the nodepool's disruption budgets allow to be disrupted now, by nodepool and reason.", &m.nodepools_allowed_disruptions);
        b.add(
            "karpenter_scheduler_scheduling_duration_seconds",
            "Duration of one scheduling simulation, by controller.",
            &m.scheduler_scheduling_duration_seconds,
        );
        b.add(
            "karpenter_scheduler_unschedulable_pods_count",
            "Number of pods the last scheduling simulation could not place, by controller.",
            &m.scheduler_unschedulable_pods_count,
        );
        b.add(
            "karpenter_scheduler_queue_depth",
            "Number of pods the scheduling simulation in progress has still to decide, by controller (0 between rounds).",
            &m.scheduler_queue_depth,
        );
        b.add(
            "karpenter_interruption_received_messages",
            "Number of interruption messages received, by message type.",
            &m.interruption_received_messages,
        );
        b.add(
            "karpenter_interruption_deleted_messages",
            "Number of interruption messages deleted from the queue.",
            &m.interruption_deleted_messages,
        );
        b.add(
            "karpenter_interruption_message_queue_duration_seconds",
            "Time from an interruption event to the deletion of its message from the queue.",
            &m.interruption_message_queue_duration_seconds,
        );
        b.add(
            "karpenter_interruption_instance_status_unhealthy",
            "Number of unique unhealthy instance statuses of the cluster's instances found with EC2 DescribeInstanceStatus, by status check category.",
            &m.interruption_instance_status_unhealthy,
        );
        b.add(
            "karpenter_cloudprovider_batcher_batch_time_seconds",
            "Time from a batch's first request to the batch being sent, by batcher.",
            &m.cloudprovider_batcher_batch_time_seconds,
        );
        b.add(
            "karpenter_cloudprovider_batcher_batch_size",
            "Number of requests in a batch when it is sent, by batcher.",
            &m.cloudprovider_batcher_batch_size,
        );
        b.add(
            "karpenter_cloudprovider_instance_type_offering_available",
            "1 when an instance type offering is available, else 0, by instance type, capacity type and zone.",
            &m.cloudprovider_instance_type_offering_available,
        );
        b.add(
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            "Estimated hourly price of an instance type offering, by instance type, capacity type and zone.",
            &m.cloudprovider_instance_type_offering_price_estimate,
        );
        b.add(
            "karpenter_cloudprovider_instance_type_cpu_cores",
            "VCPUs of an instance type.",
            &m.cloudprovider_instance_type_cpu_cores,
        );
        b.add(
            "karpenter_cloudprovider_instance_type_memory_bytes",
            "Memory of an instance type, in bytes.",
            &m.cloudprovider_instance_type_memory_bytes,
        );
        b.add(
            "karpenter_cloudprovider_instance_launch_failures",
            "Number of failed instance launches, by zone, zone ID, capacity type and reason.",
            &m.cloudprovider_instance_launch_failures,
        );
        b.add(
            "karpenter_ec2nodeclasses_userdata_bytes",
            "Size of the user data generated for an EC2NodeClass's launch templates, in bytes.",
            &m.ec2nodeclasses_userdata_bytes,
        );
        b.add(
            "karpenter_cluster_state_node_count",
            "Number of nodes in Karpenter's cluster state.",
            &m.cluster_state_node_count,
        );
        b.add(
            "karpenter_cluster_state_synced",
            "1 when Karpenter's cluster state has listed every kind it watches, else 0.",
            &m.cluster_state_synced,
        );
        b.add(
            "karpenter_nodepools_usage",
            "Resources used by the nodes of a nodepool (their capacity), by nodepool and resource type.",
            &m.nodepools_usage,
        );
        b.add(
            "karpenter_nodepools_limit",
            "The nodepool's limits, by nodepool and resource type.",
            &m.nodepools_limit,
        );
        b.add(
            "karpenter_nodepools_cost_total",
            "The hourly price of a nodepool's nodes (the sum of their offerings' prices), by nodepool.",
            &m.nodepools_cost_total,
        );
        // Written by `encode_chunks` itself, streamed, not through the registry.
        b.describe::<NodeResourceGauge>(NODES_ALLOCATABLE.0, NODES_ALLOCATABLE.1);
        b.describe::<NodeResourceGauge>(NODES_TOTAL_POD_REQUESTS.0, NODES_TOTAL_POD_REQUESTS.1);
        b.describe::<NodeResourceGauge>(NODES_TOTAL_DAEMON_REQUESTS.0, NODES_TOTAL_DAEMON_REQUESTS.1);
        b.add("karpenter_cluster_utilization_percent", "Requests of bound pods as a percentage of the allocatable of Karpenter's nodes, by resource type.", &m.cluster_utilization_percent);
        b.add(
            "controller_runtime_reconcile",
            "Number of reconciliations per controller, by result.",
            &m.reconcile_total,
        );
        b.add(
            "controller_runtime_reconcile_errors",
            "Number of reconciliation errors per controller.",
            &m.reconcile_errors,
        );
        b.add(
            "controller_runtime_reconcile_time_seconds",
            "Duration of reconciliations per controller.",
            &m.reconcile_time_seconds,
        );
        b.add(
            "leader_election_master_status",
            "1 while this replica holds the leader lease, else 0.",
            &m.leader_election_master_status,
        );
        // Read from /proc by `encode_chunks` at each scrape.
        b.describe::<Counter>(process::CPU_SECONDS.0, process::CPU_SECONDS.1);
        for gauge in [
            process::RESIDENT_MEMORY_BYTES,
            process::VIRTUAL_MEMORY_BYTES,
            process::START_TIME_SECONDS,
            process::OPEN_FDS,
            process::MAX_FDS,
            process::HEAP_LIVE_BYTES,
        ] {
            b.describe::<Gauge>(gauge.0, gauge.1);
        }
        Self {
            registry: b.registry,
            descriptors: b.descriptors,
            ..m
        }
    }

    /// What is exported, in registration order (the metrics reference is generated from this).
    pub fn descriptors(&self) -> &[Descriptor] {
        &self.descriptors
    }

    /// The OpenMetrics text of every metric ([`crate::CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        self.encode_chunks().collect()
    }

    /// The same text as [`Metrics::encode`], in pieces a response can stream: the registry's metrics, then the
    /// per-node gauges a few hundred nodes at a time (at 5,000 nodes they are most of a 10 MB exposition), the
    /// process's own metrics (read from /proc now), then `# EOF`. The gauges are written from the tables as they were when this was called.
    pub fn encode_chunks(&self) -> impl Iterator<Item = String> + Send + '_ {
        // Sized from the last scrape, plus room to grow, rather than grown by doubling.
        let expected = self.last_encoded_len.load(Ordering::Relaxed);
        let mut head = String::with_capacity(expected + expected / 8);
        // Writing into a String cannot fail.
        let _ = encode_registry(&mut head, &self.registry);
        self.last_encoded_len.store(head.len(), Ordering::Relaxed);
        let allocatable = self
            .nodes_allocatable
            .text(NODES_ALLOCATABLE.0, NODES_ALLOCATABLE.1);
        let requests = self
            .nodes_total_pod_requests
            .text(NODES_TOTAL_POD_REQUESTS.0, NODES_TOTAL_POD_REQUESTS.1);
        let daemon_requests = self
            .nodes_total_daemon_requests
            .text(NODES_TOTAL_DAEMON_REQUESTS.0, NODES_TOTAL_DAEMON_REQUESTS.1);
        let termination = self.nodes_termination_duration_seconds.text(
            NODES_TERMINATION_DURATION_SECONDS.0,
            NODES_TERMINATION_DURATION_SECONDS.1,
        );
        let startup = self
            .pods_startup_duration_seconds
            .text(PODS_STARTUP_DURATION_SECONDS.0, PODS_STARTUP_DURATION_SECONDS.1);
        let pods = self.pods_state.text(PODS_STATE.0, PODS_STATE.1);
        std::iter::once(head)
            .chain(std::iter::once(termination))
            .chain(std::iter::once(startup))
            .chain(allocatable)
            .chain(requests)
            .chain(daemon_requests)
            .chain(pods)
            .chain(std::iter::once(process::ProcessSample::read().text()))
            .chain(std::iter::once("# EOF\n".to_string()))
    }

    /// Starts timing one reconciliation of `controller`; the guard records its count and duration when dropped,
    /// as an error if [`ReconcileTimer::failed`] was called.
    pub fn reconcile(&'static self, controller: &'static str) -> ReconcileTimer {
        ReconcileTimer {
            metrics: self,
            controller,
            started: Instant::now(),
            failed: false,
        }
    }
}

/// See [`Metrics::reconcile`].
pub struct ReconcileTimer {
    metrics: &'static Metrics,
    controller: &'static str,
    started: Instant,
    failed: bool,
}

impl ReconcileTimer {
    pub fn failed(&mut self) {
        self.failed = true;
    }
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        let controller = ControllerLabels {
            controller: self.controller.to_string(),
        };
        let result = if self.failed { "error" } else { "success" };
        self.metrics
            .reconcile_total
            .get_or_create(&ReconcileLabels {
                controller: self.controller.to_string(),
                result: result.to_string(),
            })
            .inc();
        if self.failed {
            self.metrics.reconcile_errors.get_or_create(&controller).inc();
        }
        self.metrics
            .reconcile_time_seconds
            .get_or_create(&controller)
            .observe(self.started.elapsed().as_secs_f64());
    }
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::POD_LABEL_NAMES;

    #[test]
    fn counters_are_exported_with_upstream_names_and_total_suffix() {
        let m = metrics();
        m.nodeclaims_created
            .get_or_create(&NodeClaimCreatedLabels {
                reason: "provisioning".into(),
                nodepool: "default".into(),
                min_values_relaxed: "false".into(),
            })
            .inc();
        drop(m.reconcile("provisioner"));
        m.leader_election_master_status
            .get_or_create(&LeaderLabels {
                name: "karpenter-leader-election".into(),
            })
            .set(1);
        let text = m.encode();
        assert!(
            text.contains(
                r#"karpenter_nodeclaims_created_total{reason="provisioning",nodepool="default",min_values_relaxed="false"}"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"controller_runtime_reconcile_total{controller="provisioner",result="success"}"#)
        );
        assert!(text.contains("# HELP leader_election_master_status"));
        assert!(text.ends_with("# EOF\n"));
        let created = m
            .descriptors()
            .iter()
            .find(|d| d.name == "karpenter_nodeclaims_created_total")
            .map(|d| (d.kind, d.labels.clone()));
        assert_eq!(
            created,
            Some((
                "counter",
                vec!["reason".into(), "nodepool".into(), "min_values_relaxed".into()]
            ))
        );
        m.interruption_message_queue_duration_seconds
            .get_or_create(&NoLabels {})
            .observe(2.0);
        let text = m.encode();
        assert!(
            text.contains("karpenter_interruption_message_queue_duration_seconds_count 1"),
            "{text}"
        );
        m.nodes_termination_duration_seconds.observe("default", 42.0);
        let text = m.encode();
        assert!(
            text.contains("# TYPE karpenter_nodes_termination_duration_seconds summary\n"),
            "{text}"
        );
        assert!(
            text.contains("karpenter_nodes_termination_duration_seconds_count{nodepool=\"default\"} 1\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
        assert!(
            m.descriptors()
                .iter()
                .any(|d| d.name == "karpenter_nodes_termination_duration_seconds"
                    && d.kind == "summary"
                    && d.labels == ["nodepool"])
        );
        assert!(m.descriptors().iter().any(|d| d.name
            == "karpenter_cloudprovider_instance_launch_failures_total"
            && d.labels == ["zone", "zone_id", "capacity_type", "reason"]));
        assert!(
            m.descriptors()
                .iter()
                .any(|d| d.name == "karpenter_cloudprovider_duration_seconds"
                    && d.kind == "histogram"
                    && d.labels == ["controller", "method", "provider"])
        );
    }

    #[test]
    fn pod_node_lifetime_cost_and_timeout_metrics_have_upstreams_names_types_and_labels() {
        let m = metrics();
        let described = |name: &str| {
            m.descriptors()
                .iter()
                .find(|d| d.name == name)
                .map(|d| (d.kind, d.labels.join(",")))
        };
        let expected = [
            ("karpenter_pods_state", "gauge", POD_LABEL_NAMES.join(",")),
            (
                "karpenter_pods_startup_duration_seconds",
                "summary",
                String::new(),
            ),
            (
                "karpenter_pods_bound_duration_seconds",
                "histogram",
                String::new(),
            ),
            (
                "karpenter_pods_provisioning_bound_duration_seconds",
                "histogram",
                String::new(),
            ),
            (
                "karpenter_nodes_lifetime_duration_seconds",
                "histogram",
                "nodepool".into(),
            ),
            ("karpenter_nodepools_cost_total", "gauge", "nodepool".into()),
            (
                "karpenter_voluntary_disruption_consolidation_timeouts_total",
                "counter",
                "consolidation_type".into(),
            ),
        ];
        for (name, kind, labels) in expected {
            assert_eq!(described(name), Some((kind, labels)), "{name}");
        }
        assert_eq!(
            POD_LABEL_NAMES.join(","),
            "name,namespace,owner,node,scheduled,nodepool,zone,arch,capacity_type,instance_type,phase,ready,managed"
        );

        m.nodes_lifetime_duration_seconds
            .get_or_create(&NodePoolLabels {
                nodepool: "lifetime-test".into(),
            })
            .observe(5400.0);
        m.pods_provisioning_bound_duration_seconds.observe(3.0);
        let text = m.encode();
        assert!(text.contains("karpenter_nodes_lifetime_duration_seconds_bucket{le=\"3600.0\",nodepool=\"lifetime-test\"} 0\n"), "{text}");
        assert!(text.contains("karpenter_nodes_lifetime_duration_seconds_bucket{le=\"7200.0\",nodepool=\"lifetime-test\"} 1\n"), "{text}");
        assert!(text.contains("karpenter_nodes_lifetime_duration_seconds_bucket{le=\"2592000.0\",nodepool=\"lifetime-test\"} 1\n"), "{text}");
        assert!(
            text.contains("karpenter_pods_provisioning_bound_duration_seconds_bucket{le=\"5.0\"}"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE karpenter_pods_startup_duration_seconds summary\n"),
            "{text}"
        );
        assert!(
            text.contains("karpenter_pods_startup_duration_seconds_count "),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
