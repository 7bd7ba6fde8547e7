//! The controller's settings: flags with environment-variable fallbacks, upstream's names and defaults
//! (`--batch-max-duration` / `BATCH_MAX_DURATION`, ...). A flag wins over its variable. A value that does not
//! parse, or parses but makes no sense, stops start-up with a message naming the setting.

use std::{collections::BTreeMap, time::Duration};

use clap::{ArgAction, Args, ValueEnum};
use karpenter_api::duration::parse_go_duration;
use karpenter_core::{
    scheduler_config::SchedulerConfig,
    scheduling::{MinValuesPolicy, PreferencePolicy},
};

use crate::OperatorError;

/// `LOG_LEVEL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

/// `PREFERENCE_POLICY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PreferencePolicyArg {
    /// Preferred affinities and ScheduleAnyway spread constraints are honoured while they can be.
    #[value(name = "Respect")]
    Respect,
    /// They are ignored.
    #[value(name = "Ignore")]
    Ignore,
}

/// `MIN_VALUES_POLICY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MinValuesPolicyArg {
    /// A NodePool whose minValues cannot be met launches nothing.
    #[value(name = "Strict")]
    Strict,
    /// minValues are relaxed as far as needed (the NodeClaim is annotated).
    #[value(name = "BestEffort")]
    BestEffort,
}

/// `FEATURE_GATES`: `Name=bool` pairs separated by commas; unknown names are ignored, as upstream does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    pub node_repair: bool,
    pub reserved_capacity: bool,
    pub spot_to_spot_consolidation: bool,
    pub node_overlay: bool,
    pub static_capacity: bool,
    pub capacity_buffer: bool,
    /// Drifted nodes are deleted before their replacements launch (capacity pinned by reservations).
    pub terminate_first_drift: bool,
    /// Unhealthy nodes are deleted before their replacements launch; node repair always works this way, so
    /// the gate is accepted and changes nothing.
    pub terminate_first_repair: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            node_repair: false,
            reserved_capacity: true,
            spot_to_spot_consolidation: false,
            node_overlay: false,
            static_capacity: false,
            capacity_buffer: false,
            terminate_first_drift: false,
            terminate_first_repair: false,
        }
    }
}

/// Every gate the controller knows, for `--help` and the settings reference.
pub const FEATURE_GATE_NAMES: [&str; 8] = [
    "NodeRepair",
    "ReservedCapacity",
    "SpotToSpotConsolidation",
    "NodeOverlay",
    "StaticCapacity",
    "CapacityBuffer",
    "TerminateFirstDrift",
    "TerminateFirstRepair",
];

/// Parses `FEATURE_GATES` on top of the defaults.
pub fn parse_feature_gates(raw: &str) -> Result<FeatureGates, String> {
    let mut gates = FeatureGates::default();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not Name=true or Name=false"))?;
        let value: bool = value
            .trim()
            .parse()
            .map_err(|_| format!("{name}: {value:?} is not true or false"))?;
        match name.trim() {
            "NodeRepair" => gates.node_repair = value,
            "ReservedCapacity" => gates.reserved_capacity = value,
            "SpotToSpotConsolidation" => gates.spot_to_spot_consolidation = value,
            "NodeOverlay" => gates.node_overlay = value,
            "StaticCapacity" => gates.static_capacity = value,
            "CapacityBuffer" => gates.capacity_buffer = value,
            "TerminateFirstDrift" => gates.terminate_first_drift = value,
            "TerminateFirstRepair" => gates.terminate_first_repair = value,
            // Upstream ignores gates it does not know, so manifests written for newer versions still start.
            _ => {}
        }
    }
    Ok(gates)
}

fn parse_duration(raw: &str) -> Result<Duration, String> {
    parse_go_duration(raw).map_err(|e| e.to_string())
}

/// The controller's settings (core; the cloud provider's are separate).
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Longest a batch of pending pods is collected before scheduling, however often pods keep arriving.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub batch_max_duration: Duration,
    /// A batch closes once no pending pod has arrived for this long.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_duration)]
    pub batch_idle_duration: Duration,
    /// Feature gates, e.g. `NodeRepair=true,SpotToSpotConsolidation=true`.
    #[arg(
        long,
        env = "FEATURE_GATES",
        default_value = "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false",
        value_parser = parse_feature_gates
    )]
    pub feature_gates: FeatureGates,
    /// Whether preferred node/pod affinities and ScheduleAnyway topology spread are honoured.
    #[arg(long, env = "PREFERENCE_POLICY", value_enum, default_value = "Respect")]
    pub preference_policy: PreferencePolicyArg,
    /// Whether a NodePool's minValues are strict or relaxed when they cannot be met.
    #[arg(long, env = "MIN_VALUES_POLICY", value_enum, default_value = "Strict")]
    pub min_values_policy: MinValuesPolicyArg,
    /// Requests per second to the Kubernetes API server.
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = 200)]
    pub kube_client_qps: u32,
    /// Burst of requests to the Kubernetes API server.
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = 300)]
    pub kube_client_burst: u32,
    /// Port of /metrics.
    #[arg(long, env = "METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    /// Port of /healthz and /readyz.
    #[arg(long, env = "HEALTH_PROBE_PORT", default_value_t = 8081)]
    pub health_probe_port: u16,
    /// Least severe log level written.
    #[arg(long, env = "LOG_LEVEL", value_enum, default_value = "info")]
    pub log_level: LogLevel,
    /// Run the controllers without taking the leader lease (one replica only).
    #[arg(long, env = "DISABLE_LEADER_ELECTION", action = ArgAction::Set, default_value_t = false,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_leader_election: bool,
    /// Name of the coordination.k8s.io Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_NAME",
        default_value = "karpenter-leader-election"
    )]
    pub leader_election_name: String,
    /// Namespace of the Lease; empty means SYSTEM_NAMESPACE, else kube-system.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "")]
    pub leader_election_namespace: String,
    /// The namespace Karpenter runs in (set by the chart).
    #[arg(long, env = "SYSTEM_NAMESPACE", default_value = "kube-system")]
    pub system_namespace: String,
    /// Turns off the node, NodePool and cluster gauges computed from the state cache.
    #[arg(long, env = "DISABLE_CLUSTER_STATE_OBSERVABILITY", action = ArgAction::Set, default_value_t = false,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_cluster_state_observability: bool,
    /// Ignore DRA resource claims when scheduling. Only `true` is accepted: DRA-aware scheduling (upstream's
    /// `false`) is not implemented, and start-up refuses `false` rather than run without it.
    #[arg(long, env = "IGNORE_DRA_REQUESTS", action = ArgAction::Set, default_value_t = true,
          num_args = 0..=1, default_missing_value = "true")]
    pub ignore_dra_requests: bool,
    /// The Service in front of Karpenter (accepted for chart compatibility; as upstream v1, no webhook is served).
    #[arg(long, env = "KARPENTER_SERVICE", default_value = "")]
    pub karpenter_service: String,
    /// Memory limit of the container in bytes, -1 for none. Upstream sets Go's garbage-collection limit from it;
    /// this controller has no garbage collector to tune, so it is only logged at start-up.
    #[arg(long, env = "MEMORY_LIMIT", default_value_t = -1, allow_negative_numbers = true)]
    pub memory_limit: i64,
    /// CPU requests of the container in millicores. As upstream, scales how many NodeClaims the lifecycle and
    /// termination controllers work on at once: 64 at one CPU, rising linearly to 1,000 at 60.
    #[arg(long, env = "CPU_REQUESTS", default_value_t = 1000)]
    pub cpu_requests: u32,
    /// This replica's identity in the Lease (default: the host name, i.e. the pod name).
    #[arg(long, env = "POD_NAME", default_value = "")]
    pub identity: String,
    /// The cluster's kube-scheduler settings the simulation mirrors, as a YAML or JSON document: today
    /// `podTopologySpread.defaultConstraints` (no labelSelector: one is deduced per pod from the Services and the
    /// ReplicaSet, StatefulSet or ReplicationController that select it). Empty: none.
    #[arg(long, env = "SCHEDULER_CONFIG", default_value = "", value_parser = parse_scheduler_config)]
    pub scheduler_config: SchedulerConfig,
}

fn parse_scheduler_config(raw: &str) -> Result<SchedulerConfig, String> {
    SchedulerConfig::parse(raw).map(Option::unwrap_or_default)
}

/// The declared defaults, as if no flag and no variable were set (`karpenter simulate` and the tests use them).
impl Default for Settings {
    fn default() -> Self {
        Self {
            batch_max_duration: Duration::from_secs(10),
            batch_idle_duration: Duration::from_secs(1),
            feature_gates: FeatureGates::default(),
            preference_policy: PreferencePolicyArg::Respect,
            min_values_policy: MinValuesPolicyArg::Strict,
            kube_client_qps: 200,
            kube_client_burst: 300,
            metrics_port: 8080,
            health_probe_port: 8081,
            log_level: LogLevel::Info,
            disable_leader_election: false,
            leader_election_name: "karpenter-leader-election".into(),
            leader_election_namespace: String::new(),
            system_namespace: "kube-system".into(),
            disable_cluster_state_observability: false,
            ignore_dra_requests: true,
            karpenter_service: String::new(),
            memory_limit: -1,
            cpu_requests: 1000,
            identity: String::new(),
            scheduler_config: SchedulerConfig::default(),
        }
    }
}

impl Settings {
    /// Checks what parsing cannot: each error names the setting by its environment variable.
    pub fn validate(&self) -> Result<(), OperatorError> {
        let bad = |setting: &'static str, message: String| Err(OperatorError::Setting { setting, message });
        if self.batch_max_duration.is_zero() {
            return bad("BATCH_MAX_DURATION", "must be greater than 0".into());
        }
        if self.batch_idle_duration.is_zero() {
            return bad("BATCH_IDLE_DURATION", "must be greater than 0".into());
        }
        if self.batch_idle_duration > self.batch_max_duration {
            return bad(
                "BATCH_IDLE_DURATION",
                format!(
                    "{:?} is longer than BATCH_MAX_DURATION {:?}",
                    self.batch_idle_duration, self.batch_max_duration
                ),
            );
        }
        if self.kube_client_qps == 0 {
            return bad("KUBE_CLIENT_QPS", "must be greater than 0".into());
        }
        if self.kube_client_burst == 0 {
            return bad("KUBE_CLIENT_BURST", "must be at least 1".into());
        }
        if self.metrics_port != 0 && self.metrics_port == self.health_probe_port {
            return bad(
                "HEALTH_PROBE_PORT",
                format!("{} is also METRICS_PORT", self.health_probe_port),
            );
        }
        if self.leader_election_name.is_empty() {
            return bad("LEADER_ELECTION_NAME", "must not be empty".into());
        }
        if !self.ignore_dra_requests {
            return bad(
                "IGNORE_DRA_REQUESTS",
                "false asks for DRA-aware scheduling, which this controller does not implement; set it to true \
                 (pods' ResourceClaims are then ignored when choosing instance types, upstream's default)"
                    .into(),
            );
        }
        if self.cpu_requests == 0 {
            return bad("CPU_REQUESTS", "must be at least 1 (millicores)".into());
        }
        if self.memory_limit < -1 || self.memory_limit == 0 {
            return bad(
                "MEMORY_LIMIT",
                format!("{} is neither -1 nor a number of bytes", self.memory_limit),
            );
        }
        Ok(())
    }

    /// How many objects a per-object controller works on at once: `min` at one CPU requested, rising linearly
    /// to `max` at 60 CPUs, as upstream scales its reconcilers by `CPU_REQUESTS` (whole CPUs, rounded up).
    pub fn reconcile_concurrency(&self, min: usize, max: usize) -> usize {
        let cpus = self.cpu_requests.div_ceil(1000).max(1) as usize;
        let slope = max.saturating_sub(min) as f64 / 59.0;
        let scaled = (slope * (cpus - 1) as f64) as usize + min;
        scaled.clamp(min, max.max(min))
    }

    /// Where the Lease lives.
    pub fn lease_namespace(&self) -> &str {
        if self.leader_election_namespace.is_empty() {
            &self.system_namespace
        } else {
            &self.leader_election_namespace
        }
    }

    /// The scheduling settings these flags select.
    pub fn scheduling(&self) -> karpenter_core::scheduling::SchedulingSettings {
        karpenter_core::scheduling::SchedulingSettings {
            preference_policy: match self.preference_policy {
                PreferencePolicyArg::Respect => PreferencePolicy::Respect,
                PreferencePolicyArg::Ignore => PreferencePolicy::Ignore,
            },
            min_values_policy: match self.min_values_policy {
                MinValuesPolicyArg::Strict => MinValuesPolicy::Strict,
                MinValuesPolicyArg::BestEffort => MinValuesPolicy::BestEffort,
            },
            reserved_capacity: self.feature_gates.reserved_capacity,
            ..Default::default()
        }
    }

    /// The settings as `VARIABLE=value` lines, logged at start-up.
    pub fn describe(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("BATCH_MAX_DURATION", format!("{:?}", self.batch_max_duration)),
            ("BATCH_IDLE_DURATION", format!("{:?}", self.batch_idle_duration)),
            ("FEATURE_GATES", format!("{:?}", self.feature_gates)),
            ("PREFERENCE_POLICY", format!("{:?}", self.preference_policy)),
            ("MIN_VALUES_POLICY", format!("{:?}", self.min_values_policy)),
            ("KUBE_CLIENT_QPS", self.kube_client_qps.to_string()),
            ("KUBE_CLIENT_BURST", self.kube_client_burst.to_string()),
            ("METRICS_PORT", self.metrics_port.to_string()),
            ("HEALTH_PROBE_PORT", self.health_probe_port.to_string()),
            ("LOG_LEVEL", format!("{:?}", self.log_level)),
            (
                "DISABLE_LEADER_ELECTION",
                self.disable_leader_election.to_string(),
            ),
            ("LEADER_ELECTION_NAME", self.leader_election_name.clone()),
            ("LEADER_ELECTION_NAMESPACE", self.lease_namespace().to_string()),
            ("CPU_REQUESTS", self.cpu_requests.to_string()),
            ("MEMORY_LIMIT", self.memory_limit.to_string()),
            ("IGNORE_DRA_REQUESTS", self.ignore_dra_requests.to_string()),
            (
                "SCHEDULER_CONFIG",
                format!("{:?}", self.scheduler_config.default_constraints()),
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }

    fn parse(args: &[&str]) -> Result<Settings, String> {
        let mut argv = vec!["karpenter"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)
            .map(|c| c.settings)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn scheduler_config_is_read_and_a_bad_one_named() -> Result<(), String> {
        assert!(parse(&[])?.scheduler_config.default_constraints().is_empty());
        let s = parse(&[
            "--scheduler-config",
            "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]}",
        ])?;
        assert_eq!(s.scheduler_config.default_constraints().len(), 1);
        let error = parse(&[
            "--scheduler-config",
            "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]}",
        ])
        .unwrap_err();
        assert!(
            error.contains("--scheduler-config") && error.contains("labelSelector"),
            "{error}"
        );
        Ok(())
    }

    #[test]
    fn defaults_are_upstreams() -> Result<(), String> {
        let s = parse(&[])?;
        assert_eq!(s.batch_max_duration, Duration::from_secs(10));
        assert_eq!(s.batch_idle_duration, Duration::from_secs(1));
        assert_eq!((s.metrics_port, s.health_probe_port), (8080, 8081));
        assert_eq!((s.kube_client_qps, s.kube_client_burst), (200, 300));
        assert_eq!(s.feature_gates, FeatureGates::default());
        assert!(s.feature_gates.reserved_capacity && !s.feature_gates.node_repair);
        assert!(!s.disable_leader_election);
        assert_eq!(s.lease_namespace(), "kube-system");
        assert!(s.validate().is_ok());
        Ok(())
    }

    #[test]
    fn flags_parse_go_durations_gates_and_policies() -> Result<(), String> {
        let s = parse(&[
            "--batch-max-duration=1m30s",
            "--batch-idle-duration=500ms",
            "--feature-gates=NodeRepair=true,SpotToSpotConsolidation=true,SomeFutureGate=true",
            "--preference-policy=Ignore",
            "--min-values-policy=BestEffort",
            "--disable-leader-election",
            "--leader-election-namespace=karpenter",
        ])?;
        assert_eq!(s.batch_max_duration, Duration::from_secs(90));
        assert_eq!(s.batch_idle_duration, Duration::from_millis(500));
        assert!(s.feature_gates.node_repair && s.feature_gates.spot_to_spot_consolidation);
        assert_eq!(s.scheduling().preference_policy, PreferencePolicy::Ignore);
        assert_eq!(s.scheduling().min_values_policy, MinValuesPolicy::BestEffort);
        assert!(s.disable_leader_election);
        assert_eq!(s.lease_namespace(), "karpenter");
        Ok(())
    }

    #[test]
    fn bad_values_name_the_setting() -> Result<(), String> {
        let err = parse(&["--batch-max-duration=ten"]).err().unwrap_or_default();
        assert!(
            err.contains("--batch-max-duration") && err.contains("BATCH_MAX_DURATION"),
            "{err}"
        );
        let err = parse(&["--feature-gates=NodeRepair=maybe"])
            .err()
            .unwrap_or_default();
        assert!(
            err.contains("FEATURE_GATES") && err.contains("NodeRepair"),
            "{err}"
        );
        let err = parse(&["--preference-policy=Sometimes"])
            .err()
            .unwrap_or_default();
        assert!(err.contains("PREFERENCE_POLICY"), "{err}");

        let s = parse(&["--batch-idle-duration=20s"])?;
        let err = s.validate().map_err(|e| e.to_string()).err().unwrap_or_default();
        assert!(
            err.contains("BATCH_IDLE_DURATION") && err.contains("BATCH_MAX_DURATION"),
            "{err}"
        );
        let s = parse(&["--metrics-port=9000", "--health-probe-port=9000"])?;
        assert!(
            s.validate()
                .map_err(|e| e.to_string())
                .err()
                .unwrap_or_default()
                .contains("HEALTH_PROBE_PORT")
        );
        Ok(())
    }

    #[test]
    fn ignoring_dra_requests_is_the_only_accepted_value() -> Result<(), String> {
        assert!(parse(&[])?.validate().is_ok());
        let s = parse(&["--ignore-dra-requests=false"])?;
        let err = s.validate().map_err(|e| e.to_string()).err().unwrap_or_default();
        assert!(
            err.contains("IGNORE_DRA_REQUESTS") && err.contains("DRA-aware scheduling"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn cpu_requests_scale_the_per_object_concurrency_as_upstream() -> Result<(), String> {
        let at = |millicores: &str| -> Result<usize, String> {
            Ok(parse(&[&format!("--cpu-requests={millicores}")])?.reconcile_concurrency(64, 1000))
        };
        // One CPU or less: the minimum; 60 or more: the maximum; linear between, whole CPUs rounded up.
        assert_eq!(at("250")?, 64);
        assert_eq!(at("1000")?, 64);
        assert_eq!(at("1001")?, 64 + 936 / 59);
        assert_eq!(at("30000")?, 64 + (936.0 / 59.0 * 29.0) as usize);
        assert_eq!(at("60000")?, 1000);
        assert_eq!(at("128000")?, 1000);
        let zero = parse(&["--cpu-requests=0"])?;
        assert!(
            zero.validate()
                .map_err(|e| e.to_string())
                .err()
                .unwrap_or_default()
                .contains("CPU_REQUESTS")
        );
        Ok(())
    }

    #[test]
    fn default_is_what_parsing_nothing_gives() -> Result<(), String> {
        assert_eq!(format!("{:?}", Settings::default()), format!("{:?}", parse(&[])?));
        Ok(())
    }
}
