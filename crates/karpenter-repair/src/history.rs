//! Reboot escalation (upstream's `RebootHistory`): a NodeClaim that repair has already rebooted twice within a
//! day, and that is due for a reboot again, is replaced instead. Pure; the repair controller keeps one history
//! (in memory, as upstream: a restart forgets it, and at worst allows two more reboots).

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use karpenter_core::cloudprovider::RepairAction;

/// How far back committed reboots count.
pub const REBOOT_HISTORY_WINDOW: SignedDuration = SignedDuration::from_hours(24);
/// Reboots within the window after which a due reboot becomes a replacement.
pub const REBOOTS_BEFORE_REPLACEMENT: usize = 2;

/// When each NodeClaim (by UID) had reboots committed, the last [`REBOOTS_BEFORE_REPLACEMENT`] of them.
#[derive(Debug, Default, Clone)]
pub struct RebootHistory {
    committed: HashMap<String, Vec<Timestamp>>,
}

impl RebootHistory {
    /// Records a reboot committed at `now`, once per commit (a reboot already under way is not committed again).
    pub fn record(&mut self, claim_uid: &str, now: Timestamp) {
        let entry = self.committed.entry(claim_uid.to_string()).or_default();
        entry.retain(|t| now.duration_since(*t) < REBOOT_HISTORY_WINDOW);
        if entry.len() < REBOOTS_BEFORE_REPLACEMENT {
            entry.push(now);
        }
    }

    /// Reboots committed for the claim within the window before `now`.
    pub fn recent(&self, claim_uid: &str, now: Timestamp) -> usize {
        self.committed.get(claim_uid).map_or(0, |times| {
            times
                .iter()
                .filter(|t| now.duration_since(**t) < REBOOT_HISTORY_WINDOW)
                .count()
        })
    }

    /// Forgets claims with no reboot in the window, so the history does not grow with every claim ever rebooted.
    pub fn prune(&mut self, now: Timestamp) {
        self.committed.retain(|_, times| {
            times
                .iter()
                .any(|t| now.duration_since(*t) < REBOOT_HISTORY_WINDOW)
        });
    }
}

/// The action repair takes for a due policy's `action`, given the claim's recent reboots: a reboot that has
/// already been tried [`REBOOTS_BEFORE_REPLACEMENT`] times escalates to a replacement. `true` when it did.
pub fn escalate(action: RepairAction, recent_reboots: usize) -> (RepairAction, bool) {
    match action {
        RepairAction::RebootNode if recent_reboots >= REBOOTS_BEFORE_REPLACEMENT => {
            (RepairAction::ReplaceNode, true)
        }
        other => (other, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn two_reboots_in_a_day_then_a_replacement() {
        let mut h = RebootHistory::default();
        let t0 = at("2026-01-01T00:00:00Z");
        assert_eq!(
            escalate(RepairAction::RebootNode, h.recent("u", t0)),
            (RepairAction::RebootNode, false)
        );
        h.record("u", t0);
        assert_eq!(
            escalate(RepairAction::RebootNode, h.recent("u", t0)),
            (RepairAction::RebootNode, false)
        );
        h.record("u", at("2026-01-01T00:05:00Z"));
        let later = at("2026-01-01T00:10:00Z");
        assert_eq!(h.recent("u", later), 2);
        assert_eq!(
            escalate(RepairAction::RebootNode, h.recent("u", later)),
            (RepairAction::ReplaceNode, true)
        );
        assert_eq!(h.recent("other", later), 0, "by NodeClaim");
        // A replacement stays one.
        assert_eq!(
            escalate(RepairAction::ReplaceNode, 0),
            (RepairAction::ReplaceNode, false)
        );
    }

    #[test]
    fn reboots_older_than_a_day_no_longer_count() {
        let mut h = RebootHistory::default();
        h.record("u", at("2026-01-01T00:00:00Z"));
        h.record("u", at("2026-01-01T06:00:00Z"));
        assert_eq!(h.recent("u", at("2026-01-02T00:00:01Z")), 1);
        assert_eq!(h.recent("u", at("2026-01-02T06:00:01Z")), 0);
        // A new reboot after the window starts over.
        h.record("u", at("2026-01-02T07:00:00Z"));
        assert_eq!(h.recent("u", at("2026-01-02T07:00:00Z")), 1);
        h.prune(at("2026-01-04T00:00:00Z"));
        assert!(h.committed.is_empty());
    }
}
