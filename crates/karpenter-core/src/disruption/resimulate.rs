//! Re-simulation backed by the real scheduler (upstream's `SimulateScheduling`): what happens to the pods of a
//! set of nodes if those nodes go.
//!
//! The removed nodes stop taking pods (`schedulable = false`) and stop being topology domains (`leaving`, which
//! also takes the pods bound to them out of the topology counts); their reschedulable pods are placed with [`crate::scheduling::schedule`] on the nodes that stay or on
//! new NodeClaims. A pod that fits nowhere, that could not be converted, or that would only fit on a node that is
//! not initialized yet (an in-flight NodeClaim, or a managed node still initializing: upstream does not rely on
//! nodes that have not settled) makes the removal [`SimulationOutcome::Unschedulable`]; otherwise it is a
//! [`SimulationOutcome::Delete`] when no new NodeClaim is needed and a [`SimulationOutcome::Replace`] when some
//! are.
//!
//! The base input is built once ([`DisruptionInputs::base`]); each simulation changes it in place and puts it
//! back: it flips the removed nodes' `schedulable` and `leaving` flags and moves their pods into
//! the input, so nothing is cloned or rebuilt per simulation: the scheduler copies the records of only the nodes
//! it places pods on, and reads the bound pods with anti-affinity and the nodes' room ceiling from
//! [`DisruptionInputs::simulation_index`], built once per pass. The scheduler interns placeholder hostnames into
//! the base's one interner.

use super::candidates::ClusterView;
use super::consolidation::{ConsolidationCandidate, Resimulator, SimulationOutcome};
use crate::{
    scheduling::{SchedulingInput, SchedulingResults, schedule_indexed},
    snapshot::DisruptionInputs,
};

/// A [`Resimulator`] over the inputs of a disruption pass. [`ConsolidationCandidate::index`] is a view node
/// index ([`crate::disruption::candidates::ClusterView::nodes`]).
pub struct SchedulerResimulator<'a> {
    inputs: &'a mut DisruptionInputs,
    simulations: usize,
}

impl<'a> SchedulerResimulator<'a> {
    pub fn new(inputs: &'a mut DisruptionInputs) -> Self {
        Self {
            inputs,
            simulations: 0,
        }
    }

    /// The inputs simulated against (unchanged between simulations).
    pub fn inputs(&self) -> &DisruptionInputs {
        self.inputs
    }

    /// How many simulations ran.
    pub fn simulations(&self) -> usize {
        self.simulations
    }
}

impl Resimulator for SchedulerResimulator<'_> {
    fn simulate(&mut self, candidates: &[&ConsolidationCandidate]) -> SimulationOutcome {
        let nodes: Vec<usize> = candidates.iter().map(|c| c.index).collect();
        self.simulations += 1;
        simulate_removal(self.inputs, &nodes)
    }
}

/// Simulates removing `nodes` (view node indices; unknown ones are ignored) and placing their reschedulable
/// pods elsewhere. `inputs` is left as it was.
pub fn simulate_removal(inputs: &mut DisruptionInputs, nodes: &[usize]) -> SimulationOutcome {
    let mut nodes: Vec<usize> = nodes
        .iter()
        .copied()
        .filter(|&n| n < inputs.view.nodes.len())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    for &n in &nodes {
        if let Some(why) = inputs.unconverted_of.get(n).and_then(|u| u.first()) {
            return SimulationOutcome::Unschedulable(format!("pod {why}"));
        }
    }

    let DisruptionInputs {
        view,
        base,
        simulation_index,
        existing_of,
        view_of_existing,
        pods_of,
        ..
    } = inputs;
    let input = &mut base.input;

    // The removed nodes take no pods and their pods leave topology. Only their records are touched: a
    // re-simulation costs what it removes, not the size of the cluster.
    let mut was_schedulable = Vec::with_capacity(nodes.len());
    for &n in &nodes {
        if let Some(e) = existing_of.get(n).copied().flatten()
            && let Some(node) = input.existing.get_mut(e)
        {
            was_schedulable.push((e, node.schedulable));
            node.schedulable = false;
            node.leaving = true;
        }
    }

    // Their reschedulable pods are the pods to place.
    let first = input.pods.len();
    let mut moved = Vec::with_capacity(nodes.len());
    for &n in &nodes {
        if let Some(pods) = pods_of.get_mut(n) {
            moved.push((n, pods.len()));
            input.pods.append(pods);
        }
    }

    let results = schedule_indexed(input, simulation_index, &mut base.interner, &base.table);
    let outcome = unschedulable(input, &results, first)
        .or_else(|| on_uninitialized_node(input, &results, first, view, view_of_existing));

    // Put everything back (in reverse, so a node listed twice ends as it started).
    for &(n, count) in moved.iter().rev() {
        let at = input.pods.len().saturating_sub(count);
        pods_of[n] = input.pods.split_off(at);
    }
    for &(e, schedulable) in was_schedulable.iter().rev() {
        input.existing[e].schedulable = schedulable;
        input.existing[e].leaving = false;
    }

    match outcome {
        Some(o) => o,
        None if results.new_node_claims.is_empty() => SimulationOutcome::Delete,
        None => SimulationOutcome::Replace(results.new_node_claims),
    }
}

/// The first moved pod (index `first` on) that fits nowhere, as the outcome.
fn unschedulable(
    input: &SchedulingInput,
    results: &SchedulingResults,
    first: usize,
) -> Option<SimulationOutcome> {
    let (p, why) = results.pod_errors.iter().find(|(p, _)| *p >= first)?;
    Some(SimulationOutcome::Unschedulable(format!(
        "pod {}: {why}",
        input.pods[*p].id
    )))
}

/// The first moved pod (index `first` on) placed on an existing node that is not initialized yet, as the outcome:
/// upstream does not count on such nodes. Only the nodes that took pods are looked up.
fn on_uninitialized_node(
    input: &SchedulingInput,
    results: &SchedulingResults,
    first: usize,
    view: &ClusterView,
    view_of_existing: &[Option<usize>],
) -> Option<SimulationOutcome> {
    let initialized = |e: usize| {
        view_of_existing
            .get(e)
            .copied()
            .flatten()
            .is_some_and(|n| view.nodes[n].node_claim.is_none() || view.nodes[n].initialized)
    };
    results
        .existing_nodes
        .iter()
        .filter(|(e, _)| !initialized(*e))
        .find_map(|(e, pods)| {
            let &p = pods.iter().find(|&&p| p >= first)?;
            Some(SimulationOutcome::Unschedulable(format!(
                "pod {} would schedule to {}, which is not initialized yet",
                input.pods[p].id, input.existing[*e].name
            )))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::drift::NoProviderDrift;
    use crate::snapshot::test_support::*;
    use crate::snapshot::{BuildOptions, build_disruption_inputs};

    fn inputs(objects: &[&str]) -> DisruptionInputs {
        build_disruption_inputs(
            &snapshot(objects),
            &catalog(),
            &BuildOptions::default(),
            &NoProviderDrift,
            "2026-06-01T12:00:00Z".parse().unwrap(),
        )
    }

    fn two_nodes(cpu: &str, pool: bool) -> DisruptionInputs {
        let mut objects = vec![
            node("n1", "", ""),
            node("n2", "", ""),
            bound_pod("default", "a", "n1", cpu, ""),
            bound_pod("default", "b", "n2", cpu, ""),
        ];
        if pool {
            objects.push(DEFAULT_POOL.to_string());
        }
        inputs(&objects.iter().map(String::as_str).collect::<Vec<_>>())
    }

    #[test]
    fn removing_a_node_whose_pods_fit_elsewhere_is_a_delete() {
        let mut d = two_nodes("1", true);
        let outcome = simulate_removal(&mut d, &[0]);
        assert!(matches!(outcome, SimulationOutcome::Delete), "{outcome:?}");
        // The inputs are as they were.
        assert_eq!(d.pods_of[0].len(), 1);
        assert_eq!(d.pods_of[0][0].id, "default/a");
        assert!(d.base.input.pods.is_empty());
        assert_eq!(d.base.input.bound_pods.len(), 2);
        assert!(d.base.input.existing.iter().all(|n| n.schedulable));
    }

    #[test]
    fn removing_a_full_node_needs_a_replacement() {
        let mut d = two_nodes("3", true);
        match simulate_removal(&mut d, &[0]) {
            SimulationOutcome::Replace(claims) => {
                assert_eq!(claims.len(), 1);
                assert_eq!(claims[0].pods, vec![0]);
                assert!(claims[0].instance_types.iter().all(|it| it.name != "small"));
            }
            other => panic!("{other:?}"),
        }
        // Removing both needs room for both.
        match simulate_removal(&mut d, &[1, 0]) {
            SimulationOutcome::Replace(claims) => {
                assert_eq!(claims.iter().map(|c| c.pods.len()).sum::<usize>(), 2);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(simulate_removal(&mut d, &[]), SimulationOutcome::Delete));
    }

    #[test]
    fn a_pod_that_fits_nowhere_makes_the_removal_unschedulable() {
        let mut d = two_nodes("3", false);
        match simulate_removal(&mut d, &[1]) {
            SimulationOutcome::Unschedulable(why) => assert!(why.starts_with("pod default/b: "), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(d.pods_of[1].len(), 1, "the pods are put back");
    }

    #[test]
    fn a_removal_relying_on_an_uninitialized_node_is_unschedulable() {
        let starting = node("n2", ", karpenter.sh/nodepool: default", "");
        let mut d = inputs(&[
            &node("n1", "", ""),
            &starting,
            "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: c2, labels: {karpenter.sh/nodepool: default}}\nspec:\n  requirements: []\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\nstatus: {nodeName: n2}\n",
            &bound_pod("default", "a", "n1", "1", ""),
        ]);
        match simulate_removal(&mut d, &[0]) {
            SimulationOutcome::Unschedulable(why) => assert!(why.contains("not initialized"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_removed_node_is_no_longer_a_topology_domain() {
        // Spread over `rack`, a label only the nodes carry: two racks, a pod on each. Once n2 goes, rack b is
        // gone with it, so b's pod may join a's on rack a (skew over the one rack left is 0). Counting the
        // removed rack as an empty domain would refuse that (2 - 0 > maxSkew 1).
        let spread = "  topologySpreadConstraints:\n  - {maxSkew: 1, topologyKey: rack, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}\n";
        let pod = |name: &str, node: &str| {
            bound_pod("default", name, node, "1", spread)
                .replace("labels: {app: ", "labels: {app: web, name: ")
        };
        let mut d = inputs(&[
            &node("n1", ", rack: a", ""),
            &node("n2", ", rack: b", ""),
            &pod("a", "n1"),
            &pod("b", "n2"),
        ]);
        let outcome = simulate_removal(&mut d, &[1]);
        assert!(matches!(outcome, SimulationOutcome::Delete), "{outcome:?}");
        assert!(d.base.input.existing.iter().all(|n| !n.leaving), "put back");
    }

    #[test]
    fn the_resimulator_maps_candidates_to_view_nodes() {
        use karpenter_api::nodepool::ConsolidationPolicy;
        let mut d = two_nodes("1", true);
        let candidate = ConsolidationCandidate {
            index: 1,
            node_pool: 0,
            node_pool_name: "default".into(),
            policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
            instance_type: "small".into(),
            capacity_type: d.base.interner.intern("spot"),
            zone: d.base.interner.intern("test-zone-1"),
            price: 0.05,
            disruption_cost: 1.0,
            pod_count: 1,
            reserved: false,
        };
        let mut r = SchedulerResimulator::new(&mut d);
        assert!(matches!(r.simulate(&[&candidate]), SimulationOutcome::Delete));
        assert_eq!(r.simulations(), 1);
    }
}
