//! A NodePool's `NodeRegistrationHealthy` condition (upstream's nodepool.registrationhealth controller and the
//! lifecycle's registration and liveness hooks): whether the NodeClaims launched from it come up as Nodes.
//!
//! - The lifecycle reports each outcome of a claim owned by a NodePool: its Node registered, or the claim was
//!   deleted because it did not launch or register in time ([`RegistrationHealth::observe`]).
//! - Per NodePool the last [`BUFFER_SIZE`] outcomes are kept; the pool is unhealthy when at least half of that
//!   window ([`THRESHOLD_FALSE`]) failed, and healthy otherwise.
//! - A failure that leaves the pool unhealthy sets the condition False: reason `RegistrationFailed` for a Node
//!   that never registered, or the claim's `Launched` reason and message for a launch that never finished. A
//!   registration that leaves it healthy sets it True. Other outcomes leave it as it is.
//! - When the NodePool's spec (its generation) or its NodeClass's generation changes, the condition goes back
//!   to Unknown and the window is emptied: the new configuration has yet to prove itself.
//! - After a restart the window is empty; it is seeded from the condition found (a True pool counts one
//!   success, a False one enough failures to stay False), as upstream does.
//!
//! The NodePool status controller is the only writer of NodePool conditions: it applies the reported outcomes
//! on its next pass ([`RegistrationHealth::conditions`]), so two controllers never race over the list. The
//! condition does not gate the NodePool's `Ready`, as upstream.

use std::collections::{HashMap, VecDeque};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::common::{Condition, ConditionStatus};

pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
/// How many recent outcomes decide a pool's health.
pub const BUFFER_SIZE: usize = 4;
/// The share of failures in the window at which the pool is unhealthy.
pub const THRESHOLD_FALSE: f64 = 0.5;

/// What the window of recent outcomes says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// No outcome yet.
    Unknown,
    Healthy,
    Unhealthy,
}

/// What became of one NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Its Node registered.
    Registered,
    /// It was deleted because it did not launch or register in time; the reason and message go to the
    /// condition.
    Failed { reason: String, message: String },
}

/// The last [`BUFFER_SIZE`] outcomes of one pool (true: registered).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    outcomes: VecDeque<bool>,
}

impl Window {
    pub fn record(&mut self, registered: bool) {
        if self.outcomes.len() == BUFFER_SIZE {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back(registered);
    }

    pub fn health(&self) -> Health {
        if self.outcomes.is_empty() {
            return Health::Unknown;
        }
        // Failures over the whole window size, not over the outcomes seen: one early failure is not enough.
        let failed = self.outcomes.iter().filter(|r| !**r).count();
        if failed as f64 / BUFFER_SIZE as f64 >= THRESHOLD_FALSE {
            Health::Unhealthy
        } else {
            Health::Healthy
        }
    }

    /// The health after recording `registered`, without recording it.
    fn health_with(&self, registered: bool) -> Health {
        let mut next = self.clone();
        next.record(registered);
        next.health()
    }

    /// Seeds an empty window from the condition a previous run left.
    fn seed(&mut self, status: ConditionStatus) {
        match status {
            ConditionStatus::True => self.record(true),
            ConditionStatus::False => {
                for _ in 0..(BUFFER_SIZE as f64 * THRESHOLD_FALSE) as usize {
                    self.record(false);
                }
            }
            ConditionStatus::Unknown => {}
        }
    }
}

/// One pool's window and the outcomes reported since the status controller last wrote the condition.
#[derive(Debug, Default)]
struct PoolHealth {
    window: Window,
    reported: Vec<Outcome>,
    /// The window after the outcomes the last computed conditions took in, and how many they were: kept
    /// until those conditions are written ([`RegistrationHealth::written`]), so a failed write loses nothing.
    computed: Option<(Window, usize)>,
}

/// The generations the condition is computed against: the NodePool's and its NodeClass's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generations {
    pub node_pool: Option<i64>,
    pub node_class: Option<i64>,
    /// `status.nodeClassObservedGeneration` as found on the NodePool.
    pub observed_node_class: Option<i64>,
}

/// The registration outcomes of every NodePool, by NodePool UID; shared by the lifecycle, which reports, and
/// the NodePool status controller, which writes the condition.
#[derive(Debug, Default)]
pub struct RegistrationHealth {
    pools: std::sync::Mutex<HashMap<String, PoolHealth>>,
}

impl RegistrationHealth {
    /// Reports what became of a claim of the NodePool with UID `pool_uid`.
    pub fn observe(&self, pool_uid: &str, outcome: Outcome) {
        if let Ok(mut pools) = self.pools.lock() {
            pools
                .entry(pool_uid.to_string())
                .or_default()
                .reported
                .push(outcome);
        }
    }

    /// The NodePool's conditions with `NodeRegistrationHealthy` brought up to date: reset to Unknown when a
    /// generation changed (or it is missing), then moved by the outcomes reported since the last write. Call
    /// [`RegistrationHealth::written`] once they are on the NodePool.
    pub fn conditions(
        &self,
        pool_uid: &str,
        current: &[Condition],
        generations: Generations,
        now: Timestamp,
    ) -> Vec<Condition> {
        let Ok(mut pools) = self.pools.lock() else {
            return current.to_vec();
        };
        let pool = pools.entry(pool_uid.to_string()).or_default();
        let mut window = pool.window.clone();
        let out = next_conditions(&mut window, current, &pool.reported, generations, now);
        pool.computed = Some((window, pool.reported.len()));
        out
    }

    /// The conditions last computed for the pool are on it (or needed no write): the outcomes they took in are
    /// done with.
    pub fn written(&self, pool_uid: &str) {
        if let Ok(mut pools) = self.pools.lock()
            && let Some(pool) = pools.get_mut(pool_uid)
            && let Some((window, taken)) = pool.computed.take()
        {
            pool.window = window;
            pool.reported.drain(..taken.min(pool.reported.len()));
        }
    }

    /// Forgets NodePools not in `live` (deleted ones).
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        if let Ok(mut pools) = self.pools.lock() {
            pools.retain(|uid, _| live.contains(uid));
        }
    }
}

/// The pure step behind [`RegistrationHealth::conditions`].
pub fn next_conditions(
    window: &mut Window,
    current: &[Condition],
    reported: &[Outcome],
    generations: Generations,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = current.to_vec();
    let found = current.iter().find(|c| c.type_ == NODE_REGISTRATION_HEALTHY);
    if window.health() == Health::Unknown
        && let Some(found) = found
    {
        window.seed(found.status);
    }
    let stale = match found {
        None => true,
        Some(c) => {
            generations.node_class != generations.observed_node_class
                || c.observed_generation != generations.node_pool
        }
    };
    if stale {
        *window = Window::default();
        set(
            &mut out,
            ConditionStatus::Unknown,
            "AwaitingReconciliation",
            "object is awaiting reconciliation",
            generations.node_pool,
            now,
        );
    }
    for outcome in reported {
        match outcome {
            Outcome::Failed { reason, message } => {
                let is_false = out
                    .iter()
                    .any(|c| c.type_ == NODE_REGISTRATION_HEALTHY && c.status == ConditionStatus::False);
                if window.health_with(false) == Health::Unhealthy && !is_false {
                    set(
                        &mut out,
                        ConditionStatus::False,
                        reason,
                        message,
                        generations.node_pool,
                        now,
                    );
                }
                window.record(false);
            }
            Outcome::Registered => {
                if window.health_with(true) == Health::Healthy {
                    set(
                        &mut out,
                        ConditionStatus::True,
                        NODE_REGISTRATION_HEALTHY,
                        "",
                        generations.node_pool,
                        now,
                    );
                }
                window.record(true);
            }
        }
    }
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

fn set(
    conditions: &mut Vec<Condition>,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    match conditions
        .iter_mut()
        .find(|c| c.type_ == NODE_REGISTRATION_HEALTHY)
    {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Time(now);
            }
            c.status = status;
            c.reason = reason.to_string();
            c.message = message.to_string();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: NODE_REGISTRATION_HEALTHY.to_string(),
            status,
            observed_generation: generation,
            last_transition_time: Time(now),
            reason: reason.to_string(),
            message: message.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    const GEN: Generations = Generations {
        node_pool: Some(1),
        node_class: Some(1),
        observed_node_class: Some(1),
    };

    /// One status pass that wrote what it computed.
    fn step(h: &RegistrationHealth, current: &[Condition], g: Generations, now: Timestamp) -> Vec<Condition> {
        let c = h.conditions("uid", current, g, now);
        h.written("uid");
        c
    }

    fn failed() -> Outcome {
        Outcome::Failed {
            reason: "RegistrationFailed".into(),
            message: "Failed to register node".into(),
        }
    }

    fn status(conditions: &[Condition]) -> Option<(ConditionStatus, String)> {
        conditions
            .iter()
            .find(|c| c.type_ == NODE_REGISTRATION_HEALTHY)
            .map(|c| (c.status, c.reason.clone()))
    }

    #[test]
    fn half_of_the_window_failing_is_unhealthy() {
        let mut w = Window::default();
        assert_eq!(w.health(), Health::Unknown);
        w.record(false);
        assert_eq!(w.health(), Health::Healthy, "one failure of four is a quarter");
        w.record(false);
        assert_eq!(w.health(), Health::Unhealthy);
        w.record(true);
        w.record(true);
        assert_eq!(w.health(), Health::Unhealthy, "two of four still failed");
        w.record(true);
        assert_eq!(w.health(), Health::Healthy, "the oldest failure fell out");
    }

    #[test]
    fn a_missing_condition_starts_unknown_then_follows_the_outcomes() {
        let now = at("2026-01-01T00:00:00Z");
        let h = RegistrationHealth::default();
        let c = step(&h, &[], GEN, now);
        assert_eq!(
            status(&c),
            Some((ConditionStatus::Unknown, "AwaitingReconciliation".into()))
        );
        h.observe("uid", failed());
        let c = step(&h, &c, GEN, now);
        assert_eq!(
            status(&c).map(|s| s.0),
            Some(ConditionStatus::Unknown),
            "one failure"
        );
        h.observe("uid", failed());
        let c = step(&h, &c, GEN, now);
        assert_eq!(
            status(&c),
            Some((ConditionStatus::False, "RegistrationFailed".into()))
        );
        let later = at("2026-01-01T00:10:00Z");
        for _ in 0..2 {
            h.observe("uid", Outcome::Registered);
        }
        let c = step(&h, &c, GEN, later);
        assert_eq!(status(&c).map(|s| s.0), Some(ConditionStatus::False));
        h.observe("uid", Outcome::Registered);
        let c = step(&h, &c, GEN, later);
        assert_eq!(
            status(&c),
            Some((ConditionStatus::True, NODE_REGISTRATION_HEALTHY.into()))
        );
        let found = c.iter().find(|c| c.type_ == NODE_REGISTRATION_HEALTHY);
        assert_eq!(found.map(|c| c.last_transition_time.clone()), Some(Time(later)));
    }

    #[test]
    fn a_launch_that_never_finished_names_the_launch_failure() {
        let h = RegistrationHealth::default();
        let now = at("2026-01-01T00:00:00Z");
        let c = step(&h, &[], GEN, now);
        for _ in 0..2 {
            h.observe(
                "uid",
                Outcome::Failed {
                    reason: "LaunchFailed".into(),
                    message: "quota exceeded".into(),
                },
            );
        }
        let c = step(&h, &c, GEN, now);
        let found = c.iter().find(|c| c.type_ == NODE_REGISTRATION_HEALTHY);
        assert_eq!(
            found.map(|c| (c.status, c.reason.as_str(), c.message.as_str())),
            Some((ConditionStatus::False, "LaunchFailed", "quota exceeded"))
        );
    }

    #[test]
    fn a_new_pool_or_class_generation_resets_to_unknown() {
        let h = RegistrationHealth::default();
        let now = at("2026-01-01T00:00:00Z");
        let mut c = step(&h, &[], GEN, now);
        for _ in 0..2 {
            h.observe("uid", failed());
        }
        c = step(&h, &c, GEN, now);
        assert_eq!(status(&c).map(|s| s.0), Some(ConditionStatus::False));
        let edited = Generations {
            node_pool: Some(2),
            ..GEN
        };
        c = step(&h, &c, edited, now);
        assert_eq!(status(&c).map(|s| s.0), Some(ConditionStatus::Unknown));
        // The window was emptied: one registration is enough.
        h.observe("uid", Outcome::Registered);
        c = step(&h, &c, edited, now);
        assert_eq!(status(&c).map(|s| s.0), Some(ConditionStatus::True));
        let class_edited = Generations {
            node_class: Some(2),
            ..edited
        };
        c = step(&h, &c, class_edited, now);
        assert_eq!(status(&c).map(|s| s.0), Some(ConditionStatus::Unknown));
    }

    #[test]
    fn after_a_restart_a_false_condition_stays_false_until_registrations_prove_otherwise() {
        let now = at("2026-01-01T00:00:00Z");
        let previous = next_conditions(&mut Window::default(), &[], &[failed(), failed()], GEN, now);
        assert_eq!(status(&previous).map(|s| s.0), Some(ConditionStatus::False));
        // A new process: an empty window, seeded from the condition.
        let h = RegistrationHealth::default();
        h.observe("uid", Outcome::Registered);
        let c = step(&h, &previous, GEN, now);
        assert_eq!(status(&c).map(|s| s.0), Some(ConditionStatus::False));
        // A write that failed takes the same outcomes in again on the next pass.
        let h = RegistrationHealth::default();
        let c = step(&h, &[], GEN, now);
        h.observe("uid", failed());
        h.observe("uid", failed());
        let _lost = h.conditions("uid", &c, GEN, now);
        let again = step(&h, &c, GEN, now);
        assert_eq!(status(&again).map(|s| s.0), Some(ConditionStatus::False));
        // And an unchanged pool keeps its condition as it is.
        let same = step(&h, &c, GEN, now);
        assert_eq!(same, c);
    }
}
