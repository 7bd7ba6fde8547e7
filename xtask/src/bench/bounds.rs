//! Lower bounds to report beside node count and cost (benchmarks.md §4.2).
//!
//! With demand `D_r` per resource r (CPU, memory, pods), allowed instance types t with capacity `c_t,r`,
//! overhead `o_t,r`, allocatable `a_t,r = c_t,r - o_t,r` and price `p_t` (the cheapest allowed offering), and
//! `F` a lower bound on the node count:
//!
//! - nodes: `max(forced, max_r ceil(D_r / max_t a_t,r))`, where `forced` comes from hard constraints
//!   (pairwise hostname anti-affinity, hostname spreads);
//! - cost, single-resource LP bound: `D_r · min_t (p_t / a_t,r)`;
//! - cost, with the per-node overhead: every node pays for its overhead, so
//!   `cost >= min_t (p_t / c_t,r) · Σ c_t,r x_t`
//!   `>= min_t (p_t / c_t,r) · (D_r + F · min_t o_t,r)`;
//!   on the fake catalog this is §4.2's "LP bound + N/5 nodes x 0.1 vCPU";
//! - cost, additive prices: when every price is exactly `α·vCPU + β·GiB` (the KWOK catalog), cost is
//!   `α Σ c_cpu x + β Σ c_mem x >= α (D_cpu + F o_cpu) + β (D_mem + F o_mem)`
//!   (§4.2's `0.025·ΣCPU + 0.0010737·ΣGiB` plus the per-node overhead).
//!
//! The reported cost bound is the largest of these. All are valid lower bounds on any packing, not just on
//! Karpenter's; DaemonSets are absent from every workload.

use super::catalogs::GIB;
use super::workloads::Workload;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub nodes: usize,
    pub cost: f64,
}

/// Per allowed type: (price, capacity, overhead) over [CPU in cores, memory in bytes, pods].
struct TypeFacts {
    price: f64,
    capacity: [f64; 3],
    overhead: [f64; 3],
}

const RESOURCES: [&str; 3] = ["cpu", "memory", "pods"];

pub fn lower_bounds(w: &Workload) -> Bounds {
    let demand = [
        w.requests
            .iter()
            .map(|r| r.cpu_milli as f64 / 1000.0)
            .sum::<f64>(),
        w.requests.iter().map(|r| r.memory_bytes as f64).sum::<f64>(),
        w.requests.len() as f64,
    ];
    let types: Vec<TypeFacts> = w
        .catalog
        .instance_types
        .iter()
        .filter(|it| (w.allowed)(it))
        .filter_map(|it| {
            let price = it
                .offerings
                .iter()
                .filter(|o| o.available && w.capacity_type.is_none_or(|ct| o.capacity_type == ct))
                .map(|o| o.price)
                .min_by(f64::total_cmp)?;
            let overhead_total = it.overhead.total();
            let milli = |q: Option<&i64>| q.copied().unwrap_or(0) as f64 / 1000.0;
            Some(TypeFacts {
                price,
                capacity: RESOURCES.map(|r| milli(it.capacity.get(r))),
                overhead: RESOURCES.map(|r| milli(overhead_total.get(r))),
            })
        })
        .collect();
    if types.is_empty() {
        return Bounds {
            nodes: w.forced_nodes,
            cost: 0.0,
        };
    }

    let mut nodes = w.forced_nodes;
    for (r, &d) in demand.iter().enumerate() {
        let largest = types
            .iter()
            .map(|t| t.capacity[r] - t.overhead[r])
            .fold(0.0, f64::max);
        if largest > 0.0 && d > 0.0 {
            nodes = nodes.max((d / largest).ceil() as usize);
        }
    }
    let f = nodes as f64;

    let mut cost: f64 = 0.0;
    for (r, &d) in demand.iter().enumerate() {
        let per_allocatable = types
            .iter()
            .filter(|t| t.capacity[r] - t.overhead[r] > 0.0)
            .map(|t| t.price / (t.capacity[r] - t.overhead[r]))
            .fold(f64::INFINITY, f64::min);
        if per_allocatable.is_finite() {
            cost = cost.max(d * per_allocatable);
        }
        let per_capacity = types
            .iter()
            .filter(|t| t.capacity[r] > 0.0)
            .map(|t| t.price / t.capacity[r])
            .fold(f64::INFINITY, f64::min);
        let min_overhead = types.iter().map(|t| t.overhead[r]).fold(f64::INFINITY, f64::min);
        if per_capacity.is_finite() {
            cost = cost.max((d + f * min_overhead) * per_capacity);
        }
    }
    if let Some((per_vcpu, per_gib)) = w.linear_price {
        let min_overhead = |r: usize| types.iter().map(|t| t.overhead[r]).fold(f64::INFINITY, f64::min);
        let additive = per_vcpu * (demand[0] + f * min_overhead(0))
            + per_gib * (demand[1] + f * min_overhead(1)) / GIB as f64;
        cost = cost.max(additive);
    }
    Bounds { nodes, cost }
}
