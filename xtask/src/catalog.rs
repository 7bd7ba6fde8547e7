//! `cargo xtask catalog`: turns the shared AWS reference data (shared/data/aws: instance-types.json,
//! on-demand-prices.json, zones.json) into the compact data files that karpenter-core embeds:
//!
//! - `aws-catalog.json`: per instance type only what scheduling needs (labels, arch, vCPUs, memory, ENI limits,
//!   extended resources, GPU/accelerator facts, bare metal, hypervisor, capacity types, zones per region and the
//!   us-east-1 on-demand price), with a header that cites the sources and names every synthetic value.
//! - `aws-allocatable-golden.json`: the allocatable resources Karpenter's generated instance-type reference
//!   documents for each type, the golden values karpenter-core's capacity maths is tested against.
//!
//! Both files are committed; `check` fails when they differ from what this generator would write, so the data
//! cannot drift from its sources unnoticed. The output is deterministic: the source order of types, sorted maps.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Map, Value, json};

/// The embedded catalog, relative to the output folder (crates/karpenter-aws-catalog/data).
pub const CATALOG_FILE: &str = "aws-catalog.json";
/// The golden allocatable values, relative to the output folder.
pub const GOLDEN_FILE: &str = "aws-allocatable-golden.json";

/// The regions the embedded catalog covers (those zones.json describes).
const REGIONS: [&str; 3] = ["us-east-1", "us-west-2", "eu-west-1"];
/// The only commercial region with real on-demand prices in the shared data.
const PRICE_REGION: &str = "us-east-1";
/// Labels under this prefix are stored with the prefix removed; karpenter-core puts it back.
const LABEL_PREFIX: &str = "karpenter.k8s.aws/instance-";
/// The upstream commit the shared data was extracted from (shared/data/aws/README.md, "Sources").
const UPSTREAM_REPO: &str = "aws/karpenter-provider-aws";
const UPSTREAM_COMMIT: &str = "1d927085dd81a9df9301e613f371dac5b4d16bfe";
/// Spot prices are synthesised by karpenter-aws-catalog (src/catalog.rs, `synthetic_spot_price`); the header states the
/// formula, so these must agree with the constants there.
const SPOT_FORMULA: &str = "spot price = round(onDemandPrice * 0.35 * (1 + d), 6 decimals) with d = ((FNV-1a-64 of \
    the UTF-8 string \"<instance type>/<zone>\") mod 11 - 5) / 100, so -5% to +5% around 35% of on-demand and \
    different per zone; computed at load time by karpenter-aws-catalog (src/catalog.rs, synthetic_spot_price)";

/// Generates the data files into `out_dir` (crates/karpenter-aws-catalog/data), or with `check` verifies that the
/// committed files equal what would be generated. `shared_data_dir` is either the folder holding
/// instance-types.json, on-demand-prices.json and zones.json, or its parent (shared/data, with an `aws` child).
pub fn run(shared_data_dir: &Path, out_dir: &Path, check: bool) -> Result<()> {
    let aws_dir = resolve_aws_dir(shared_data_dir)?;
    let sources = Sources::read(&aws_dir)?;
    let outputs = [
        (CATALOG_FILE, catalog_json(&sources)?),
        (GOLDEN_FILE, golden_json(&sources)?),
    ];
    let mut stale = Vec::new();
    for (file, text) in &outputs {
        let path = out_dir.join(file);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(text.as_str()) {
            println!("{}: up to date ({} bytes)", path.display(), text.len());
            continue;
        }
        if check {
            stale.push(path.display().to_string());
        } else {
            std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            println!("{}: written ({} bytes)", path.display(), text.len());
        }
    }
    if !stale.is_empty() {
        bail!(
            "stale (differs from what the generator writes from {1}): {0}; run `cargo xtask catalog` and commit the result",
            stale.join(", "),
            aws_dir.display()
        );
    }
    Ok(())
}

fn resolve_aws_dir(dir: &Path) -> Result<PathBuf> {
    for candidate in [dir.to_path_buf(), dir.join("aws")] {
        if candidate.join("instance-types.json").is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "{} holds no instance-types.json (nor does its `aws` folder)",
        dir.display()
    )
}

/// The three shared files, parsed.
struct Sources {
    types: Vec<Value>,
    prices: Value,
    zones: Value,
}

impl Sources {
    fn read(dir: &Path) -> Result<Self> {
        let load = |name: &str| -> Result<Value> {
            let path = dir.join(name);
            let text =
                std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
        };
        let types = match load("instance-types.json")? {
            Value::Array(types) => types,
            _ => bail!("instance-types.json is not a JSON array"),
        };
        Ok(Self {
            types,
            prices: load("on-demand-prices.json")?,
            zones: load("zones.json")?,
        })
    }
}

fn field<'a>(object: &'a Value, key: &str, what: &str) -> Result<&'a Value> {
    object
        .get(key)
        .with_context(|| format!("{what}: field {key:?} is missing"))
}

fn str_field<'a>(object: &'a Value, key: &str, what: &str) -> Result<&'a str> {
    field(object, key, what)?
        .as_str()
        .with_context(|| format!("{what}: field {key:?} is not a string"))
}

fn int_field(object: &Value, key: &str, what: &str) -> Result<i64> {
    field(object, key, what)?
        .as_i64()
        .with_context(|| format!("{what}: field {key:?} is not an integer"))
}

fn bool_field(object: &Value, key: &str, what: &str) -> Result<bool> {
    field(object, key, what)?
        .as_bool()
        .with_context(|| format!("{what}: field {key:?} is not a boolean"))
}

/// Per region: the zones in order (suffix letter, name, id) and, per instance type, the letters of its zones.
struct RegionZones {
    zones: Vec<(char, String, String)>,
    by_type: BTreeMap<String, String>,
}

fn region_zones(zones: &Value, region: &str) -> Result<RegionZones> {
    let what = format!("zones.json regions.{region}");
    let entry = zones
        .get("regions")
        .and_then(|r| r.get(region))
        .with_context(|| format!("{what} is missing"))?;
    let list = field(entry, "zones", &what)?
        .as_array()
        .with_context(|| format!("{what}.zones is not a list"))?;
    let mut out = RegionZones {
        zones: Vec::new(),
        by_type: BTreeMap::new(),
    };
    let mut letters: BTreeMap<String, BTreeSet<char>> = BTreeMap::new();
    for zone in list {
        let name = str_field(zone, "name", &what)?;
        let zone_id = str_field(zone, "zone_id", &what)?;
        let suffix = name.strip_prefix(region).unwrap_or_default();
        let mut chars = suffix.chars();
        let (Some(letter), None) = (chars.next(), chars.next()) else {
            bail!("{what}: zone {name:?} is not the region name plus one letter");
        };
        ensure!(
            letter.is_ascii_lowercase(),
            "{what}: zone {name:?} does not end in a lower-case letter"
        );
        out.zones.push((letter, name.to_string(), zone_id.to_string()));
        let types = field(zone, "instance_types", &what)?
            .as_array()
            .with_context(|| format!("{what}: {name}"))?;
        for instance_type in types {
            let instance_type = instance_type
                .as_str()
                .with_context(|| format!("{what}: {name}: bad type"))?;
            letters
                .entry(instance_type.to_string())
                .or_default()
                .insert(letter);
        }
    }
    out.zones.sort();
    // The region's own list must agree with the union of its zones (it does in moto's data; say so if not).
    let region_types = field(entry, "region_instance_types", &what)?
        .as_array()
        .with_context(|| format!("{what}.region_instance_types is not a list"))?;
    let region_set: BTreeSet<&str> = region_types.iter().filter_map(Value::as_str).collect();
    let zone_set: BTreeSet<&str> = letters.keys().map(String::as_str).collect();
    ensure!(
        region_set == zone_set,
        "{what}: region_instance_types differs from the union of its zones' types"
    );
    out.by_type = letters
        .into_iter()
        .map(|(t, l)| (t, l.into_iter().collect()))
        .collect();
    Ok(out)
}

/// The capacity types Karpenter offers for a type: its usage classes that are on-demand or spot (upstream skips
/// capacity-block). null (the 5 g4ad types, absent from moto) is assumed to be both.
fn capacity_types(instance_type: &Value, name: &str) -> Result<Vec<&'static str>> {
    let classes = match instance_type.get("supported_usage_classes") {
        None | Some(Value::Null) => return Ok(vec!["on-demand", "spot"]),
        Some(Value::Array(classes)) => classes,
        Some(_) => bail!("{name}: supported_usage_classes is not a list"),
    };
    let has = |class: &str| classes.iter().any(|c| c.as_str() == Some(class));
    Ok(["on-demand", "spot"].into_iter().filter(|c| has(c)).collect())
}

/// One instance type of the embedded catalog as a single JSON line, keys in a fixed, readable order.
fn type_line(t: &Value, zones: &[(&str, &RegionZones)], price: Option<f64>) -> Result<String> {
    let name = str_field(t, "name", "instance type")?;
    let what = format!("instance type {name}");
    let arch = str_field(t, "architecture", &what)?;
    let vcpu = int_field(t, "vcpu", &what)?;
    let memory_mib = int_field(t, "memory_mib", &what)?;
    let hypervisor = str_field(t, "hypervisor", &what)?;
    let max_enis = int_field(t, "max_enis", &what)?;
    let ipv4_per_eni = int_field(t, "ipv4_per_eni", &what)?;
    ensure!(
        vcpu > 0 && memory_mib > 0,
        "{what}: vcpu and memory_mib must be positive"
    );
    ensure!(
        max_enis >= 0 && ipv4_per_eni >= 1,
        "{what}: implausible ENI limits"
    );
    ensure!(
        int_field(t, "max_pods", &what)? == max_enis * (ipv4_per_eni - 1) + 2,
        "{what}: max_pods does not follow the ENI formula"
    );
    let bare_metal = bool_field(t, "bare_metal", &what)?;
    let sources = field(t, "sources", &what)?
        .as_array()
        .with_context(|| format!("{what}: sources"))?;
    let in_vpc_limits = sources.iter().any(|s| s.as_str() == Some("karpenter-vpclimits"));

    // Labels: the Karpenter labels map, checked against the typed fields and stored with the common prefix
    // removed. The three upstream keys (instance-type, arch, os) follow from name and arch and are left out.
    let labels = field(t, "labels", &what)?
        .as_object()
        .with_context(|| format!("{what}: labels"))?;
    let mut short = Map::new();
    for (key, value) in labels {
        let value = value
            .as_str()
            .with_context(|| format!("{what}: label {key} is not a string"))?;
        match key.as_str() {
            "node.kubernetes.io/instance-type" => ensure!(value == name, "{what}: instance-type label"),
            "kubernetes.io/arch" => ensure!(value == arch, "{what}: arch label"),
            "kubernetes.io/os" => ensure!(value == "linux", "{what}: os label"),
            _ => {
                let Some(rest) = key.strip_prefix(LABEL_PREFIX) else {
                    bail!("{what}: unexpected label {key}");
                };
                short.insert(rest.to_string(), Value::String(value.to_string()));
            }
        }
    }
    let label = |k: &str| short.get(k).and_then(Value::as_str);
    ensure!(
        label("cpu") == Some(vcpu.to_string().as_str()),
        "{what}: instance-cpu label differs from vcpu"
    );
    ensure!(
        label("memory") == Some(memory_mib.to_string().as_str()),
        "{what}: instance-memory label"
    );
    ensure!(
        label("hypervisor") == Some(hypervisor),
        "{what}: instance-hypervisor label"
    );

    // Zero counts are dropped: the fractional-GPU types (g6f, gr6f) list nvidia.com/gpu 0, which is no capacity.
    let extended = field(t, "extended_resources", &what)?
        .as_object()
        .with_context(|| format!("{what}: ext"))?;
    let mut nonzero = Map::new();
    for (resource, count) in extended {
        let count = count.as_i64().filter(|c| *c >= 0);
        let count = count.with_context(|| format!("{what}: extended resource {resource} is not a count"))?;
        if count > 0 {
            nonzero.insert(resource.clone(), json!(count));
        }
    }

    let mut zone_letters = Map::new();
    for (region, region_zones) in zones {
        if let Some(letters) = region_zones.by_type.get(name) {
            zone_letters.insert((*region).to_string(), Value::String(letters.clone()));
        }
    }

    let mut line = String::from("{");
    let mut push = |key: &str, value: Value| -> Result<()> {
        if line.len() > 1 {
            line.push(',');
        }
        write_str(&mut line, key);
        line.push(':');
        write_sorted(&mut line, &value, None);
        Ok(())
    };
    push("name", json!(name))?;
    push("arch", json!(arch))?;
    push("vcpu", json!(vcpu))?;
    push("memoryMib", json!(memory_mib))?;
    push("hypervisor", json!(hypervisor))?;
    push("bareMetal", json!(bare_metal))?;
    push("maxEnis", json!(max_enis))?;
    push("ipv4PerEni", json!(ipv4_per_eni))?;
    push("inVpcLimits", json!(in_vpc_limits))?;
    push("capacityTypes", json!(capacity_types(t, name)?))?;
    if let Some(gpu) = t.get("gpu").filter(|g| !g.is_null()) {
        push(
            "gpu",
            json!({
                "name": str_field(gpu, "name", &what)?,
                "manufacturer": str_field(gpu, "manufacturer", &what)?,
                "count": int_field(gpu, "count", &what)?,
                "memoryMib": int_field(gpu, "memory_mib", &what)?,
            }),
        )?;
    }
    if let Some(accelerator) = t.get("accelerator").filter(|a| !a.is_null()) {
        push(
            "accelerator",
            json!({
                "name": str_field(accelerator, "name", &what)?,
                "manufacturer": str_field(accelerator, "manufacturer", &what)?,
                "count": int_field(accelerator, "count", &what)?,
            }),
        )?;
    }
    push("extendedResources", Value::Object(nonzero))?;
    push("labels", Value::Object(short))?;
    push("onDemandPrice", price.map_or(Value::Null, |p| json!(p)))?;
    push("zones", Value::Object(zone_letters))?;
    line.push('}');
    Ok(line)
}

/// Writes a JSON string with JSON escaping.
fn write_str(out: &mut String, s: &str) {
    out.push_str(&Value::String(s.to_string()).to_string());
}

/// Writes `value` as JSON with object keys sorted, whatever serde_json's map type preserves (its
/// `preserve_order` feature may be switched on by any crate in the build), so the output never depends on it.
/// `indent` is the current depth for pretty output (two spaces a level), or None for one compact line.
fn write_sorted(out: &mut String, value: &Value, indent: Option<usize>) {
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if let Some(depth) = indent {
                    newline(out, depth + 1);
                }
                write_sorted(out, item, indent.map(|d| d + 1));
            }
            if let Some(depth) = indent {
                newline(out, depth);
            }
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if let Some(depth) = indent {
                    newline(out, depth + 1);
                }
                write_str(out, key);
                out.push_str(if indent.is_some() { ": " } else { ":" });
                write_sorted(out, item, indent.map(|d| d + 1));
            }
            if let Some(depth) = indent {
                newline(out, depth);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Writes an object pretty at depth 1 with the keys named in `first` first, in that order (a header reads best
/// with "what" on top), then the rest sorted; every nested value has sorted keys.
fn write_header_object(out: &mut String, object: &Value, first: &[&str]) {
    let mut keys: Vec<&str> = first
        .iter()
        .copied()
        .filter(|k| object.get(*k).is_some())
        .collect();
    let mut rest: Vec<&str> = object
        .as_object()
        .into_iter()
        .flat_map(|m| m.keys())
        .map(String::as_str)
        .filter(|k| !first.contains(k))
        .collect();
    rest.sort_unstable();
    keys.extend(rest);
    out.push('{');
    for (i, key) in keys.into_iter().enumerate() {
        out.push_str(if i > 0 { ",\n    " } else { "\n    " });
        write_str(out, key);
        out.push_str(": ");
        write_sorted(out, &object[key], Some(2));
    }
    out.push_str("\n  }");
}

fn catalog_json(sources: &Sources) -> Result<String> {
    let generated_from = str_field(&sources.prices, "generated_from", "on-demand-prices.json")?;
    ensure!(
        generated_from == format!("{UPSTREAM_REPO}@{UPSTREAM_COMMIT}"),
        "on-demand-prices.json was generated from {generated_from}, not the commit this generator cites"
    );
    let price_source = field(&sources.prices, "region_sources", "on-demand-prices.json")?
        .get(PRICE_REGION)
        .with_context(|| format!("on-demand-prices.json has no region_sources.{PRICE_REGION}"))?;
    let price_file = str_field(price_source, "file", "on-demand-prices.json region_sources")?;
    let price_generated_at = str_field(
        price_source,
        "generated_at",
        "on-demand-prices.json region_sources",
    )?;
    ensure!(
        str_field(price_source, "currency", "on-demand-prices.json region_sources")? == "USD",
        "{PRICE_REGION} prices are not in USD"
    );
    let prices = field(&sources.prices, "regions", "on-demand-prices.json")?
        .get(PRICE_REGION)
        .and_then(Value::as_object)
        .with_context(|| format!("on-demand-prices.json has no {PRICE_REGION} prices"))?;
    let zones_generated_from = str_field(&sources.zones, "generated_from", "zones.json")?;

    let region_zones: Vec<(&str, RegionZones)> = REGIONS
        .iter()
        .map(|r| Ok((*r, region_zones(&sources.zones, r)?)))
        .collect::<Result<_>>()?;
    let zone_refs: Vec<(&str, &RegionZones)> = region_zones.iter().map(|(r, z)| (*r, z)).collect();

    let mut lines = Vec::with_capacity(sources.types.len());
    let mut names = BTreeSet::new();
    let mut unpriced = Vec::new();
    for t in &sources.types {
        let name = str_field(t, "name", "instance type")?;
        ensure!(
            names.insert(name.to_string()),
            "instance type {name} appears twice"
        );
        let price = match prices.get(name) {
            Some(p) => Some(
                p.as_f64()
                    .filter(|p| p.is_finite() && *p > 0.0)
                    .with_context(|| {
                        format!(
                            "on-demand-prices.json: {PRICE_REGION} price of {name} is not a positive number"
                        )
                    })?,
            ),
            None => {
                unpriced.push(name.to_string());
                None
            }
        };
        lines.push(type_line(t, &zone_refs, price)?);
    }
    let mut region_counts = Map::new();
    for (region, zones) in &region_zones {
        let in_catalog = zones.by_type.keys().filter(|t| names.contains(*t)).count();
        region_counts.insert((*region).to_string(), json!(in_catalog));
    }

    let about = json!({
        "what": "The embedded AWS EC2 instance-type catalog of karpenter-aws-catalog: per instance type only what \
            Karpenter's scheduling needs. karpenter-aws-catalog (src/catalog.rs) turns it into a catalog file for a \
            region with upstream's capacity maths (crates/karpenter-aws-catalog/src/capacity.rs).",
        "generatedBy": "cargo xtask catalog (xtask/src/catalog.rs) from shared/data/aws (see its README.md); \
            do not edit by hand, `cargo xtask catalog --check` fails when this file is stale",
        "sources": [
            {
                "id": "karpenter-doc",
                "what": "the generated instance-type reference: Karpenter's labels (and, in aws-allocatable-golden.json, \
                    allocatable resources) for each type",
                "repository": UPSTREAM_REPO,
                "commit": UPSTREAM_COMMIT,
                "commitNote": "2026-08-21, \"docs: update for patch release v1.14.1\"",
                "path": "website/content/en/docs/reference/instance-types.md",
                "pathNote": "last regenerated in 692ccdd06, v1.14.0, 2026-07-11; covers us-east-1, us-east-2 and \
                    us-west-2 with AL2023 and no blockDeviceMappings"
            },
            {
                "id": "karpenter-vpclimits",
                "what": "maxEnis (default network card), ipv4PerEni, vpc.amazonaws.com/pod-eni (branch ENIs)",
                "repository": UPSTREAM_REPO,
                "commit": UPSTREAM_COMMIT,
                "path": "pkg/providers/instancetype/zz_generated.vpclimits.go",
                "pathNote": "generated 2026-08-06T04:02:42Z; types marked inVpcLimits=false take their ENI limits \
                    from moto's NetworkInfo"
            },
            {
                "id": "karpenter-bandwidth",
                "what": "the instance-network-bandwidth label",
                "repository": UPSTREAM_REPO,
                "commit": UPSTREAM_COMMIT,
                "path": "pkg/providers/instancetype/zz_generated.bandwidth.go"
            },
            {
                "id": "karpenter-pricing",
                "what": format!("onDemandPrice: {PRICE_REGION} on-demand prices, USD per instance-hour, Linux, shared tenancy"),
                "repository": UPSTREAM_REPO,
                "commit": UPSTREAM_COMMIT,
                "path": price_file,
                "generatedAt": price_generated_at
            },
            {
                "id": "moto",
                "what": "DescribeInstanceTypes records (bareMetal, capacityTypes, GPU/accelerator/EFA facts, the 28 \
                    types newer than karpenter-doc) and the zone offerings of each region",
                "package": "moto==5.2.5 (PyPI wheel, resource files dated 2026-10-27)",
                "paths": [
                    "moto/ec2/resources/instance_types.json.gz",
                    "moto/ec2/resources/instance_type_offerings/{availability-zone,availability-zone-id,region}/<region>.json.gz"
                ],
                "zonesFile": zones_generated_from
            }
        ],
        "synthetic": [
            format!("onDemandPrice is a fact for {PRICE_REGION} only. The shared data has no us-west-2 or eu-west-1 \
                prices, so karpenter-aws-catalog prices those regions' on-demand offerings with the {PRICE_REGION} price: \
                SYNTHETIC."),
            format!("Spot prices are not in the data and are SYNTHETIC: {SPOT_FORMULA}."),
            "Zone IDs (regions.*.zones[].zoneId) were inferred by matching moto's by-name and by-ID offering sets; \
                the name-to-ID mapping differs per AWS account: illustrative only.",
            "capacityTypes of the 5 g4ad types (absent from moto) are assumed to be on-demand and spot.",
            "Labels of the 28 types newer than karpenter-doc (r9g, r9gd, t8i, trn2.3xlarge, trn2u.48xlarge) were \
                computed from moto's records with upstream's computeRequirements() rules, not taken from the doc."
        ],
        "notes": [
            format!("{} instance types have no {PRICE_REGION} on-demand price (onDemandPrice null); karpenter-core \
                gives them no offerings in any region, so they can be matched but never launched.", unpriced.len()),
            "capacityTypes keeps on-demand and spot only: upstream ignores the capacity-block usage class.",
            "The 9 mac*.metal types are excluded (architectures *_mac; Karpenter keeps only x86_64/arm64 hvm).",
            "Not in the data: the nitro-sandbox/Nitro Enclaves and instance-tenancy labels (karpenter-core adds \
                instance-tenancy In [default, dedicated] as upstream does), EFA-only ENIs, per-OS prices, Windows data."
        ],
        "fields": {
            "name": "node.kubernetes.io/instance-type",
            "arch": "kubernetes.io/arch (amd64|arm64)",
            "vcpu": "DefaultVCpus",
            "memoryMib": "MemoryInfo.SizeInMiB, total memory before any overhead",
            "hypervisor": "nitro, xen or \"\" (bare metal)",
            "bareMetal": "from moto (vpclimits for g4ad)",
            "maxEnis": "MaximumNetworkInterfaces of the default network card (what the VPC CNI uses)",
            "ipv4PerEni": "Ipv4AddressesPerInterface",
            "inVpcLimits": "the type is in upstream's vpclimits table (Windows vpc.amazonaws.com/PrivateIPv4Address needs it)",
            "capacityTypes": "karpenter.sh/capacity-type values offered",
            "gpu": "present when Karpenter sets the instance-gpu-* labels (exactly one GPU kind); memoryMib is per GPU",
            "accelerator": "present when Karpenter sets the instance-accelerator-* labels",
            "extendedResources": "capacity Karpenter reports beyond cpu/memory/pods/ephemeral-storage; zero counts omitted",
            "labels": format!("the single-valued Karpenter labels with the prefix {LABEL_PREFIX:?} removed; \
                node.kubernetes.io/instance-type, kubernetes.io/arch and kubernetes.io/os=linux are implied"),
            "onDemandPrice": format!("USD per hour in {PRICE_REGION}, or null when the data has none"),
            "zones": "per region, the suffix letters of the zones that offer the type (\"abd\" = <region>a, <region>b, <region>d)"
        },
        "counts": {
            "instanceTypes": lines.len(),
            "withoutOnDemandPrice": unpriced.len(),
            "perRegion": Value::Object(region_counts)
        }
    });

    let mut regions = Map::new();
    for (region, zones) in &region_zones {
        let list: Vec<Value> = zones
            .zones
            .iter()
            .map(|(letter, name, id)| json!({"letter": letter.to_string(), "name": name, "zoneId": id}))
            .collect();
        let pricing = if *region == PRICE_REGION {
            format!("fact: {PRICE_REGION} on-demand prices from karpenter-pricing")
        } else {
            format!("synthetic: {PRICE_REGION} on-demand prices reused")
        };
        regions.insert(
            (*region).to_string(),
            json!({"zones": list, "onDemandPrices": pricing}),
        );
    }

    let mut out = String::with_capacity(lines.iter().map(|l| l.len() + 2).sum::<usize>() + 16_384);
    writeln!(out, "{{")?;
    out.push_str("  \"about\": ");
    write_header_object(
        &mut out,
        &about,
        &[
            "what",
            "generatedBy",
            "sources",
            "synthetic",
            "notes",
            "fields",
            "counts",
        ],
    );
    out.push_str(",\n  \"regions\": ");
    write_sorted(&mut out, &Value::Object(regions), Some(1));
    out.push_str(",\n");
    writeln!(out, "  \"instanceTypes\": [")?;
    for (i, line) in lines.iter().enumerate() {
        let comma = if i + 1 < lines.len() { "," } else { "" };
        writeln!(out, "{line}{comma}")?;
    }
    writeln!(out, "  ]")?;
    writeln!(out, "}}")?;
    Ok(out)
}

fn golden_json(sources: &Sources) -> Result<String> {
    let mut lines = Vec::new();
    for t in &sources.types {
        let name = str_field(t, "name", "instance type")?;
        let Some(allocatable) = t.get("karpenter_doc_allocatable").and_then(Value::as_object) else {
            continue;
        };
        for resource in ["cpu", "memory", "ephemeral-storage", "pods"] {
            ensure!(
                allocatable.contains_key(resource),
                "{name}: karpenter_doc_allocatable lacks {resource}"
            );
        }
        let mut line = String::new();
        write_str(&mut line, name);
        line.push(':');
        write_sorted(&mut line, &Value::Object(allocatable.clone()), None);
        lines.push(line);
    }
    let about = json!({
        "what": "Allocatable resources per instance type as Karpenter's generated instance-type reference documents \
            them: the golden values for karpenter-core's AWS capacity maths (test \
            allocatable_matches_karpenter_docs_for_every_type). Generated by cargo xtask catalog; do not edit.",
        "source": {
            "repository": UPSTREAM_REPO,
            "commit": UPSTREAM_COMMIT,
            "path": "website/content/en/docs/reference/instance-types.md",
            "via": "shared/data/aws/instance-types.json field karpenter_doc_allocatable"
        },
        "settings": "AL2023, 20Gi root volume, no blockDeviceMappings, VM_MEMORY_OVERHEAD_PERCENT=0.075, reservedENIs 0, \
            default kube-reserved, default eviction-hard (memory.available 100Mi, nodefs.available 10%)",
        "count": lines.len()
    });
    let mut out = String::new();
    writeln!(out, "{{")?;
    out.push_str("  \"about\": ");
    write_header_object(&mut out, &about, &["what", "source", "settings", "count"]);
    writeln!(out, ",")?;
    writeln!(out, "  \"allocatable\": {{")?;
    for (i, line) in lines.iter().enumerate() {
        let comma = if i + 1 < lines.len() { "," } else { "" };
        writeln!(out, "{line}{comma}")?;
    }
    writeln!(out, "  }}")?;
    writeln!(out, "}}")?;
    Ok(out)
}
