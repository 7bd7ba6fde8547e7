//! Upstream KWOK's instance-type catalog (`kwok/cloudprovider/instance_types.json` of sigs.k8s.io/karpenter)
//! turned into core's catalog form, with the requirements, capacity, overhead and offerings upstream's
//! `ConstructInstanceTypes` derives from it:
//!
//! - requirements: `node.kubernetes.io/instance-type`, `kubernetes.io/arch`, `kubernetes.io/os` (every listed
//!   OS), `topology.kubernetes.io/zone` and `karpenter.sh/capacity-type` (every value the offerings name), and
//!   the four `karpenter.kwok.sh/instance-*` labels: size (the AWS-style suffix of the name, else the CPU
//!   quantity), family (the name up to the first `.` or `-`, else its first character), cpu and memory;
//! - capacity: `resources`, with 110 pods unless the file says otherwise;
//! - overhead: kubeReserved 100m CPU and 10Mi memory;
//! - offerings: zone and capacity type from each offering's requirements, its price, all available (upstream
//!   marks every offering available whatever the file says).
//!
//! Go's JSON decoder matches field names case-insensitively (the file writes `Price`, `Requirements`), so this
//! reader does too. Every error names the entry and field.

use std::sync::Arc;

use karpenter_api::{kwoknodeclass as kwok, labels, quantity::parse_milli};
use karpenter_core::catalog::{
    CatalogInstanceType, CatalogOffering, CatalogOverhead, CatalogRequirement, Quantities,
};
use serde_json::{Map, Value};

use crate::error::KwokError;

/// The label of the capacity reservation an offering launches into.
const RESERVATION_ID_LABEL: &str = "karpenter.sh/reservation-id";
/// Pods per node when the file sets none: Kubernetes' default.
const DEFAULT_PODS: i64 = 110;

/// Reads upstream's instance_types.json text; `source_name` (a path) names it in errors.
pub fn parse(source_name: &str, text: &str) -> Result<Vec<CatalogInstanceType>, KwokError> {
    let invalid = |field: &str, message: String| KwokError::Invalid {
        source_name: source_name.to_string(),
        field: field.to_string(),
        message,
    };
    let value: Value = serde_json::from_str(text).map_err(|e| invalid("", e.to_string()))?;
    let Value::Array(entries) = value else {
        // INSTANCE_TYPES_FILE_PATH named a catalog of this project's format before it took upstream's.
        let hint = if value.get("instanceTypes").is_some() {
            "; this is a catalog in `cargo xtask catalog`'s format, which --kwok-aws-catalog / KWOK_AWS_CATALOG \
             reads for EC2NodeClass NodePools"
        } else {
            ""
        };
        return Err(invalid(
            "",
            format!("must be a list of instance types (upstream's instance_types.json){hint}"),
        ));
    };
    let mut types: Vec<CatalogInstanceType> = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let it = instance_type(entry)
            .map_err(|(field, message)| invalid(&format!("[{index}]{field}"), message))?;
        if let Some(first) = types.iter().position(|t| t.name == it.name) {
            return Err(invalid(
                &format!("[{index}].name"),
                format!("{:?} duplicates [{first}]", it.name),
            ));
        }
        types.push(it);
    }
    Ok(types)
}

/// A field of `object` by Go's case-insensitive match.
fn field<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).or_else(|| {
        object
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

type FieldResult<T> = Result<T, (String, String)>;

fn string(object: &Map<String, Value>, name: &str, path: &str) -> FieldResult<String> {
    match field(object, name) {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => Ok(String::new()),
        Some(other) => Err((format!("{path}.{name}"), format!("must be a string, not {other}"))),
    }
}

fn list<'a>(object: &'a Map<String, Value>, name: &str, path: &str) -> FieldResult<&'a [Value]> {
    match field(object, name) {
        Some(Value::Array(items)) => Ok(items),
        None | Some(Value::Null) => Ok(&[]),
        Some(other) => Err((format!("{path}.{name}"), format!("must be a list, not {other}"))),
    }
}

fn instance_type(entry: &Value) -> FieldResult<CatalogInstanceType> {
    let Value::Object(entry) = entry else {
        return Err((String::new(), "must be an object".into()));
    };
    let name = string(entry, "name", "")?;
    if name.is_empty() {
        return Err((".name".into(), "is required".into()));
    }
    let architecture = string(entry, "architecture", "")?;
    let mut systems = Vec::new();
    for (i, os) in list(entry, "operatingSystems", "")?.iter().enumerate() {
        match os {
            Value::String(s) => systems.push(s.clone()),
            other => {
                return Err((
                    format!(".operatingSystems[{i}]"),
                    format!("must be a string, not {other}"),
                ));
            }
        }
    }
    let (capacity, cpu, memory) = resources(entry)?;
    let mut offerings = Vec::new();
    for (i, offering) in list(entry, "offerings", "")?.iter().enumerate() {
        offerings.push(parse_offering(offering).map_err(|(f, m)| (format!(".offerings[{i}]{f}"), m))?);
    }
    let mut zones: Vec<String> = Vec::new();
    let mut capacity_types: Vec<String> = Vec::new();
    for o in &offerings {
        if !zones.contains(&o.zone) {
            zones.push(o.zone.clone());
        }
        if !capacity_types.contains(&o.capacity_type) {
            capacity_types.push(o.capacity_type.clone());
        }
    }
    let requirements = vec![
        CatalogRequirement::is_in(labels::INSTANCE_TYPE_LABEL, [name.clone()]),
        CatalogRequirement::is_in(labels::ARCH_LABEL, [architecture]),
        CatalogRequirement::is_in(labels::OS_LABEL, systems),
        CatalogRequirement::is_in(labels::ZONE_LABEL, zones),
        CatalogRequirement::is_in(labels::CAPACITY_TYPE_LABEL, capacity_types),
        CatalogRequirement::is_in(kwok::INSTANCE_SIZE_LABEL, [size_of(&name, &cpu)]),
        CatalogRequirement::is_in(kwok::INSTANCE_FAMILY_LABEL, [family_of(&name)]),
        CatalogRequirement::is_in(kwok::INSTANCE_CPU_LABEL, [cpu]),
        CatalogRequirement::is_in(kwok::INSTANCE_MEMORY_LABEL, [memory]),
    ];
    Ok(CatalogInstanceType {
        name,
        requirements: Arc::new(requirements),
        capacity,
        overhead: CatalogOverhead {
            kube_reserved: Quantities::from([
                ("cpu".into(), 100),
                ("memory".into(), 10 * 1024 * 1024 * 1000),
            ]),
            ..CatalogOverhead::default()
        },
        offerings,
    })
}

/// `resources` in milli-units with the default pod count, and the CPU and memory as written (the values of the
/// instance-cpu and instance-memory labels; upstream prints the parsed quantity, the same text for the
/// canonical quantities its catalog holds).
fn resources(entry: &Map<String, Value>) -> FieldResult<(Quantities, String, String)> {
    let mut capacity = Quantities::from([("pods".to_string(), DEFAULT_PODS * 1000)]);
    let (mut cpu, mut memory) = (String::new(), String::new());
    let Some(Value::Object(resources)) = field(entry, "resources") else {
        return Ok((capacity, cpu, memory));
    };
    for (resource, quantity) in resources {
        let path = format!(".resources.{resource}");
        let text = match quantity {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => return Err((path, format!("must be a quantity, not {other}"))),
        };
        let milli = parse_milli(&text).map_err(|e| (path.clone(), e.to_string()))?;
        match resource.as_str() {
            "cpu" => cpu = text,
            "memory" => memory = text,
            _ => {}
        }
        capacity.insert(resource.clone(), milli);
    }
    Ok((capacity, cpu, memory))
}

fn parse_offering(offering: &Value) -> FieldResult<CatalogOffering> {
    let Value::Object(offering) = offering else {
        return Err((String::new(), "must be an object".into()));
    };
    let price = match field(offering, "price") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or_default(),
        None | Some(Value::Null) => 0.0,
        Some(other) => return Err((".Price".into(), format!("must be a number, not {other}"))),
    };
    let reservation_capacity = match field(offering, "reservationCapacity") {
        Some(Value::Number(n)) => n.as_i64().filter(|n| *n > 0),
        _ => None,
    };
    let mut out = CatalogOffering {
        zone: String::new(),
        capacity_type: String::new(),
        price,
        available: true,
        reservation_id: None,
        reservation_capacity,
    };
    for (i, requirement) in list(offering, "requirements", "")?.iter().enumerate() {
        let path = format!(".Requirements[{i}]");
        let Value::Object(requirement) = requirement else {
            return Err((path, "must be an object".into()));
        };
        let key = string(requirement, "key", &path)?;
        let operator = string(requirement, "operator", &path)?;
        let values: Vec<&str> = list(requirement, "values", &path)?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        // Core's offerings have a zone, a capacity type and a reservation, each one value: an offering that
        // needs more cannot be represented, so it is refused rather than launched wrongly.
        let [value] = values.as_slice() else {
            return Err((
                format!("{path}.values"),
                format!("{key}: an offering needs exactly one value"),
            ));
        };
        if operator != "In" {
            return Err((
                format!("{path}.operator"),
                format!("{key}: only In is supported in offerings, not {operator:?}"),
            ));
        }
        match key.as_str() {
            labels::ZONE_LABEL => out.zone = (*value).to_string(),
            labels::CAPACITY_TYPE_LABEL => out.capacity_type = (*value).to_string(),
            RESERVATION_ID_LABEL => out.reservation_id = Some((*value).to_string()),
            other => {
                return Err((
                    format!("{path}.key"),
                    format!(
                        "{other}: offerings may name only {}, {} and {RESERVATION_ID_LABEL}",
                        labels::ZONE_LABEL,
                        labels::CAPACITY_TYPE_LABEL
                    ),
                ));
            }
        }
    }
    if out.zone.is_empty() || out.capacity_type.is_empty() {
        return Err((
            ".Requirements".into(),
            format!(
                "an offering needs a {} and a {} requirement",
                labels::ZONE_LABEL,
                labels::CAPACITY_TYPE_LABEL
            ),
        ));
    }
    Ok(out)
}

/// The size suffix of an AWS-style name (`m5.2xlarge` is `2xlarge`), else the CPU quantity.
fn size_of(name: &str, cpu: &str) -> String {
    const SIZES: [&str; 6] = ["nano", "micro", "small", "medium", "large", "metal"];
    let Some((family, size)) = name.split_once('.') else {
        return cpu.to_string();
    };
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let family_ok = !family.is_empty() && family.chars().all(word);
    let xlarge = size
        .strip_suffix("xlarge")
        .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()));
    if family_ok && (SIZES.contains(&size) || xlarge) {
        size.to_string()
    } else {
        cpu.to_string()
    }
}

/// The name up to the first `.` or `-`, else its first character.
fn family_of(name: &str) -> String {
    match name.split_once(['.', '-']) {
        Some((family, _)) => family.to_string(),
        None => name.chars().next().map(String::from).unwrap_or_default(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two entries in upstream's format, as its generator writes them.
    pub(crate) const SMALL_CATALOG: &str = r#"[
      {"name": "c-4x-amd64-linux", "architecture": "amd64", "operatingSystems": ["linux"],
       "resources": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "20Gi"},
       "offerings": [
         {"Price": 0.2, "Available": false, "Requirements": [
           {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
           {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]},
         {"price": 0.3, "requirements": [
           {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
           {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-b"]}]}]},
      {"name": "m5.2xlarge", "architecture": "arm64", "operatingSystems": ["linux", "windows"],
       "resources": {"cpu": "8", "memory": "32Gi", "pods": "58"},
       "offerings": [{"Price": 0.5, "Requirements": [
           {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
           {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}]}
    ]"#;

    fn requirement<'a>(it: &'a CatalogInstanceType, key: &str) -> &'a [String] {
        &it.requirements.iter().find(|r| r.key == key).expect(key).values
    }

    #[test]
    fn entries_become_instance_types_with_upstreams_requirements_capacity_and_offerings() {
        let types = parse("test.json", SMALL_CATALOG).unwrap();
        let [generic, aws] = types.as_slice() else {
            panic!("two types")
        };
        assert_eq!(requirement(generic, kwok::INSTANCE_SIZE_LABEL), ["4"]);
        assert_eq!(requirement(generic, kwok::INSTANCE_FAMILY_LABEL), ["c"]);
        assert_eq!(requirement(generic, kwok::INSTANCE_CPU_LABEL), ["4"]);
        assert_eq!(requirement(generic, kwok::INSTANCE_MEMORY_LABEL), ["8Gi"]);
        assert_eq!(
            requirement(generic, labels::ZONE_LABEL),
            ["test-zone-a", "test-zone-b"]
        );
        assert_eq!(
            requirement(generic, labels::CAPACITY_TYPE_LABEL),
            ["spot", "on-demand"]
        );
        assert_eq!(requirement(generic, labels::ARCH_LABEL), ["amd64"]);
        assert_eq!(generic.capacity["pods"], 110_000, "the default pod count");
        assert_eq!(generic.capacity["cpu"], 4000);
        assert_eq!(generic.allocatable()["cpu"], 3900, "100m kube-reserved");
        assert_eq!(
            generic.allocatable()["memory"],
            (8 * 1024 - 10) * 1024 * 1024 * 1000
        );
        // Upstream marks every offering available, whatever the file says.
        assert!(generic.offerings.iter().all(|o| o.available));
        assert_eq!(generic.offerings[1].zone, "test-zone-b");
        assert_eq!(generic.offerings[1].price, 0.3);

        assert_eq!(requirement(aws, kwok::INSTANCE_SIZE_LABEL), ["2xlarge"]);
        assert_eq!(requirement(aws, kwok::INSTANCE_FAMILY_LABEL), ["m5"]);
        assert_eq!(requirement(aws, labels::OS_LABEL), ["linux", "windows"]);
        assert_eq!(aws.capacity["pods"], 58_000, "the file's pod count wins");
    }

    #[test]
    fn sizes_and_families_follow_upstreams_name_rules() {
        assert_eq!(size_of("m5.large", "2"), "large");
        assert_eq!(size_of("m5.24xlarge", "96"), "24xlarge");
        assert_eq!(size_of("m5.metal", "96"), "metal");
        assert_eq!(size_of("m5.huge", "8"), "8");
        assert_eq!(size_of("s-16x-arm64-linux", "16"), "16");
        assert_eq!(family_of("s-16x-arm64-linux"), "s");
        assert_eq!(family_of("n2-standard-8"), "n2");
        assert_eq!(family_of("Standard_D2"), "S");
        assert_eq!(family_of(""), "");
    }

    #[test]
    fn a_bad_entry_is_named_by_index_and_field() {
        let message = |text: &str| parse("kwok.json", text).unwrap_err().to_string();
        assert_eq!(
            message(r#"{"name": "x"}"#),
            "KWOK instance types kwok.json: : must be a list of instance types (upstream's instance_types.json)"
        );
        assert_eq!(
            message(r#"[{"name": "x", "resources": {"cpu": "4q"}}]"#),
            format!(
                "KWOK instance types kwok.json: [0].resources.cpu: {}",
                parse_milli("4q").unwrap_err()
            )
        );
        assert!(message(r#"[{"name": "x", "offerings": [{"Requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}]}]"#)
            .contains("[0].offerings[0].Requirements: an offering needs a topology.kubernetes.io/zone"));
        assert!(message(r#"[{"name": "x", "offerings": [{"Requirements": [{"key": "example.com/rack", "operator": "In", "values": ["r1"]}]}]}]"#)
            .contains("[0].offerings[0].Requirements[0].key: example.com/rack: offerings may name only"));
        assert!(message(r#"[{"name": "x"}, {"name": "x"}]"#).contains("[1].name: \"x\" duplicates [0]"));
        assert!(
            message(r#"{"instanceTypes": []}"#).contains("which --kwok-aws-catalog / KWOK_AWS_CATALOG reads"),
            "a catalog of the other format says which flag takes it"
        );
        assert!(message(r#"[{"architecture": "amd64"}]"#).contains("[0].name: is required"));
    }
}
