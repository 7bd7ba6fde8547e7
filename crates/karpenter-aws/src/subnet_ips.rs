//! Free IP addresses per subnet, shared by every launch, and the subnet each zone of a launch uses: the one
//! with the most free addresses, as upstream's subnet provider picks it.
//!
//! EC2's count (DescribeSubnets, when the EC2NodeClass controller resolves a class, every minute) is the base.
//! A launch leases, before its CreateFleet, the addresses it is about to use in the subnet it picks in each
//! zone, so launches at the same time see each other and spread over a zone's subnets instead of all filling
//! the same nearly-full one. The lease gives the addresses back when the launch fails, and all but the zone it
//! launched in when it succeeds; those stay subtracted until a count asked for after the launch finished (which
//! includes the instance). A subnet with no free addresses left is not chosen.
//!
//! How many addresses a launch uses: under the VPC CNI each pod takes an address from its node's subnet, so a
//! launch counts on the smallest max pods among the instance types it may launch in the zone (upstream's
//! estimate), and at least one, the node's own; with prefix delegation, whole /28 prefixes for those pods
//! (at least the class's `ipPrefixCount`) plus the node's own address ([`crate::pod_addressing`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use karpenter_api::ec2nodeclass::Subnet;

use crate::counted_capacity::CountedCapacity;

/// EC2's free address counts of some subnets, and when they were asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetAddressCounts {
    /// Taken before the DescribeSubnets call, so a launch that finished while EC2 counted stays subtracted.
    pub asked_at: Instant,
    /// Subnet id → available IP addresses.
    pub available: Vec<(String, i64)>,
}

/// How good a subnet is for a launch: counted subnets with free addresses by how many, then subnets never
/// counted (right after start-up); a counted subnet with none free is not a candidate.
fn preference(free: Option<i64>) -> Option<(bool, i64)> {
    match free {
        Some(free) if free <= 0 => None,
        Some(free) => Some((true, free)),
        None => Some((false, 0)),
    }
}

/// Subnet id → counts. Share it as `Arc<SubnetIps>`.
#[derive(Debug, Default)]
pub struct SubnetIps {
    counts: Mutex<HashMap<String, CountedCapacity>>,
}

impl SubnetIps {
    /// Takes EC2's counts: each replaces the subnet's previous count, and forgets the launches that finished
    /// before it was asked for (EC2 counted their addresses).
    pub fn record_reported(&self, counts: &SubnetAddressCounts) {
        let mut all = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        for (id, available) in &counts.available {
            all.entry(id.clone())
                .or_default()
                .record_reported(*available, counts.asked_at);
        }
    }

    /// Free addresses of subnet `id`, net of launches in flight and not yet counted; None before EC2 counted it.
    pub fn free(&self, id: &str) -> Option<i64> {
        let all = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(id).and_then(CountedCapacity::free)
    }

    /// Per zone, the subnet of `subnets` (a class's status, most free addresses first as of its resolution) a
    /// launch would use now: the most free addresses, ties and uncounted subnets in the order given.
    pub fn choose(&self, subnets: &[Subnet]) -> BTreeMap<String, String> {
        let all = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        choose_locked(&all, subnets)
            .into_iter()
            .map(|(zone, subnet)| (zone, subnet.id.clone()))
            .collect()
    }

    /// Chooses as [`SubnetIps::choose`] in each zone of `addresses` (zone → addresses one instance there uses)
    /// and holds those addresses in the chosen subnet until the lease is settled. A zone whose subnets have no
    /// free addresses gets none.
    pub fn lease(self: &Arc<Self>, subnets: &[Subnet], addresses: &BTreeMap<String, i64>) -> SubnetLease {
        let mut all = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let chosen: Vec<(String, String, i64)> = choose_locked(&all, subnets)
            .into_iter()
            .filter_map(|(zone, subnet)| {
                let needed = addresses.get(&zone)?.max(&1);
                Some((zone, subnet.id.clone(), *needed))
            })
            .collect();
        for (_, id, needed) in &chosen {
            all.entry(id.clone()).or_default().hold(*needed);
        }
        SubnetLease {
            ips: Arc::clone(self),
            held: chosen
                .into_iter()
                .map(|(zone, id, needed)| (zone, (id, needed)))
                .collect(),
            launched: None,
        }
    }

    fn settle(&self, held: &BTreeMap<String, (String, i64)>, launched: Option<(&str, Instant)>) {
        let mut all = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        for (zone, (id, addresses)) in held {
            let Some(entry) = all.get_mut(id) else {
                continue;
            };
            let finished = launched
                .filter(|(launched_zone, _)| launched_zone == zone)
                .map(|(_, at)| at);
            entry.settle(*addresses, finished);
        }
    }
}

fn choose_locked<'a>(
    all: &HashMap<String, CountedCapacity>,
    subnets: &'a [Subnet],
) -> BTreeMap<String, &'a Subnet> {
    let mut best: BTreeMap<String, (&Subnet, (bool, i64))> = BTreeMap::new();
    for subnet in subnets {
        let Some(rank) = preference(all.get(&subnet.id).and_then(CountedCapacity::free)) else {
            continue;
        };
        // Strictly better only: ties keep the earlier subnet.
        if best.get(&subnet.zone).is_none_or(|(_, current)| rank > *current) {
            best.insert(subnet.zone.clone(), (subnet, rank));
        }
    }
    best.into_iter()
        .map(|(zone, (subnet, _))| (zone, subnet))
        .collect()
}

/// The addresses one launch holds: one subnet per zone. Dropping it unsettled (a failed launch) gives all of
/// them back; [`SubnetLease::launched`] keeps the launched zone's.
#[derive(Debug)]
pub struct SubnetLease {
    ips: Arc<SubnetIps>,
    /// Zone → (subnet id, addresses held).
    held: BTreeMap<String, (String, i64)>,
    launched: Option<(String, Instant)>,
}

impl SubnetLease {
    /// Zone → the subnet the launch uses there.
    pub fn subnets(&self) -> BTreeMap<String, String> {
        self.held
            .iter()
            .map(|(zone, (id, _))| (zone.clone(), id.clone()))
            .collect()
    }

    /// The instance launched in `zone` at `now`: its addresses stay subtracted until a count asked for later;
    /// the other zones' are given back.
    pub fn launched(mut self, zone: &str, now: Instant) {
        self.launched = Some((zone.to_string(), now));
    }
}

impl Drop for SubnetLease {
    fn drop(&mut self) {
        let launched = self.launched.as_ref().map(|(zone, at)| (zone.as_str(), *at));
        self.ips.settle(&self.held, launched);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn subnet(id: &str, zone: &str) -> Subnet {
        Subnet {
            id: id.into(),
            zone: zone.into(),
            zone_id: None,
        }
    }

    fn counts(asked_at: Instant, available: &[(&str, i64)]) -> SubnetAddressCounts {
        SubnetAddressCounts {
            asked_at,
            available: available.iter().map(|(id, n)| (id.to_string(), *n)).collect(),
        }
    }

    fn needs(zone: &str, addresses: i64) -> BTreeMap<String, i64> {
        BTreeMap::from([(zone.to_string(), addresses)])
    }

    #[test]
    fn launches_at_the_same_time_spread_over_a_zones_subnets() {
        let t0 = Instant::now();
        let ips = Arc::new(SubnetIps::default());
        let subnets = [subnet("subnet-a1", "zone-a"), subnet("subnet-a2", "zone-a")];
        ips.record_reported(&counts(t0, &[("subnet-a1", 40), ("subnet-a2", 30)]));

        let first = ips.lease(&subnets, &needs("zone-a", 29));
        assert_eq!(first.subnets()["zone-a"], "subnet-a1", "the roomiest subnet");
        assert_eq!(ips.free("subnet-a1"), Some(11));
        let second = ips.lease(&subnets, &needs("zone-a", 29));
        assert_eq!(
            second.subnets()["zone-a"],
            "subnet-a2",
            "the first launch's addresses are counted as used"
        );
        assert_eq!(ips.choose(&subnets)["zone-a"], "subnet-a1");
        drop((first, second));
    }

    #[test]
    fn a_failed_launch_gives_its_addresses_back_and_a_launched_one_keeps_them_until_ec2_counts_again() {
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let ips = Arc::new(SubnetIps::default());
        let subnets = [subnet("subnet-a", "zone-a"), subnet("subnet-b", "zone-b")];
        ips.record_reported(&counts(t0, &[("subnet-a", 100), ("subnet-b", 100)]));
        let both = BTreeMap::from([("zone-a".to_string(), 10), ("zone-b".to_string(), 20)]);

        let failed = ips.lease(&subnets, &both);
        assert_eq!((ips.free("subnet-a"), ips.free("subnet-b")), (Some(90), Some(80)));
        drop(failed);
        assert_eq!(
            (ips.free("subnet-a"), ips.free("subnet-b")),
            (Some(100), Some(100))
        );

        // Launched in zone-b: zone-a's addresses come back, zone-b's stay used.
        ips.lease(&subnets, &both).launched("zone-b", at(10));
        assert_eq!(
            (ips.free("subnet-a"), ips.free("subnet-b")),
            (Some(100), Some(80))
        );
        // A count asked for before the launch finished may not include it.
        ips.record_reported(&counts(at(5), &[("subnet-b", 100)]));
        assert_eq!(ips.free("subnet-b"), Some(80));
        // One asked for afterwards does, and replaces the estimate.
        ips.record_reported(&counts(at(60), &[("subnet-b", 75)]));
        assert_eq!(ips.free("subnet-b"), Some(75));
    }

    #[test]
    fn a_subnet_without_free_addresses_is_skipped() {
        let t0 = Instant::now();
        let ips = Arc::new(SubnetIps::default());
        let subnets = [
            subnet("subnet-full", "zone-a"),
            subnet("subnet-small", "zone-a"),
            subnet("subnet-b", "zone-b"),
        ];
        ips.record_reported(&counts(
            t0,
            &[("subnet-full", 0), ("subnet-small", 3), ("subnet-b", 0)],
        ));
        assert_eq!(
            ips.choose(&subnets),
            BTreeMap::from([("zone-a".to_string(), "subnet-small".to_string())]),
            "zone-b has no subnet with room"
        );
        let lease = ips.lease(&subnets, &needs("zone-a", 3));
        assert_eq!(ips.free("subnet-small"), Some(0));
        assert!(
            ips.lease(&subnets, &needs("zone-a", 1)).subnets().is_empty(),
            "the last addresses are leased"
        );
        drop(lease);
        assert_eq!(ips.free("subnet-small"), Some(3));
    }

    #[test]
    fn before_ec2_counted_the_class_status_order_decides() {
        let ips = Arc::new(SubnetIps::default());
        let subnets = [subnet("subnet-2", "zone-a"), subnet("subnet-1", "zone-a")];
        assert_eq!(ips.free("subnet-2"), None);
        let lease = ips.lease(&subnets, &needs("zone-a", 0));
        assert_eq!(lease.subnets()["zone-a"], "subnet-2");
        drop(lease);
        ips.record_reported(&counts(Instant::now(), &[("subnet-1", 5)]));
        assert_eq!(
            ips.choose(&subnets)["zone-a"],
            "subnet-1",
            "counted beats uncounted"
        );
    }
}
