//! PodDisruptionBudget status, as kube-controller-manager's disruption controller keeps it: expectedPods,
//! currentHealthy, desiredHealthy and disruptionsAllowed, from the live pods each PDB selects (Ready and not
//! terminating count as healthy). Karpenter's disruption decisions read `disruptionsAllowed`; the eviction
//! subresource computes the same numbers itself at eviction time.

use serde_json::json;

use super::{is_ready, update_status};
use crate::{
    apiserver::{ApiServer, ResourceId, pdb_desired_healthy, selectors::LabelSelector},
    objects,
};

pub(super) fn reconcile(api: &ApiServer) {
    let pdbs = ResourceId::new("policy", "poddisruptionbudgets");
    let budgets = api.list_internal(&pdbs, None);
    if budgets.is_empty() {
        return;
    }
    let pods = api.list_internal(&objects::pods(), None);
    for pdb in budgets {
        let namespace = objects::namespace(&pdb);
        let Some(selector) = LabelSelector::from_object(&pdb["spec"]["selector"]) else {
            continue;
        };
        let selected: Vec<_> = pods
            .iter()
            .filter(|p| objects::namespace(p) == namespace && selector.matches(&***p))
            .collect();
        let expected = selected.len() as i64;
        let healthy = selected
            .iter()
            .filter(|p| is_ready(p) && !objects::is_deleting(p))
            .count() as i64;
        let desired = pdb_desired_healthy(&pdb["spec"], expected);
        update_status(
            api,
            &pdbs,
            &pdb,
            json!({
                "expectedPods": expected,
                "currentHealthy": healthy,
                "desiredHealthy": desired,
                "disruptionsAllowed": (healthy - desired).max(0),
                "observedGeneration": pdb["metadata"]["generation"],
            }),
        );
    }
}
