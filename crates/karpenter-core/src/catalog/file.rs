//! The catalog file (architecture.md, "The catalog file"): a list of instance types with their requirements,
//! capacity, overhead and offerings, as `karpenter schedule --instance-types` reads it and as the embedded
//! AWS catalog is handed to the rest of core.
//!
//! Reading goes through `serde_json::Value` by hand rather than a derived `Deserialize`, so every error names
//! the instance type and the field (`instanceTypes[3] (m5.large): capacity.memory: quantity "2Gx" has an
//! unknown suffix`) instead of a line and column. Quantities become exact integer milli-units at this edge;
//! requirements stay plain (key, operator, values) data for the requirements algebra to compile.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use karpenter_api::quantity::{format_milli, parse_milli};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use super::CatalogError;

/// Resource name to amount in milli-units of its base unit (millicores, milli-bytes, milli-pods).
pub type Quantities = BTreeMap<String, i64>;

/// A whole catalog file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "Value")]
pub struct CatalogFile {
    /// Label keys that constrain instance types the way the well-known karpenter.k8s.aws/* keys do: a pod may
    /// select them without the NodePool declaring them.
    pub well_known_labels: Vec<String>,
    pub instance_types: Vec<CatalogInstanceType>,
    /// Which of `instance_types` (by index) each NodePool is offered, when the catalog was gathered from a cloud
    /// provider NodePool by NodePool: NodePools of different node classes see the same type with different
    /// offerings (subnets, zones) or capacity (kubelet, volumes), so one name may appear once per version. A
    /// NodePool not listed is offered every type; a catalog file has no such list.
    #[serde(skip)]
    pub node_pool_types: BTreeMap<String, Vec<usize>>,
}

/// One instance type of a catalog file.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogInstanceType {
    pub name: String,
    /// What a node of this type satisfies; may be multi-valued and use any operator. Shared: copies of a
    /// catalog (a provider's answer per NodePool, with its own offerings' availability) differ in offerings
    /// only, and the requirements are most of a type's memory (about 8 MiB of the 800-odd AWS types).
    pub requirements: Arc<Vec<CatalogRequirement>>,
    #[serde(serialize_with = "serialize_quantities")]
    pub capacity: Quantities,
    pub overhead: CatalogOverhead,
    pub offerings: Vec<CatalogOffering>,
}

/// A requirement as plain data: the requirements algebra (src/requirements.rs) compiles it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CatalogRequirement {
    pub key: String,
    pub operator: RequirementOperator,
    pub values: Vec<String>,
}

impl CatalogRequirement {
    /// `key In values`.
    pub fn is_in<I, S>(key: &str, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            key: key.to_string(),
            operator: RequirementOperator::In,
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// `key DoesNotExist`.
    pub fn does_not_exist(key: &str) -> Self {
        Self {
            key: key.to_string(),
            operator: RequirementOperator::DoesNotExist,
            values: Vec::new(),
        }
    }
}

/// The node-selector operators, shared with the requirements algebra.
pub use crate::requirements::Operator as RequirementOperator;

/// What the kubelet and the system hold back from capacity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogOverhead {
    #[serde(serialize_with = "serialize_quantities")]
    pub kube_reserved: Quantities,
    #[serde(serialize_with = "serialize_quantities")]
    pub system_reserved: Quantities,
    #[serde(serialize_with = "serialize_quantities")]
    pub eviction_threshold: Quantities,
}

impl CatalogOverhead {
    /// kubeReserved + systemReserved + evictionThreshold per resource.
    pub fn total(&self) -> Quantities {
        let mut total = self.kube_reserved.clone();
        for (resource, amount) in self.system_reserved.iter().chain(&self.eviction_threshold) {
            let sum = total.entry(resource.clone()).or_insert(0);
            *sum = sum.saturating_add(*amount);
        }
        total
    }
}

/// Where and how a type can be launched, at what hourly price.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogOffering {
    pub zone: String,
    /// karpenter.sh/capacity-type: on-demand, spot or reserved.
    pub capacity_type: String,
    pub price: f64,
    pub available: bool,
    /// The capacity reservation a reserved offering launches into.
    pub reservation_id: Option<String>,
    /// Instances the reservation still has free, already net of running instances.
    pub reservation_capacity: Option<i64>,
}

impl CatalogInstanceType {
    /// `capacity - kubeReserved - systemReserved - evictionThreshold` per capacity resource, never negative.
    /// Hugepages (hugepages-*) are carved out of memory as the kubelet does.
    pub fn allocatable(&self) -> Quantities {
        let hugepages: i64 = self
            .capacity
            .iter()
            .filter(|(resource, _)| resource.starts_with("hugepages-"))
            .fold(0i64, |sum, (_, amount)| sum.saturating_add(*amount));
        let overhead = self.overhead.total();
        self.capacity
            .iter()
            .map(|(resource, amount)| {
                let mut left = amount.saturating_sub(overhead.get(resource).copied().unwrap_or(0));
                if resource == "memory" {
                    left = left.saturating_sub(hugepages);
                }
                (resource.clone(), left.max(0))
            })
            .collect()
    }
}

impl CatalogFile {
    /// Reads a catalog file from JSON text.
    pub fn from_json_str(text: &str) -> Result<Self, CatalogError> {
        let value: Value = serde_json::from_str(text).map_err(|e| CatalogError::Json(e.to_string()))?;
        Self::from_value(value)
    }

    /// Reads a catalog file from an already parsed document (for example YAML read into a
    /// `serde_json::Value`).
    pub fn from_value(value: Value) -> Result<Self, CatalogError> {
        let Value::Object(mut top) = value else {
            return Err(invalid("", format!("must be an object, not {}", kind(&value))));
        };
        reject_unknown(&top, &["wellKnownLabels", "instanceTypes"], |key| {
            invalid(key, "unknown field")
        })?;
        let well_known_labels = match top.remove("wellKnownLabels") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) if !s.is_empty() => Ok(s),
                    other => Err(invalid(
                        &format!("wellKnownLabels[{i}]"),
                        not_a("label key", &other),
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(invalid("wellKnownLabels", not_a("list of label keys", &other))),
        };
        let types = match top.remove("instanceTypes") {
            Some(Value::Array(types)) => types,
            None => return Err(invalid("instanceTypes", "is required")),
            Some(other) => return Err(invalid("instanceTypes", not_a("list", &other))),
        };
        let mut seen: HashMap<String, usize> = HashMap::with_capacity(types.len());
        let mut instance_types = Vec::with_capacity(types.len());
        for (index, value) in types.into_iter().enumerate() {
            let instance_type = parse_instance_type(index, value)?;
            if let Some(first) = seen.insert(instance_type.name.clone(), index) {
                return Err(CatalogError::InstanceType {
                    index,
                    name: instance_type.name,
                    field: "name".into(),
                    message: format!("duplicates instanceTypes[{first}]"),
                });
            }
            instance_types.push(instance_type);
        }
        Ok(Self {
            well_known_labels,
            instance_types,
            node_pool_types: BTreeMap::new(),
        })
    }

    /// The instance type of this name, if any.
    pub fn instance_type(&self, name: &str) -> Option<&CatalogInstanceType> {
        self.instance_types.iter().find(|t| t.name == name)
    }
}

impl TryFrom<Value> for CatalogFile {
    type Error = CatalogError;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        Self::from_value(value)
    }
}

fn invalid(path: &str, message: impl Into<String>) -> CatalogError {
    CatalogError::Invalid {
        path: path.to_string(),
        message: message.into(),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn not_a(what: &str, value: &Value) -> String {
    format!("must be a {what}, not {}", kind(value))
}

fn reject_unknown(
    object: &Map<String, Value>,
    known: &[&str],
    error: impl Fn(&str) -> CatalogError,
) -> Result<(), CatalogError> {
    match object.keys().find(|key| !known.contains(&key.as_str())) {
        Some(key) => Err(error(key)),
        None => Ok(()),
    }
}

/// Errors inside one instance type carry its index and name.
struct TypeContext<'a> {
    index: usize,
    name: &'a str,
}

impl TypeContext<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> CatalogError {
        CatalogError::InstanceType {
            index: self.index,
            name: self.name.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }
}

fn parse_instance_type(index: usize, value: Value) -> Result<CatalogInstanceType, CatalogError> {
    let Value::Object(mut object) = value else {
        let ctx = TypeContext {
            index,
            name: "<unnamed>",
        };
        return Err(ctx.err("", not_a("object", &value)));
    };
    let name = match object.remove("name") {
        Some(Value::String(name)) if !name.is_empty() => name,
        other => {
            let ctx = TypeContext {
                index,
                name: "<unnamed>",
            };
            let message = match other {
                None => "is required".to_string(),
                Some(Value::String(_)) => "must not be empty".to_string(),
                Some(other) => not_a("string", &other),
            };
            return Err(ctx.err("name", message));
        }
    };
    let ctx = TypeContext { index, name: &name };
    reject_unknown(
        &object,
        &["requirements", "capacity", "overhead", "offerings"],
        |key| ctx.err(key, "unknown field"),
    )?;
    let requirements = match object.remove("requirements") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| parse_requirement(&ctx, &format!("requirements[{i}]"), item))
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(ctx.err("requirements", not_a("list", &other))),
    };
    let capacity = match object.remove("capacity") {
        None => return Err(ctx.err("capacity", "is required")),
        Some(value) => parse_quantities(&ctx, "capacity", value)?,
    };
    let overhead = match object.remove("overhead") {
        None | Some(Value::Null) => CatalogOverhead::default(),
        Some(Value::Object(mut overhead)) => {
            reject_unknown(
                &overhead,
                &["kubeReserved", "systemReserved", "evictionThreshold"],
                |key| ctx.err(format!("overhead.{key}"), "unknown field"),
            )?;
            let mut part = |key: &str| match overhead.remove(key) {
                None | Some(Value::Null) => Ok(Quantities::new()),
                Some(value) => parse_quantities(&ctx, &format!("overhead.{key}"), value),
            };
            CatalogOverhead {
                kube_reserved: part("kubeReserved")?,
                system_reserved: part("systemReserved")?,
                eviction_threshold: part("evictionThreshold")?,
            }
        }
        Some(other) => return Err(ctx.err("overhead", not_a("object", &other))),
    };
    let offerings = match object.remove("offerings") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| parse_offering(&ctx, &format!("offerings[{i}]"), item))
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(ctx.err("offerings", not_a("list", &other))),
    };
    Ok(CatalogInstanceType {
        name: name.clone(),
        requirements: Arc::new(requirements),
        capacity,
        overhead,
        offerings,
    })
}

fn parse_requirement(
    ctx: &TypeContext<'_>,
    path: &str,
    value: Value,
) -> Result<CatalogRequirement, CatalogError> {
    let Value::Object(mut object) = value else {
        return Err(ctx.err(path, not_a("object", &value)));
    };
    reject_unknown(&object, &["key", "operator", "values"], |key| {
        ctx.err(format!("{path}.{key}"), "unknown field")
    })?;
    let key = match object.remove("key") {
        Some(Value::String(key)) if !key.is_empty() => key,
        None => return Err(ctx.err(format!("{path}.key"), "is required")),
        Some(other) => return Err(ctx.err(format!("{path}.key"), not_a("non-empty string", &other))),
    };
    let operator = match object.remove("operator") {
        Some(Value::String(op)) => RequirementOperator::parse(&op).ok_or_else(|| {
            ctx.err(
                format!("{path}.operator"),
                format!("{op:?} is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte"),
            )
        })?,
        None => return Err(ctx.err(format!("{path}.operator"), "is required")),
        Some(other) => return Err(ctx.err(format!("{path}.operator"), not_a("string", &other))),
    };
    let values: Vec<String> = match object.remove("values") {
        None | Some(Value::Null) => Vec::new(),
        // YAML readers turn `values: [2]` into numbers and `[true]` into booleans: take them as their text.
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s),
                Value::Number(n) => Ok(n.to_string()),
                Value::Bool(b) => Ok(b.to_string()),
                other => Err(ctx.err(format!("{path}.values[{i}]"), not_a("string", &other))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(ctx.err(format!("{path}.values"), not_a("list", &other))),
    };
    match operator {
        RequirementOperator::Exists | RequirementOperator::DoesNotExist if !values.is_empty() => {
            return Err(ctx.err(format!("{path}.values"), format!("must be empty for {operator}")));
        }
        op if op.is_numeric() && !matches!(values.as_slice(), [v] if v.parse::<i64>().is_ok()) => {
            return Err(ctx.err(
                format!("{path}.values"),
                format!("{operator} needs exactly one integer value"),
            ));
        }
        _ => {}
    }
    Ok(CatalogRequirement {
        key,
        operator,
        values,
    })
}

fn parse_quantities(ctx: &TypeContext<'_>, path: &str, value: Value) -> Result<Quantities, CatalogError> {
    let Value::Object(object) = value else {
        return Err(ctx.err(path, not_a("map of resource quantities", &value)));
    };
    let mut out = Quantities::new();
    for (resource, amount) in object {
        let field = format!("{path}.{resource}");
        let text = match amount {
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            other => return Err(ctx.err(field, not_a("quantity", &other))),
        };
        let milli = parse_milli(&text).map_err(|e| ctx.err(&field, e.to_string()))?;
        if milli < 0 {
            return Err(ctx.err(field, format!("quantity {text:?} must not be negative")));
        }
        out.insert(resource, milli);
    }
    Ok(out)
}

fn parse_offering(ctx: &TypeContext<'_>, path: &str, value: Value) -> Result<CatalogOffering, CatalogError> {
    let Value::Object(mut object) = value else {
        return Err(ctx.err(path, not_a("object", &value)));
    };
    reject_unknown(
        &object,
        &[
            "zone",
            "capacityType",
            "price",
            "available",
            "reservationId",
            "reservationCapacity",
        ],
        |key| ctx.err(format!("{path}.{key}"), "unknown field"),
    )?;
    let mut string = |key: &str| match object.remove(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        None => Err(ctx.err(format!("{path}.{key}"), "is required")),
        Some(other) => Err(ctx.err(format!("{path}.{key}"), not_a("non-empty string", &other))),
    };
    let zone = string("zone")?;
    let capacity_type = string("capacityType")?;
    let price = match object.remove("price") {
        Some(Value::Number(n)) => match n.as_f64() {
            Some(p) if p.is_finite() && p >= 0.0 => p,
            _ => {
                return Err(ctx.err(
                    format!("{path}.price"),
                    format!("{n} is not a price (a number >= 0)"),
                ));
            }
        },
        None => return Err(ctx.err(format!("{path}.price"), "is required")),
        Some(other) => return Err(ctx.err(format!("{path}.price"), not_a("number", &other))),
    };
    let available = match object.remove("available") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => b,
        Some(other) => return Err(ctx.err(format!("{path}.available"), not_a("boolean", &other))),
    };
    let reservation_id = match object.remove("reservationId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        Some(other) => {
            return Err(ctx.err(format!("{path}.reservationId"), not_a("non-empty string", &other)));
        }
    };
    let reservation_capacity = match object.remove("reservationCapacity") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_i64() {
            Some(c) if c >= 0 => Some(c),
            _ => {
                return Err(ctx.err(
                    format!("{path}.reservationCapacity"),
                    format!("{n} is not a count >= 0"),
                ));
            }
        },
        Some(other) => return Err(ctx.err(format!("{path}.reservationCapacity"), not_a("number", &other))),
    };
    if capacity_type == "reserved" && reservation_id.is_none() {
        return Err(ctx.err(
            format!("{path}.reservationId"),
            "is required for a reserved offering",
        ));
    }
    Ok(CatalogOffering {
        zone,
        capacity_type,
        price,
        available,
        reservation_id,
        reservation_capacity,
    })
}

/// Writes milli-units back as Kubernetes quantity strings ("1500m", "2Gi", "110").
fn serialize_quantities<S: Serializer>(quantities: &Quantities, serializer: S) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(quantities.len()))?;
    for (resource, milli) in quantities {
        map.serialize_entry(resource, &format_milli(resource, *milli))?;
    }
    map.end()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{"wellKnownLabels": ["size"],
 "instanceTypes": [{
   "name": "small-instance-type",
   "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "size", "operator": "In", "values": ["small"]}],
   "capacity": {"cpu": "2", "memory": "2Gi", "pods": "5"},
   "overhead": {"kubeReserved": {"cpu": "100m", "memory": "10Mi"}, "systemReserved": {}, "evictionThreshold": {}},
   "offerings": [{"zone": "test-zone-1", "capacityType": "spot", "price": 0.41, "available": true,
                  "reservationId": null, "reservationCapacity": null}]}]}"#;

    fn with_type(instance_type: &str) -> String {
        format!(r#"{{"instanceTypes": [{{"name": "ok", "capacity": {{}}}}, {instance_type}]}}"#)
    }

    fn error_of(text: &str) -> String {
        match CatalogFile::from_json_str(text) {
            Ok(file) => panic!("expected an error, parsed {file:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn catalog_file_reads_the_architecture_example() {
        let file = CatalogFile::from_json_str(EXAMPLE).unwrap();
        assert_eq!(file.well_known_labels, ["size"]);
        let t = &file.instance_types[0];
        assert_eq!(t.name, "small-instance-type");
        assert_eq!(t.requirements[1], CatalogRequirement::is_in("size", ["small"]));
        assert_eq!(t.capacity["cpu"], 2000);
        assert_eq!(t.capacity["memory"], 2 * 1024 * 1024 * 1024 * 1000);
        assert_eq!(t.overhead.kube_reserved["cpu"], 100);
        assert_eq!(t.offerings[0].price, 0.41);
        assert_eq!(t.offerings[0].reservation_id, None);
        assert!(file.instance_type("small-instance-type").is_some());
    }

    #[test]
    fn allocatable_is_capacity_minus_all_overhead() {
        let file = CatalogFile::from_json_str(EXAMPLE).unwrap();
        let allocatable = file.instance_types[0].allocatable();
        assert_eq!(allocatable["cpu"], 1900);
        assert_eq!(allocatable["memory"], (2048 - 10) * 1024 * 1024 * 1000);
        assert_eq!(allocatable["pods"], 5000);
    }

    #[test]
    fn allocatable_is_never_negative_and_subtracts_hugepages_from_memory() {
        let text = with_type(
            r#"{"name": "t", "capacity": {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "256Mi"},
                "overhead": {"kubeReserved": {"cpu": "2"}, "systemReserved": {"memory": "256Mi"},
                             "evictionThreshold": {"memory": "100Mi", "nvidia.com/gpu": "1"}}}"#,
        );
        let file = CatalogFile::from_json_str(&text).unwrap();
        let allocatable = file.instance_types[1].allocatable();
        assert_eq!(allocatable["cpu"], 0);
        assert_eq!(
            allocatable["memory"],
            (1024 - 256 - 100 - 256) * 1024 * 1024 * 1000
        );
        assert_eq!(allocatable["hugepages-2Mi"], 256 * 1024 * 1024 * 1000);
        assert!(
            !allocatable.contains_key("nvidia.com/gpu"),
            "only capacity resources are allocatable"
        );
    }

    #[test]
    fn catalog_file_rejects_bad_quantity_naming_the_type() {
        let text = r#"{"instanceTypes": [
            {"name": "a", "capacity": {}}, {"name": "b", "capacity": {}}, {"name": "c", "capacity": {}},
            {"name": "m5.large", "capacity": {"cpu": "2", "memory": "2Gx"}}]}"#;
        assert_eq!(
            error_of(text),
            r#"instanceTypes[3] (m5.large): capacity.memory: quantity "2Gx" has an unknown suffix"#
        );
    }

    #[test]
    fn catalog_file_errors_name_the_field_path() {
        let cases = [
            (
                r#"{"name": "t", "capacity": {"cpu": "-1"}}"#,
                r#"capacity.cpu: quantity "-1" must not be negative"#,
            ),
            (
                r#"{"name": "t", "capacity": {}, "overhead": {"kubeReserved": {"memory": "x"}}}"#,
                "overhead.kubeReserved.memory: quantity \"x\" has no number",
            ),
            (
                r#"{"name": "t", "capacity": {}, "requirements": [{"key": "k", "operator": "Within"}]}"#,
                "requirements[0].operator: \"Within\" is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte",
            ),
            (
                r#"{"name": "t", "capacity": {}, "requirements": [{"key": "k", "operator": "Gt", "values": ["a"]}]}"#,
                "requirements[0].values: Gt needs exactly one integer value",
            ),
            (
                r#"{"name": "t", "capacity": {}, "requirements": [{"key": "k", "operator": "Exists", "values": ["a"]}]}"#,
                "requirements[0].values: must be empty for Exists",
            ),
            (
                r#"{"name": "t", "capacity": {}, "offerings": [{"zone": "z", "capacityType": "spot", "price": -1}]}"#,
                "offerings[0].price: -1 is not a price (a number >= 0)",
            ),
            (
                r#"{"name": "t", "capacity": {}, "offerings": [{"zone": "z", "capacityType": "spot"}]}"#,
                "offerings[0].price: is required",
            ),
            (
                r#"{"name": "t", "capacity": {}, "offerings": [{"zone": "z", "capacityType": "reserved", "price": 1}]}"#,
                "offerings[0].reservationId: is required for a reserved offering",
            ),
            (
                r#"{"name": "t", "capacity": {}, "offerings": [{"zone": "z", "capacityType": "spot", "price": 1, "zoneId": "x"}]}"#,
                "offerings[0].zoneId: unknown field",
            ),
            (r#"{"name": "t", "capacty": {}}"#, "capacty: unknown field"),
            (r#"{"name": "t"}"#, "capacity: is required"),
        ];
        for (instance_type, expected) in cases {
            let error = error_of(&with_type(instance_type));
            assert_eq!(
                error,
                format!("instanceTypes[1] (t): {expected}"),
                "for {instance_type}"
            );
        }
        assert_eq!(
            error_of(&with_type(r#"{"capacity": {}}"#)),
            "instanceTypes[1] (<unnamed>): name: is required"
        );
        assert_eq!(
            error_of(&with_type(r#"{"name": "ok", "capacity": {}}"#)),
            "instanceTypes[1] (ok): name: duplicates instanceTypes[0]"
        );
        assert_eq!(error_of(r#"{"types": []}"#), "types: unknown field");
        assert_eq!(error_of("{}"), "instanceTypes: is required");
        assert!(error_of("{").starts_with("catalog file is not valid JSON"));
    }

    #[test]
    fn catalog_file_defaults_optional_fields_and_accepts_yaml_style_scalars() {
        let text = with_type(
            r#"{"name": "t", "capacity": {"cpu": 2, "memory": "1Gi", "pods": 110},
                "requirements": [{"key": "gen", "operator": "Gt", "values": [5]}],
                "offerings": [{"zone": "z", "capacityType": "on-demand", "price": 1}]}"#,
        );
        let file = CatalogFile::from_json_str(&text).unwrap();
        let t = &file.instance_types[1];
        assert_eq!(t.capacity["cpu"], 2000);
        assert_eq!(t.capacity["pods"], 110_000);
        assert_eq!(t.requirements[0].values, ["5"]);
        assert!(t.offerings[0].available, "available defaults to true");
        assert_eq!(t.overhead, CatalogOverhead::default());
        assert!(file.well_known_labels.is_empty());
    }

    #[test]
    fn catalog_file_round_trips_through_json() {
        let file = CatalogFile::from_json_str(EXAMPLE).unwrap();
        let json = serde_json::to_value(&file).unwrap();
        assert_eq!(json["instanceTypes"][0]["capacity"]["memory"], "2Gi");
        assert_eq!(
            json["instanceTypes"][0]["overhead"]["kubeReserved"]["cpu"],
            "100m"
        );
        assert_eq!(
            json["instanceTypes"][0]["offerings"][0]["reservationId"],
            Value::Null
        );
        assert_eq!(json["instanceTypes"][0]["requirements"][0]["operator"], "In");
        let again: CatalogFile = serde_json::from_value(json).unwrap();
        assert_eq!(again, file);
    }

    #[test]
    fn catalog_file_deserialize_reports_the_same_error() {
        let error = serde_json::from_str::<CatalogFile>(
            r#"{"instanceTypes": [{"name": "m5.large", "capacity": {"memory": "2Gx"}}]}"#,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"instanceTypes[0] (m5.large): capacity.memory: quantity "2Gx" has an unknown suffix"#
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn quantities() -> impl Strategy<Value = Quantities> {
            proptest::collection::btree_map(
                prop_oneof![
                    Just("cpu".to_string()),
                    Just("memory".to_string()),
                    Just("pods".to_string()),
                    Just("ephemeral-storage".to_string()),
                    Just("nvidia.com/gpu".to_string()),
                ],
                0i64..1_000_000_000_000_000,
                0..5,
            )
        }

        fn instance_type() -> impl Strategy<Value = CatalogInstanceType> {
            let requirement = (
                "[a-z]{1,8}(/[a-z]{1,8})?",
                proptest::sample::select(RequirementOperator::ALL.to_vec()),
                proptest::collection::vec("[a-z0-9]{1,6}", 0..3),
                0i64..1000,
            )
                .prop_map(|(key, operator, values, number)| {
                    let values = match operator {
                        RequirementOperator::Exists | RequirementOperator::DoesNotExist => Vec::new(),
                        op if op.is_numeric() => vec![number.to_string()],
                        _ => values,
                    };
                    CatalogRequirement {
                        key,
                        operator,
                        values,
                    }
                });
            let offering = (
                "[a-z0-9-]{1,10}",
                prop_oneof![Just("spot"), Just("on-demand")],
                0u32..100_000,
                any::<bool>(),
            )
                .prop_map(|(zone, capacity_type, price, available)| CatalogOffering {
                    zone,
                    capacity_type: capacity_type.to_string(),
                    price: f64::from(price) / 10_000.0,
                    available,
                    reservation_id: None,
                    reservation_capacity: None,
                });
            (
                "[a-z0-9.]{1,12}",
                proptest::collection::vec(requirement, 0..4),
                quantities(),
                (quantities(), quantities(), quantities()),
                proptest::collection::vec(offering, 0..3),
            )
                .prop_map(
                    |(name, requirements, capacity, (kube, system, eviction), offerings)| {
                        CatalogInstanceType {
                            name,
                            requirements: Arc::new(requirements),
                            capacity,
                            overhead: CatalogOverhead {
                                kube_reserved: kube,
                                system_reserved: system,
                                eviction_threshold: eviction,
                            },
                            offerings,
                        }
                    },
                )
        }

        proptest! {
            #[test]
            fn serialized_catalog_files_parse_back_unchanged(mut types in proptest::collection::vec(instance_type(), 0..4)) {
                // Names must be unique in a file.
                for (i, t) in types.iter_mut().enumerate() {
                    t.name = format!("{}-{i}", t.name);
                }
                let file = CatalogFile { well_known_labels: vec!["size".into()], instance_types: types, ..CatalogFile::default() };
                let text = serde_json::to_string(&file).unwrap();
                let again = CatalogFile::from_json_str(&text).unwrap();
                prop_assert_eq!(again, file);
            }

            #[test]
            fn allocatable_never_exceeds_capacity_nor_goes_negative(t in instance_type()) {
                let allocatable = t.allocatable();
                prop_assert_eq!(allocatable.len(), t.capacity.len());
                for (resource, amount) in &allocatable {
                    prop_assert!(*amount >= 0);
                    prop_assert!(*amount <= t.capacity[resource]);
                }
            }
        }
    }
}
