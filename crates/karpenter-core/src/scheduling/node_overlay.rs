//! What one simulation has placed on existing nodes, kept beside the input rather than in a copy of it.
//!
//! A re-simulation of a disruption candidate places a few dozen pods, yet used to start by copying every
//! existing node's free resources, host ports and attached volumes: at 5,000 nodes that copy, repeated for each
//! of 5,000 candidates, was most of the pass. Here a node's record is copied from the input the first time a pod
//! is placed on it, and every read of a node no pod has reached goes to the input itself, so a simulation pays for
//! the nodes it touches, not for the size of the cluster.

use crate::{requirements::Symbol, resources::Resources};

use super::{nodes::ExistingNode, pod::HostPort};

/// An existing node once the simulation has placed pods on it.
#[derive(Debug, Clone)]
pub(super) struct NodeState {
    /// The input's `available` less the requests of the pods placed here.
    pub available: Resources,
    /// The input's host ports plus those of the pods placed here.
    pub host_ports: Vec<HostPort>,
    /// The input's attached volumes per CSI driver plus those of the pods placed here.
    pub volumes_used: Vec<(Symbol, u32)>,
    /// Indices into `SchedulingInput::pods`, in the order placed.
    pub pods: Vec<usize>,
}

/// What a pod placed on an existing node must be checked against: the node's record in the overlay if a pod was
/// placed there, else the input's.
#[derive(Debug, Clone, Copy)]
pub(super) struct NodeView<'a> {
    pub available: &'a Resources,
    pub host_ports: &'a [HostPort],
    pub volumes_used: &'a [(Symbol, u32)],
}

/// The existing nodes a simulation changed (see the module documentation).
///
/// Invariant: each node is in `touched` at most once. While `slot` is empty a node is found by walking
/// `touched`; once more than [`WALKED_NODES`] nodes are touched, `slot[n] == 0` for a node no pod was placed on,
/// else `touched[slot[n] - 1].0 == n`.
#[derive(Debug, Clone, Default)]
pub(super) struct NodeOverlay {
    /// How many existing nodes there are.
    nodes: usize,
    /// Per existing node: 0 while untouched, else one more than its position in `touched`. Empty until more
    /// than [`WALKED_NODES`] nodes are touched: most re-simulations touch a handful of nodes, and a table the
    /// size of the cluster, zeroed for each of thousands of candidates, cost more than their placements.
    slot: Vec<u32>,
    /// (existing-node index, its state), in the order first touched.
    touched: Vec<(usize, NodeState)>,
}

/// Up to this many touched nodes are found by walking them rather than through a table of every node.
const WALKED_NODES: usize = 16;

impl NodeOverlay {
    /// An overlay over `nodes` existing nodes, none touched.
    pub fn new(nodes: usize) -> Self {
        Self {
            nodes,
            slot: Vec::new(),
            touched: Vec::new(),
        }
    }

    /// Node `n`'s position in `touched`, if a pod was placed on it.
    fn position(&self, n: usize) -> Option<usize> {
        if self.slot.is_empty() {
            self.touched.iter().position(|(t, _)| *t == n)
        } else {
            let slot = *self.slot.get(n)?;
            (slot > 0).then(|| slot as usize - 1)
        }
    }

    /// The state of node `n`, if a pod was placed on it.
    pub fn get(&self, n: usize) -> Option<&NodeState> {
        self.position(n).map(|at| &self.touched[at].1)
    }

    /// Node `n` as placement sees it now; `node` must be the input's record of node `n`.
    pub fn view<'a>(&'a self, n: usize, node: &'a ExistingNode) -> NodeView<'a> {
        match self.get(n) {
            Some(state) => NodeView {
                available: &state.available,
                host_ports: &state.host_ports,
                volumes_used: &state.volumes_used,
            },
            None => NodeView {
                available: &node.available,
                host_ports: &node.host_ports,
                volumes_used: &node.volumes_used,
            },
        }
    }

    /// The state of node `n` to change, copied from `node` (the input's record of node `n`) the first time.
    pub fn touch(&mut self, n: usize, node: &ExistingNode) -> &mut NodeState {
        let at = match self.position(n) {
            Some(at) => at,
            None => {
                assert!(n < self.nodes, "existing node {n} of {}", self.nodes);
                self.touched.push((
                    n,
                    NodeState {
                        available: node.available.clone(),
                        host_ports: node.host_ports.clone(),
                        volumes_used: node.volumes_used.clone(),
                        pods: Vec::new(),
                    },
                ));
                if !self.slot.is_empty() {
                    self.slot[n] = u32::try_from(self.touched.len()).unwrap_or(u32::MAX);
                } else if self.touched.len() > WALKED_NODES {
                    self.slot = vec![0; self.nodes];
                    for (i, (t, _)) in self.touched.iter().enumerate() {
                        self.slot[*t] = u32::try_from(i + 1).unwrap_or(u32::MAX);
                    }
                }
                self.touched.len() - 1
            }
        };
        &mut self.touched[at].1
    }

    /// The pods placed on each existing node that got any, by ascending node index.
    pub fn into_placements(self) -> Vec<(usize, Vec<usize>)> {
        let mut placements: Vec<(usize, Vec<usize>)> = self
            .touched
            .into_iter()
            .filter(|(_, state)| !state.pods.is_empty())
            .map(|(n, state)| (n, state.pods))
            .collect();
        placements.sort_unstable_by_key(|(n, _)| *n);
        placements
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::{LabelInterner, Requirements};

    fn symbol() -> Symbol {
        LabelInterner::default().intern("ebs.csi.aws.com")
    }

    fn node(cpu_milli: i64) -> ExistingNode {
        ExistingNode {
            name: "n".into(),
            hostname: symbol(),
            requirements: Requirements::default(),
            available: Resources::zero().with(crate::resources::ResourceId::CPU, cpu_milli),
            taints: Vec::new(),
            host_ports: Vec::new(),
            volume_limits: Vec::new(),
            volumes_used: vec![(symbol(), 1)],
            nodepool: None,
            schedulable: true,
            leaving: false,
        }
    }

    #[test]
    fn an_untouched_node_reads_through_to_the_input() {
        let nodes = [node(1000), node(2000)];
        let overlay = NodeOverlay::new(nodes.len());
        assert!(overlay.get(0).is_none() && overlay.get(1).is_none());
        assert_eq!(overlay.view(1, &nodes[1]).available.cpu(), 2000);
        assert_eq!(overlay.view(1, &nodes[1]).volumes_used, &[(symbol(), 1)]);
        assert!(overlay.get(7).is_none(), "out of range is untouched");
        assert!(overlay.into_placements().is_empty());
    }

    #[test]
    fn a_touched_node_is_copied_once_and_read_from_the_overlay() {
        let nodes = [node(1000), node(2000), node(3000)];
        let mut overlay = NodeOverlay::new(nodes.len());
        let request = Resources::zero().with(crate::resources::ResourceId::CPU, 500);
        for (n, pod) in [(2, 0), (0, 1), (2, 2)] {
            let state = overlay.touch(n, &nodes[n]);
            state.available.sub_assign(&request);
            state.pods.push(pod);
        }
        assert_eq!(
            overlay.view(2, &nodes[2]).available.cpu(),
            2000,
            "both placements counted"
        );
        assert_eq!(overlay.view(0, &nodes[0]).available.cpu(), 500);
        assert_eq!(overlay.view(1, &nodes[1]).available.cpu(), 2000, "untouched");
        assert_eq!(nodes[2].available.cpu(), 3000, "the input is unchanged");
        // Touching without placing (as a failed check never does, but the overlay allows) lists nothing.
        overlay.touch(1, &nodes[1]);
        assert_eq!(
            overlay.into_placements(),
            vec![(0, vec![1]), (2, vec![0, 2])],
            "by node index, pods in the order placed"
        );
    }

    #[test]
    fn touching_more_nodes_than_are_walked_keeps_every_record() {
        let nodes: Vec<ExistingNode> = (0..100).map(|i| node(1000 + i)).collect();
        let mut overlay = NodeOverlay::new(nodes.len());
        let request = Resources::zero().with(crate::resources::ResourceId::CPU, 100);
        // Every third node, twice each, past the point where the overlay builds its table of every node.
        let touched: Vec<usize> = (0..nodes.len()).step_by(3).collect();
        assert!(touched.len() > WALKED_NODES);
        for round in 0..2 {
            for &n in &touched {
                let state = overlay.touch(n, &nodes[n]);
                state.available.sub_assign(&request);
                state.pods.push(n * 10 + round);
            }
        }
        for (n, node) in nodes.iter().enumerate() {
            let expected = if n % 3 == 0 {
                node.available.cpu() - 200
            } else {
                node.available.cpu()
            };
            assert_eq!(overlay.view(n, node).available.cpu(), expected, "node {n}");
            assert_eq!(overlay.get(n).is_some(), n % 3 == 0, "node {n}");
        }
        let placements = overlay.into_placements();
        assert_eq!(placements.len(), touched.len());
        assert!(
            placements
                .iter()
                .all(|(n, pods)| *pods == vec![n * 10, n * 10 + 1])
        );
    }
}
