//! The launch templates a launch names: one per distinct user data and network interfaces.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use karpenter_api::ec2nodeclass::{AmiFamily, EC2NodeClass};
use karpenter_api::labels::{NODEPOOL_LABEL, RESOURCE_EFA};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_core::catalog::CatalogInstanceType;
use karpenter_core::cloudprovider::CloudProviderError;

use crate::error::AwsError;
use crate::launch::LaunchOverride;
use crate::launch_plan::LaunchPlan;
use crate::launch_template::{LaunchTemplateSpec, LaunchTemplates, TemplatePlacement};
use crate::placement_groups::PlacementTarget;
use crate::tenancy::{self, claim_tenancy};
use crate::userdata::{self, ClusterInfo, UserDataInput, kubelet_labels};

use super::AwsCloudProvider;
use super::metrics::record_user_data_size;

/// Whether `claim` requests EFA devices, so its templates need EFA interfaces (unless its class lists its own).
fn requests_efa(claim: &NodeClaim) -> bool {
    claim
        .spec
        .resources
        .requests
        .as_ref()
        .and_then(|requests| requests.get(RESOURCE_EFA))
        .and_then(|quantity| karpenter_api::quantity::parse_milli(&quantity.0).ok())
        .is_some_and(|milli| milli > 0)
}

/// What a launch's templates are made from: the claim, its class with the status the launch resolved, the
/// plan, the placement group target and the catalog (for each type's max pods and EFA devices).
pub(super) struct TemplateInputs<'a> {
    pub claim: &'a NodeClaim,
    pub node_class: &'a EC2NodeClass,
    pub plan: &'a LaunchPlan,
    pub placement: Option<&'a PlacementTarget>,
    pub catalog: &'a [CatalogInstanceType],
}

impl AwsCloudProvider {
    /// The cluster's launch templates, through the cache launches share.
    pub fn launch_templates(&self) -> LaunchTemplates {
        LaunchTemplates::new(
            self.clients.ec2.clone(),
            self.settings.cluster_name.clone(),
            Arc::clone(&self.launch_template_cache),
        )
    }

    /// What user data is generated from about the cluster.
    pub fn cluster_info(&self) -> ClusterInfo {
        ClusterInfo {
            name: self.settings.cluster_name.clone(),
            endpoint: self.settings.cluster_endpoint.clone(),
            ca_bundle: self.settings.cluster_ca_bundle.clone(),
            service_cidr: self.settings.service_cidr(),
            dns_ip: self.settings.cluster_dns_ip.clone(),
        }
    }

    /// Ensures the launch templates of `plan` and returns its overrides, each naming its template: one template
    /// per distinct user data, which differs by the max pods of the instance types (the AMI is set per override).
    pub(super) async fn ensure_launch_templates(
        &self,
        inputs: &TemplateInputs<'_>,
    ) -> Result<Vec<LaunchOverride>, CloudProviderError> {
        let &TemplateInputs {
            claim,
            node_class,
            plan,
            placement,
            catalog,
        } = inputs;
        let class_name = node_class.metadata.name.clone().unwrap_or_default();
        let family = node_class.spec.ami_family();
        let cluster = self.cluster_info();
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        // The template is tagged with the claim's NodePool, as the instances it launches are.
        let node_pool = labels.get(NODEPOOL_LABEL).map_or("", String::as_str);
        let mut taints = claim.spec.taints.clone();
        taints.extend(claim.spec.startup_taints.iter().cloned());
        // Keyed by max pods (the user data) and EFA interfaces (the network interfaces).
        let mut templates: HashMap<(Option<i64>, i32), String> = HashMap::new();
        // A class that lists its own interfaces keeps them, EFA or not.
        let wants_efa = requests_efa(claim) && node_class.spec.network_interfaces.is_none();
        let mut overrides = plan.overrides.clone();
        for o in &mut overrides {
            let efa_count = if wants_efa {
                catalog
                    .iter()
                    .find(|t| t.name == o.instance_type)
                    .and_then(|t| t.capacity.get(RESOURCE_EFA))
                    .and_then(|milli| i32::try_from(milli / 1000).ok())
                    .unwrap_or(0)
            } else {
                0
            };
            let max_pods = (family != AmiFamily::Custom)
                .then(|| {
                    catalog
                        .iter()
                        .find(|t| t.name == o.instance_type)
                        .and_then(|t| t.capacity.get("pods"))
                        .map(|milli| milli / 1000)
                })
                .flatten();
            if let Some(name) = templates.get(&(max_pods, efa_count)) {
                o.launch_template_name = Some(name.clone());
                continue;
            }
            let input = UserDataInput {
                cluster: &cluster,
                kubelet: node_class.spec.kubelet.as_ref(),
                max_pods,
                labels: kubelet_labels(&labels),
                taints: taints.clone(),
                custom: node_class.spec.user_data.as_deref(),
                instance_store_raid0: node_class.spec.instance_store_raid0(),
            };
            let user_data = userdata::generate(family, &input).map_err(|e| CloudProviderError::Create {
                reason: "UserDataGenerationFailed".into(),
                message: format!("EC2NodeClass {class_name}: {e}"),
            })?;
            if let Some(data) = &user_data {
                record_user_data_size(&class_name, data.len());
            }
            let mut template = LaunchTemplateSpec::from_node_class(
                node_class,
                &plan.image_id,
                &self.settings.cluster_name,
                node_pool,
            )?
            .with_ip_family(self.settings.cluster_ip_family())
            .with_efa_interfaces(efa_count);
            template.user_data = user_data.map(|d| userdata::base64_encode(d.as_bytes()));
            template.capacity_reservation = plan.reservation.clone();
            template.placement = placement.map(|target| TemplatePlacement {
                group_id: target.group.id.clone(),
                partition: target.partition,
            });
            template.tenancy = (claim_tenancy(&claim.spec.requirements) == tenancy::DEDICATED)
                .then(|| tenancy::DEDICATED.to_string());
            let name = self
                .launch_templates()
                .ensure(&template, Instant::now())
                .await
                .map_err(|e| {
                    let message = format!(
                        "EC2NodeClass {class_name}: launch template {}: {e}",
                        template.name()
                    );
                    match e {
                        AwsError::Throttled { .. } | AwsError::Unreachable { .. } => {
                            CloudProviderError::Transient(message)
                        }
                        _ => CloudProviderError::Create {
                            reason: "LaunchTemplateCreationFailed".into(),
                            message,
                        },
                    }
                })?;
            templates.insert((max_pods, efa_count), name.clone());
            o.launch_template_name = Some(name);
        }
        Ok(overrides)
    }
}
