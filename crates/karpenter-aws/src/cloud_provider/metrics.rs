//! The instance type gauges and the user data size gauge the provider records.

use karpenter_core::catalog::CatalogInstanceType;

use crate::userdata::{self};
use karpenter_metrics::{InstanceTypeLabels, InstanceTypeOfferingLabels, NodeClassLabels};

/// `karpenter_ec2nodeclasses_userdata_bytes{nodeclass}`; warns from 90% of EC2's 16 KiB limit.
pub(super) fn record_user_data_size(node_class: &str, bytes: usize) {
    if bytes * 10 >= userdata::USER_DATA_LIMIT_BYTES * 9 {
        tracing::warn!(
            ec2nodeclass = node_class,
            bytes,
            limit = userdata::USER_DATA_LIMIT_BYTES,
            "the user data is close to EC2's limit"
        );
    }
    karpenter_metrics::metrics()
        .ec2nodeclasses_userdata_bytes
        .get_or_create(&NodeClassLabels {
            nodeclass: node_class.to_string(),
        })
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
}

/// The instance type gauges from `catalog`: each type's vCPUs and memory, and each offering's availability and
/// price (`karpenter_cloudprovider_instance_type_*`).
pub(crate) fn record_catalog_metrics(catalog: &[CatalogInstanceType]) {
    let metrics = karpenter_metrics::metrics();
    for entry in catalog {
        let labels = InstanceTypeLabels {
            instance_type: entry.name.clone(),
        };
        let capacity = |resource: &str| entry.capacity.get(resource).copied().unwrap_or(0) / 1000;
        metrics
            .cloudprovider_instance_type_cpu_cores
            .get_or_create(&labels)
            .set(capacity("cpu"));
        metrics
            .cloudprovider_instance_type_memory_bytes
            .get_or_create(&labels)
            .set(capacity("memory"));
        for offering in &entry.offerings {
            let labels = InstanceTypeOfferingLabels {
                instance_type: entry.name.clone(),
                capacity_type: offering.capacity_type.clone(),
                zone: offering.zone.clone(),
            };
            metrics
                .cloudprovider_instance_type_offering_available
                .get_or_create(&labels)
                .set(i64::from(offering.available));
            metrics
                .cloudprovider_instance_type_offering_price_estimate
                .get_or_create(&labels)
                .set(offering.price);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_gauges_and_user_data_sizes_are_recorded() {
        use karpenter_core::catalog::CatalogOffering;
        let entry = CatalogInstanceType {
            name: "metrics-test.large".into(),
            capacity: [
                ("cpu".to_string(), 2000),
                ("memory".to_string(), 8 * 1024 * 1024 * 1024 * 1000),
            ]
            .into(),
            offerings: vec![CatalogOffering {
                zone: "us-west-2a".into(),
                capacity_type: "spot".into(),
                price: 0.025,
                available: false,
                reservation_id: None,
                reservation_capacity: None,
            }],
            requirements: Default::default(),
            overhead: karpenter_core::catalog::CatalogOverhead::default(),
        };
        record_catalog_metrics(&[entry]);
        record_user_data_size("metrics-test", 1234);
        let metrics = karpenter_metrics::metrics();
        let labels = InstanceTypeLabels {
            instance_type: "metrics-test.large".into(),
        };
        assert_eq!(
            metrics
                .cloudprovider_instance_type_cpu_cores
                .get_or_create(&labels)
                .get(),
            2
        );
        assert_eq!(
            metrics
                .cloudprovider_instance_type_memory_bytes
                .get_or_create(&labels)
                .get(),
            8 * 1024 * 1024 * 1024
        );
        let offering = InstanceTypeOfferingLabels {
            instance_type: "metrics-test.large".into(),
            capacity_type: "spot".into(),
            zone: "us-west-2a".into(),
        };
        assert_eq!(
            metrics
                .cloudprovider_instance_type_offering_available
                .get_or_create(&offering)
                .get(),
            0
        );
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"karpenter_cloudprovider_instance_type_offering_price_estimate{instance_type="metrics-test.large",capacity_type="spot",zone="us-west-2a"} 0.025"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"karpenter_ec2nodeclasses_userdata_bytes{nodeclass="metrics-test"} 1234"#),
            "{text}"
        );
    }
}
