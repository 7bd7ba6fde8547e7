//! Fault injection a test can switch on: error answers for matching requests (a number of times, or with a
//! probability drawn from a seeded generator), a delay before every resource request, and dropping every open
//! watch at once.

use std::{sync::Arc, time::Duration};

use super::{Shared, route::Verb};
use crate::rng::Rng;

/// Answer matching requests with an error code instead of serving them.
#[derive(Debug, Clone)]
pub struct FaultRule {
    verb: Option<Verb>,
    group: Option<String>,
    resource: Option<String>,
    subresource: Option<String>,
    code: u16,
    remaining: Option<u32>,
    probability: f64,
}

impl FaultRule {
    /// Fail every request with `code` (500, 429, 409, 503, ...) until narrowed by the other builders.
    pub fn error(code: u16) -> Self {
        Self {
            verb: None,
            group: None,
            resource: None,
            subresource: None,
            code,
            remaining: None,
            probability: 1.0,
        }
    }

    /// Only requests with this RBAC verb.
    pub fn verb(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Only requests for this resource (group "" for core).
    pub fn resource(mut self, group: &str, resource: &str) -> Self {
        self.group = Some(group.to_string());
        self.resource = Some(resource.to_string());
        self
    }

    /// Only requests for this subresource ("status", "eviction", ...).
    pub fn subresource(mut self, subresource: &str) -> Self {
        self.subresource = Some(subresource.to_string());
        self
    }

    /// Fire at most this many times.
    pub fn times(mut self, count: u32) -> Self {
        self.remaining = Some(count);
        self
    }

    /// Fire with this probability per matching request (using the server's seeded generator).
    pub fn probability(mut self, probability: f64) -> Self {
        self.probability = probability.clamp(0.0, 1.0);
        self
    }

    fn matches(&self, verb: Verb, group: &str, resource: &str, subresource: Option<&str>) -> bool {
        self.verb.is_none_or(|v| v == verb)
            && self.group.as_deref().is_none_or(|g| g == group)
            && self.resource.as_deref().is_none_or(|r| r == resource)
            && self.subresource.as_deref().is_none_or(|s| Some(s) == subresource)
            && self.remaining != Some(0)
    }
}

/// The switched-on faults.
#[derive(Debug)]
pub struct FaultState {
    rules: Vec<FaultRule>,
    delay: Option<Duration>,
    rng: Rng,
}

impl FaultState {
    pub fn new(seed: u64) -> Self {
        Self {
            rules: Vec::new(),
            delay: None,
            rng: Rng::seeded(seed ^ 0xFA17),
        }
    }

    pub fn delay(&self) -> Option<Duration> {
        self.delay
    }

    /// The error code to answer with, if a rule fires for this request.
    pub fn fire(
        &mut self,
        verb: Verb,
        group: &str,
        resource: &str,
        subresource: Option<&str>,
    ) -> Option<u16> {
        for rule in &mut self.rules {
            if !rule.matches(verb, group, resource, subresource) {
                continue;
            }
            if rule.probability < 1.0 && self.rng.next_f64() >= rule.probability {
                continue;
            }
            if let Some(remaining) = &mut rule.remaining {
                *remaining -= 1;
            }
            return Some(rule.code);
        }
        None
    }
}

/// The handle tests use to switch faults on and off.
#[derive(Clone)]
pub struct Faults {
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

impl Faults {
    /// Adds a rule; rules are tried in the order they were added.
    pub fn inject(&self, rule: FaultRule) {
        self.shared.faults().rules.push(rule);
    }

    /// Removes every rule and the delay.
    pub fn clear(&self) {
        let mut faults = self.shared.faults();
        faults.rules.clear();
        faults.delay = None;
    }

    /// Delays every resource request by `delay` (tokio time), or stops delaying with `None`.
    pub fn set_delay(&self, delay: Option<Duration>) {
        self.shared.faults().delay = delay;
    }

    /// Closes every open watch now, as a dropped connection would.
    pub fn drop_watches(&self) {
        self.shared.state().close_all_watches();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_rule_fires_then_stops() {
        let mut state = FaultState::new(1);
        state.rules.push(
            FaultRule::error(500)
                .verb(Verb::Create)
                .resource("", "pods")
                .times(2),
        );
        assert_eq!(state.fire(Verb::Create, "", "pods", None), Some(500));
        assert_eq!(state.fire(Verb::Get, "", "pods", None), None);
        assert_eq!(state.fire(Verb::Create, "", "pods", None), Some(500));
        assert_eq!(state.fire(Verb::Create, "", "pods", None), None);
    }

    #[test]
    fn probability_is_reproducible() {
        let run = || {
            let mut state = FaultState::new(9);
            state.rules.push(FaultRule::error(429).probability(0.5));
            (0..64)
                .map(|_| state.fire(Verb::List, "", "nodes", None).is_some())
                .collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run());
        assert!(first.iter().any(|f| *f) && first.iter().any(|f| !*f));
    }
}
