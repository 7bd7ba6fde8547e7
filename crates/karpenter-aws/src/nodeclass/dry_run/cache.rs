//! [`DryRunCache`]: the last dry-run verdict of each EC2NodeClass, trusted for a TTL while the class and what
//! the calls were built from stay the same. One entry per class: a changed class replaces its old verdict
//! instead of piling up keys.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{DRY_RUN_CACHE_TTL, DryRunOutcome};

#[derive(Debug)]
struct Verdict {
    key: String,
    outcome: DryRunOutcome,
    checked_at: Instant,
}

/// Class name → its last cacheable verdict.
#[derive(Debug)]
pub struct DryRunCache {
    ttl: Duration,
    by_class: Mutex<HashMap<String, Verdict>>,
}

impl Default for DryRunCache {
    fn default() -> Self {
        Self::new(DRY_RUN_CACHE_TTL)
    }
}

impl DryRunCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            by_class: Mutex::new(HashMap::new()),
        }
    }

    /// The verdict for class `class` checked with `key`, when it is younger than the TTL at `now`.
    pub fn get(&self, class: &str, key: &str, now: Instant) -> Option<DryRunOutcome> {
        self.by_class
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(class)
            .filter(|v| v.key == key && now.saturating_duration_since(v.checked_at) < self.ttl)
            .map(|v| v.outcome.clone())
    }

    /// Keeps `outcome` of class `class` checked with `key` at `now`.
    pub fn insert(&self, class: &str, key: &str, outcome: DryRunOutcome, now: Instant) {
        self.by_class
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                class.to_string(),
                Verdict {
                    key: key.to_string(),
                    outcome,
                    checked_at: now,
                },
            );
    }

    /// Forgets class `class` (deleted).
    pub fn remove(&self, class: &str) {
        self.by_class
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(class);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_holds_for_its_key_until_the_ttl_ends() {
        let cache = DryRunCache::default();
        let start = Instant::now();
        assert_eq!(cache.get("default", "k1", start), None);
        cache.insert("default", "k1", DryRunOutcome::Authorized, start);
        let later = start + Duration::from_secs(29 * 60);
        assert_eq!(cache.get("default", "k1", later), Some(DryRunOutcome::Authorized));
        assert_eq!(
            cache.get("default", "k2", later),
            None,
            "another class hash or resolution"
        );
        assert_eq!(cache.get("other", "k1", later), None);
        assert_eq!(
            cache.get("default", "k1", start + DRY_RUN_CACHE_TTL),
            None,
            "expired"
        );

        let refused = DryRunOutcome::Failed {
            reason: "CreateFleetAuthCheckFailed",
            message: "no".into(),
        };
        cache.insert("default", "k2", refused.clone(), later);
        assert_eq!(cache.get("default", "k2", later), Some(refused));
        assert_eq!(cache.get("default", "k1", later), None, "replaced");
        cache.remove("default");
        assert_eq!(cache.get("default", "k2", later), None);
    }
}
