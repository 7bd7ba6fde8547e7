//! What the upstream suites need built: the suites' test binaries and upstream's KWOK controller, from the module
//! pinned in `tests/upstream-e2e/go.mod` (with the Go toolchain the module needs, which the Go module proxy
//! serves), and our controller from this workspace.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use super::Suite;
use crate::go::run;

/// The module whose suites and controller are built: `tests/upstream-e2e/`.
const MODULE: &str = "tests/upstream-e2e";

/// Where the binaries go.
const BIN: &str = "target/upstream-e2e/bin";

pub struct UpstreamModule {
    /// `sigs.k8s.io/karpenter`'s version, as go.mod pins it.
    pub version: String,
    /// Its source in the module cache (read-only): the suites' test data, the KWOKNodeClass CRD, the catalog.
    pub dir: PathBuf,
}

fn go(root: &Path) -> Command {
    crate::go::go(&root.join(MODULE))
}

impl UpstreamModule {
    /// Downloads the pinned module if needed and finds it in the module cache.
    pub fn locate(root: &Path) -> anyhow::Result<Self> {
        let mut command = go(root);
        command.args(["list", "-m", "-json", "sigs.k8s.io/karpenter"]);
        let text = run(command, "locating sigs.k8s.io/karpenter")?;
        let module: serde_json::Value = serde_json::from_str(&text).context("`go list -m -json` output")?;
        let version = module["Version"].as_str().unwrap_or_default().to_string();
        let mut dir = module["Dir"].as_str().map(PathBuf::from);
        if dir.is_none() {
            let mut download = go(root);
            download.args(["mod", "download", "-json", "sigs.k8s.io/karpenter"]);
            let text = run(download, "downloading sigs.k8s.io/karpenter")?;
            let downloaded: serde_json::Value =
                serde_json::from_str(&text).context("`go mod download` output")?;
            dir = downloaded["Dir"].as_str().map(PathBuf::from);
        }
        let Some(dir) = dir else {
            bail!("sigs.k8s.io/karpenter {version} is not in the Go module cache after `go mod download`");
        };
        Ok(Self { version, dir })
    }

    pub fn suite_path(root: &Path, suite: Suite) -> PathBuf {
        root.join(BIN).join(format!("{suite}.test"))
    }

    /// `go test -c` of `test/suites/<suite>` (Go's build cache makes a rebuild of an unchanged suite a link).
    pub fn build_suite(&self, root: &Path, suite: Suite) -> anyhow::Result<PathBuf> {
        let out = Self::suite_path(root, suite);
        eprintln!("building upstream's {suite} suite ({})", out.display());
        let mut command = go(root);
        command
            .args(["test", "-c", "-o"])
            .arg(&out)
            .arg(format!("sigs.k8s.io/karpenter/test/suites/{suite}"));
        run(command, &format!("building the {suite} suite"))?;
        Ok(out)
    }

    pub fn controller_path(&self, root: &Path) -> PathBuf {
        root.join(BIN).join("karpenter-kwok-upstream")
    }

    /// `go build sigs.k8s.io/karpenter/kwok`: upstream's KWOK controller.
    pub fn build_controller(&self, root: &Path) -> anyhow::Result<PathBuf> {
        let out = self.controller_path(root);
        eprintln!("building upstream's KWOK controller ({})", out.display());
        let mut command = go(root);
        command
            .args(["build", "-o"])
            .arg(&out)
            .arg("sigs.k8s.io/karpenter/kwok");
        run(command, "building upstream's KWOK controller")?;
        Ok(out)
    }

    /// The KubeSchedulerConfiguration upstream's CI gives kube-scheduler (a profile with default topology spread
    /// constraints, which the DefaultTopologySpreadConstraints specs read back).
    pub fn scheduler_config(&self) -> PathBuf {
        self.dir
            .join("test/suites/regression/testdata/kube-scheduler-config.yaml")
    }

    /// Upstream's CRDs: karpenter.sh and autoscaling.x-k8s.io (`pkg/apis/crds`) and the KWOKNodeClass
    /// (`kwok/apis/crds`).
    pub fn crd_files(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut files = super::stand_in::yaml_files(&self.dir.join("pkg/apis/crds"))?;
        files.extend(super::stand_in::yaml_files(&self.dir.join("kwok/apis/crds"))?);
        Ok(files)
    }
}

pub fn rust_controller_path(root: &Path, release: bool) -> PathBuf {
    root.join("target")
        .join(if release { "release" } else { "debug" })
        .join("karpenter")
}

/// `cargo build -p karpenter` (the default features: the kwok provider needs no AWS SDK).
pub fn rust_controller(root: &Path, release: bool) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .args(["build", "--quiet", "-p", "karpenter", "--bin", "karpenter"]);
    if release {
        command.arg("--release");
    }
    let status = command.status().context("running cargo")?;
    if !status.success() {
        bail!("building the karpenter binary failed ({status})");
    }
    Ok(rust_controller_path(root, release))
}
