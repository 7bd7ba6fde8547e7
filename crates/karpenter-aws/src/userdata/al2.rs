//! AL2: a MIME multipart document whose last part is a shell script calling `/etc/eks/bootstrap.sh`.

use std::fmt::Write as _;

use super::kubelet::{cluster_dns, kubelet_extra_args, max_pods};
use super::mime::{MimePart, custom_parts, render_mime};
use super::{UserDataError, UserDataInput};

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Whether the node's first cluster DNS address makes it an IPv6 node, as upstream decides for AL2: anything
/// but an IPv4 address (an IPv4-mapped IPv6 one included) counts as IPv6, an unparsable one too.
fn is_ipv6(dns_ip: &str) -> bool {
    match dns_ip.trim().parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => false,
        Ok(std::net::IpAddr::V6(v6)) => v6.to_ipv4_mapped().is_none(),
        Err(_) => true,
    }
}

/// The AL2 bootstrap script.
pub fn al2_script(input: &UserDataInput<'_>) -> String {
    let cluster = input.cluster;
    let mut command = format!("/etc/eks/bootstrap.sh {}", shell_quote(&cluster.name));
    if let Some(endpoint) = &cluster.endpoint {
        let _ = write!(command, " \\\n  --apiserver-endpoint {}", shell_quote(endpoint));
    }
    if let Some(ca) = &cluster.ca_bundle {
        let _ = write!(command, " \\\n  --b64-cluster-ca {}", shell_quote(ca));
    }
    if let Some(dns) = cluster_dns(input).first() {
        if is_ipv6(dns) {
            // bootstrap.sh assumes IPv4 otherwise, and would give the kubelet the instance's IPv4 address
            // as its node IP on a cluster whose pods and Services are IPv6.
            command.push_str(" \\\n  --ip-family ipv6");
        }
        let _ = write!(command, " \\\n  --dns-cluster-ip {}", shell_quote(dns));
    }
    if max_pods(input).is_some() {
        // The script's own max-pods table would otherwise override --max-pods.
        command.push_str(" \\\n  --use-max-pods false");
    }
    if input.instance_store_raid0 {
        command.push_str(" \\\n  --local-disks raid0");
    }
    let _ = write!(
        command,
        " \\\n  --kubelet-extra-args {}",
        shell_quote(&kubelet_extra_args(input, true))
    );
    format!(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log | logger -t user-data -s 2>/dev/console) 2>&1\n{command}\n"
    )
}

pub(super) fn al2(input: &UserDataInput<'_>) -> Result<String, UserDataError> {
    let mut parts = custom_parts(input.custom)?;
    parts.push(MimePart::typed(
        "text/x-shellscript; charset=\"us-ascii\"",
        &al2_script(input),
    ));
    Ok(render_mime(&parts))
}
