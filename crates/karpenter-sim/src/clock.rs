//! Where the simulation's "now" comes from.
//!
//! Everything in the simulator that stamps a time (creationTimestamp, deletionTimestamp, lease renewals later)
//! asks a [`Clock`], never the system. Tests run on [`VirtualClock`], which follows tokio's clock: under
//! `#[tokio::test(start_paused = true)]` tokio skips idle time, so a simulated day of timers takes seconds.

use std::fmt;

use jiff::{SignedDuration, Timestamp};

/// The controllers' time source and the wall clock, declared in core; [`VirtualClock`] is the simulator's.
pub use karpenter_core::clock::{Clock, SystemClock};

/// A clock that starts at a chosen instant and advances with tokio's clock.
///
/// It reads `tokio::time::Instant`, which is frozen under a paused runtime and jumps forward when every task is
/// waiting on a timer, so virtual time moves exactly as fast as the simulation needs.
#[derive(Clone, Copy)]
pub struct VirtualClock {
    start: Timestamp,
    base: tokio::time::Instant,
}

impl VirtualClock {
    /// A clock that reads `start` now and advances with tokio's clock from here on.
    pub fn starting_at(start: Timestamp) -> Self {
        Self {
            start,
            base: tokio::time::Instant::now(),
        }
    }
}

impl fmt::Debug for VirtualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualClock")
            .field("start", &self.start)
            .field("now", &self.now())
            .finish()
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Timestamp {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.base);
        let elapsed = SignedDuration::try_from(elapsed).unwrap_or(SignedDuration::MAX);
        self.start.checked_add(elapsed).unwrap_or(Timestamp::MAX)
    }
}

/// Kubernetes' wire format for metav1.Time: RFC 3339 with whole seconds, in UTC.
#[cfg_attr(not(feature = "apiserver"), allow(dead_code))]
pub(crate) fn format_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn virtual_clock_follows_paused_tokio_time() -> Result<(), jiff::Error> {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse()?;
        let clock = VirtualClock::starting_at(start);
        assert_eq!(clock.now(), start);
        // A day of virtual time passes instantly because the runtime is paused and idle.
        tokio::time::sleep(std::time::Duration::from_secs(86_400)).await;
        assert_eq!(clock.now(), "2026-01-02T00:00:00Z".parse::<Timestamp>()?);
        Ok(())
    }

    #[test]
    fn time_is_formatted_as_kubernetes_does() -> Result<(), jiff::Error> {
        let ts: Timestamp = "2026-03-04T05:06:07.891Z".parse()?;
        assert_eq!(format_time(ts), "2026-03-04T05:06:07Z");
        Ok(())
    }
}
