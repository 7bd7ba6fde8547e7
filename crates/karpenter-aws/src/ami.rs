//! AMI aliases (`amiSelectorTerms: [{alias: al2023@latest}]`): the EKS-optimised AMIs an alias names, found
//! through their public SSM parameters, each with the requirements of the instance types it suits (upstream's
//! `AL2023.DescribeImageQuery` and `Variant.Requirements` in pkg/providers/amifamily).
//!
//! AL2023 has a standard variant for both architectures, an NVIDIA variant for both and a Neuron variant for
//! x86_64. The standard AMI suits types without GPUs or accelerators; the NVIDIA one types with GPUs; the
//! Neuron one types with accelerators. Other families' aliases (AL2, Bottlerocket, Windows) are not resolved
//! here yet.

use karpenter_core::catalog::{CatalogRequirement, RequirementOperator};

use crate::error::AwsError;

/// The alias version that follows the newest AMI.
pub const ALIAS_VERSION_LATEST: &str = "latest";
const LABEL_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
const LABEL_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";

/// An EKS-optimised AMI variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AmiVariant {
    Standard,
    Nvidia,
    Neuron,
}

impl AmiVariant {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::Nvidia => "nvidia",
            Self::Neuron => "neuron",
        }
    }

    /// The instance types the variant suits, besides its architecture.
    pub fn requirements(self) -> Vec<CatalogRequirement> {
        let exists = |key: &str| CatalogRequirement {
            key: key.to_string(),
            operator: RequirementOperator::Exists,
            values: Vec::new(),
        };
        match self {
            Self::Standard => vec![
                CatalogRequirement::does_not_exist(LABEL_ACCELERATOR_COUNT),
                CatalogRequirement::does_not_exist(LABEL_GPU_COUNT),
            ],
            Self::Nvidia => vec![exists(LABEL_GPU_COUNT)],
            Self::Neuron => vec![exists(LABEL_ACCELERATOR_COUNT)],
        }
    }
}

/// A parsed alias: `al2023@latest` is family `al2023`, version `latest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmiAlias {
    pub family: String,
    pub version: String,
}

impl AmiAlias {
    pub fn parse(alias: &str) -> Result<Self, AwsError> {
        match alias.split_once('@') {
            Some((family, version)) if !family.is_empty() && !version.is_empty() => Ok(Self {
                family: family.to_string(),
                version: version.to_string(),
            }),
            _ => Err(AwsError::Config(format!(
                "AMI alias {alias:?} is not of the form family@version"
            ))),
        }
    }
}

/// One SSM parameter an alias may resolve through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasParameter {
    pub path: String,
    /// EC2's architecture name: x86_64 or arm64.
    pub architecture: &'static str,
    pub variant: AmiVariant,
}

/// The SSM parameters of an AL2023 alias for a Kubernetes version (`1.33`): `recommended` for `latest`, else
/// the versioned image name (`amazon-eks-node-al2023-x86_64-standard-1.33-v20250101`).
pub fn al2023_parameters(k8s_version: &str, ami_version: &str) -> Vec<AliasParameter> {
    let variants: [(&'static str, &[AmiVariant]); 2] = [
        (
            "x86_64",
            &[AmiVariant::Standard, AmiVariant::Nvidia, AmiVariant::Neuron],
        ),
        ("arm64", &[AmiVariant::Standard, AmiVariant::Nvidia]),
    ];
    variants
        .into_iter()
        .flat_map(|(architecture, variants)| {
            variants.iter().map(move |variant| {
                let variant_name = variant.as_str();
                let name = if ami_version == ALIAS_VERSION_LATEST {
                    "recommended".to_string()
                } else {
                    format!("amazon-eks-node-al2023-{architecture}-{variant_name}-{k8s_version}-{ami_version}")
                };
                AliasParameter {
                    path: format!(
                        "/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{architecture}/{variant_name}/{name}/image_id"
                    ),
                    architecture,
                    variant: *variant,
                }
            })
        })
        .collect()
}

/// An AMI an alias names, with the requirements of the instance types it suits (including kubernetes.io/arch).
#[derive(Debug, Clone, PartialEq)]
pub struct AliasAmi {
    pub id: String,
    pub variant: AmiVariant,
    pub requirements: Vec<CatalogRequirement>,
}

/// The parameters of `alias` for `k8s_version`; an error for families not resolved here.
pub fn alias_parameters(alias: &AmiAlias, k8s_version: &str) -> Result<Vec<AliasParameter>, AwsError> {
    match alias.family.as_str() {
        "al2023" => Ok(al2023_parameters(k8s_version, &alias.version)),
        other => Err(AwsError::Config(format!(
            "AMI alias family {other:?} is not supported yet (only al2023)"
        ))),
    }
}

/// Resolves `alias` through SSM. Parameters that do not exist are skipped (not every variant exists for every
/// version); none at all is NotFound.
pub async fn resolve_alias(
    ssm: &aws_sdk_ssm::Client,
    alias: &AmiAlias,
    k8s_version: &str,
) -> Result<Vec<AliasAmi>, AwsError> {
    let parameters = alias_parameters(alias, k8s_version)?;
    // GetParameters takes up to 10 names; AL2023 has 5.
    let output = ssm
        .get_parameters()
        .set_names(Some(parameters.iter().map(|p| p.path.clone()).collect()))
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("GetParameters", e))?;
    let amis: Vec<AliasAmi> = parameters
        .iter()
        .filter_map(|parameter| {
            let id = output
                .parameters()
                .iter()
                .find(|p| p.name() == Some(parameter.path.as_str()))?
                .value()?;
            let arch = if parameter.architecture == "arm64" {
                "arm64"
            } else {
                "amd64"
            };
            let mut requirements = vec![CatalogRequirement::is_in("kubernetes.io/arch", [arch])];
            requirements.extend(parameter.variant.requirements());
            Some(AliasAmi {
                id: id.to_string(),
                variant: parameter.variant,
                requirements,
            })
        })
        .collect();
    if amis.is_empty() {
        return Err(AwsError::NotFound {
            operation: "GetParameters",
            code: "ParameterNotFound".into(),
            message: format!(
                "no AMI found for alias {}@{} and Kubernetes {k8s_version}",
                alias.family, alias.version
            ),
        });
    }
    Ok(amis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn al2023_parameter_paths() {
        let latest = al2023_parameters("1.33", "latest");
        assert_eq!(latest.len(), 5);
        assert_eq!(
            latest[0].path,
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"
        );
        assert!(
            !latest
                .iter()
                .any(|p| p.architecture == "arm64" && p.variant == AmiVariant::Neuron)
        );
        let pinned = al2023_parameters("1.33", "v20250101");
        assert_eq!(
            pinned[4].path,
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/nvidia/amazon-eks-node-al2023-arm64-nvidia-1.33-v20250101/image_id"
        );
    }

    #[test]
    fn aliases_parse_and_unsupported_families_say_so() {
        let alias = AmiAlias::parse("al2023@latest").unwrap();
        assert_eq!(
            (alias.family.as_str(), alias.version.as_str()),
            ("al2023", "latest")
        );
        assert!(AmiAlias::parse("al2023").is_err());
        assert!(AmiAlias::parse("@latest").is_err());
        let bottlerocket = AmiAlias::parse("bottlerocket@latest").unwrap();
        assert_eq!(
            alias_parameters(&bottlerocket, "1.33").unwrap_err().to_string(),
            r#"configuration: AMI alias family "bottlerocket" is not supported yet (only al2023)"#
        );
    }

    #[test]
    fn variants_suit_their_instance_types() {
        assert_eq!(
            AmiVariant::Standard.requirements(),
            [
                CatalogRequirement::does_not_exist(LABEL_ACCELERATOR_COUNT),
                CatalogRequirement::does_not_exist(LABEL_GPU_COUNT)
            ]
        );
        assert_eq!(
            AmiVariant::Nvidia.requirements()[0].operator,
            RequirementOperator::Exists
        );
        assert_eq!(AmiVariant::Neuron.requirements()[0].key, LABEL_ACCELERATOR_COUNT);
    }
}
