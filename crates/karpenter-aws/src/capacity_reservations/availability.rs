//! How many more instances each capacity reservation can take, shared by every EC2NodeClass that selects it and
//! every launch. EC2's count (DescribeCapacityReservations, every minute) is the base; launches that finished
//! after that count was asked for, and launches still in flight, are subtracted. So two launches at once never
//! both count on the last instance, and the reserved offering goes unavailable as soon as it is used up, not a
//! minute later. When in doubt (a launch that finished while EC2 was counting) an instance is subtracted twice
//! rather than not at all: a launch that counts on an instance that is not there fails, one that misses an
//! instance only waits for the next count.
//!
//! A launch takes a [`ReservationSlot`] before CreateFleet: [`ReservationSlot::launched`] keeps the instance
//! counted until a count asked for after the launch; dropping the slot (a failed launch) gives it back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::counted_capacity::CountedCapacity;

/// Reservation id → counts. Share it as `Arc<ReservationAvailability>`.
#[derive(Debug, Default)]
pub struct ReservationAvailability {
    counts: Mutex<HashMap<String, CountedCapacity>>,
}

impl ReservationAvailability {
    /// EC2's counts of `reservations` (id, available instances), asked for at `asked_at`: each replaces the
    /// previous count, and forgets the launches that finished before it was asked for (EC2 counted them).
    pub fn record_reported<'a>(
        &self,
        reservations: impl IntoIterator<Item = (&'a str, i64)>,
        asked_at: Instant,
    ) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        for (id, available) in reservations {
            counts
                .entry(id.to_string())
                .or_default()
                .record_reported(available, asked_at);
        }
    }

    /// How many more instances reservation `id` can take; 0 for one never counted.
    pub fn available(&self, id: &str) -> i64 {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.get(id).and_then(CountedCapacity::free).unwrap_or(0)
    }

    /// Takes one instance of reservation `id` for a launch; None when it has none left.
    pub fn try_take(self: &Arc<Self>, id: &str) -> Option<ReservationSlot> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = counts.get_mut(id)?;
        if entry.free().unwrap_or(0) == 0 {
            return None;
        }
        entry.hold(1);
        Some(ReservationSlot {
            availability: Arc::clone(self),
            id: id.to_string(),
            launched_at: None,
        })
    }

    fn finish(&self, id: &str, launched_at: Option<Instant>) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = counts.get_mut(id) {
            entry.settle(1, launched_at);
        }
    }
}

/// One instance of a reservation, held by a launch in flight.
#[derive(Debug)]
pub struct ReservationSlot {
    availability: Arc<ReservationAvailability>,
    id: String,
    launched_at: Option<Instant>,
}

impl ReservationSlot {
    pub fn reservation_id(&self) -> &str {
        &self.id
    }

    /// The instance launched into the reservation at `now`: it stays counted until a count asked for later.
    pub fn launched(mut self, now: Instant) {
        self.launched_at = Some(now);
    }
}

impl Drop for ReservationSlot {
    fn drop(&mut self) {
        self.availability.finish(&self.id, self.launched_at);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn launches_in_flight_and_not_yet_counted_by_ec2_are_not_available() {
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let availability = Arc::new(ReservationAvailability::default());
        assert_eq!(availability.available("cr-1"), 0, "never counted");
        assert!(availability.try_take("cr-1").is_none());

        availability.record_reported([("cr-1", 2)], t0);
        let first = availability.try_take("cr-1").unwrap();
        let second = availability.try_take("cr-1").unwrap();
        assert!(
            availability.try_take("cr-1").is_none(),
            "two launches in flight hold both instances"
        );
        assert_eq!(availability.available("cr-1"), 0);

        // A failed launch gives its instance back; a successful one keeps it until EC2 counts it.
        drop(first);
        assert_eq!(availability.available("cr-1"), 1);
        second.launched(at(10));
        assert_eq!(availability.available("cr-1"), 1);
        // A count asked for before the launch finished may not include it: it stays subtracted.
        availability.record_reported([("cr-1", 2)], at(5));
        assert_eq!(availability.available("cr-1"), 1);
        // A count asked for afterwards does include it.
        availability.record_reported([("cr-1", 1)], at(60));
        assert_eq!(availability.available("cr-1"), 1);

        // A launch in flight while EC2 counts stays subtracted until it finishes.
        let third = availability.try_take("cr-1").unwrap();
        assert_eq!(third.reservation_id(), "cr-1");
        availability.record_reported([("cr-1", 1)], at(70));
        assert_eq!(availability.available("cr-1"), 0);
        drop(third);
        assert_eq!(availability.available("cr-1"), 1);
    }
}
