//! The disruption loop and its one-command-at-a-time orchestration (see the crate documentation).

use std::{collections::HashMap, sync::Arc, time::Duration};

use jiff::Timestamp;
use karpenter_api::{
    common::{ConditionStatus, find_condition},
    label_policy::LabelPolicy,
    nodeclaim::{NodeClaim, conditions},
};
use karpenter_core::{
    clock::Clock,
    cloudprovider::CloudProvider,
    disruption::pass::{PassSettings, disruption_pass},
    provisioning::{ClaimContext, node_claim_object},
    snapshot::{BuildOptions, build_disruption_inputs},
};
use karpenter_provisioner::catalog::catalog_for;
use karpenter_state::ClusterState;
use karpenter_termination::taint::{add_disrupted_taint, remove_disrupted_taint};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams},
};
use tokio::sync::Mutex;

use crate::DisruptionError;

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct DisruptionSettings {
    /// Between passes (upstream: 10 s).
    pub interval: Duration,
    /// How long replacements may take to initialize before the command is rolled back.
    pub replacement_timeout: Duration,
    pub build: BuildOptions,
    /// The SpotToSpotConsolidation feature gate.
    pub spot_to_spot: bool,
}

impl Default for DisruptionSettings {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(10),
            replacement_timeout: Duration::from_secs(600),
            build: BuildOptions {
                label_policy: LabelPolicy::Aws,
                ..BuildOptions::default()
            },
            spot_to_spot: false,
        }
    }
}

/// A command being carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// The method that chose it (`single-node-consolidation`, `drift`, ...).
    pub method: String,
    /// The candidates' NodeClaim and Node names.
    pub candidates: Vec<(String, String)>,
    /// The replacement NodeClaims created for it.
    pub replacements: Vec<String>,
    pub started: Timestamp,
}

/// What one tick did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tick {
    NotSynced,
    /// No command in flight and the pass found nothing to do.
    Idle,
    Started(InFlight),
    /// Replacements are not all initialized yet.
    Waiting,
    /// The candidates' NodeClaims were deleted (the terminator drains them).
    Completed(InFlight),
    RolledBack {
        command: InFlight,
        why: String,
    },
}

/// The controller's context.
pub struct DisruptionController {
    client: Client,
    state: ClusterState,
    cloud: Arc<dyn CloudProvider>,
    clock: Arc<dyn Clock>,
    settings: DisruptionSettings,
    in_flight: Mutex<Option<InFlight>>,
}

fn is_initialized(claim: &NodeClaim) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        find_condition(&s.conditions, conditions::INITIALIZED)
            .is_some_and(|c| c.status == ConditionStatus::True)
    })
}

impl DisruptionController {
    pub fn new(
        client: Client,
        state: ClusterState,
        cloud: Arc<dyn CloudProvider>,
        clock: Arc<dyn Clock>,
        settings: DisruptionSettings,
    ) -> Self {
        Self {
            client,
            state,
            cloud,
            clock,
            settings,
            in_flight: Mutex::new(None),
        }
    }

    /// Ticks until the future is dropped; a failed tick is logged and the next one retries.
    pub async fn run(&self) {
        loop {
            match self.tick().await {
                Ok(Tick::Started(c)) => {
                    tracing::info!(method = %c.method, candidates = ?c.candidates, replacements = ?c.replacements, "disrupting")
                }
                Ok(Tick::RolledBack { command, why }) => {
                    tracing::warn!(method = %command.method, %why, "disruption rolled back");
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(category = error.category(), %error, "disruption tick failed"),
            }
            tokio::time::sleep(self.settings.interval).await;
        }
    }

    /// The command being carried out, if any.
    pub async fn in_flight(&self) -> Option<InFlight> {
        self.in_flight.lock().await.clone()
    }

    /// Moves the command in flight on, or runs a pass and starts its command.
    pub async fn tick(&self) -> Result<Tick, DisruptionError> {
        if !self.state.synced() {
            return Ok(Tick::NotSynced);
        }
        let mut in_flight = self.in_flight.lock().await;
        if let Some(command) = in_flight.clone() {
            let tick = self.advance(command).await?;
            if !matches!(tick, Tick::Waiting) {
                *in_flight = None;
            }
            return Ok(tick);
        }
        let tick = self.start().await?;
        if let Tick::Started(command) = &tick {
            *in_flight = Some(command.clone());
        }
        Ok(tick)
    }

    async fn start(&self) -> Result<Tick, DisruptionError> {
        let now = self.clock.now();
        let snapshot = self.state.snapshot();
        let catalog = catalog_for(self.cloud.as_ref(), &snapshot.node_pools).await?;
        let mut inputs = build_disruption_inputs(
            &snapshot,
            &catalog,
            &self.settings.build,
            self.cloud.as_ref(),
            now,
        );
        let result = disruption_pass(
            &mut inputs,
            &PassSettings {
                now,
                spot_to_spot: self.settings.spot_to_spot,
            },
        );
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        // Expiration is forceful: the claims go now, whatever else the pass decided.
        for e in &result.expirations {
            if let Some(name) = &inputs.view.nodes[e.node].node_claim {
                tracing::info!(nodeclaim = %name, "expired; deleting");
                delete_claim(&claims, name).await?;
            }
        }
        if result.commands.is_empty() {
            return Ok(Tick::Idle);
        }
        let pools: HashMap<&str, _> = snapshot
            .node_pools
            .iter()
            .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
            .collect();
        let mut command = InFlight {
            method: result.commands[0].method.as_str().to_string(),
            candidates: Vec::new(),
            replacements: Vec::new(),
            started: now,
        };
        // Every command of the pass (emptiness gives one per NodePool) is carried out together.
        for c in &result.commands {
            for &n in &c.candidates {
                let view = &inputs.view.nodes[n];
                if let Some(claim) = &view.node_claim {
                    command.candidates.push((claim.clone(), view.name.clone()));
                }
            }
        }
        for (_, node) in &command.candidates {
            if let Some(node) = self.state.nodes.get(node) {
                add_disrupted_taint(&self.client, &node).await?;
            }
        }
        for c in &result.commands {
            for r in &c.replacements {
                let Some(template) = inputs.base.input.templates.get(r.template) else {
                    continue;
                };
                let pool = pools.get(template.name.as_str());
                let hash = pool.map(|p| p.hash());
                let object = node_claim_object(
                    &ClaimContext {
                        interner: &inputs.base.interner,
                        table: &inputs.base.table,
                        template,
                        nodepool_hash: hash.as_deref(),
                        nodepool_uid: pool.and_then(|p| p.metadata.uid.as_deref()),
                    },
                    r,
                );
                let created = claims.create(&PostParams::default(), &object).await?;
                command.replacements.push(created.name_any());
            }
        }
        Ok(Tick::Started(command))
    }

    async fn advance(&self, command: InFlight) -> Result<Tick, DisruptionError> {
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        let mut missing = None;
        let mut ready = true;
        for name in &command.replacements {
            match claims.get_opt(name).await? {
                None => missing = Some(name.clone()),
                Some(c) => ready &= is_initialized(&c),
            }
        }
        let waited = self.clock.now().duration_since(command.started);
        let why = match missing {
            Some(name) => Some(format!(
                "replacement NodeClaim {name} was deleted before it initialized"
            )),
            None if !ready && waited.as_secs() >= self.settings.replacement_timeout.as_secs() as i64 => {
                Some(format!(
                    "replacements were not initialized within {}s",
                    self.settings.replacement_timeout.as_secs()
                ))
            }
            None => None,
        };
        if let Some(why) = why {
            for (_, node) in &command.candidates {
                if let Some(node) = self.state.nodes.get(node) {
                    remove_disrupted_taint(&self.client, &node).await?;
                }
            }
            for name in &command.replacements {
                delete_claim(&claims, name).await?;
            }
            return Ok(Tick::RolledBack { command, why });
        }
        if !ready {
            return Ok(Tick::Waiting);
        }
        for (claim, _) in &command.candidates {
            delete_claim(&claims, claim).await?;
        }
        Ok(Tick::Completed(command))
    }
}

async fn delete_claim(claims: &Api<NodeClaim>, name: &str) -> Result<(), DisruptionError> {
    match claims.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
