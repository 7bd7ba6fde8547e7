//! [`ResolvedPlacementGroups`]: the placement group each EC2NodeClass's selector resolved to, kept beside the
//! class (its status has no field for it) for the catalog, launches and drift.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use karpenter_api::ec2nodeclass::PlacementGroupSelector;

use super::PlacementGroup;

/// What a class's selector resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementGroupResolution {
    /// The selector that was resolved: an answer for another selector is no answer.
    pub selector: PlacementGroupSelector,
    /// None when no group matches it.
    pub group: Option<PlacementGroup>,
}

/// Class name → the last successful resolution of its placement group selector.
#[derive(Debug, Default)]
pub struct ResolvedPlacementGroups {
    by_class: RwLock<HashMap<String, PlacementGroupResolution>>,
}

impl ResolvedPlacementGroups {
    /// Records what `selector` of class `class` resolved to.
    pub fn record(&self, class: &str, selector: &PlacementGroupSelector, group: Option<PlacementGroup>) {
        self.by_class
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                class.to_string(),
                PlacementGroupResolution {
                    selector: selector.clone(),
                    group,
                },
            );
    }

    /// The resolution of class `class` when it was made for `selector`; None when unknown.
    pub fn get(&self, class: &str, selector: &PlacementGroupSelector) -> Option<PlacementGroupResolution> {
        self.by_class
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(class)
            .filter(|r| r.selector == *selector)
            .cloned()
    }

    /// The available group class `class` launches into under `selector`; None when it selects none, or it
    /// is unknown or not available.
    pub fn available_group(&self, class: &str, selector: &PlacementGroupSelector) -> Option<PlacementGroup> {
        self.get(class, selector)
            .and_then(|r| r.group)
            .filter(PlacementGroup::is_available)
    }

    /// Forgets class `class` (deleted, or no longer selecting a group).
    pub fn remove(&self, class: &str) {
        self.by_class
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(class);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement_groups::PlacementStrategy;

    #[test]
    fn a_resolution_answers_only_for_its_selector() {
        let by_name = PlacementGroupSelector {
            name: Some("training".into()),
            id: None,
        };
        let by_id = PlacementGroupSelector {
            name: None,
            id: Some("pg-0abc".into()),
        };
        let mut group = PlacementGroup {
            id: "pg-0abc".into(),
            name: "training".into(),
            strategy: Some(PlacementStrategy::Cluster),
            partition_count: None,
            state: "available".into(),
        };
        let store = ResolvedPlacementGroups::default();
        assert_eq!(store.get("default", &by_name), None);
        store.record("default", &by_name, Some(group.clone()));
        assert_eq!(store.available_group("default", &by_name), Some(group.clone()));
        assert_eq!(
            store.get("default", &by_id),
            None,
            "resolved for another selector"
        );
        group.state = "pending".into();
        store.record("default", &by_name, Some(group));
        assert_eq!(store.available_group("default", &by_name), None, "not available");
        store.record("default", &by_name, None);
        assert_eq!(
            store.get("default", &by_name).map(|r| r.group),
            Some(None),
            "known not to exist"
        );
        store.remove("default");
        assert_eq!(store.get("default", &by_name), None);
    }
}
