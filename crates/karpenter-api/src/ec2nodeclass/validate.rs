//! `EC2NodeClass::validate`: every rule of the CRD schema and its CEL rules, applied in Rust, each reported at the
//! most precise field path (a CEL rule on a list is reported at the offending item).

use std::collections::BTreeMap;

use super::{
    ALIAS_FAMILIES, AMI_FAMILIES, AmiFamily, AmiSelectorTerm, BlockDevice, CapacityReservationSelectorTerm,
    ConnectionTracking, EC2NodeClass, EC2NodeClassSpec, ENABLED_DISABLED, EVICTION_SIGNALS, HTTP_TOKENS,
    INSTANCE_MATCH_CRITERIA, INSTANCE_STORE_POLICIES, INTERFACE_TYPE_EFA_ONLY, INTERFACE_TYPE_INTERFACE,
    INTERFACE_TYPES, KubeletConfiguration, MetadataOptions, NetworkInterface, RESERVED_RESOURCE_KEYS,
    RESERVED_TAG_KEYS, RESERVED_TAG_PREFIX, SecurityGroupSelectorTerm, SubnetSelectorTerm, VOLUME_TYPES,
    messages, patterns,
};
use crate::validation::{ValidationErrors, Validator};

impl EC2NodeClass {
    /// Applies every rule of the CRD schema and its CEL rules, naming the EC2NodeClass and the field of each
    /// problem, for example `EC2NodeClass default: spec.amiSelectorTerms[0]: 'alias' cannot be combined with 'id',
    /// 'tags', 'name' or 'owner' in an amiSelectorTerm`.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut v = Validator::new("EC2NodeClass", self.metadata.name.as_deref());
        v.field("spec", |v| self.spec.validate(v));
        v.finish()
    }
}

impl EC2NodeClassSpec {
    /// Validates the spec into `v` (the caller has pushed `spec`).
    pub fn validate(&self, v: &mut Validator) {
        self.validate_identity(v);
        self.validate_ami_family(v);
        v.field("subnetSelectorTerms", |v| {
            list_len(v, self.subnet_selector_terms.len(), 1, 30);
            for (i, t) in self.subnet_selector_terms.iter().enumerate() {
                v.index(i, |v| validate_subnet_term(v, t));
            }
            // Upstream's rule asks whether *every* term mixes them (`!self.all(...)`), so one mixed term among
            // others is accepted; the list is never empty here (checked above).
            let terms = &self.subnet_selector_terms;
            if !terms.is_empty() && terms.iter().all(|t| t.id.is_some() && t.tags.is_some()) {
                v.error(messages::SUBNET_ID_EXCLUSIVE);
            }
        });
        v.field("securityGroupSelectorTerms", |v| {
            list_len(v, self.security_group_selector_terms.len(), 1, 30);
            for (i, t) in self.security_group_selector_terms.iter().enumerate() {
                v.index(i, |v| validate_security_group_term(v, t));
            }
            let terms = &self.security_group_selector_terms;
            if !terms.is_empty() {
                let all = |f: fn(&SecurityGroupSelectorTerm) -> bool| terms.iter().all(f);
                v.check(
                    !all(|t| t.id.is_some() && (t.tags.is_some() || t.name.is_some())),
                    messages::SECURITY_GROUP_ID_EXCLUSIVE,
                );
                v.check(
                    !all(|t| t.name.is_some() && (t.tags.is_some() || t.id.is_some())),
                    messages::SECURITY_GROUP_NAME_EXCLUSIVE,
                );
            }
        });
        if let Some(terms) = &self.capacity_reservation_selector_terms {
            v.field("capacityReservationSelectorTerms", |v| {
                list_len(v, terms.len(), 0, 30);
                for (i, t) in terms.iter().enumerate() {
                    v.index(i, |v| validate_capacity_reservation_term(v, t));
                }
                // `!self.all(...)`, as upstream: true of an empty list too, so an explicit `[]` is rejected
                // (an absent field is not checked).
                let mixed = terms.iter().all(|t| {
                    t.id.is_some()
                        && (t.tags.is_some() || t.owner_id.is_some() || t.instance_match_criteria.is_some())
                });
                v.check(!mixed, messages::CAPACITY_RESERVATION_ID_EXCLUSIVE);
            });
        }
        if let Some(pg) = &self.placement_group_selector {
            v.field("placementGroupSelector", |v| {
                v.check(
                    pg.name.is_some() != pg.id.is_some(),
                    messages::PLACEMENT_GROUP_ONE_OF,
                );
                if let Some(id) = &pg.id {
                    v.field("id", |v| check_id(v, id, "pg-", patterns::PLACEMENT_GROUP_ID));
                }
            });
        }
        range(
            v,
            "ipPrefixCount",
            self.ip_prefix_count.map(i64::from),
            Some(0),
            None,
        );
        v.field("amiSelectorTerms", |v| {
            let terms = &self.ami_selector_terms;
            list_len(v, terms.len(), 1, 30);
            for (i, t) in terms.iter().enumerate() {
                v.index(i, |v| validate_ami_term(v, t, terms.len()));
            }
        });
        if let Some(tags) = &self.tags {
            v.field("tags", |v| validate_tags(v, tags));
        }
        if let Some(kubelet) = &self.kubelet {
            v.field("kubelet", |v| validate_kubelet(v, kubelet));
        }
        if let Some(mappings) = &self.block_device_mappings {
            v.field("blockDeviceMappings", |v| {
                list_len(v, mappings.len(), 0, 50);
                let roots = mappings.iter().filter(|m| m.root_volume == Some(true)).count();
                v.check(roots <= 1, messages::BDM_ONE_ROOT_VOLUME);
                for (i, m) in mappings.iter().enumerate() {
                    if let Some(ebs) = &m.ebs {
                        v.index(i, |v| v.field("ebs", |v| validate_ebs(v, ebs)));
                    }
                }
            });
        }
        one_of(
            v,
            "instanceStorePolicy",
            self.instance_store_policy.as_deref(),
            &INSTANCE_STORE_POLICIES,
        );
        if let Some(interfaces) = &self.network_interfaces {
            v.field("networkInterfaces", |v| {
                validate_network_interfaces(v, interfaces)
            });
        }
        if let Some(options) = &self.metadata_options {
            v.field("metadataOptions", |v| validate_metadata_options(v, options));
        }
        if let Some(ct) = &self.connection_tracking {
            v.field("connectionTracking", |v| validate_connection_tracking(v, ct));
        }
        if let Some(cpu) = &self.cpu_options {
            v.field("cpuOptions", |v| {
                one_of(
                    v,
                    "nestedVirtualization",
                    cpu.nested_virtualization.as_deref(),
                    &ENABLED_DISABLED,
                );
            });
        }
    }

    fn validate_identity(&self, v: &mut Validator) {
        v.check(
            self.role.is_some() != self.instance_profile.is_some(),
            messages::ROLE_XOR_INSTANCE_PROFILE,
        );
        if self.role.as_deref() == Some("") {
            v.error_at("role", messages::ROLE_EMPTY);
        }
        if self.instance_profile.as_deref() == Some("") {
            v.error_at("instanceProfile", messages::INSTANCE_PROFILE_EMPTY);
        }
    }

    fn validate_ami_family(&self, v: &mut Validator) {
        let aliases: Vec<&str> = self
            .ami_selector_terms
            .iter()
            .filter_map(|t| t.alias.as_deref())
            .collect();
        v.field("amiFamily", |v| match self.ami_family.as_deref() {
            None => v.check(!aliases.is_empty(), messages::AMI_FAMILY_REQUIRED),
            Some(family) => {
                if !AMI_FAMILIES.contains(&family) {
                    v.error(not_one_of(family, &AMI_FAMILIES));
                }
                let alias_name = family.parse::<AmiFamily>().ok().and_then(AmiFamily::alias_name);
                let matches = aliases
                    .iter()
                    .all(|a| alias_name.is_some() && a.split('@').next() == alias_name);
                v.check(family == "Custom" || matches, messages::AMI_FAMILY_MATCHES_ALIAS);
            }
        });
    }
}

// --- selector terms -----------------------------------------------------------------------------------------------

fn validate_subnet_term(v: &mut Validator, t: &SubnetSelectorTerm) {
    selector_tags(v, t.tags.as_ref());
    if let Some(id) = &t.id {
        v.field("id", |v| check_id(v, id, "subnet-", patterns::SUBNET_ID));
    }
    v.check(t.tags.is_some() || t.id.is_some(), messages::SUBNET_TERM_EMPTY);
}

fn validate_security_group_term(v: &mut Validator, t: &SecurityGroupSelectorTerm) {
    selector_tags(v, t.tags.as_ref());
    if let Some(id) = &t.id {
        v.field("id", |v| check_id(v, id, "sg-", patterns::SECURITY_GROUP_ID));
    }
    let (tags, id, name) = (t.tags.is_some(), t.id.is_some(), t.name.is_some());
    v.check(tags || id || name, messages::SECURITY_GROUP_TERM_EMPTY);
}

fn validate_capacity_reservation_term(v: &mut Validator, t: &CapacityReservationSelectorTerm) {
    selector_tags(v, t.tags.as_ref());
    if let Some(id) = &t.id {
        v.field("id", |v| {
            check_id(v, id, "cr-", patterns::CAPACITY_RESERVATION_ID)
        });
    }
    if let Some(owner) = &t.owner_id {
        v.field("ownerID", |v| {
            let ok = owner.len() == 12 && owner.bytes().all(|b| b.is_ascii_digit());
            v.check(
                ok,
                format!(
                    "{owner:?} must be a 12-digit AWS account id (pattern {})",
                    patterns::ACCOUNT_ID
                ),
            );
        });
    }
    one_of(
        v,
        "instanceMatchCriteria",
        t.instance_match_criteria.as_deref(),
        &INSTANCE_MATCH_CRITERIA,
    );
    let (tags, id, criteria) = (
        t.tags.is_some(),
        t.id.is_some(),
        t.instance_match_criteria.is_some(),
    );
    v.check(tags || id || criteria, messages::CAPACITY_RESERVATION_TERM_EMPTY);
}

fn validate_ami_term(v: &mut Validator, t: &AmiSelectorTerm, term_count: usize) {
    selector_tags(v, t.tags.as_ref());
    if let Some(id) = &t.id {
        v.field("id", |v| check_id(v, id, "ami-", patterns::AMI_ID));
    }
    if let Some(alias) = &t.alias {
        v.field("alias", |v| validate_alias(v, alias));
    }
    let (alias, tags, id, name, owner, ssm) = (
        t.alias.is_some(),
        t.tags.is_some(),
        t.id.is_some(),
        t.name.is_some(),
        t.owner.is_some(),
        t.ssm_parameter.is_some(),
    );
    v.check(tags || id || name || alias || ssm, messages::AMI_TERM_EMPTY);
    // `ssmParameter` may accompany `id` or `alias`: upstream's exclusivity rules do not name it.
    v.check(
        !(id && (alias || tags || name || owner)),
        messages::AMI_ID_EXCLUSIVE,
    );
    v.check(
        !(alias && (id || tags || name || owner)),
        messages::AMI_ALIAS_EXCLUSIVE,
    );
    v.check(!(alias && term_count != 1), messages::AMI_ALIAS_ONLY_TERM);
}

/// The three alias rules, each on its own as the CRD evaluates them.
fn validate_alias(v: &mut Validator, alias: &str) {
    if alias.chars().count() > 30 {
        v.error("must be at most 30 characters");
    }
    // ^[a-zA-Z0-9]+@.+$
    let format_ok = alias.split_once('@').is_some_and(|(family, version)| {
        !family.is_empty() && family.bytes().all(|b| b.is_ascii_alphanumeric()) && !version.is_empty()
    });
    v.check(format_ok, messages::ALIAS_FORMAT);
    let family = alias.split('@').next().unwrap_or_default();
    v.check(ALIAS_FAMILIES.contains(&family), messages::ALIAS_FAMILY);
    // !matches('^windows') || matches('^[a-z0-9]+@latest$')
    let latest_ok = alias.strip_suffix("@latest").is_some_and(|family| {
        !family.is_empty()
            && family
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    });
    v.check(
        !alias.starts_with("windows") || latest_ok,
        messages::ALIAS_WINDOWS_LATEST,
    );
}

/// `tags` of a selector term: at most 20, no empty key or value.
fn selector_tags(v: &mut Validator, tags: Option<&BTreeMap<String, String>>) {
    let Some(tags) = tags else { return };
    v.field("tags", |v| {
        if tags.len() > 20 {
            v.error(format!("must have at most 20 tags, has {}", tags.len()));
        }
        if tags.iter().any(|(k, value)| k.is_empty() || value.is_empty()) {
            v.error(messages::SELECTOR_TAGS_EMPTY);
        }
    });
}

/// An AWS resource id: `prefix` then one or more lowercase alphanumerics.
fn check_id(v: &mut Validator, id: &str, prefix: &str, pattern: &str) {
    let ok = id.strip_prefix(prefix).is_some_and(|rest| {
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    });
    v.check(ok, format!("{id:?} does not match {pattern}"));
}

// --- tags ---------------------------------------------------------------------------------------------------------

fn validate_tags(v: &mut Validator, tags: &BTreeMap<String, String>) {
    for key in tags.keys() {
        v.key(key, |v| {
            if key.is_empty() {
                v.error(messages::TAG_KEY_EMPTY);
            }
            for (reserved, message) in RESERVED_TAG_KEYS {
                if key == reserved {
                    v.error(message);
                }
            }
            if key.starts_with(RESERVED_TAG_PREFIX) {
                v.error(messages::TAG_RESERVED_CLUSTER);
            }
        });
    }
}

// --- kubelet ------------------------------------------------------------------------------------------------------

fn validate_kubelet(v: &mut Validator, k: &KubeletConfiguration) {
    range(v, "maxPods", k.max_pods.map(i64::from), Some(0), None);
    range(v, "podsPerCore", k.pods_per_core.map(i64::from), Some(0), None);
    for (field, map) in [
        ("systemReserved", &k.system_reserved),
        ("kubeReserved", &k.kube_reserved),
    ] {
        let Some(map) = map else { continue };
        v.field(field, |v| {
            for (key, value) in map {
                v.key(key, |v| {
                    v.check(
                        RESERVED_RESOURCE_KEYS.contains(&key.as_str()),
                        messages::KUBELET_RESERVED_KEYS,
                    );
                    v.check(
                        is_quantity(value),
                        format!("{value:?} is not a resource quantity"),
                    );
                    v.check(!value.starts_with('-'), messages::KUBELET_RESERVED_NEGATIVE);
                });
            }
        });
    }
    for (field, map) in [
        ("evictionHard", &k.eviction_hard),
        ("evictionSoft", &k.eviction_soft),
    ] {
        let Some(map) = map else { continue };
        v.field(field, |v| {
            for (key, value) in map {
                v.key(key, |v| {
                    v.check(
                        EVICTION_SIGNALS.contains(&key.as_str()),
                        messages::KUBELET_EVICTION_KEYS,
                    );
                    v.check(
                        is_eviction_threshold(value),
                        format!("{value:?} is not a percentage (0% to 100%) or a resource quantity"),
                    );
                });
            }
        });
    }
    if let Some(map) = &k.eviction_soft_grace_period {
        v.field("evictionSoftGracePeriod", |v| {
            for (key, value) in map {
                v.key(key, |v| {
                    v.check(
                        EVICTION_SIGNALS.contains(&key.as_str()),
                        messages::KUBELET_EVICTION_KEYS,
                    );
                    v.check(
                        is_go_duration(value),
                        format!("{value:?} is not a duration such as 1m30s"),
                    );
                });
            }
        });
    }
    let empty = BTreeMap::new();
    let soft = k.eviction_soft.as_ref();
    let grace = k.eviction_soft_grace_period.as_ref();
    if let Some(soft) = soft {
        v.field("evictionSoft", |v| {
            for key in soft
                .keys()
                .filter(|key| !grace.unwrap_or(&empty).contains_key(*key))
            {
                v.key(key, |v| v.error(messages::KUBELET_SOFT_NEEDS_GRACE));
            }
        });
    }
    if let Some(grace) = grace {
        v.field("evictionSoftGracePeriod", |v| {
            for key in grace
                .keys()
                .filter(|key| !soft.unwrap_or(&empty).contains_key(*key))
            {
                v.key(key, |v| v.error(messages::KUBELET_GRACE_NEEDS_SOFT));
            }
        });
    }
    let (high, low) = (
        k.image_gc_high_threshold_percent,
        k.image_gc_low_threshold_percent,
    );
    range(
        v,
        "imageGCHighThresholdPercent",
        high.map(i64::from),
        Some(0),
        Some(100),
    );
    range(
        v,
        "imageGCLowThresholdPercent",
        low.map(i64::from),
        Some(0),
        Some(100),
    );
    if let (Some(high), Some(low)) = (high, low) {
        v.field("imageGCHighThresholdPercent", |v| {
            v.check(high > low, messages::KUBELET_IMAGE_GC)
        });
    }
}

/// Splits a leading decimal number (`12`, `1.5`, `1.`, `.5`) off `s`.
fn split_decimal(s: &str) -> Option<(&str, &str)> {
    let int_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (int, rest) = s.split_at(int_end);
    let (frac_len, rest) = match rest.strip_prefix('.') {
        Some(r) => {
            let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            (Some(end), &r[end..])
        }
        None => (None, rest),
    };
    let ok = !int.is_empty() || frac_len.is_some_and(|n| n > 0);
    ok.then(|| (&s[..s.len() - rest.len()], rest))
}

/// [`patterns::QUANTITY`]: an optionally signed decimal with an optional binary, decimal or exponent suffix.
pub(super) fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let Some((_, suffix)) = split_decimal(s) else {
        return false;
    };
    match suffix {
        "" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        exp if exp.starts_with(['e', 'E']) => {
            let exp = exp[1..].strip_prefix(['+', '-']).unwrap_or(&exp[1..]);
            split_decimal(exp).is_some_and(|(_, rest)| rest.is_empty())
        }
        _ => false,
    }
}

/// [`patterns::EVICTION_THRESHOLD`]: a percentage from 0% to 100% with at most two decimals, or a quantity.
pub(super) fn is_eviction_threshold(s: &str) -> bool {
    let Some(pct) = s.strip_suffix('%') else {
        return is_quantity(s);
    };
    let (int, frac) = pct.split_once('.').map_or((pct, None), |(i, f)| (i, Some(f)));
    let digits = |x: &str, max: usize| (1..=max).contains(&x.len()) && x.bytes().all(|b| b.is_ascii_digit());
    if int == "100" {
        return frac.is_none_or(|f| (1..=2).contains(&f.len()) && f.bytes().all(|b| b == b'0'));
    }
    digits(int, 2) && frac.is_none_or(|f| digits(f, 2))
}

/// [`patterns::GO_DURATION`]: `0`, or a sequence of decimal numbers with Go's units.
pub(super) fn is_go_duration(s: &str) -> bool {
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let Some((_, after)) = split_decimal(rest) else {
            return false;
        };
        let Some(unit) = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
            .into_iter()
            .filter(|u| after.starts_with(u))
            .max_by_key(|u| u.len())
        else {
            return false;
        };
        rest = &after[unit.len()..];
    }
    true
}

// --- block devices ------------------------------------------------------------------------------------------------

fn validate_ebs(v: &mut Validator, ebs: &BlockDevice) {
    v.check(
        ebs.snapshot_id.is_some() || ebs.volume_size.is_some(),
        messages::EBS_SNAPSHOT_OR_SIZE,
    );
    if ebs.volume_initialization_rate.is_some() && ebs.snapshot_id.as_deref().is_none_or(str::is_empty) {
        v.error_at("volumeInitializationRate", messages::EBS_INIT_RATE_NEEDS_SNAPSHOT);
    }
    range(
        v,
        "volumeInitializationRate",
        ebs.volume_initialization_rate.map(i64::from),
        Some(100),
        Some(300),
    );
    if let Some(size) = &ebs.volume_size {
        v.field("volumeSize", |v| {
            v.check(
                volume_size_ok(size),
                format!(
                    "{size:?} must be 1-59000Gi, 1-64000G, 1-58Ti or 1-64T (pattern {})",
                    patterns::VOLUME_SIZE
                ),
            );
        });
    }
    one_of(v, "volumeType", ebs.volume_type.as_deref(), &VOLUME_TYPES);
}

/// [`patterns::VOLUME_SIZE`]: a whole number without leading zeros in one of four units, within EBS' limit.
pub(super) fn volume_size_ok(size: &str) -> bool {
    let digits_end = size.find(|c: char| !c.is_ascii_digit()).unwrap_or(size.len());
    let (number, unit) = size.split_at(digits_end);
    if number.is_empty() || number.starts_with('0') || number.len() > 5 {
        return false;
    }
    let Ok(n) = number.parse::<u32>() else {
        return false;
    };
    let max = match unit {
        "Gi" => 59000,
        "G" => 64000,
        "Ti" => 58,
        "T" => 64,
        _ => return false,
    };
    (1..=max).contains(&n)
}

// --- network interfaces -------------------------------------------------------------------------------------------

fn validate_network_interfaces(v: &mut Validator, interfaces: &[NetworkInterface]) {
    list_len(v, interfaces.len(), 0, 150);
    let primary = interfaces.iter().any(|n| {
        n.network_card_index == 0 && n.device_index == 0 && n.interface_type == INTERFACE_TYPE_INTERFACE
    });
    v.check(primary, messages::NETWORK_INTERFACES_PRIMARY);
    for (i, n) in interfaces.iter().enumerate() {
        v.index(i, |v| {
            range(
                v,
                "networkCardIndex",
                Some(i64::from(n.network_card_index)),
                Some(0),
                None,
            );
            range(v, "deviceIndex", Some(i64::from(n.device_index)), Some(0), None);
            one_of(v, "interfaceType", Some(&n.interface_type), &INTERFACE_TYPES);
            let earlier = &interfaces[..i];
            let repeated = earlier
                .iter()
                .any(|e| e.network_card_index == n.network_card_index && e.device_index == n.device_index);
            v.check(!repeated, messages::NETWORK_INTERFACES_UNIQUE);
            let second_efa_only = n.interface_type == INTERFACE_TYPE_EFA_ONLY
                && earlier.iter().any(|e| {
                    e.interface_type == INTERFACE_TYPE_EFA_ONLY
                        && e.network_card_index == n.network_card_index
                });
            v.check(!second_efa_only, messages::NETWORK_INTERFACES_ONE_EFA_ONLY);
        });
    }
}

// --- metadata options, connection tracking ------------------------------------------------------------------------

fn validate_metadata_options(v: &mut Validator, o: &MetadataOptions) {
    one_of(v, "httpEndpoint", o.http_endpoint.as_deref(), &ENABLED_DISABLED);
    one_of(
        v,
        "httpProtocolIPv6",
        o.http_protocol_ipv6.as_deref(),
        &ENABLED_DISABLED,
    );
    range(
        v,
        "httpPutResponseHopLimit",
        o.http_put_response_hop_limit,
        Some(1),
        Some(64),
    );
    one_of(v, "httpTokens", o.http_tokens.as_deref(), &HTTP_TOKENS);
}

fn validate_connection_tracking(v: &mut Validator, c: &ConnectionTracking) {
    let any =
        c.tcp_established_timeout.is_some() || c.udp_stream_timeout.is_some() || c.udp_timeout.is_some();
    v.check(any, messages::CONNECTION_TRACKING_ONE);
    range(
        v,
        "tcpEstablishedTimeout",
        c.tcp_established_timeout.map(i64::from),
        Some(60),
        Some(432_000),
    );
    range(
        v,
        "udpStreamTimeout",
        c.udp_stream_timeout.map(i64::from),
        Some(60),
        Some(180),
    );
    range(v, "udpTimeout", c.udp_timeout.map(i64::from), Some(30), Some(60));
}

// --- helpers ------------------------------------------------------------------------------------------------------

fn not_one_of(value: &str, allowed: &[&str]) -> String {
    format!("{value:?} is not one of {}", allowed.join(", "))
}

fn one_of(v: &mut Validator, field: &str, value: Option<&str>, allowed: &[&str]) {
    if let Some(value) = value
        && !allowed.contains(&value)
    {
        v.error_at(field, not_one_of(value, allowed));
    }
}

fn range(v: &mut Validator, field: &str, value: Option<i64>, min: Option<i64>, max: Option<i64>) {
    let Some(value) = value else { return };
    let ok = min.is_none_or(|m| value >= m) && max.is_none_or(|m| value <= m);
    if !ok {
        let message = match (min, max) {
            (Some(min), Some(max)) => format!("{value} must be between {min} and {max}"),
            (Some(min), None) => format!("{value} must be at least {min}"),
            (None, Some(max)) => format!("{value} must be at most {max}"),
            (None, None) => return,
        };
        v.error_at(field, message);
    }
}

fn list_len(v: &mut Validator, len: usize, min: usize, max: usize) {
    if len < min {
        v.error(format!(
            "must have at least {min} item{}",
            if min == 1 { "" } else { "s" }
        ));
    }
    if len > max {
        v.error(format!("must have at most {max} items, has {len}"));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn base() -> Value {
        json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]
            }
        })
    }

    fn errors(spec_patch: Value) -> Vec<String> {
        let mut obj = base();
        if let (Some(spec), Value::Object(patch)) = (obj["spec"].as_object_mut(), spec_patch) {
            for (k, value) in patch {
                if value.is_null() {
                    spec.remove(&k);
                } else {
                    spec.insert(k, value);
                }
            }
        }
        let nc: EC2NodeClass = serde_json::from_value(obj).unwrap();
        nc.validate()
            .err()
            .map(|e| e.0.iter().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    fn assert_one(spec_patch: Value, expected: &str) {
        let errs = errors(spec_patch);
        assert_eq!(errs, vec![expected.to_string()]);
    }

    #[test]
    fn base_is_valid() {
        assert!(errors(json!({})).is_empty());
    }

    #[test]
    fn role_xor_instance_profile() {
        assert_one(
            json!({"instanceProfile": "p"}),
            "EC2NodeClass default: spec: exactly one of 'role' or 'instanceProfile' must be set",
        );
        assert_one(
            json!({"role": null}),
            "EC2NodeClass default: spec: exactly one of 'role' or 'instanceProfile' must be set",
        );
        assert!(errors(json!({"role": null, "instanceProfile": "p"})).is_empty());
    }

    #[test]
    fn role_and_instance_profile_not_empty() {
        assert_one(
            json!({"role": ""}),
            "EC2NodeClass default: spec.role: 'role' must not be empty",
        );
        assert_one(
            json!({"role": null, "instanceProfile": ""}),
            "EC2NodeClass default: spec.instanceProfile: 'instanceProfile' must not be empty",
        );
    }

    #[test]
    fn ami_family_required_without_alias() {
        assert_one(
            json!({"amiSelectorTerms": [{"id": "ami-123"}]}),
            "EC2NodeClass default: spec.amiFamily: 'amiFamily' is required unless an amiSelectorTerm uses an 'alias'",
        );
        assert!(errors(json!({"amiSelectorTerms": [{"id": "ami-123"}], "amiFamily": "AL2023"})).is_empty());
    }

    #[test]
    fn ami_family_matches_alias() {
        assert_one(
            json!({"amiFamily": "Bottlerocket"}),
            "EC2NodeClass default: spec.amiFamily: with an 'alias' amiSelectorTerm, 'amiFamily' may only be the alias' family or 'Custom'",
        );
        assert!(errors(json!({"amiFamily": "AL2023"})).is_empty());
        assert!(errors(json!({"amiFamily": "Custom"})).is_empty());
    }

    #[test]
    fn ami_family_enum() {
        let errs = errors(json!({"amiFamily": "Ubuntu", "amiSelectorTerms": [{"id": "ami-1"}]}));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("EC2NodeClass default: spec.amiFamily: \"Ubuntu\" is not one of AL2"),
            "{errs:?}"
        );
    }

    #[test]
    fn alias_is_exclusive_and_the_only_term() {
        assert_one(
            json!({"amiSelectorTerms": [{"alias": "al2023@latest", "owner": "self"}]}),
            "EC2NodeClass default: spec.amiSelectorTerms[0]: 'alias' cannot be combined with 'id', 'tags', 'name' or 'owner' in an amiSelectorTerm",
        );
        // Upstream's rule does not name ssmParameter.
        assert!(
            errors(json!({"amiSelectorTerms": [{"alias": "al2023@latest", "ssmParameter": "/p"}]}))
                .is_empty()
        );
        assert_one(
            json!({"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-1"}]}),
            "EC2NodeClass default: spec.amiSelectorTerms[0]: an amiSelectorTerm with an 'alias' must be the only amiSelectorTerm",
        );
    }

    #[test]
    fn alias_format_family_and_windows_latest() {
        let errs = errors(json!({"amiSelectorTerms": [{"alias": "al2023"}]}));
        assert!(
            errs.iter().any(|e| e
                .ends_with("spec.amiSelectorTerms[0].alias: 'alias' must have the form 'family@version'")),
            "{errs:?}"
        );
        assert_one(
            json!({"amiSelectorTerms": [{"alias": "ubuntu@latest"}], "amiFamily": "Custom"}),
            &format!(
                "EC2NodeClass default: spec.amiSelectorTerms[0].alias: {}",
                messages::ALIAS_FAMILY
            ),
        );
        assert_one(
            json!({"amiSelectorTerms": [{"alias": "windows2022@v1"}]}),
            "EC2NodeClass default: spec.amiSelectorTerms[0].alias: windows alias families only support the version 'latest'",
        );
        assert!(errors(json!({"amiSelectorTerms": [{"alias": "windows2025@latest"}]})).is_empty());
        assert!(errors(json!({"amiSelectorTerms": [{"alias": "bottlerocket@v1.20.0"}]})).is_empty());
    }

    #[test]
    fn ami_id_exclusive_and_term_not_empty() {
        assert_one(
            json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-1", "name": "x"}]}),
            "EC2NodeClass default: spec.amiSelectorTerms[0]: 'id' cannot be combined with 'alias', 'tags', 'name' or 'owner' in an amiSelectorTerm",
        );
        assert!(
            errors(
                json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-1", "ssmParameter": "/p"}]})
            )
            .is_empty()
        );
        assert_one(
            json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"owner": "self"}]}),
            "EC2NodeClass default: spec.amiSelectorTerms[0]: each amiSelectorTerm must set 'tags', 'id', 'name', 'alias' or 'ssmParameter'",
        );
    }

    #[test]
    fn selector_terms_count() {
        assert_one(
            json!({"subnetSelectorTerms": []}),
            "EC2NodeClass default: spec.subnetSelectorTerms: must have at least 1 item",
        );
        let many: Vec<Value> = (0..31).map(|i| json!({"id": format!("sg-{i}")})).collect();
        assert_one(
            json!({"securityGroupSelectorTerms": many}),
            "EC2NodeClass default: spec.securityGroupSelectorTerms: must have at most 30 items, has 31",
        );
    }

    #[test]
    fn subnet_id_exclusive_and_pattern() {
        assert_one(
            json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]}),
            &format!(
                "EC2NodeClass default: spec.subnetSelectorTerms: {}",
                messages::SUBNET_ID_EXCLUSIVE
            ),
        );
        // Only when every term mixes them, as upstream's `!self.all(...)`.
        assert!(
            errors(
                json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}, {"tags": {"c": "d"}}]})
            )
            .is_empty()
        );
        assert_one(
            json!({"subnetSelectorTerms": [{"id": "sg-1"}]}),
            "EC2NodeClass default: spec.subnetSelectorTerms[0].id: \"sg-1\" does not match ^subnet-[0-9a-z]+$",
        );
    }

    #[test]
    fn selector_tags_not_empty() {
        assert_one(
            json!({"securityGroupSelectorTerms": [{"tags": {"a": ""}}]}),
            "EC2NodeClass default: spec.securityGroupSelectorTerms[0].tags: selector tag keys and values must not be empty",
        );
    }

    #[test]
    fn security_group_name_exclusive() {
        assert_one(
            json!({"securityGroupSelectorTerms": [{"name": "n", "tags": {"a": "b"}}]}),
            &format!(
                "EC2NodeClass default: spec.securityGroupSelectorTerms: {}",
                messages::SECURITY_GROUP_NAME_EXCLUSIVE
            ),
        );
        assert!(
            errors(
                json!({"securityGroupSelectorTerms": [{"name": "n", "tags": {"a": "b"}}, {"id": "sg-1"}]})
            )
            .is_empty()
        );
    }

    #[test]
    fn capacity_reservation_terms() {
        assert_one(
            json!({"capacityReservationSelectorTerms": [{"ownerID": "123456789012"}]}),
            &format!(
                "EC2NodeClass default: spec.capacityReservationSelectorTerms[0]: {}",
                messages::CAPACITY_RESERVATION_TERM_EMPTY
            ),
        );
        assert_one(
            json!({"capacityReservationSelectorTerms": [{"id": "cr-1", "instanceMatchCriteria": "open"}]}),
            &format!(
                "EC2NodeClass default: spec.capacityReservationSelectorTerms: {}",
                messages::CAPACITY_RESERVATION_ID_EXCLUSIVE
            ),
        );
        assert_one(
            json!({"capacityReservationSelectorTerms": []}),
            &format!(
                "EC2NodeClass default: spec.capacityReservationSelectorTerms: {}",
                messages::CAPACITY_RESERVATION_ID_EXCLUSIVE
            ),
        );
        assert_eq!(
            errors(json!({"capacityReservationSelectorTerms": [{"tags": {"a": "b"}, "ownerID": "12"}]}))
                .len(),
            1
        );
        assert!(
            errors(
                json!({"capacityReservationSelectorTerms": [{"tags": {"a": "*"}, "ownerID": "123456789012"}]})
            )
            .is_empty()
        );
    }

    #[test]
    fn reserved_tags() {
        for (key, message) in [
            ("eks:eks-cluster-name", messages::TAG_RESERVED_EKS_CLUSTER_NAME),
            ("kubernetes.io/cluster/foo", messages::TAG_RESERVED_CLUSTER),
            ("karpenter.sh/nodepool", messages::TAG_RESERVED_NODEPOOL),
            ("karpenter.sh/nodeclaim", messages::TAG_RESERVED_NODECLAIM),
            (
                "karpenter.k8s.aws/ec2nodeclass",
                messages::TAG_RESERVED_EC2NODECLASS,
            ),
            ("", messages::TAG_KEY_EMPTY),
        ] {
            assert_one(
                json!({"tags": {key: "x"}}),
                &format!("EC2NodeClass default: spec.tags[{key:?}]: {message}"),
            );
        }
        assert!(errors(json!({"tags": {"team": "a", "karpenter.sh/discovery": "c"}})).is_empty());
    }

    #[test]
    fn kubelet_image_gc_high_above_low() {
        assert_one(
            json!({"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 50}}),
            "EC2NodeClass default: spec.kubelet.imageGCHighThresholdPercent: imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
        );
        assert_one(
            json!({"kubelet": {"imageGCLowThresholdPercent": 101}}),
            "EC2NodeClass default: spec.kubelet.imageGCLowThresholdPercent: 101 must be between 0 and 100",
        );
    }

    #[test]
    fn kubelet_eviction_soft_and_grace_match() {
        assert_one(
            json!({"kubelet": {"evictionSoft": {"memory.available": "5%"}}}),
            "EC2NodeClass default: spec.kubelet.evictionSoft[\"memory.available\"]: every evictionSoft signal needs a matching evictionSoftGracePeriod",
        );
        assert_one(
            json!({"kubelet": {"evictionSoftGracePeriod": {"memory.available": "1m"}}}),
            "EC2NodeClass default: spec.kubelet.evictionSoftGracePeriod[\"memory.available\"]: every evictionSoftGracePeriod signal needs a matching evictionSoft",
        );
        assert!(errors(json!({"kubelet": {"evictionSoft": {"memory.available": "5%"}, "evictionSoftGracePeriod": {"memory.available": "1m30s"}}})).is_empty());
    }

    #[test]
    fn kubelet_reserved_keys_and_negative() {
        assert_one(
            json!({"kubelet": {"kubeReserved": {"gpu": "1"}}}),
            &format!(
                "EC2NodeClass default: spec.kubelet.kubeReserved[\"gpu\"]: {}",
                messages::KUBELET_RESERVED_KEYS
            ),
        );
        assert_one(
            json!({"kubelet": {"systemReserved": {"cpu": "-1"}}}),
            &format!(
                "EC2NodeClass default: spec.kubelet.systemReserved[\"cpu\"]: {}",
                messages::KUBELET_RESERVED_NEGATIVE
            ),
        );
    }

    #[test]
    fn kubelet_eviction_keys_and_values() {
        assert_one(
            json!({"kubelet": {"evictionHard": {"memory.free": "5%"}}}),
            &format!(
                "EC2NodeClass default: spec.kubelet.evictionHard[\"memory.free\"]: {}",
                messages::KUBELET_EVICTION_KEYS
            ),
        );
        assert_eq!(
            errors(json!({"kubelet": {"evictionHard": {"memory.available": "101%"}}})).len(),
            1
        );
    }

    #[test]
    fn block_device_mappings_one_root_and_snapshot_or_size() {
        assert_one(
            json!({"blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}},
                {"deviceName": "/dev/xvdb", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}
            ]}),
            "EC2NodeClass default: spec.blockDeviceMappings: at most one blockDeviceMapping may set 'rootVolume'",
        );
        assert_one(
            json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]}),
            "EC2NodeClass default: spec.blockDeviceMappings[0].ebs: ebs must set 'snapshotID' or 'volumeSize'",
        );
        assert_one(
            json!({"blockDeviceMappings": [{"ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 200}}]}),
            "EC2NodeClass default: spec.blockDeviceMappings[0].ebs.volumeInitializationRate: 'volumeInitializationRate' requires a non-empty 'snapshotID'",
        );
    }

    #[test]
    fn network_interfaces_primary_unique_one_efa_only() {
        let nic = |card: i32, dev: i32, ty: &str| json!({"networkCardIndex": card, "deviceIndex": dev, "interfaceType": ty});
        assert_one(
            json!({"networkInterfaces": [nic(0, 1, "efa-only")]}),
            &format!(
                "EC2NodeClass default: spec.networkInterfaces: {}",
                messages::NETWORK_INTERFACES_PRIMARY
            ),
        );
        assert_one(
            json!({"networkInterfaces": [nic(0, 0, "interface"), nic(0, 0, "efa-only")]}),
            &format!(
                "EC2NodeClass default: spec.networkInterfaces[1]: {}",
                messages::NETWORK_INTERFACES_UNIQUE
            ),
        );
        assert_one(
            json!({"networkInterfaces": [nic(0, 0, "interface"), nic(1, 0, "efa-only"), nic(1, 1, "efa-only")]}),
            &format!(
                "EC2NodeClass default: spec.networkInterfaces[2]: {}",
                messages::NETWORK_INTERFACES_ONE_EFA_ONLY
            ),
        );
        assert!(errors(json!({"networkInterfaces": [nic(0, 0, "interface"), nic(0, 1, "efa-only"), nic(1, 0, "efa-only")]})).is_empty());
    }

    #[test]
    fn connection_tracking_at_least_one_and_ranges() {
        assert_one(
            json!({"connectionTracking": {}}),
            "EC2NodeClass default: spec.connectionTracking: connectionTracking must set at least one timeout",
        );
        assert_one(
            json!({"connectionTracking": {"udpTimeout": 61}}),
            "EC2NodeClass default: spec.connectionTracking.udpTimeout: 61 must be between 30 and 60",
        );
    }

    #[test]
    fn placement_group_selector_exactly_one() {
        assert_one(
            json!({"placementGroupSelector": {"name": "a", "id": "pg-1"}}),
            "EC2NodeClass default: spec.placementGroupSelector: placementGroupSelector must set exactly one of 'name' or 'id'",
        );
        assert_one(
            json!({"placementGroupSelector": {"id": "pg_1"}}),
            "EC2NodeClass default: spec.placementGroupSelector.id: \"pg_1\" does not match ^pg-[0-9a-z]+$",
        );
    }

    #[test]
    fn metadata_options_enums_and_hop_limit() {
        assert_one(
            json!({"metadataOptions": {"httpPutResponseHopLimit": 0}}),
            "EC2NodeClass default: spec.metadataOptions.httpPutResponseHopLimit: 0 must be between 1 and 64",
        );
        assert_one(
            json!({"metadataOptions": {"httpTokens": "sometimes"}}),
            "EC2NodeClass default: spec.metadataOptions.httpTokens: \"sometimes\" is not one of required, optional",
        );
    }

    #[test]
    fn syntax_helpers() {
        for ok in ["1", "100m", "1.5Gi", "+2", ".5", "1e3", "1E-2", "5."] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "Gi", "1.2.3", "1Xi", "1e", "--1", "."] {
            assert!(!is_quantity(bad), "{bad}");
        }
        for ok in ["0%", "5%", "99.99%", "100%", "100.0%", "100.00%", "500Mi"] {
            assert!(is_eviction_threshold(ok), "{ok}");
        }
        for bad in ["101%", "100.1%", "5.123%", "%", "abc"] {
            assert!(!is_eviction_threshold(bad), "{bad}");
        }
        for ok in ["0", "1m", "1m30s", "1.5h", "300ms", "2µs", "1h0m0s"] {
            assert!(is_go_duration(ok), "{ok}");
        }
        for bad in ["", "1", "1d", "-1m", "m", "+1m"] {
            assert!(!is_go_duration(bad), "{bad}");
        }
        for ok in ["1Gi", "59000Gi", "64000G", "58Ti", "64T", "100Gi"] {
            assert!(volume_size_ok(ok), "{ok}");
        }
        for bad in [
            "0Gi", "59001Gi", "64001G", "59Ti", "65T", "Ti", "01Gi", "1Mi", "1.5Gi",
        ] {
            assert!(!volume_size_ok(bad), "{bad}");
        }
    }
}
