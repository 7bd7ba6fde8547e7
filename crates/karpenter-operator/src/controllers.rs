//! The controllers assembled on one state cache: what the leader runs. `karpenter controller`, `karpenter
//! simulate` and the end-to-end tests all start them through [`controller_tasks`], so what is tested is what
//! runs.

use std::{future::Future, pin::Pin, sync::Arc};

use karpenter_api::{labels, nodepool::DisruptionReason};
use karpenter_core::{
    clock::Clock,
    cloudprovider::{CloudProvider, InterruptionSource},
    disruption::pass::Method,
    snapshot::BuildOptions,
};
use karpenter_disruption::{DisruptionController, DisruptionSettings, InFlight, Tick};
use karpenter_interruption::{Handled, InterruptionController};
use karpenter_metrics::{DecisionLabels, EvaluationLabels, NodeClaimDisruptedLabels, metrics};
use karpenter_provisioner::{
    batcher::BatchWindow,
    capacity_buffer::{BufferSignals, CapacityBufferController},
    consistency::ConsistencyController,
    gc::GarbageCollector,
    lifecycle::Lifecycle,
    nodeoverlay_status::NodeOverlayStatusController,
    nodepool_status::NodePoolStatusController,
    podevents::PodEventsController,
    provisioner::{Provisioner, ProvisionerSettings},
    registration_health::RegistrationHealth,
    static_capacity::StaticCapacityController,
};
use karpenter_repair::{NodeRepairController, reboot::RebootController};
use karpenter_state::{ClusterState, ControllerContext, periodic::run_timed_waking};
use karpenter_termination::Terminator;
use kube::{Client, ResourceExt};

use crate::{metered_cloud::MeteredCloudProvider, settings::Settings};

/// A controller's loop, named for logs and metrics.
pub type ControllerTask = (&'static str, Pin<Box<dyn Future<Output = ()> + Send>>);

/// Told what the controllers did, for `karpenter simulate`'s summary (metrics carry the same for users).
pub trait Observer: Send + Sync {
    /// A disruption command started: `method` (`emptiness`, `drift`, `single-node-consolidation`, ...) over
    /// `candidates` nodes.
    fn disrupted(&self, _method: &str, _candidates: usize) {}
    /// An interruption message deleted a NodeClaim.
    fn interrupted(&self, _node_claim: &str) {}
}

/// Everything the controllers share.
#[derive(Clone)]
pub struct ControllerParts {
    pub client: Client,
    pub state: ClusterState,
    pub cloud: Arc<dyn CloudProvider>,
    pub clock: Arc<dyn Clock>,
    /// Where interruption messages come from; `None` turns the interruption controller off.
    pub interruption: Option<Arc<dyn InterruptionSource>>,
    /// Label policy and the provider's well-known labels; the scheduling settings and gates come from
    /// `settings`.
    pub build: BuildOptions,
    pub settings: Settings,
    pub observer: Option<Arc<dyn Observer>>,
}

impl ControllerParts {
    fn build_options(&self) -> BuildOptions {
        BuildOptions {
            settings: self.settings.scheduling(),
            node_overlays: self.settings.feature_gates.node_overlay,
            capacity_buffers: self.settings.feature_gates.capacity_buffer,
            // As upstream: a NodePool launches nothing until the status controller has found it Ready.
            unevaluated_nodepools: false,
            default_spread: self.settings.scheduler_config.default_constraints().to_vec(),
            ..self.build.clone()
        }
    }

    /// The client, state cache and clock every controller is built on.
    pub fn context(&self) -> ControllerContext {
        ControllerContext::new(self.client.clone(), self.state.clone(), Arc::clone(&self.clock))
    }

    fn cloud_for(&self, controller: &'static str) -> Arc<dyn CloudProvider> {
        MeteredCloudProvider::wrap(Arc::clone(&self.cloud), controller)
    }
}

/// The upstream disruption reason a method reports in metrics.
pub fn disruption_reason(method: Method) -> &'static str {
    match method.reason() {
        DisruptionReason::Empty => "empty",
        DisruptionReason::Drifted => "drifted",
        DisruptionReason::Underutilized | DisruptionReason::Unhealthy => "underutilized",
    }
}

/// Upstream's `decision` label: a command that launches replacements replaces, else it deletes.
fn decision(command: &InFlight) -> &'static str {
    if command.replacements.is_empty() {
        "delete"
    } else {
        "replace"
    }
}

/// Counts a started command in the disruption metrics.
fn record_disruption(state: &ClusterState, command: &InFlight) {
    let m = metrics();
    let reason = disruption_reason(command.method);
    m.voluntary_disruption_decisions
        .get_or_create(&DecisionLabels {
            decision: decision(command).into(),
            reason: reason.into(),
            consolidation_type: command.method.consolidation_type().into(),
        })
        .inc();
    for (claim, _) in &command.candidates {
        let claim = state.node_claims.get(claim);
        let label = |key: &str| {
            claim
                .as_ref()
                .and_then(|c| c.labels().get(key).cloned())
                .unwrap_or_default()
        };
        m.nodeclaims_disrupted
            .get_or_create(&NodeClaimDisruptedLabels {
                reason: reason.into(),
                nodepool: label(labels::NODEPOOL_LABEL),
                capacity_type: label(labels::CAPACITY_TYPE_LABEL),
            })
            .inc();
    }
}

/// The NodeClaim lifecycle's and the terminator's concurrency at one requested CPU and at 60
/// ([`Settings::reconcile_concurrency`]). The floor is the lifecycle's long-standing 64 (a provisioning round's
/// launches reach the CreateFleet batcher together).
const PER_OBJECT_CONCURRENCY: (usize, usize) = (64, 1000);

/// Every controller loop the leader runs (not the state cache's watches: the caller runs those on every
/// replica). Each future runs until dropped.
pub fn controller_tasks(parts: &ControllerParts) -> Vec<ControllerTask> {
    let build = parts.build_options();
    let settings = &parts.settings;
    // With the CapacityBuffer gate, the buffer controller asks the provisioner for rounds (placeholder pods
    // are no pending pods) and the provisioner tells it where they went.
    let buffer_signals = settings
        .feature_gates
        .capacity_buffer
        .then(|| Arc::new(BufferSignals::default()));
    let cx = parts.context();
    let mut provisioner = Provisioner::new(
        cx.clone(),
        parts.cloud_for("provisioner"),
        ProvisionerSettings {
            batch: BatchWindow {
                idle: settings.batch_idle_duration,
                max: settings.batch_max_duration,
            },
            build: build.clone(),
            ..ProvisionerSettings::default()
        },
    );
    if let Some(signals) = &buffer_signals {
        provisioner = provisioner.with_buffer_signals(Arc::clone(signals));
    }
    // The lifecycle reports registrations and liveness deletions; the NodePool status writes the condition.
    let registration_health = Arc::new(RegistrationHealth::default());
    // As upstream, the per-object controllers work on more objects at once when the container requests more CPU.
    let per_object = settings.reconcile_concurrency(PER_OBJECT_CONCURRENCY.0, PER_OBJECT_CONCURRENCY.1);
    let mut lifecycle = Lifecycle::new(cx.clone(), parts.cloud_for("nodeclaim.lifecycle"))
        .with_registration_health(Arc::clone(&registration_health));
    lifecycle.concurrency = per_object;
    let mut terminator = Terminator::new(cx.clone(), parts.cloud_for("nodeclaim.termination"));
    terminator.concurrency = per_object;
    let pod_events = PodEventsController::new(cx.clone());
    let gc = GarbageCollector::new(cx.clone(), parts.cloud_for("nodeclaim.garbagecollection"));
    let disruption_settings = DisruptionSettings {
        build,
        spot_to_spot: settings.feature_gates.spot_to_spot_consolidation,
        terminate_first_drift: settings.feature_gates.terminate_first_drift,
        ..DisruptionSettings::default()
    };
    let interval = disruption_settings.interval;
    let disruption =
        DisruptionController::new(cx.clone(), parts.cloud_for("disruption"), disruption_settings);
    let nodepool_status = NodePoolStatusController::new(
        cx.clone(),
        parts.cloud_for("nodepool.status"),
        parts.build.label_policy,
    )
    .with_registration_health(registration_health);
    let mut tasks: Vec<ControllerTask> = vec![
        ("provisioner", Box::pin(async move { provisioner.run().await })),
        (
            "nodepool.status",
            Box::pin(async move { nodepool_status.run().await }),
        ),
        (
            "nodeclaim.lifecycle",
            Box::pin(async move { lifecycle.run().await }),
        ),
        (
            "nodeclaim.termination",
            Box::pin(async move { terminator.run().await }),
        ),
        (
            "nodeclaim.podevents",
            Box::pin(async move { pod_events.run().await }),
        ),
        (
            "nodeclaim.garbagecollection",
            Box::pin(async move { gc.run().await }),
        ),
    ];
    if settings.feature_gates.static_capacity {
        let static_capacity = StaticCapacityController::new(
            cx.clone(),
            parts.cloud_for("static.capacity"),
            parts.build_options(),
        );
        tasks.push((
            "static.capacity",
            Box::pin(async move { static_capacity.run().await }),
        ));
    } else {
        // As upstream, without the gate nothing acts on `replicas`; a user is told so once per NodePool.
        let state = parts.state.clone();
        tasks.push((
            "static.capacity.inert",
            Box::pin(StaticCapacityController::report_inert(state)),
        ));
    }
    if let Some(signals) = buffer_signals {
        let buffers = CapacityBufferController::new(cx.clone(), signals);
        tasks.push(("capacitybuffer", Box::pin(async move { buffers.run().await })));
    }
    if settings.feature_gates.node_overlay {
        let overlay_status = NodeOverlayStatusController::new(
            cx.clone(),
            parts.cloud_for("nodeoverlay.controller"),
            parts.build.label_policy,
        );
        tasks.push((
            "nodeoverlay.controller",
            Box::pin(async move { overlay_status.run().await }),
        ));
    }
    let consistency = ConsistencyController::new(cx.clone());
    tasks.push((
        "nodeclaim.consistency",
        Box::pin(async move { consistency.run().await }),
    ));
    if settings.feature_gates.node_repair {
        let repair = NodeRepairController::new(cx.clone(), parts.cloud_for("node.health"));
        tasks.push(("node.health", Box::pin(async move { repair.run().await })));
        // Carries out the reboots repair commits (upstream starts it with node repair).
        let reboot = RebootController::new(cx.clone(), parts.cloud_for("nodeclaim.reboot"));
        tasks.push(("nodeclaim.reboot", Box::pin(async move { reboot.run().await })));
    }
    let (state, observer) = (parts.state.clone(), parts.observer.clone());
    tasks.push((
        "disruption",
        Box::pin(async move {
            let (disruption, state, observer) = (&disruption, &state, &observer);
            // Timed before the sync too: the tick answers NotSynced itself.
            // A NodePool edited (its template, so its NodeClaims drift; its budgets) is answered at the next
            // pass, within a second, as upstream's NodeClaim disruption controller reacts to NodePool events.
            // Only spec changes count (generations, and NodePools coming and going): the NodePool status
            // written every few seconds during a scale-up must not turn the 10-second pass into a 1-second one.
            let pools = state.node_pools.clone();
            let specs = move || {
                let all = pools.unordered();
                let generations: u64 = all
                    .iter()
                    .map(|p| p.metadata.generation.unwrap_or(0).unsigned_abs())
                    .sum();
                generations.wrapping_add((all.len() as u64) << 40)
            };
            run_timed_waking("disruption", interval, specs, || async move {
                match disruption.tick().await {
                    Ok(Tick::Started(command)) => {
                        tracing::info!(controller = "disruption", method = %command.method, candidates = ?command.candidates, replacements = ?command.replacements, "disrupting");
                        record_disruption(state, &command);
                        if let Some(observer) = observer {
                            observer.disrupted(command.method.as_str(), command.candidates.len());
                        }
                    }
                    Ok(Tick::RolledBack { command, why }) => {
                        tracing::warn!(controller = "disruption", method = %command.method, %why, "disruption rolled back");
                        metrics()
                            .voluntary_disruption_queue_failures
                            .get_or_create(&DecisionLabels {
                                decision: decision(&command).into(),
                                reason: disruption_reason(command.method).into(),
                                consolidation_type: command.method.consolidation_type().into(),
                            })
                            .inc();
                    }
                    Ok(Tick::Abandoned { method, why }) => {
                        tracing::info!(controller = "disruption", %method, %why, "disruption abandoned after validation");
                        metrics()
                            .voluntary_disruption_failed_validations
                            .get_or_create(&EvaluationLabels {
                                reason: disruption_reason(method).into(),
                                consolidation_type: method.consolidation_type().into(),
                            })
                            .inc();
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(controller = "disruption", category = error.category(), %error, "disruption tick failed");
                        return false;
                    }
                }
                true
            })
            .await;
        }),
    ));
    if let Some(source) = parts.interruption.clone() {
        let interruption = InterruptionController::new(&parts.context());
        let observer = parts.observer.clone();
        tasks.push((
            "interruption",
            Box::pin(async move {
                while let Some(events) = source.receive().await {
                    for event in events {
                        let mut timer = metrics().reconcile("interruption");
                        match interruption.handle(&event).await {
                            Ok(handled) => {
                                // Another cluster's instance (a shared queue, or an impaired instance of the
                                // account) is nothing to report, as upstream reports nothing for it.
                                if handled == Handled::NotOurs {
                                    tracing::debug!(controller = "interruption", provider_id = %event.provider_id, kind = ?event.kind, "interruption for an instance no NodeClaim owns");
                                } else {
                                    tracing::info!(controller = "interruption", provider_id = %event.provider_id, kind = ?event.kind, ?handled, "interruption");
                                }
                                if let (Handled::Deleted(claim), Some(observer)) = (&handled, &observer) {
                                    observer.interrupted(claim);
                                }
                                if handled != Handled::NotOurs {
                                    source.claimed(&event).await;
                                }
                            }
                            Err(error) => {
                                timer.failed();
                                tracing::warn!(controller = "interruption", provider_id = %event.provider_id, %error, "interruption not handled; its message is kept for a retry");
                                source.not_handled(&event).await;
                            }
                        }
                    }
                }
            }),
        ));
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_method_reports_upstreams_disruption_reason() {
        let reasons = [
            Method::Emptiness,
            Method::StaticDrift,
            Method::Drift,
            Method::MultiNodeConsolidation,
            Method::SingleNodeConsolidation,
        ]
        .map(disruption_reason);
        assert_eq!(
            reasons,
            ["empty", "drifted", "drifted", "underutilized", "underutilized"]
        );
    }
}
