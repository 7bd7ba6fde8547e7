//! The instance types the simulation may launch: what the cloud provider offers each NodePool, merged into one
//! catalog (core's scheduling input takes one catalog and narrows it per NodePool by the NodePool's
//! requirements).

use karpenter_api::nodepool::NodePool;
use karpenter_core::{
    catalog::CatalogFile,
    cloudprovider::{CloudProvider, CloudProviderError},
};

/// Every instance type the provider offers any of `pools`, each once (the first NodePool's version wins;
/// providers return the same offerings for every NodePool of one node class).
pub async fn catalog_for(
    cloud: &dyn CloudProvider,
    pools: &[NodePool],
) -> Result<CatalogFile, CloudProviderError> {
    let mut catalog = CatalogFile::default();
    let mut seen = std::collections::HashSet::new();
    for pool in pools {
        for it in cloud.instance_types(pool).await? {
            if seen.insert(it.name.clone()) {
                catalog.instance_types.push(it);
            }
        }
    }
    Ok(catalog)
}
