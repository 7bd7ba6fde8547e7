//! A CloudProvider that records `karpenter_cloudprovider_duration_seconds` and
//! `karpenter_cloudprovider_errors_total` around every call, labelled with the calling controller, so each
//! controller gets its own wrapper and no provider has to record them itself.

use std::{future::Future, sync::Arc, time::Instant};

use async_trait::async_trait;
use karpenter_api::{nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_core::{
    catalog::CatalogInstanceType,
    cloudprovider::{
        CloudProvider, CloudProviderError, InstanceSummary, NodeClassKind, RebootError, RebootPolicy,
        RepairPolicy,
    },
    disruption::drift::DriftProvider,
};
use karpenter_metrics::{CloudProviderErrorLabels, CloudProviderLabels, metrics};

pub struct MeteredCloudProvider {
    inner: Arc<dyn CloudProvider>,
    controller: &'static str,
}

impl MeteredCloudProvider {
    pub fn wrap(inner: Arc<dyn CloudProvider>, controller: &'static str) -> Arc<dyn CloudProvider> {
        Arc::new(Self { inner, controller })
    }

    async fn timed<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T, CloudProviderError>>,
    ) -> Result<T, CloudProviderError> {
        let started = Instant::now();
        let result = call.await;
        let m = metrics();
        m.cloudprovider_duration_seconds
            .get_or_create(&CloudProviderLabels {
                controller: self.controller.into(),
                method: method.into(),
                provider: self.inner.name().into(),
            })
            .observe(started.elapsed().as_secs_f64());
        if let Err(error) = &result {
            m.cloudprovider_errors
                .get_or_create(&CloudProviderErrorLabels {
                    controller: self.controller.into(),
                    method: method.into(),
                    provider: self.inner.name().into(),
                    error: upstream_error_name(error).into(),
                })
                .inc();
        }
        result
    }
}

/// Upstream's `error` label values.
fn upstream_error_name(error: &CloudProviderError) -> &'static str {
    match error {
        CloudProviderError::InsufficientCapacity { .. } => "InsufficientCapacityError",
        CloudProviderError::NodeClaimNotFound(_) => "NodeClaimNotFoundError",
        CloudProviderError::NodeClassNotReady { .. } => "NodeClassNotReadyError",
        CloudProviderError::Create { .. } | CloudProviderError::Transient(_) => "",
    }
}

impl DriftProvider for MeteredCloudProvider {
    fn is_drifted(&self, claim: &NodeClaim) -> Option<String> {
        self.inner.is_drifted(claim)
    }
}

#[async_trait]
impl CloudProvider for MeteredCloudProvider {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        self.timed("Create", self.inner.create(claim)).await
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        self.timed("Delete", self.inner.delete(claim)).await
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.timed("Get", self.inner.get(provider_id)).await
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.timed("List", self.inner.list()).await
    }

    async fn list_instances(&self) -> Result<Vec<InstanceSummary>, CloudProviderError> {
        // The same List call to the cloud, without a NodeClaim per instance.
        self.timed("List", self.inner.list_instances()).await
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
    ) -> Result<Vec<CatalogInstanceType>, CloudProviderError> {
        self.timed("GetInstanceTypes", self.inner.instance_types(node_pool))
            .await
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.inner.repair_policies()
    }

    fn reboot_policies(&self) -> Vec<RebootPolicy> {
        self.inner.reboot_policies()
    }

    async fn reboot(&self, claim: &NodeClaim, operation_id: &str) -> Result<(), RebootError> {
        let started = Instant::now();
        let result = self.inner.reboot(claim, operation_id).await;
        let m = metrics();
        m.cloudprovider_duration_seconds
            .get_or_create(&CloudProviderLabels {
                controller: self.controller.into(),
                method: "Reboot".into(),
                provider: self.inner.name().into(),
            })
            .observe(started.elapsed().as_secs_f64());
        if let Err(error) = &result {
            let name = match error {
                RebootError::NotImplemented => "NodeRebootNotImplementedError",
                RebootError::Rejected(_) => "NodeRebootFailedError",
                RebootError::Provider(e) => upstream_error_name(e),
            };
            m.cloudprovider_errors
                .get_or_create(&CloudProviderErrorLabels {
                    controller: self.controller.into(),
                    method: "Reboot".into(),
                    provider: self.inner.name().into(),
                    error: name.into(),
                })
                .inc();
        }
        result
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.inner.supported_node_classes()
    }

    fn node_classes_report_readiness(&self) -> bool {
        self.inner.node_classes_report_readiness()
    }

    fn node_class_reports_readiness(&self, kind: &NodeClassKind) -> bool {
        self.inner.node_class_reports_readiness(kind)
    }
}
