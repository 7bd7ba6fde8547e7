//! Running a scenario: karpenter-sim's cluster and cloud with the real controllers (state cache, provisioner,
//! NodeClaim lifecycle, garbage collection, terminator, disruption, interruption) on one virtual clock, sampled
//! every 5 simulated seconds.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod, policy::v1::PodDisruptionBudget};
use karpenter_api::{label_policy::LabelPolicy, nodepool::NodePool};
use karpenter_aws_catalog::aws_catalog;
use karpenter_core::{catalog::CatalogFile, snapshot::BuildOptions};
use karpenter_operator::{ControllerParts, Observer, Settings, controller_tasks};
use karpenter_sim::{InterruptionKind, SimCluster, SimOptions, VirtualClock, cloud::LaunchOutcome};
use karpenter_state::{ClusterState, Watched};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde::Serialize;
use serde_json::{Value, json};

use super::scenario::{Action, Scenario};

/// How often the cluster is sampled (simulated time).
const SAMPLE: Duration = Duration::from_secs(5);
/// How often a progress line is printed (simulated time).
const PROGRESS: Duration = Duration::from_secs(300);

/// One sample of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    pub seconds: u64,
    pub nodes: usize,
    pub cost_per_hour: f64,
}

/// What `karpenter simulate` reports; `-o json` prints it as one object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub scenario: String,
    pub nodes_launched: usize,
    pub nodes_launched_by_type: BTreeMap<String, usize>,
    pub cost_total: f64,
    pub cost_per_hour_peak: f64,
    pub pod_pending_seconds_p50: f64,
    pub pod_pending_seconds_p99: f64,
    pub disruptions_by_reason: BTreeMap<String, usize>,
    /// Evictions the API server granted.
    pub evictions: usize,
    /// Pods the controllers deleted outright instead of evicting (bypassing their PodDisruptionBudgets).
    pub pdb_violations: usize,
    pub simulated_seconds: u64,
    pub wall_seconds: f64,
    #[serde(skip)]
    pub samples: Vec<Sample>,
}

/// Disruptions by reason, as the controllers report them.
#[derive(Debug, Default)]
struct Counters {
    disruptions: Mutex<BTreeMap<String, usize>>,
}

impl Counters {
    fn add(&self, reason: &str, n: usize) {
        if let Ok(mut d) = self.disruptions.lock() {
            *d.entry(reason.to_string()).or_default() += n;
        }
    }
}

impl Observer for Counters {
    fn disrupted(&self, method: &str, candidates: usize) {
        self.add(reason_of(method), candidates);
    }

    fn interrupted(&self, _node_claim: &str) {
        self.add("Interrupted", 1);
    }
}

fn reason_of(method: &str) -> &'static str {
    match method {
        "emptiness" => "Empty",
        "drift" | "static-drift" => "Drifted",
        _ => "Underutilized",
    }
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn apply(client: &Client, objects: &[Value]) -> Result<()> {
    let pp = PostParams::default();
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        match kind {
            "NodePool" => {
                Api::<NodePool>::all(client.clone())
                    .create(&pp, &serde_json::from_value(object.clone())?)
                    .await?;
            }
            "Deployment" => {
                Api::<Deployment>::namespaced(client.clone(), "default")
                    .create(&pp, &serde_json::from_value(object.clone())?)
                    .await?;
            }
            "PodDisruptionBudget" => {
                Api::<PodDisruptionBudget>::namespaced(client.clone(), "default")
                    .create(&pp, &serde_json::from_value(object.clone())?)
                    .await?;
            }
            other => return Err(anyhow!("the scenario cannot apply a {other}")),
        }
    }
    Ok(())
}

/// Runs `scenario` for `duration` of simulated time (its whole length, or less: later actions then do not
/// happen), passing a progress line to `progress` every 5 simulated minutes. Must run on a tokio runtime whose
/// time is paused (a simulated hour then takes seconds).
pub async fn run(
    scenario: &Scenario,
    duration: Duration,
    mut progress: impl FnMut(String),
) -> Result<Summary> {
    let wall = Instant::now();
    let catalog: CatalogFile =
        aws_catalog("us-east-1", &Default::default()).map_err(|e| anyhow!("embedded catalog: {e}"))?;
    let build = BuildOptions {
        label_policy: LabelPolicy::Aws,
        extra_well_known_labels: catalog.well_known_labels.clone(),
        ..BuildOptions::default()
    };
    let clock = Arc::new(VirtualClock::starting_at("2026-01-01T00:00:00Z".parse()?));
    let sim = SimCluster::start(SimOptions::new(catalog, clock));
    let client = sim.client();
    let state = ClusterState::new(Watched::default());
    let counters = Arc::new(Counters::default());
    let parts = ControllerParts {
        client: client.clone(),
        state: state.clone(),
        cloud: sim.cloud_provider(),
        clock: sim.clock(),
        interruption: Some(sim.cloud().interruption_source()),
        build,
        settings: Settings::default(),
        observer: Some(Arc::clone(&counters) as Arc<dyn Observer>),
    };
    let mut tasks = vec![tokio::spawn({
        let (state, client) = (state.clone(), client.clone());
        async move { state.watch(client).await }
    })];
    tasks.extend(
        controller_tasks(&parts)
            .into_iter()
            .map(|(_, task)| tokio::spawn(task)),
    );

    let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let start = sim.clock().now();
    let mut timeline = scenario.timeline.iter().peekable();
    let mut samples = Vec::new();
    let mut peak = 0.0f64;
    // Pod uid -> (created, first seen running), simulated seconds.
    let mut pods: HashMap<String, (i64, Option<i64>)> = HashMap::new();
    let mut elapsed = Duration::ZERO;
    while elapsed <= duration {
        while let Some((at, action)) = timeline.next_if(|(at, _)| *at <= elapsed) {
            let _ = at;
            match action {
                Action::Apply(objects) => apply(&client, objects).await?,
                Action::Scale { deployment, replicas } => {
                    deployments
                        .patch(
                            deployment,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                        )
                        .await
                        .with_context(|| format!("scaling {deployment}"))?;
                }
                Action::InterruptSpot(n) => {
                    let mut spot: Vec<_> = sim
                        .cloud()
                        .running_instances()
                        .into_iter()
                        .filter(|i| i.offering.capacity_type == "spot")
                        .collect();
                    spot.sort_by_key(|i| i.launched_at);
                    let now = sim.clock().now();
                    for instance in spot.iter().take(*n) {
                        sim.cloud().schedule_interruption(
                            &instance.provider_id,
                            InterruptionKind::SpotInterruption,
                            now,
                        );
                    }
                }
            }
        }

        let now = sim.clock().now().duration_since(start).as_secs();
        for pod in pods_api.list(&ListParams::default()).await?.items {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            let created = pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(now, |t| t.0.duration_since(start).as_secs());
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let entry = pods.entry(uid).or_insert((created, None));
            if running && entry.1.is_none() {
                entry.1 = Some(now);
            }
        }
        // + 0.0 turns a -0.0 from an empty sum into 0.0.
        let cost = sim.cloud().cost_per_hour_now() + 0.0;
        peak = peak.max(cost);
        let nodes = sim.cloud().running_instances().len();
        samples.push(Sample {
            seconds: u64::try_from(now).unwrap_or_default(),
            nodes,
            cost_per_hour: cost,
        });
        if elapsed.as_secs().is_multiple_of(PROGRESS.as_secs()) {
            let pending = pods.values().filter(|(_, r)| r.is_none()).count();
            progress(format!(
                "[{:02}:{:02}] nodes {nodes:>3}  cost {cost:>7.3}/h  pods seen {:>4}  waiting {pending:>4}",
                now / 3600,
                (now % 3600) / 60,
                pods.len()
            ));
        }
        tokio::time::sleep(SAMPLE).await;
        elapsed += SAMPLE;
    }

    let mut pending: Vec<f64> = pods
        .values()
        .filter_map(|(created, running)| running.map(|r| (r - created).max(0) as f64))
        .collect();
    pending.sort_by(f64::total_cmp);
    let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
    for record in sim.cloud().launch_log() {
        if let (LaunchOutcome::Launched { .. }, Some(offering)) = (&record.outcome, &record.offering) {
            *by_type.entry(offering.instance_type.clone()).or_default() += 1;
        }
    }
    let audit = sim.api().audit();
    let granted = |code: u16| (200..300).contains(&code);
    let evictions = audit
        .iter()
        .filter(|r| r.resource == "pods" && r.subresource.as_deref() == Some("eviction") && granted(r.code))
        .count();
    let pdb_violations = audit
        .iter()
        .filter(|r| r.resource == "pods" && r.verb == "delete" && r.subresource.is_none() && granted(r.code))
        .count();
    let disruptions = counters.disruptions.lock().map(|d| d.clone()).unwrap_or_default();
    let summary = Summary {
        scenario: scenario.name.to_string(),
        nodes_launched: by_type.values().sum(),
        nodes_launched_by_type: by_type,
        cost_total: (sim.cloud().cost_so_far() * 1e4).round() / 1e4,
        cost_per_hour_peak: (peak * 1e4).round() / 1e4,
        pod_pending_seconds_p50: percentile(&pending, 50.0),
        pod_pending_seconds_p99: percentile(&pending, 99.0),
        disruptions_by_reason: disruptions,
        evictions,
        pdb_violations,
        simulated_seconds: duration.as_secs(),
        wall_seconds: (wall.elapsed().as_secs_f64() * 100.0).round() / 100.0,
        samples,
    };
    tasks.iter().for_each(tokio::task::JoinHandle::abort);
    sim.shutdown().await;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
