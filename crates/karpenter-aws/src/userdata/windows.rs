//! Windows: one `<powershell>` block, the user's script then the EKS bootstrap script.

use std::fmt::Write as _;

use super::UserDataInput;
use super::kubelet::{cluster_dns, kubelet_extra_args};

fn powershell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The PowerShell that joins a Windows node: the user's script, then the EKS bootstrap script.
pub(super) fn windows(input: &UserDataInput<'_>) -> String {
    let mut out = String::from("<powershell>\n");
    if let Some(custom) = input.custom.filter(|c| !c.trim().is_empty()) {
        let script = custom
            .trim()
            .trim_start_matches("<powershell>")
            .trim_end_matches("</powershell>")
            .trim_matches('\n');
        out.push_str(script);
        out.push('\n');
    }
    let cluster = input.cluster;
    out.push_str(
        "[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n",
    );
    let _ = write!(
        out,
        "& $EKSBootstrapScriptFile -EKSClusterName {}",
        powershell_quote(&cluster.name)
    );
    if let Some(endpoint) = &cluster.endpoint {
        let _ = write!(out, " -APIServerEndpoint {}", powershell_quote(endpoint));
    }
    if let Some(ca) = &cluster.ca_bundle {
        let _ = write!(out, " -Base64ClusterCA {}", powershell_quote(ca));
    }
    if let Some(dns) = cluster_dns(input).first() {
        let _ = write!(out, " -DNSClusterIP {}", powershell_quote(dns));
    }
    let _ = write!(
        out,
        " -KubeletExtraArgs {}",
        powershell_quote(&kubelet_extra_args(input, false))
    );
    out.push_str("\n</powershell>\n");
    out
}
