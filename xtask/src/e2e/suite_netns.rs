//! A network namespace of its own for the suite's test process, joined to the run's by a veth pair.
//!
//! On upstream's CI the suites run on the host and Karpenter in its pod, each with its own ports. Here the
//! controller process runs in the run's namespace (where its pod's address is), so a port it listens on is
//! taken for anything else there; the Chaos specs start a controller-runtime manager inside the test process,
//! whose metrics server binds `:8080`, the controller's metrics port, and a failed start in that goroutine
//! crashes the whole suite process. In a namespace of its own the test process has its ports to itself, as on
//! CI, and reaches the API server over the veth (kube-apiserver listens on every address of the run's
//! namespace: `StartOptions::listen_on_all_addresses`).

use std::{
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context, bail};

/// The run's end of the veth pair and the suite's.
const RUN_ADDRESS: &str = "169.254.80.1";
const SUITE_ADDRESS: &str = "169.254.80.2";

/// The namespace, removed when dropped.
pub struct SuiteNetns {
    name: String,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new("ip")
        .args(args)
        .status()
        .context("running `ip` (iproute2)")?;
    if !status.success() {
        bail!("`ip {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

impl SuiteNetns {
    /// Creates the namespace (named after this process, so concurrent runs do not collide) and the veth pair.
    pub fn create(suite: &str) -> anyhow::Result<Self> {
        let name = format!("karpenter-e2e-{suite}-{}", std::process::id());
        // A namespace left by a run that was killed (nothing to say when there is none).
        let quietly = |args: &[&str]| {
            let _ = Command::new("ip").args(args).stderr(Stdio::null()).status();
        };
        quietly(&["netns", "del", &name]);
        ip(&["netns", "add", &name])?;
        let netns = Self { name };
        let (run_end, suite_end) = ("ke2e-run", "ke2e-suite");
        quietly(&["link", "del", run_end]);
        ip(&[
            "link",
            "add",
            run_end,
            "type",
            "veth",
            "peer",
            "name",
            suite_end,
            "netns",
            &netns.name,
        ])?;
        ip(&["addr", "add", &format!("{RUN_ADDRESS}/30"), "dev", run_end])?;
        ip(&["link", "set", run_end, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["-n", netns.name.as_str()];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["link", "set", "lo", "up"])?;
        inside(&["addr", "add", &format!("{SUITE_ADDRESS}/30"), "dev", suite_end])?;
        inside(&["link", "set", suite_end, "up"])?;
        Ok(netns)
    }

    /// `program` run inside the namespace.
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// The admin kubeconfig as the suite uses it: the API server at the run's end of the veth, its certificate
    /// still checked against the name it was issued for.
    pub fn kubeconfig(&self, admin: &Path, dest: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(admin).with_context(|| format!("reading {}", admin.display()))?;
        let rewritten = suite_kubeconfig(&text)?;
        std::fs::write(dest, rewritten).with_context(|| format!("writing {}", dest.display()))
    }
}

impl Drop for SuiteNetns {
    fn drop(&mut self) {
        // Removing the namespace removes the veth pair with it.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// `server: https://127.0.0.1:<port>` becomes the run's veth address, with `tls-server-name: 127.0.0.1` (the
/// certificate's IP) beside it.
fn suite_kubeconfig(text: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(text.len() + 64);
    let mut replaced = false;
    for line in text.lines() {
        if let Some(rest) = line.trim_start().strip_prefix("server: https://127.0.0.1:") {
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(&format!("{indent}server: https://{RUN_ADDRESS}:{rest}\n"));
            out.push_str(&format!("{indent}tls-server-name: 127.0.0.1\n"));
            replaced = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !replaced {
        bail!("the admin kubeconfig names no API server at https://127.0.0.1");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suites_kubeconfig_reaches_the_api_server_over_the_veth_and_checks_its_certificate() {
        let admin = "apiVersion: v1\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:41234\n    certificate-authority: /pki/ca.crt\n";
        let suite = suite_kubeconfig(admin).unwrap();
        assert!(
            suite.contains("    server: https://169.254.80.1:41234\n    tls-server-name: 127.0.0.1\n"),
            "{suite}"
        );
        assert!(suite.contains("certificate-authority: /pki/ca.crt"));
        assert!(suite_kubeconfig("clusters: []\n").is_err());
    }
}
