//! Reading what a CLI run decides over: snapshot files and folders (Kubernetes objects as
//! `kubectl get -o yaml` prints them), the instance-type catalog (a catalog file, or the embedded AWS
//! catalog of a region) and the controller settings file.
//!
//! Unusable input (a file that cannot be read, a catalog that does not parse, a setting with a bad value) is
//! an error that names the file and the field; problems with single objects inside a snapshot are notes, and
//! the run goes on with the rest.

use std::{
    fs,
    io::{self, BufRead as _},
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail};
use karpenter_api::label_policy::LabelPolicy;
use karpenter_aws_catalog::{AwsCapacitySettings, aws_catalog};
use karpenter_core::{
    catalog::CatalogFile,
    scheduling::{MinValuesPolicy, PreferencePolicy, SchedulingSettings},
    snapshot::{BuildOptions, Snapshot, SnapshotNote},
};
use serde_json::Value;

use crate::{json_stream, schedule::OutputFormat};

/// The flags `schedule` and `disrupt` share: what to read, when the decision is made and how to print it.
#[derive(Debug, Clone, clap::Args)]
pub struct InputArgs {
    /// A YAML or JSON file, or a folder searched recursively for *.yaml, *.yml and *.json, holding Kubernetes
    /// objects as `kubectl get -o yaml` prints them (multi-document streams and `kind: List` accepted): Pods,
    /// Nodes, NodeClaims, NodePools, EC2NodeClasses, NodeOverlays, CapacityBuffers, DaemonSets, ReplicaSets,
    /// StatefulSets, Deployments, Services, PodDisruptionBudgets, PVCs, PVs, StorageClasses, CSINodes and
    /// Namespaces. Repeatable. Unbound pods not owned by a DaemonSet are pending. Unknown kinds and malformed
    /// objects are reported on stderr and skipped.
    #[arg(long = "snapshot", value_name = "PATH", required = true)]
    pub snapshots: Vec<PathBuf>,

    /// A catalog file (JSON or YAML: {"wellKnownLabels": [...], "instanceTypes": [{name, requirements,
    /// capacity, overhead, offerings}]}) to use instead of the embedded AWS catalog.
    #[arg(long, value_name = "PATH", conflicts_with = "region")]
    pub instance_types: Option<PathBuf>,

    /// The region whose embedded AWS catalog to use when no --instance-types is given (us-east-1, us-west-2,
    /// eu-west-1).
    #[arg(long, value_name = "REGION", default_value = "us-east-1")]
    pub region: String,

    /// The time the decision is made at, as RFC 3339 (2026-01-02T15:04:05Z): budgets' cron windows,
    /// consolidateAfter, expireAfter and do-not-disrupt durations are evaluated at it. Defaults to now.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<jiff::Timestamp>,

    /// A YAML or JSON map of controller settings, in the controller's names: preferencePolicy
    /// (Respect|Ignore), minValuesPolicy (Strict|BestEffort), featureGates ({ReservedCapacity: true,
    /// NodeOverlay: false, CapacityBuffer: false, SpotToSpotConsolidation: false}), vmMemoryOverheadPercent,
    /// reservedENIs; the environment names (PREFERENCE_POLICY, MIN_VALUES_POLICY, FEATURE_GATES:
    /// "ReservedCapacity=true,NodeOverlay=false", ...) work too.
    #[arg(long, value_name = "PATH")]
    pub settings: Option<PathBuf>,

    /// Output format; json is the stable contract other tools read.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Json)]
    pub output: OutputFormat,
}

fn parse_now(s: &str) -> std::result::Result<jiff::Timestamp, String> {
    s.parse::<jiff::Timestamp>()
        .map_err(|e| format!("not an RFC 3339 time: {e}"))
}

impl InputArgs {
    /// Loads everything the flags name (see [`load_all`]).
    pub fn load(&self, note: &mut dyn FnMut(String)) -> Result<Loaded> {
        load_all(
            &self.snapshots,
            self.instance_types.as_deref(),
            &self.region,
            self.settings.as_deref(),
            note,
        )
    }

    /// `--now`, or the current time.
    pub fn now(&self) -> jiff::Timestamp {
        self.now.unwrap_or_else(jiff::Timestamp::now)
    }
}

/// Everything `schedule` and `disrupt` read, loaded once: settings, catalog, snapshot and the build options
/// they imply.
pub struct Loaded {
    pub settings: Settings,
    pub catalog: CatalogFile,
    pub snapshot: Snapshot,
    pub options: BuildOptions,
}

/// Loads the settings file, the catalog (a file, or the embedded AWS catalog of `region`) and the snapshots,
/// passing every note to `note` as it comes. The label rules follow the catalog: the AWS flavour for the
/// embedded AWS catalog, the provider-neutral one for a catalog file.
pub fn load_all(
    snapshots: &[PathBuf],
    instance_types: Option<&Path>,
    region: &str,
    settings_path: Option<&Path>,
    note: &mut dyn FnMut(String),
) -> Result<Loaded> {
    let (settings, setting_notes) = load_settings(settings_path)?;
    setting_notes.into_iter().for_each(&mut *note);
    let (catalog, source) = load_catalog(instance_types, region, &settings.aws)?;
    let (snapshot, snapshot_notes) = load_snapshot(snapshots)?;
    snapshot_notes
        .into_iter()
        .for_each(|n| note(format!("{}: {}", n.object, n.message)));
    let options = BuildOptions {
        settings: settings.scheduling.clone(),
        label_policy: match source {
            CatalogSource::Aws => LabelPolicy::Aws,
            CatalogSource::File => LabelPolicy::Core,
        },
        extra_well_known_labels: catalog.well_known_labels.clone(),
        capacity_buffers: settings.capacity_buffer,
        node_overlays: settings.node_overlay,
        // A NodePool written by hand for a snapshot has no status; one whose Ready is False or Unknown is
        // still skipped, as the controller would.
        unevaluated_nodepools: true,
        default_spread: settings.default_spread.clone(),
    };
    Ok(Loaded {
        settings,
        catalog,
        snapshot,
        options,
    })
}

/// File name endings read when a `--snapshot` path is a folder.
const SNAPSHOT_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Reads every `--snapshot` path into one snapshot. A folder is walked recursively (sorted, so notes and
/// object order are stable) for `*.yaml`, `*.yml` and `*.json`; a file named directly is read whatever its
/// name.
pub fn load_snapshot(paths: &[PathBuf]) -> Result<(Snapshot, Vec<SnapshotNote>)> {
    let mut snapshot = Snapshot::default();
    let mut notes = Vec::new();
    for path in paths {
        let meta = fs::metadata(path).with_context(|| format!("cannot read snapshot {}", path.display()))?;
        let files = if meta.is_dir() {
            let mut files = Vec::new();
            collect_snapshot_files(path, &mut files)?;
            files
        } else {
            vec![path.clone()]
        };
        for file in files {
            read_snapshot_file(&file, &mut snapshot, &mut notes)?;
        }
    }
    Ok((snapshot, notes))
}

/// Reads one snapshot file. JSON (what `kubectl get -o json` prints) is streamed object by object, so a
/// 150,000-pod dump is never held whole; anything else, or JSON the streaming reader cannot start on, is read
/// as YAML/JSON text.
fn read_snapshot_file(path: &Path, snapshot: &mut Snapshot, notes: &mut Vec<SnapshotNote>) -> Result<()> {
    let source = path.display().to_string();
    let cannot_read = || format!("cannot read snapshot file {source}");
    let mut reader = io::BufReader::new(fs::File::open(path).with_context(cannot_read)?);
    let first = reader
        .fill_buf()
        .with_context(cannot_read)?
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace());
    if matches!(first, Some(b'{' | b'[')) {
        let outcome = json_stream::read_json(reader, &source, snapshot, notes);
        match outcome.error {
            None => return Ok(()),
            Some(e) if e.is_io() => return Err(e).with_context(cannot_read),
            Some(e) if outcome.objects > 0 => {
                notes.push(SnapshotNote::new(
                    source,
                    format!(
                        "not valid JSON at line {} column {}: {e}; the {} object(s) before that point were read, \
                         the rest of the file was not",
                        e.line(),
                        e.column(),
                        outcome.objects
                    ),
                ));
                return Ok(());
            }
            // Nothing read yet: it may be YAML in flow style; the text reader says what is wrong with it.
            Some(_) => {}
        }
    }
    let text = read_text(path, "snapshot")?;
    notes.extend(snapshot.add_text(&text, &source));
    Ok(())
}

fn collect_snapshot_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot read snapshot folder {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("cannot read snapshot folder {}", dir.display()))?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_snapshot_files(&path, out)?;
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| SNAPSHOT_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
        {
            out.push(path);
        }
    }
    Ok(())
}

fn read_text(path: &Path, what: &str) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("cannot read {what} file {}", path.display()))
}

/// Reads JSON, or failing that YAML, into a JSON value.
fn parse_document(text: &str) -> std::result::Result<Value, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Ok(v),
        Err(json_err) => {
            if text.trim_start().starts_with('{') {
                return Err(json_err.to_string());
            }
            serde_saphyr::from_str::<Value>(text).map_err(|e| e.to_string())
        }
    }
}

/// Where the instance types come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogSource {
    /// A catalog file (`--instance-types`).
    File,
    /// The embedded AWS catalog of a region.
    Aws,
}

/// Reads the catalog file at `path`, or builds the embedded AWS catalog for `region` under the AWS capacity
/// settings.
pub fn load_catalog(
    path: Option<&Path>,
    region: &str,
    aws: &AwsCapacitySettings,
) -> Result<(CatalogFile, CatalogSource)> {
    match path {
        Some(path) => {
            let text = read_text(path, "instance-types")?;
            let value = parse_document(&text).map_err(|e| {
                anyhow::anyhow!("instance-types file {}: not JSON or YAML: {e}", path.display())
            })?;
            let catalog = CatalogFile::from_value(value)
                .with_context(|| format!("instance-types file {}", path.display()))?;
            if catalog.instance_types.is_empty() {
                bail!("instance-types file {}: instanceTypes is empty", path.display());
            }
            Ok((catalog, CatalogSource::File))
        }
        None => {
            let catalog = aws_catalog(region, aws)
                .with_context(|| format!("embedded AWS catalog for --region {region}"))?;
            Ok((catalog, CatalogSource::Aws))
        }
    }
}

/// The controller settings a `schedule` run honours.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub scheduling: SchedulingSettings,
    /// The NodeOverlay feature gate.
    pub node_overlay: bool,
    /// The CapacityBuffer feature gate.
    pub capacity_buffer: bool,
    /// The SpotToSpotConsolidation feature gate.
    pub spot_to_spot: bool,
    /// VM_MEMORY_OVERHEAD_PERCENT and RESERVED_ENIS, for the embedded AWS catalog.
    pub aws: AwsCapacitySettings,
    /// SCHEDULER_CONFIG's default topology spread constraints.
    pub default_spread: Vec<k8s_openapi::api::core::v1::TopologySpreadConstraint>,
}

/// Feature gates the controller knows; `schedule` reads ReservedCapacity, NodeOverlay and CapacityBuffer.
const FEATURE_GATES: [&str; 6] = [
    "ReservedCapacity",
    "NodeOverlay",
    "CapacityBuffer",
    "NodeRepair",
    "SpotToSpotConsolidation",
    "StaticCapacity",
];

/// Controller settings that exist but do not change what `schedule` decides (normalized: lower case, no
/// `_`/`-`).
const IGNORED_SETTINGS: [&str; 27] = [
    "batchmaxduration",
    "batchidleduration",
    "clustername",
    "clusterendpoint",
    "clustercabundle",
    "isolatedvpc",
    "interruptionqueue",
    "ekscontrolplane",
    "loglevel",
    "logoutputpaths",
    "logerroroutputpaths",
    "kubeclientqps",
    "kubeclientburst",
    "metricsport",
    "healthprobeport",
    "enableprofiling",
    "disableleaderelection",
    "leaderelectionname",
    "leaderelectionnamespace",
    "memorylimit",
    "cpurequests",
    "ignoredrarequests",
    "disableclusterstateobservability",
    "disabledryrun",
    // The chart's AWS settings that only the controller's refresh loops read.
    "amirefreshinterval",
    "subnetrefreshinterval",
    "enablezonalshift",
];

/// `preferencePolicy`, `PREFERENCE_POLICY` and `preference-policy` all become `preferencepolicy`.
fn normalize(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Reads a settings file (YAML or JSON): a map of the controller's settings, in the Helm chart's camelCase
/// names (`preferencePolicy`, `minValuesPolicy`, `featureGates: {ReservedCapacity: true}`) or the environment
/// variable names (`PREFERENCE_POLICY`, `FEATURE_GATES: "ReservedCapacity=true,NodeOverlay=false"`). A
/// top-level `settings:` map (as in the chart's values) is read the same way. Returns the settings and notes
/// about settings that do not affect scheduling.
pub fn load_settings(path: Option<&Path>) -> Result<(Settings, Vec<String>)> {
    let mut settings = Settings::default();
    let mut notes = Vec::new();
    let Some(path) = path else {
        return Ok((settings, notes));
    };
    let text = read_text(path, "settings")?;
    let value = parse_document(&text)
        .map_err(|e| anyhow::anyhow!("settings file {}: not JSON or YAML: {e}", path.display()))?;
    let map = match value {
        Value::Null => return Ok((settings, notes)),
        Value::Object(mut map) => match map.remove("settings") {
            Some(Value::Object(inner)) if map.is_empty() => inner,
            Some(other) => {
                map.insert("settings".into(), other);
                map
            }
            None => map,
        },
        other => bail!(
            "settings file {}: must be a map of settings, not {}",
            path.display(),
            kind(&other)
        ),
    };
    for (key, value) in &map {
        apply_setting(&mut settings, key, value, &mut notes)
            .with_context(|| format!("settings file {}", path.display()))?;
    }
    Ok((settings, notes))
}

fn apply_setting(settings: &mut Settings, key: &str, value: &Value, notes: &mut Vec<String>) -> Result<()> {
    match normalize(key).as_str() {
        "preferencepolicy" => {
            settings.scheduling.preference_policy = match string_setting(key, value)?.as_str() {
                "Respect" => PreferencePolicy::Respect,
                "Ignore" => PreferencePolicy::Ignore,
                other => bail!("setting {key}: {other:?} is not one of Respect, Ignore"),
            }
        }
        "minvaluespolicy" => {
            settings.scheduling.min_values_policy = match string_setting(key, value)?.as_str() {
                "Strict" => MinValuesPolicy::Strict,
                "BestEffort" => MinValuesPolicy::BestEffort,
                other => bail!("setting {key}: {other:?} is not one of Strict, BestEffort"),
            }
        }
        "featuregates" => apply_feature_gates(settings, key, value, notes)?,
        "vmmemoryoverheadpercent" => {
            let v = number_setting(key, value)?;
            if !(0.0..1.0).contains(&v) {
                bail!("setting {key}: {v} must be a fraction in [0, 1) (0.075 is 7.5%)");
            }
            settings.aws.vm_memory_overhead_percent = v;
        }
        "reservedenis" => {
            let v = number_setting(key, value)?;
            if v < 0.0 || v.fract() != 0.0 || v > f64::from(u32::MAX) {
                bail!("setting {key}: {v} must be a whole number of ENIs, 0 or more");
            }
            settings.aws.reserved_enis = v as u32;
        }
        "schedulerconfig" => {
            // The variable's YAML or JSON text, or (in a YAML settings file) the document itself.
            let raw = match value {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            let config = karpenter_core::scheduler_config::SchedulerConfig::parse(&raw)
                .map_err(|e| anyhow::anyhow!("setting {key}: {e}"))?;
            settings.default_spread = config
                .map(|c| c.default_constraints().to_vec())
                .unwrap_or_default();
        }
        other if IGNORED_SETTINGS.contains(&other) => {
            notes.push(format!("setting {key} does not affect scheduling; ignored"));
        }
        _ => bail!(
            "unknown setting {key} (schedule reads preferencePolicy, minValuesPolicy, featureGates, \
             vmMemoryOverheadPercent, reservedENIs, schedulerConfig, or their environment names such as \
             PREFERENCE_POLICY)"
        ),
    }
    Ok(())
}

fn apply_feature_gates(
    settings: &mut Settings,
    key: &str,
    value: &Value,
    notes: &mut Vec<String>,
) -> Result<()> {
    let gates: Vec<(String, bool)> = match value {
        Value::Object(map) => map
            .iter()
            .map(|(gate, v)| Ok((gate.clone(), bool_setting(&format!("{key}.{gate}"), v)?)))
            .collect::<Result<_>>()?,
        Value::String(s) => s
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| {
                let Some((gate, v)) = part.split_once('=') else {
                    bail!("setting {key}: {part:?} is not Gate=true|false");
                };
                let gate = gate.trim();
                Ok((
                    gate.to_string(),
                    bool_setting(&format!("{key}.{gate}"), &Value::String(v.trim().into()))?,
                ))
            })
            .collect::<Result<_>>()?,
        Value::Null => Vec::new(),
        other => bail!(
            "setting {key}: must be a map of gate to true/false or \"Gate=true,...\", not {}",
            kind(other)
        ),
    };
    for (gate, on) in gates {
        // The chart spells gates in lowerCamelCase (reservedCapacity), the flag in UpperCamelCase.
        let Some(known) = FEATURE_GATES.iter().find(|g| g.eq_ignore_ascii_case(&gate)) else {
            bail!(
                "setting {key}: unknown feature gate {gate:?} (known: {})",
                FEATURE_GATES.join(", ")
            );
        };
        match *known {
            "ReservedCapacity" => settings.scheduling.reserved_capacity = on,
            "NodeOverlay" => settings.node_overlay = on,
            "CapacityBuffer" => settings.capacity_buffer = on,
            "SpotToSpotConsolidation" => settings.spot_to_spot = on,
            other => notes.push(format!(
                "feature gate {other} does not affect scheduling; ignored"
            )),
        }
    }
    Ok(())
}

fn string_setting(key: &str, value: &Value) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => bail!("setting {key}: must be a string, not {}", kind(other)),
    }
}

fn bool_setting(key: &str, value: &Value) -> Result<bool> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        other => bail!("setting {key}: must be true or false, not {other}"),
    }
}

fn number_setting(key: &str, value: &Value) -> Result<f64> {
    match value {
        Value::Number(n) => n
            .as_f64()
            .with_context(|| format!("setting {key}: {n} is not a number")),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| anyhow::anyhow!("setting {key}: {s:?} is not a number")),
        other => bail!("setting {key}: must be a number, not {}", kind(other)),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}
