//! What a pod requests, from its compact spec: the scheduler's `resource.PodRequests` (containers, sidecars,
//! init containers, pod-level resources, overhead). Here rather than in [`crate::resources`], which knows
//! resource vectors and nothing of pods.

use super::compact_pod::{CompactContainer, CompactPodTemplate};
use crate::resources::{ONE_POD, ResourceError, ResourceId, ResourceTable, Resources, parse_quantity};

/// What one container requests, with Kubernetes' defaulting: a resource with a limit and no request requests
/// its limit.
pub fn container_requests(
    container: &CompactContainer,
    table: &mut ResourceTable,
) -> Result<Resources, ResourceError> {
    let mut out = Resources::zero();
    let Some(resources) = container.resources.as_ref() else {
        return Ok(out);
    };
    let requests = resources.requests.as_ref();
    for (name, q) in requests.into_iter().flatten() {
        out.set(table.intern(name), parse_quantity(name, q)?);
    }
    for (name, q) in resources.limits.iter().flatten() {
        if !requests.is_some_and(|r| r.contains_key(name)) {
            out.set(table.intern(name), parse_quantity(name, q)?);
        }
    }
    Ok(out)
}

/// Resources that pod-level `spec.resources` may set.
fn is_pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// Whether any container or init container names `name` in its requests or limits.
fn containers_name(spec: &CompactPodTemplate, name: &str) -> bool {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            c.resources.as_ref().is_some_and(|r| {
                r.requests.as_ref().is_some_and(|m| m.contains_key(name))
                    || r.limits.as_ref().is_some_and(|m| m.contains_key(name))
            })
        })
}

/// What a pod requests, exactly as the scheduler computes it (`resource.PodRequests`):
///
/// 1. regular containers and restartable init containers (sidecars, `restartPolicy: Always`) all run together,
///    so their requests add up;
/// 2. each ordinary init container runs alone, beside the sidecars started before it, so the pod needs at least
///    that much while it runs; the pod requests the larger of (1) and the largest of these, per resource;
/// 3. pod-level `spec.resources.requests` (cpu, memory, hugepages) replaces the container total for what it
///    names, with Kubernetes' defaulting: a pod-level limit without a request requests the containers' total if
///    they request that resource, else the limit;
/// 4. `spec.overhead` (the RuntimeClass's) is added;
/// 5. `pods` is 1.
///
/// Requests, never limits, except that a container limit with no request defaults the request to it.
pub fn pod_requests(
    spec: &CompactPodTemplate,
    table: &mut ResourceTable,
) -> Result<Resources, ResourceError> {
    let mut total = Resources::zero();
    for c in &spec.containers {
        total += &container_requests(c, table).map_err(|e| e.at(|| format!("container {:?}", c.name)))?;
    }
    let mut sidecars = Resources::zero();
    let mut init_peak = Resources::zero();
    for c in spec.init_containers.iter().flatten() {
        let requests =
            container_requests(c, table).map_err(|e| e.at(|| format!("init container {:?}", c.name)))?;
        if c.restart_policy.as_deref() == Some("Always") {
            total += &requests;
            sidecars += &requests;
            init_peak.max_assign(&sidecars);
        } else {
            let mut running = requests;
            running += &sidecars;
            init_peak.max_assign(&running);
        }
    }
    total.max_assign(&init_peak);

    if let Some(pod_level) = spec.resources.as_ref() {
        let requests = pod_level.requests.as_ref();
        for (name, q) in requests
            .into_iter()
            .flatten()
            .filter(|(n, _)| is_pod_level_resource(n))
        {
            let v = parse_quantity(name, q).map_err(|e| e.at(|| "spec.resources.requests".to_string()))?;
            total.set(table.intern(name), v);
        }
        for (name, q) in pod_level
            .limits
            .iter()
            .flatten()
            .filter(|(n, _)| is_pod_level_resource(n))
        {
            if requests.is_some_and(|r| r.contains_key(name)) {
                continue;
            }
            // Kubernetes defaults the pod-level request of an overcommittable resource the containers request to
            // their total, which `total` already holds; otherwise to the pod-level limit.
            let overcommittable = name == "cpu" || name == "memory";
            if overcommittable && containers_name(spec, name) {
                continue;
            }
            let v = parse_quantity(name, q).map_err(|e| e.at(|| "spec.resources.limits".to_string()))?;
            total.set(table.intern(name), v);
        }
    }

    if let Some(overhead) = spec.overhead.as_ref() {
        total += &Resources::from_resource_list(overhead, table)
            .map_err(|e| e.at(|| "spec.overhead".to_string()))?;
    }
    total.set(ResourceId::PODS, ONE_POD);
    Ok(total)
}

#[cfg(test)]
mod tests;
