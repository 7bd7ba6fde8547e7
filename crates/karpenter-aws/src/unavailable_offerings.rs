//! Offerings a launch recently found without capacity (InsufficientInstanceCapacity and friends), and capacity
//! reservations a launch found full (ReservationCapacityExceeded). They are reported unavailable for a while
//! (upstream: 3 minutes) so the next scheduling round picks something else, then tried again. Time is passed
//! in, so tests and the simulator control it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long an offering stays unavailable after a capacity error.
pub const UNAVAILABLE_OFFERING_TTL: Duration = Duration::from_secs(180);

/// What is unavailable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum OfferingKey {
    /// An instance type in a zone with a capacity type.
    Offering(String, String, String),
    /// A capacity reservation (its reserved offering), by id.
    Reservation(String),
}

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

    fn mark(&self, key: OfferingKey, now: Instant) {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.retain(|_, expiry| *expiry > now);
        until.insert(key, now + self.ttl);
    }

    fn is_marked(&self, key: &OfferingKey, now: Instant) -> bool {
        let until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.get(key).is_some_and(|expiry| *expiry > now)
    }

    /// Marks an offering unavailable from `now` for the TTL.
    pub fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str, now: Instant) {
        self.mark(
            OfferingKey::Offering(
                instance_type.to_string(),
                zone.to_string(),
                capacity_type.to_string(),
            ),
            now,
        );
    }

    pub fn is_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str, now: Instant) -> bool {
        self.is_marked(
            &OfferingKey::Offering(
                instance_type.to_string(),
                zone.to_string(),
                capacity_type.to_string(),
            ),
            now,
        )
    }

    /// Marks capacity reservation `id` (its reserved offering) unavailable from `now` for the TTL.
    pub fn mark_reservation_unavailable(&self, id: &str, now: Instant) {
        self.mark(OfferingKey::Reservation(id.to_string()), now);
    }

    pub fn is_reservation_unavailable(&self, id: &str, now: Instant) -> bool {
        self.is_marked(&OfferingKey::Reservation(id.to_string()), now)
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

    #[test]
    fn a_full_reservation_is_unavailable_apart_from_its_instance_types_other_offerings() {
        let cache = UnavailableOfferings::default();
        let t0 = Instant::now();
        cache.mark_reservation_unavailable("cr-1", t0);
        assert!(cache.is_reservation_unavailable("cr-1", t0));
        assert!(!cache.is_reservation_unavailable("cr-2", t0));
        assert!(!cache.is_unavailable("m5.large", "us-west-2a", "reserved", t0));
        assert!(!cache.is_reservation_unavailable("cr-1", t0 + UNAVAILABLE_OFFERING_TTL));
    }
}
