//! The project's CustomResourceDefinitions, embedded so the server works from any directory. They are the files
//! `cargo xtask crds` generates into `crds/` (and `crds/kwok/`).

use serde_json::Value;

use crate::error::Error;

const PROJECT_CRDS: &[(&str, &str)] = &[
    (
        "karpenter.sh_nodepools.yaml",
        include_str!("../../../../crds/karpenter.sh_nodepools.yaml"),
    ),
    (
        "karpenter.sh_nodeclaims.yaml",
        include_str!("../../../../crds/karpenter.sh_nodeclaims.yaml"),
    ),
    (
        "karpenter.sh_nodeoverlays.yaml",
        include_str!("../../../../crds/karpenter.sh_nodeoverlays.yaml"),
    ),
    (
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
        include_str!("../../../../crds/karpenter.k8s.aws_ec2nodeclasses.yaml"),
    ),
    (
        "autoscaling.x-k8s.io_capacitybuffers.yaml",
        include_str!("../../../../crds/autoscaling.x-k8s.io_capacitybuffers.yaml"),
    ),
    // For KWOKNodeClass NodePools under `--cloud-provider kwok`. This server applies no schema defaults, so a
    // class created here needs its Ready condition written, where a real API server defaults it.
    (
        "karpenter.kwok.sh_kwoknodeclasses.yaml",
        include_str!("../../../../crds/kwok/karpenter.kwok.sh_kwoknodeclasses.yaml"),
    ),
];

/// The project CRDs as JSON objects.
pub fn project_crds() -> Result<Vec<Value>, Error> {
    PROJECT_CRDS
        .iter()
        .map(|(file, text)| {
            let crd: Value = serde_saphyr::from_str(text).map_err(|e| Error::EmbeddedCrd {
                file,
                reason: e.to_string(),
            })?;
            if crd["kind"] != "CustomResourceDefinition" {
                return Err(Error::EmbeddedCrd {
                    file,
                    reason: "not a CustomResourceDefinition".into(),
                });
            }
            Ok(crd)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_project_crd_parses_and_declares_a_resource() -> Result<(), Error> {
        let crds = project_crds()?;
        assert_eq!(crds.len(), 6);
        for crd in &crds {
            let info = crate::apiserver::resources::from_crd(crd)
                .map_err(|reason| Error::EmbeddedCrd { file: "?", reason })?;
            assert!(!info.versions.is_empty());
        }
        Ok(())
    }
}
