//! Which label keys NodePools, NodeClaims and NodeOverlays may use, in the two flavours upstream v1.14 ships: the
//! core rules (the `karpenter.sh` domain except `karpenter.sh/capacity-type` and, where allowed,
//! `karpenter.sh/nodepool`; and `kubernetes.io/hostname`), and the AWS provider's copy that also restricts the
//! `karpenter.k8s.aws` domain to an allow-list. The CRDs check nothing else.
//!
//! Upstream's controller checks one more rule at run time, which the CRDs do not (so such a NodePool is accepted
//! by the API server and then not Ready, `ValidationSucceeded=False`): [`restricted_label_problem`], upstream's
//! `IsRestrictedLabel`. Keys in the `kubernetes.io` and `k8s.io` domains are the kubelet's and Kubernetes' own, so
//! only the well-known ones and a few sub-domains meant for users (`node-role.kubernetes.io/worker`,
//! `node.kubernetes.io/...`, `node-restriction.kubernetes.io/...`, `kops.k8s.io/...`) may be set or selected.
//!
//! The Rust checks and the CEL rules injected into the CRDs are both generated from the lists below, so the two
//! cannot drift apart.

use crate::labels::{self, HOSTNAME_LABEL, NODEPOOL_LABEL};

/// Which CRD flavour's label rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelPolicy {
    /// The rules of the provider-neutral karpenter.sh CRDs.
    Core,
    /// The core rules plus the AWS provider's allow-list for the `karpenter.k8s.aws` domain.
    Aws,
}

/// Where a key is used; the restrictions differ slightly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    /// `NodePool.spec.template.metadata.labels` keys.
    NodePoolLabel,
    /// `NodePool.spec.template.spec.requirements[].key`.
    NodePoolRequirement,
    /// `NodeClaim.spec.requirements[].key` (may name `karpenter.sh/nodepool`).
    NodeClaimRequirement,
    /// `NodeOverlay.spec.requirements[].key`.
    NodeOverlayRequirement,
}

/// Keys in the karpenter.sh domain a user may set or select.
pub const ALLOWED_KARPENTER_SH_KEYS: [&str; 2] = [labels::CAPACITY_TYPE_LABEL, NODEPOOL_LABEL];

/// Label domains upstream keeps for Kubernetes and Karpenter (`RestrictedLabelDomains`), sorted as its message
/// lists them. A key in one of them (or a sub-domain) may be used only if it is well-known or an exception.
pub const RESTRICTED_LABEL_DOMAINS: [&str; 3] = ["k8s.io", "karpenter.sh", "kubernetes.io"];

/// Sub-domains of [`RESTRICTED_LABEL_DOMAINS`] users may still use: upstream's `LabelDomainExceptions`
/// (`node-role.kubernetes.io`, `kops.k8s.io`, `node-restriction.kubernetes.io`) and
/// `KubeletSelfSetSuffixesAllowed` (`node.kubernetes.io`), each matching its sub-domains too.
pub const LABEL_DOMAIN_EXCEPTIONS: [&str; 4] = [
    "kops.k8s.io",
    "node-restriction.kubernetes.io",
    "node-role.kubernetes.io",
    "node.kubernetes.io",
];

/// The part of a key before `/`, or nothing for a key without a prefix (upstream's `GetLabelDomain`).
fn label_domain(key: &str) -> &str {
    key.split_once('/').map_or("", |(domain, _)| domain)
}

/// Whether Karpenter may not set `key` on a node (upstream's `IsRestrictedNodeLabel`): a well-known key (the
/// cloud provider sets those), the hostname, or a key in a restricted domain that is not an exception.
pub fn is_restricted_node_label(key: &str) -> bool {
    if labels::WELL_KNOWN_LABELS.contains(&key) {
        return true;
    }
    let domain = label_domain(key);
    if LABEL_DOMAIN_EXCEPTIONS.iter().any(|d| domain.ends_with(d)) {
        return false;
    }
    RESTRICTED_LABEL_DOMAINS.iter().any(|d| domain.ends_with(d)) || key == HOSTNAME_LABEL
}

/// Upstream's `IsRestrictedLabel`, the run-time check on NodePool template label keys and on NodePool and
/// NodeOverlay requirement keys (normalized first, so `beta.kubernetes.io/arch` is `kubernetes.io/arch`): a
/// well-known key is fine, a key Karpenter may not set on a node is not.
pub fn restricted_label_problem(key: &str) -> Option<String> {
    if labels::WELL_KNOWN_LABELS.contains(&key) || !is_restricted_node_label(key) {
        return None;
    }
    let mut well_known = labels::WELL_KNOWN_LABELS;
    well_known.sort_unstable();
    Some(format!(
        "label {key} is restricted; specify a well known label: [{}], or a custom label that does not use a \
         restricted domain: [{}]",
        well_known.join(" "),
        RESTRICTED_LABEL_DOMAINS.join(" ")
    ))
}

/// One restriction on label keys: a message, and the same rule as a Rust predicate and as CEL over `self`.
pub struct KeyRule {
    pub message: String,
    allowed: Box<dyn Fn(&str) -> bool + Send + Sync>,
    /// CEL over a string `self`.
    pub cel: String,
}

impl KeyRule {
    pub fn allows(&self, key: &str) -> bool {
        (self.allowed)(key)
    }
}

fn domain(key: &str) -> &str {
    // The CEL rules look at everything before the first '/', or the whole key when there is none.
    key.split('/').next().unwrap_or(key)
}

fn cel_list(keys: &[&str]) -> String {
    let quoted: Vec<String> = keys.iter().map(|k| format!("\"{k}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

const CEL_DOMAIN: &str = "self.find(\"^([^/]+)\")";

/// The rules for a key used in `use_` under `policy`, in the order upstream reports them.
pub fn key_rules(policy: LabelPolicy, use_: KeyUse) -> Vec<KeyRule> {
    // Upstream v1.14 restricts only Karpenter's own domain and two keys; keys in the kubernetes.io and k8s.io
    // domains (`node-role.kubernetes.io/worker`, `node.k8s.io/x`) are the user's to set and select.
    let mut rules = Vec::new();
    rules.push(KeyRule {
        message: "label domain \"karpenter.sh\" is restricted".into(),
        allowed: Box::new(|k| ALLOWED_KARPENTER_SH_KEYS.contains(&k) || !domain(k).ends_with("karpenter.sh")),
        cel: format!(
            "self in {} || !{CEL_DOMAIN}.endsWith(\"karpenter.sh\")",
            cel_list(&ALLOWED_KARPENTER_SH_KEYS)
        ),
    });
    if matches!(use_, KeyUse::NodePoolLabel | KeyUse::NodePoolRequirement) {
        rules.push(KeyRule {
            message: format!("label {NODEPOOL_LABEL:?} is restricted"),
            allowed: Box::new(|k| k != NODEPOOL_LABEL),
            cel: format!("self != \"{NODEPOOL_LABEL}\""),
        });
    }
    rules.push(KeyRule {
        message: format!("label {HOSTNAME_LABEL:?} is restricted"),
        allowed: Box::new(|k| k != HOSTNAME_LABEL),
        cel: format!("self != \"{HOSTNAME_LABEL}\""),
    });
    if policy == LabelPolicy::Aws {
        let allowed: Vec<&'static str> = if use_ == KeyUse::NodeOverlayRequirement {
            labels::aws_allowed_overlay_keys().collect()
        } else {
            labels::aws_allowed_nodepool_keys().collect()
        };
        let cel = format!(
            "self in {} || !{CEL_DOMAIN}.endsWith(\"karpenter.k8s.aws\")",
            cel_list(&allowed)
        );
        rules.push(KeyRule {
            message: "label domain \"karpenter.k8s.aws\" is restricted".into(),
            allowed: Box::new(move |k| allowed.contains(&k) || !domain(k).ends_with("karpenter.k8s.aws")),
            cel,
        });
    }
    rules
}

/// The messages of every rule `key` breaks.
pub fn key_problems(policy: LabelPolicy, use_: KeyUse, key: &str) -> Vec<String> {
    key_rules(policy, use_)
        .into_iter()
        .filter(|r| !r.allows(key))
        .map(|r| r.message)
        .collect()
}

/// Wraps a rule over a single key `self` into a rule over every key of a map or every item of a list.
pub fn for_all_keys(cel: &str) -> String {
    format!("self.all(x, {})", cel.replace("self", "x"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_domains() {
        let p = |k| key_problems(LabelPolicy::Core, KeyUse::NodePoolLabel, k);
        // Accepted by the CRD, as upstream v1.14's accepts them: only Karpenter's domain and two keys are restricted
        // there (the kubernetes.io and k8s.io domains are checked at run time, `restricted_label_problem`).
        for key in [
            "team",
            "example.com/team",
            "topology.kubernetes.io/zone",
            "karpenter.sh/capacity-type",
            "node.kubernetes.io/custom",
            "kops.k8s.io/instancegroup",
            "node-role.kubernetes.io/worker",
            "kubernetes.io/custom",
            "something.k8s.io/x",
        ] {
            assert!(p(key).is_empty(), "{key}: {:?}", p(key));
        }
        assert_eq!(
            p("kubernetes.io/hostname"),
            vec!["label \"kubernetes.io/hostname\" is restricted"]
        );
        assert_eq!(
            p("karpenter.sh/nodepool"),
            vec!["label \"karpenter.sh/nodepool\" is restricted"]
        );
        assert_eq!(
            p("karpenter.sh/foo"),
            vec!["label domain \"karpenter.sh\" is restricted"]
        );
        assert_eq!(
            p("sub.karpenter.sh/foo"),
            vec!["label domain \"karpenter.sh\" is restricted"]
        );
    }

    #[test]
    fn kubernetes_domains_are_restricted_at_run_time_except_well_known_keys_and_user_sub_domains() {
        // (key, restricted at run time), as upstream's IsRestrictedLabel answers.
        let table = [
            ("team", false),
            ("example.com/team", false),
            ("topology.kubernetes.io/zone", false),
            ("topology.kubernetes.io/region", false),
            ("kubernetes.io/arch", false),
            ("kubernetes.io/os", false),
            ("node.kubernetes.io/instance-type", false),
            ("node.kubernetes.io/windows-build", false),
            ("karpenter.sh/capacity-type", false),
            ("karpenter.sh/nodepool", false),
            // User sub-domains, and their sub-domains.
            ("node-role.kubernetes.io/worker", false),
            ("node.kubernetes.io/custom", false),
            ("team.node.kubernetes.io/x", false),
            ("node-restriction.kubernetes.io/pool", false),
            ("kops.k8s.io/instancegroup", false),
            // Kubernetes' own domains.
            ("kubernetes.io/custom", true),
            ("something.kubernetes.io/x", true),
            ("topology.kubernetes.io/rack", true),
            ("k8s.io/x", true),
            ("something.k8s.io/x", true),
            ("beta.kubernetes.io/arch", true),
            ("kubernetes.io/hostname", true),
            ("karpenter.sh/foo", true),
            // Not a Kubernetes domain, however it ends.
            ("notkubernetes.io.example.com/x", false),
            ("topology.k8s.aws/zone-id", false),
        ];
        for (key, restricted) in table {
            assert_eq!(restricted_label_problem(key).is_some(), restricted, "{key}");
        }
        assert_eq!(
            restricted_label_problem("kubernetes.io/custom").as_deref(),
            Some(
                "label kubernetes.io/custom is restricted; specify a well known label: [karpenter.sh/capacity-type \
                 karpenter.sh/nodepool kubernetes.io/arch kubernetes.io/os node.kubernetes.io/instance-type \
                 node.kubernetes.io/windows-build topology.kubernetes.io/region topology.kubernetes.io/zone], or a \
                 custom label that does not use a restricted domain: [k8s.io karpenter.sh kubernetes.io]"
            )
        );
        // Karpenter sets none of the well-known keys itself: the cloud provider does.
        assert!(is_restricted_node_label("kubernetes.io/arch"));
        assert!(!is_restricted_node_label("node-role.kubernetes.io/worker"));
    }

    #[test]
    fn nodeclaims_may_name_their_nodepool() {
        assert!(key_problems(LabelPolicy::Core, KeyUse::NodeClaimRequirement, NODEPOOL_LABEL).is_empty());
        assert!(!key_problems(LabelPolicy::Core, KeyUse::NodePoolRequirement, NODEPOOL_LABEL).is_empty());
    }

    #[test]
    fn aws_flavour_allows_only_listed_aws_keys() {
        let aws = |use_, k| key_problems(LabelPolicy::Aws, use_, k);
        assert!(aws(KeyUse::NodePoolRequirement, "karpenter.k8s.aws/instance-family").is_empty());
        assert!(
            aws(
                KeyUse::NodePoolRequirement,
                "karpenter.k8s.aws/capacity-reservation-id"
            )
            .is_empty()
        );
        assert!(!aws(KeyUse::NodePoolRequirement, "karpenter.k8s.aws/made-up").is_empty());
        assert!(
            !aws(
                KeyUse::NodeOverlayRequirement,
                "karpenter.k8s.aws/capacity-reservation-id"
            )
            .is_empty()
        );
        assert!(aws(KeyUse::NodeOverlayRequirement, "karpenter.k8s.aws/ec2nodeclass").is_empty());
        assert!(
            key_problems(
                LabelPolicy::Core,
                KeyUse::NodePoolRequirement,
                "karpenter.k8s.aws/made-up"
            )
            .is_empty()
        );
    }
}
