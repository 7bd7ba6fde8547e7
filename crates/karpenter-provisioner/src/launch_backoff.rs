//! Per-NodeClaim back-off between failed launches, as upstream's lifecycle controller gets from its work queue's
//! per-item exponential failure rate limiter: the first retry waits [`BASE`], each further failure doubles the
//! wait, up to [`CAP`] (upstream: 1 s doubling to 300 s, so the last attempts still come before the 5-minute
//! launch timeout deletes the claim). Time comes from the caller (the lifecycle's clock), so the simulator's
//! virtual clock drives it.

use std::{collections::HashMap, time::Duration};

use jiff::{SignedDuration, Timestamp};

/// The wait after the first failure.
pub const BASE: Duration = Duration::from_secs(1);
/// The longest wait.
pub const CAP: Duration = Duration::from_secs(300);

/// One claim's failures so far and when it may be tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failures {
    count: u32,
    retry_at: Timestamp,
}

/// Failed launches by NodeClaim UID.
#[derive(Debug, Default)]
pub struct LaunchBackoff {
    claims: HashMap<String, Failures>,
}

/// The wait after the `failures`-th consecutive failure (1-based).
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    BASE.saturating_mul(1 << doublings).min(CAP)
}

impl LaunchBackoff {
    /// Whether the claim may be launched at `now`: it never failed, or its wait is over.
    pub fn may_launch(&self, uid: &str, now: Timestamp) -> bool {
        self.claims.get(uid).is_none_or(|f| now >= f.retry_at)
    }

    /// Records a failed launch at `now`; returns the wait before the next attempt.
    pub fn failed(&mut self, uid: &str, now: Timestamp) -> Duration {
        let count = self.claims.get(uid).map_or(0, |f| f.count) + 1;
        let wait = delay(count);
        let retry_at = now
            .checked_add(SignedDuration::try_from(wait).unwrap_or(SignedDuration::ZERO))
            .unwrap_or(now);
        self.claims.insert(uid.to_string(), Failures { count, retry_at });
        wait
    }

    /// The claim launched or is gone: its failures no longer count.
    pub fn forget(&mut self, uid: &str) {
        self.claims.remove(uid);
    }

    /// Forgets claims not in `live`, so deleted claims do not accumulate.
    pub fn retain(&mut self, live: &std::collections::HashSet<String>) {
        self.claims.retain(|uid, _| live.contains(uid));
    }

    pub fn len(&self) -> usize {
        self.claims.len()
    }

    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + secs).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn waits_double_from_one_second_up_to_five_minutes() {
        let waits: Vec<u64> = (1..=11).map(|n| delay(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(delay(1000), CAP);
    }

    #[test]
    fn a_failed_claim_waits_on_the_clock_and_others_do_not() {
        let mut b = LaunchBackoff::default();
        assert!(b.may_launch("a", at(0)));
        assert_eq!(b.failed("a", at(0)), Duration::from_secs(1));
        assert!(!b.may_launch("a", at(0)));
        assert!(b.may_launch("a", at(1)));
        assert!(b.may_launch("b", at(0)), "backoff is per claim");
        assert_eq!(b.failed("a", at(1)), Duration::from_secs(2));
        assert_eq!(b.failed("a", at(3)), Duration::from_secs(4));
        assert!(!b.may_launch("a", at(6)));
        assert!(b.may_launch("a", at(7)));
        b.forget("a");
        assert_eq!(
            b.failed("a", at(7)),
            Duration::from_secs(1),
            "a success starts over"
        );
        b.retain(&std::collections::HashSet::new());
        assert!(b.is_empty());
    }
}
