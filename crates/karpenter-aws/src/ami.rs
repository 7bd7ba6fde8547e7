//! AMI aliases (`amiSelectorTerms: [{alias: al2023@latest}]`): the EKS-optimised AMIs an alias names, found
//! through their public SSM parameters, each with the requirements of the instance types it suits (upstream's
//! `AL2023.DescribeImageQuery` and `Variant.Requirements` in pkg/providers/amifamily).
//!
//! AL2023 has a standard variant for both architectures, an NVIDIA variant for both and a Neuron variant for
//! x86_64. The standard AMI suits types without GPUs or accelerators; the NVIDIA one types with GPUs; the
//! Neuron one types with accelerators. AL2 has a standard AMI per architecture and one GPU AMI (x86_64);
//! Bottlerocket a standard and an NVIDIA AMI per architecture; Windows one x86_64 AMI per Server release,
//! `latest` only (the parameter paths are upstream's, documented in its AMI selection guide).

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
    /// Requirements of the family itself (Windows: the OS and its build), besides architecture and variant.
    pub family_requirements: Vec<CatalogRequirement>,
}

impl AliasParameter {
    fn linux(path: String, architecture: &'static str, variant: AmiVariant) -> Self {
        Self {
            path,
            architecture,
            variant,
            family_requirements: Vec::new(),
        }
    }
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
                AliasParameter::linux(
                    format!(
                        "/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{architecture}/{variant_name}/{name}/image_id"
                    ),
                    architecture,
                    *variant,
                )
            })
        })
        .collect()
}

/// The SSM parameters of an AL2 alias: `amazon-linux-2`, `-arm64` and `-gpu`, `recommended` for `latest`, else
/// the versioned image name (`amazon-eks-arm64-node-1.29-v20240117`).
pub fn al2_parameters(k8s_version: &str, ami_version: &str) -> Vec<AliasParameter> {
    [
        ("", "", "x86_64", AmiVariant::Standard),
        ("-arm64", "-arm64", "arm64", AmiVariant::Standard),
        ("-gpu", "-gpu", "x86_64", AmiVariant::Nvidia),
    ]
    .into_iter()
    .map(|(suffix, image_infix, architecture, variant)| {
        let name = if ami_version == ALIAS_VERSION_LATEST {
            "recommended".to_string()
        } else {
            format!("amazon-eks{image_infix}-node-{k8s_version}-{ami_version}")
        };
        AliasParameter::linux(
            format!("/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2{suffix}/{name}/image_id"),
            architecture,
            variant,
        )
    })
    .collect()
}

/// The SSM parameters of a Bottlerocket alias: `aws-k8s-<version>` and its `-nvidia` flavour per architecture;
/// Bottlerocket names releases without the `v` (`v1.20.1` is `1.20.1`).
pub fn bottlerocket_parameters(k8s_version: &str, ami_version: &str) -> Vec<AliasParameter> {
    let version = ami_version.strip_prefix('v').unwrap_or(ami_version);
    [
        ("", AmiVariant::Standard),
        ("-nvidia", AmiVariant::Nvidia),
    ]
    .into_iter()
    .flat_map(|(flavour, variant)| {
        ["x86_64", "arm64"].into_iter().map(move |architecture| {
            AliasParameter::linux(
                format!("/aws/service/bottlerocket/aws-k8s-{k8s_version}{flavour}/{architecture}/{version}/image_id"),
                architecture,
                variant,
            )
        })
    })
    .collect()
}

/// The SSM parameter of a Windows alias (`release` 2019, 2022 or 2025): the latest EKS-optimised Server Core
/// AMI, x86_64 only, for Windows nodes of that build.
pub fn windows_parameters(k8s_version: &str, release: &str) -> Vec<AliasParameter> {
    let build = match release {
        "2019" => "10.0.17763",
        "2022" => "10.0.20348",
        _ => "10.0.26100",
    };
    vec![AliasParameter {
        path: format!(
            "/aws/service/ami-windows-latest/Windows_Server-{release}-English-Core-EKS_Optimized-{k8s_version}/image_id"
        ),
        architecture: "x86_64",
        variant: AmiVariant::Standard,
        family_requirements: vec![
            CatalogRequirement::is_in("kubernetes.io/os", ["windows"]),
            CatalogRequirement::is_in("node.kubernetes.io/windows-build", [build]),
        ],
    }]
}

/// An AMI an alias names, with the requirements of the instance types it suits (including kubernetes.io/arch).
#[derive(Debug, Clone, PartialEq)]
pub struct AliasAmi {
    pub id: String,
    pub variant: AmiVariant,
    pub requirements: Vec<CatalogRequirement>,
}

/// The parameters of `alias` for `k8s_version`; an error for an unknown family or a pinned Windows version.
pub fn alias_parameters(alias: &AmiAlias, k8s_version: &str) -> Result<Vec<AliasParameter>, AwsError> {
    let version = alias.version.as_str();
    match alias.family.as_str() {
        "al2023" => Ok(al2023_parameters(k8s_version, version)),
        "al2" => Ok(al2_parameters(k8s_version, version)),
        "bottlerocket" => Ok(bottlerocket_parameters(k8s_version, version)),
        windows @ ("windows2019" | "windows2022" | "windows2025") => {
            if version != ALIAS_VERSION_LATEST {
                return Err(AwsError::Config(format!(
                    "AMI alias {windows}@{version}: Windows aliases only support @latest"
                )));
            }
            Ok(windows_parameters(
                k8s_version,
                windows.trim_start_matches("windows"),
            ))
        }
        other => Err(AwsError::Config(format!(
            "AMI alias family {other:?} is not one of al2, al2023, bottlerocket, windows2019, windows2022, windows2025"
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
    // GetParameters takes up to 10 names; the largest family (AL2023) has 5.
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
            requirements.extend(parameter.family_requirements.iter().cloned());
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
        let unknown = AmiAlias::parse("ubuntu@latest").unwrap();
        assert!(
            alias_parameters(&unknown, "1.33")
                .unwrap_err()
                .to_string()
                .starts_with(r#"configuration: AMI alias family "ubuntu" is not one of"#)
        );
        let pinned_windows = AmiAlias::parse("windows2022@v20250101").unwrap();
        assert!(alias_parameters(&pinned_windows, "1.33").is_err());
    }

    #[test]
    fn other_families_parameter_paths() {
        let paths = |alias: &str| -> Vec<String> {
            alias_parameters(&AmiAlias::parse(alias).unwrap(), "1.31")
                .unwrap()
                .into_iter()
                .map(|p| p.path)
                .collect()
        };
        assert_eq!(
            paths("al2@latest"),
            [
                "/aws/service/eks/optimized-ami/1.31/amazon-linux-2/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.31/amazon-linux-2-arm64/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.31/amazon-linux-2-gpu/recommended/image_id",
            ]
        );
        assert_eq!(
            paths("al2@v20240117")[1],
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2-arm64/amazon-eks-arm64-node-1.31-v20240117/image_id"
        );
        assert_eq!(
            paths("bottlerocket@v1.20.1"),
            [
                "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.20.1/image_id",
                "/aws/service/bottlerocket/aws-k8s-1.31/arm64/1.20.1/image_id",
                "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/1.20.1/image_id",
                "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/arm64/1.20.1/image_id",
            ]
        );
        assert_eq!(
            paths("windows2022@latest"),
            ["/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.31/image_id"]
        );
        let windows = windows_parameters("1.31", "2019");
        assert_eq!(windows[0].family_requirements[1].values, ["10.0.17763"]);
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
