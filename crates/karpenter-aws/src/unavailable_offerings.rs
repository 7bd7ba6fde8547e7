//! Offerings a launch recently found without capacity (InsufficientInstanceCapacity and friends). They are
//! reported unavailable for a while (upstream: 3 minutes) so the next scheduling round picks something else,
//! then tried again. Time is passed in, so tests and the simulator control it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long an offering stays unavailable after a capacity error.
pub const UNAVAILABLE_OFFERING_TTL: Duration = Duration::from_secs(180);

/// (instance type, zone, capacity type).
type OfferingKey = (String, String, String);

/// The cache; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct UnavailableOfferings {
    ttl: Duration,
    until: Mutex<HashMap<OfferingKey, Instant>>,
}

impl Default for UnavailableOfferings {
    fn default() -> Self {
        Self::new(UNAVAILABLE_OFFERING_TTL)
    }
}

impl UnavailableOfferings {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            until: Mutex::new(HashMap::new()),
        }
    }

    /// Marks an offering unavailable from `now` for the TTL.
    pub fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str, now: Instant) {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.retain(|_, expiry| *expiry > now);
        until.insert(
            (
                instance_type.to_string(),
                zone.to_string(),
                capacity_type.to_string(),
            ),
            now + self.ttl,
        );
    }

    pub fn is_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str, now: Instant) -> bool {
        let until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until
            .get(&(
                instance_type.to_string(),
                zone.to_string(),
                capacity_type.to_string(),
            ))
            .is_some_and(|expiry| *expiry > now)
    }

    /// How many offerings are unavailable at `now`.
    pub fn len(&self, now: Instant) -> usize {
        let until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.values().filter(|expiry| **expiry > now).count()
    }

    pub fn is_empty(&self, now: Instant) -> bool {
        self.len(now) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offerings_come_back_after_the_ttl() {
        let cache = UnavailableOfferings::default();
        let t0 = Instant::now();
        cache.mark_unavailable("m5.large", "us-west-2a", "spot", t0);
        assert!(cache.is_unavailable("m5.large", "us-west-2a", "spot", t0));
        assert!(!cache.is_unavailable("m5.large", "us-west-2a", "on-demand", t0));
        assert!(!cache.is_unavailable("m5.large", "us-west-2b", "spot", t0));
        assert_eq!(cache.len(t0), 1);
        let later = t0 + UNAVAILABLE_OFFERING_TTL;
        assert!(!cache.is_unavailable("m5.large", "us-west-2a", "spot", later));
        assert!(cache.is_empty(later));
    }
}
