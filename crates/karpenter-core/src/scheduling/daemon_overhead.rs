//! What the DaemonSet pods of a NodePool's new node take, per instance type. Which DaemonSets land on a node
//! depends on the instance type it launches as (an arm64-only agent skips amd64 types, a GPU exporter selects
//! GPU families), so a NodeClaim keeps a type only when the pods placed on it plus that type's own DaemonSet
//! overhead fit, and a pod binding a host port one of those DaemonSets binds cannot go on that type. Types that
//! run the same DaemonSets share one [`DaemonOverhead`]: there are usually a handful, against hundreds of types.

use crate::{requirements::Symbol, resources::Resources};

use super::pod::HostPort;

/// The DaemonSet pods one node runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonOverhead {
    /// Their summed requests.
    pub requests: Resources,
    /// The host ports they bind, which no other pod on the node can bind too.
    pub host_ports: Vec<HostPort>,
}

impl DaemonOverhead {
    /// Whether a pod binding `ports` collides with these DaemonSets' host ports.
    pub fn conflicts(&self, ports: &[HostPort], wildcard_ip: Symbol) -> bool {
        ports
            .iter()
            .any(|p| self.host_ports.iter().any(|d| p.conflicts(d, wildcard_ip)))
    }
}

/// The DaemonSet overhead of each of a NodePool's instance types (indexed as its `instance_types`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonOverheads {
    /// The distinct overheads; never empty.
    groups: Vec<DaemonOverhead>,
    /// Per instance type, its index into `groups`; a type past the end has the first.
    group_of: Vec<u32>,
}

impl Default for DaemonOverheads {
    /// No DaemonSet runs on any type.
    fn default() -> Self {
        Self::uniform(DaemonOverhead::default())
    }
}

impl DaemonOverheads {
    /// The same overhead on every instance type.
    pub fn uniform(overhead: DaemonOverhead) -> Self {
        Self {
            groups: vec![overhead],
            group_of: Vec::new(),
        }
    }

    /// `groups[group_of[i]]` is instance type `i`'s overhead. An empty `groups` means no overhead anywhere; an
    /// index out of range counts as the first group.
    pub fn new(groups: Vec<DaemonOverhead>, group_of: Vec<u32>) -> Self {
        if groups.is_empty() {
            return Self::default();
        }
        let last = u32::try_from(groups.len() - 1).unwrap_or(u32::MAX);
        let group_of = group_of
            .into_iter()
            .map(|g| if g > last { 0 } else { g })
            .collect();
        Self { groups, group_of }
    }

    /// The distinct overheads.
    pub fn groups(&self) -> &[DaemonOverhead] {
        &self.groups
    }

    /// Index into [`Self::groups`] of instance type `instance_type`'s overhead.
    #[inline]
    pub fn group_of(&self, instance_type: usize) -> usize {
        self.group_of.get(instance_type).map_or(0, |&g| g as usize)
    }

    /// Instance type `instance_type`'s overhead.
    #[inline]
    pub fn of(&self, instance_type: usize) -> &DaemonOverhead {
        &self.groups[self.group_of(instance_type)]
    }

    /// The smallest and largest requests over the overheads of `instance_types`, slot by slot (`None` when
    /// there are none): what explanations quote, and the smallest is what a NodeClaim requests for its
    /// DaemonSets (upstream's rule: the launch may pick any of its types).
    pub fn bounds(&self, instance_types: impl IntoIterator<Item = usize>) -> Option<(Resources, Resources)> {
        let mut seen = vec![false; self.groups.len()];
        let mut bounds: Option<(Resources, Resources)> = None;
        for i in instance_types {
            let g = self.group_of(i);
            if std::mem::replace(&mut seen[g], true) {
                continue;
            }
            let requests = &self.groups[g].requests;
            match bounds.as_mut() {
                None => bounds = Some((requests.clone(), requests.clone())),
                Some((min, max)) => {
                    min.min_assign(requests);
                    max.max_assign(requests);
                }
            }
        }
        bounds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{requirements::LabelInterner, resources::ResourceId};

    fn cpu(milli: i64) -> DaemonOverhead {
        DaemonOverhead {
            requests: Resources::zero().with(ResourceId::CPU, milli),
            host_ports: Vec::new(),
        }
    }

    #[test]
    fn each_type_reads_its_own_overhead_and_bounds_cover_only_the_types_asked() {
        let overheads = DaemonOverheads::new(vec![cpu(100), cpu(300)], vec![0, 1, 0]);
        assert_eq!(overheads.of(1).requests.cpu(), 300);
        assert_eq!(overheads.of(2).requests.cpu(), 100);
        // A type the table does not list (a template grown after it was built) has the first overhead.
        assert_eq!(overheads.of(7).requests.cpu(), 100);
        let (min, max) = overheads.bounds([0, 1]).unwrap();
        assert_eq!((min.cpu(), max.cpu()), (100, 300));
        let (min, max) = overheads.bounds([1]).unwrap();
        assert_eq!((min.cpu(), max.cpu()), (300, 300));
        assert!(overheads.bounds([]).is_none());
    }

    #[test]
    fn a_pod_conflicts_only_with_the_ports_the_daemonsets_bind() {
        let mut i = LabelInterner::new();
        let (any, tcp, udp) = (i.intern(""), i.intern("TCP"), i.intern("UDP"));
        let port = |port, protocol| HostPort {
            ip: any,
            port,
            protocol,
        };
        let agent = DaemonOverhead {
            requests: Resources::zero(),
            host_ports: vec![port(9100, tcp)],
        };
        assert!(agent.conflicts(&[port(9100, tcp)], any));
        assert!(!agent.conflicts(&[port(9100, udp), port(8080, tcp)], any));
        assert!(!DaemonOverhead::default().conflicts(&[port(9100, tcp)], any));
    }
}
