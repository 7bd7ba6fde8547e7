//! The launch templates this process created or found existing recently. A launch whose template is in the
//! cache skips CreateLaunchTemplate; each use keeps the entry alive for another TTL. Garbage collection
//! spares what the cache holds (see [`super::LaunchTemplates::garbage_collect`]), so a template in use is not
//! deleted under a launch.
//!
//! An entry can outlive its template (deleted by hand or by another process); the launch then fails with
//! `InvalidLaunchTemplateName.NotFoundException`, and the CloudProvider forgets the entry, creates the
//! template again and retries once.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a template stays cached after its last use.
pub const DEFAULT_TTL: Duration = Duration::from_secs(5 * 60);

/// Template name → when it was last created or used.
#[derive(Debug)]
pub struct LaunchTemplateCache {
    ttl: Duration,
    last_used: Mutex<HashMap<String, Instant>>,
}

impl Default for LaunchTemplateCache {
    fn default() -> Self {
        Self::new(DEFAULT_TTL)
    }
}

impl LaunchTemplateCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            last_used: Mutex::new(HashMap::new()),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn fresh(&self, used: Instant, now: Instant) -> bool {
        now.saturating_duration_since(used) < self.ttl
    }

    /// Whether `name` was used within the TTL before `now`; if so this counts as another use.
    pub fn hit(&self, name: &str, now: Instant) -> bool {
        let mut entries = self.last_used.lock().unwrap_or_else(PoisonError::into_inner);
        match entries.get_mut(name) {
            Some(used) if self.fresh(*used, now) => {
                *used = (*used).max(now);
                true
            }
            _ => false,
        }
    }

    /// Records that `name` exists and was used at `now`.
    pub fn insert(&self, name: &str, now: Instant) {
        self.last_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string(), now);
    }

    /// Forgets `name` (its template is gone or about to be).
    pub fn forget(&self, name: &str) {
        self.last_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    /// The names used within the TTL before `now`; older entries are dropped.
    pub fn recently_used(&self, now: Instant) -> BTreeSet<String> {
        let mut entries = self.last_used.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|_, used| self.fresh(*used, now));
        entries.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_live_for_a_ttl_after_their_last_use_and_can_be_forgotten() {
        let cache = LaunchTemplateCache::new(Duration::from_secs(60));
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        assert!(!cache.hit("karpenter.k8s.aws/a", start), "unknown");
        cache.insert("karpenter.k8s.aws/a", start);
        cache.insert("karpenter.k8s.aws/b", start);
        assert!(cache.hit("karpenter.k8s.aws/a", at(50)));
        // a was used at 50 s, b only at 0 s.
        assert!(cache.hit("karpenter.k8s.aws/a", at(100)));
        assert!(!cache.hit("karpenter.k8s.aws/b", at(100)));
        assert_eq!(
            cache.recently_used(at(100)),
            BTreeSet::from(["karpenter.k8s.aws/a".to_string()])
        );
        cache.forget("karpenter.k8s.aws/a");
        assert!(!cache.hit("karpenter.k8s.aws/a", at(101)));
        assert!(cache.recently_used(at(101)).is_empty());
    }
}
