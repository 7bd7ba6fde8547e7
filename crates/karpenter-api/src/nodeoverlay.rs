//! NodeOverlay (karpenter.sh/v1alpha1, behind the `NodeOverlay` feature gate): adjusts what the scheduler believes
//! about the instance types matching its requirements — an absolute price or a price change, and extra extended
//! resources — without touching the cloud provider.
//!
//! Overlays are applied highest weight first; among equal weights, the name later in the alphabet first (see
//! [`sort_by_precedence`]). Two overlays of the same weight that touch the same offering or resource conflict:
//! the one behind by precedence is not applied, and the controller marks it `ValidationSucceeded=False` with
//! reason `Conflict`.

use std::cmp::Ordering;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaPropsOrArray,
};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    common::{
        Condition, ConditionStatus, NodeSelectorRequirementWithMinValues, Operator, ResourceList,
        find_condition, validate_requirements,
    },
    label_policy::{KeyUse, LabelPolicy},
    labels, quantity,
    validation::{ValidationErrors, Validator},
};

/// Condition types of a NodeOverlay.
pub mod conditions {
    /// The overlay's runtime checks passed and it conflicts with no overlay of the same weight.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// The root condition; it follows `ValidationSucceeded`.
    pub const READY: &str = "Ready";
}

/// Reasons a NodeOverlay's `ValidationSucceeded` condition is False.
pub mod reasons {
    /// Another overlay of the same weight sets a different price, or the same resource, for a shared offering.
    pub const CONFLICT: &str = "Conflict";
    /// A check the CRD schema cannot express failed (for example a requirement no instance type can satisfy).
    pub const RUNTIME_VALIDATION: &str = "RuntimeValidation";
}

/// The smallest and largest `weight`.
pub const MIN_WEIGHT: i32 = 1;
pub const MAX_WEIGHT: i32 = 10000;

/// The resources an overlay's `capacity` may not set: it only adds extended resources.
pub const RESTRICTED_CAPACITY_RESOURCES: [&str; 4] = [
    labels::RESOURCE_CPU,
    labels::RESOURCE_MEMORY,
    labels::RESOURCE_EPHEMERAL_STORAGE,
    labels::RESOURCE_PODS,
];

/// The pattern of `price`: a non-negative decimal number.
pub const PRICE_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?$";
/// The pattern of `priceAdjustment`: a signed number, a positive percentage, or a percentage decrease of at most
/// 100%.
pub const PRICE_ADJUSTMENT_PATTERN: &str =
    r"^([+-][0-9]*\.?[0-9]+|\+[0-9]*\.?[0-9]+%|-([0-9]{1,2}(\.[0-9]+)?|100)%)$";

const MUTUALLY_EXCLUSIVE_PRICE: &str = "'price' and 'priceAdjustment' are mutually exclusive";
const RESTRICTED_CAPACITY: &str =
    "only extended resources may be added: cpu, memory, ephemeral-storage and pods cannot be overlaid";
const NOT_IN_NEEDS_VALUES: &str = "requirements with operator 'NotIn' must list at least one value";

/// NodeOverlay changes the price and extended resources the scheduler assumes for matching instance types.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    singular = "nodeoverlay",
    shortname = "overlays",
    category = "karpenter",
    status = "NodeOverlayStatus",
    doc = "NodeOverlay changes the price and extended resources the scheduler assumes for matching instance types",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight", priority = 1)
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!(has(self.price) && has(self.priceAdjustment))",
     "message": MUTUALLY_EXCLUSIVE_PRICE}
]))]
pub struct NodeOverlaySpec {
    /// Which instance types (and offerings) the overlay applies to; all of them must match. Empty matches all.
    #[schemars(
        length(max = 100),
        extend("x-kubernetes-validations" = [
            {"rule": "self.all(r, r.operator != 'NotIn' || (has(r.values) && size(r.values) > 0))",
             "message": NOT_IN_NEEDS_VALUES}
        ])
    )]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// A change to the offering price: a signed amount (`+0.5`, `-0.1`) or a percentage (`+10%`, `-15%`, at most
    /// `-100%`). The result is never below zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = PRICE_ADJUSTMENT_PATTERN))]
    pub price_adjustment: Option<String>,
    /// An absolute price that replaces the offering price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = PRICE_PATTERN))]
    pub price: Option<String>,
    /// Extended resources added to the instance types' capacity. cpu, memory, ephemeral-storage and pods may not
    /// be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "!['cpu', 'memory', 'ephemeral-storage', 'pods'].exists(r, r in self)",
         "message": RESTRICTED_CAPACITY}
    ]))]
    pub capacity: Option<ResourceList>,
    /// Precedence among overlays: higher first; unset counts as 0; equal weights are merged by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_WEIGHT, max = MAX_WEIGHT))]
    pub weight: Option<i32>,
}

/// The observed state of a NodeOverlay.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    /// ValidationSucceeded and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// How `priceAdjustment` changes a price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceAdjustment {
    /// Add this amount (negative to subtract).
    Amount(f64),
    /// Change by this percentage of the price (negative to reduce, at least -100).
    Percent(f64),
}

impl PriceAdjustment {
    /// Reads a `priceAdjustment` string, with the same grammar as the CRD pattern.
    pub fn parse(s: &str) -> Result<Self, String> {
        let invalid = || {
            format!(
                "{s:?}: must be a signed amount (+0.5, -0.1), a percentage increase (+10%) or a percentage decrease of at most 100% (-15%)"
            )
        };
        let (negative, body) = match s.as_bytes().first() {
            Some(b'+') => (false, &s[1..]),
            Some(b'-') => (true, &s[1..]),
            _ => return Err(invalid()),
        };
        match body.strip_suffix('%') {
            None if is_signed_amount_body(body) => {
                let n: f64 = body.parse().map_err(|_| invalid())?;
                Ok(Self::Amount(if negative { -n } else { n }))
            }
            Some(pct) if !negative && is_signed_amount_body(pct) => {
                Ok(Self::Percent(pct.parse().map_err(|_| invalid())?))
            }
            Some(pct) if negative && is_percent_decrease_body(pct) => {
                Ok(Self::Percent(-pct.parse::<f64>().map_err(|_| invalid())?))
            }
            Some(pct) if negative && is_signed_amount_body(pct) => Err(format!(
                "{s:?}: a percentage decrease must be at most 100% (with at most two whole digits)"
            )),
            _ => Err(invalid()),
        }
    }

    /// The adjusted price, never below zero.
    pub fn apply(self, base: f64) -> f64 {
        let adjusted = match self {
            Self::Amount(delta) => base + delta,
            Self::Percent(pct) => base * (1.0 + pct / 100.0),
        };
        adjusted.max(0.0)
    }
}

/// `\d*\.?\d+`: digits with an optional decimal point, ending in a digit.
fn is_signed_amount_body(s: &str) -> bool {
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    match s.split_once('.') {
        Some((int, frac)) => digits(int) && !frac.is_empty() && digits(frac),
        None => !s.is_empty() && digits(s),
    }
}

/// `\d{1,2}(\.\d+)?` or `100`: the magnitude of an allowed percentage decrease.
fn is_percent_decrease_body(s: &str) -> bool {
    if s == "100" {
        return true;
    }
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    let (int, frac) = match s.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (s, None),
    };
    (1..=2).contains(&int.len()) && digits(int) && frac.is_none_or(|f| !f.is_empty() && digits(f))
}

/// Why `price` is invalid, or `None`.
pub fn price_problem(price: &str) -> Option<String> {
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let ok = match price.split_once('.') {
        Some((int, frac)) => digits(int) && digits(frac),
        None => digits(price),
    };
    (!ok).then(|| format!("{price:?}: must be a non-negative decimal number, for example 0.25"))
}

impl NodeOverlaySpec {
    /// The weight, 0 when unset.
    pub fn weight(&self) -> i32 {
        self.weight.unwrap_or(0)
    }

    /// True when the overlay changes prices.
    pub fn changes_price(&self) -> bool {
        self.price.is_some() || self.price_adjustment.is_some()
    }

    /// The price of an offering after this overlay: `price` replaces it, `priceAdjustment` changes it (never below
    /// zero), and without either it is unchanged. A value that does not parse (an object that skipped
    /// validation) leaves the price unchanged.
    pub fn apply_price(&self, base: f64) -> f64 {
        if let Some(price) = &self.price {
            return if price_problem(price).is_none() {
                price.parse().unwrap_or(base)
            } else {
                base
            };
        }
        match self.price_adjustment.as_deref().map(PriceAdjustment::parse) {
            Some(Ok(adjustment)) => adjustment.apply(base),
            _ => base,
        }
    }

    fn validate(&self, v: &mut Validator, policy: LabelPolicy) {
        v.field("requirements", |v| {
            validate_requirements(v, &self.requirements, policy, KeyUse::NodeOverlayRequirement);
            for (i, r) in self.requirements.iter().enumerate() {
                v.index(i, |v| {
                    if r.operator == Operator::NotIn && r.values.is_empty() {
                        v.error(NOT_IN_NEEDS_VALUES);
                    }
                    if r.min_values.is_some() {
                        v.error_at(
                            "minValues",
                            "unknown field: NodeOverlay requirements do not support minValues",
                        );
                    }
                    // Runtime: a well-known key with known values must keep at least one of them.
                    let key = labels::normalize_label_key(&r.key);
                    if key == labels::CAPACITY_TYPE_LABEL
                        && r.operator == Operator::In
                        && !r.values.is_empty()
                        && !r
                            .values
                            .iter()
                            .any(|value| labels::CAPACITY_TYPES.contains(&value.as_str()))
                    {
                        v.error(format!(
                            "key {} has no valid values: it may only be {}",
                            r.key,
                            labels::CAPACITY_TYPES.join(", ")
                        ));
                    }
                });
            }
        });
        if let Some(adjustment) = &self.price_adjustment
            && let Err(e) = PriceAdjustment::parse(adjustment)
        {
            v.error_at("priceAdjustment", e);
        }
        if let Some(price) = &self.price
            && let Some(p) = price_problem(price)
        {
            v.error_at("price", p);
        }
        if self.price.is_some() && self.price_adjustment.is_some() {
            v.error(MUTUALLY_EXCLUSIVE_PRICE);
        }
        if let Some(capacity) = &self.capacity {
            v.field("capacity", |v| {
                if capacity
                    .keys()
                    .any(|name| RESTRICTED_CAPACITY_RESOURCES.contains(&name.as_str()))
                {
                    v.error(RESTRICTED_CAPACITY);
                }
                for (name, q) in capacity {
                    if let Err(e) = quantity::parse_milli(&q.0) {
                        v.key(name, |v| v.error(e.to_string()));
                    }
                }
            });
        }
        if let Some(w) = self.weight {
            v.field("weight", |v| {
                v.check(
                    (MIN_WEIGHT..=MAX_WEIGHT).contains(&w),
                    format!("must be between {MIN_WEIGHT} and {MAX_WEIGHT}"),
                );
            });
        }
    }
}

impl NodeOverlay {
    /// Applies every rule of the CRD schema and its CEL rules, and the controller's runtime checks on the
    /// requirements, naming the NodeOverlay and the field of each problem.
    pub fn validate(&self, policy: LabelPolicy) -> Result<(), ValidationErrors> {
        let mut v = Validator::new("NodeOverlay", self.metadata.name.as_deref());
        v.field("spec", |v| self.spec.validate(v, policy));
        v.finish()
    }

    /// See [`NodeOverlaySpec::apply_price`].
    pub fn apply_price(&self, base: f64) -> f64 {
        self.spec.apply_price(base)
    }

    /// True when the Ready condition is True.
    pub fn is_ready(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, conditions::READY))
            .is_some_and(|c| c.status == ConditionStatus::True)
    }
}

/// Orders overlays by precedence: higher weight first, and among equal weights the name later in the alphabet
/// first (the order the overlay controller merges them in).
pub fn precedence(a: &NodeOverlay, b: &NodeOverlay) -> Ordering {
    b.spec
        .weight()
        .cmp(&a.spec.weight())
        .then_with(|| b.metadata.name.cmp(&a.metadata.name))
}

/// Sorts overlays by [`precedence`].
pub fn sort_by_precedence(overlays: &mut [NodeOverlay]) {
    overlays.sort_by(precedence);
}

/// The NodeOverlay CRD as the types derive it, with the requirement shape upstream uses (no `minValues`). The
/// label-key rules shared with NodePools and NodeClaims are injected by `crate::crd::nodeoverlay`.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = NodeOverlay::crd();
    for version in &mut crd.spec.versions {
        let items = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|root| root.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
            .and_then(|spec| spec.properties.as_mut())
            .and_then(|p| p.get_mut("requirements"))
            .and_then(|r| r.items.as_mut());
        if let Some(JSONSchemaPropsOrArray::Schema(item)) = items
            && let Some(props) = item.properties.as_mut()
        {
            props.remove("minValues");
        }
    }
    crd
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn overlay(spec: serde_json::Value) -> NodeOverlay {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "discount"},
            "spec": spec
        }))
        .unwrap()
    }

    fn errors(o: &NodeOverlay) -> Vec<String> {
        o.validate(LabelPolicy::Core)
            .err()
            .map(|e| e.0.iter().map(|e| format!("{}: {}", e.path, e.message)).collect())
            .unwrap_or_default()
    }

    #[test]
    fn price_and_price_adjustment_are_mutually_exclusive() {
        let o = overlay(json!({"requirements": [], "price": "1", "priceAdjustment": "+1"}));
        let e = o.validate(LabelPolicy::Core).unwrap_err();
        assert_eq!(
            e.to_string(),
            "NodeOverlay discount: spec: 'price' and 'priceAdjustment' are mutually exclusive"
        );
    }

    #[test]
    fn price_pattern() {
        for ok in ["0", "1", "0.25", "10.5"] {
            assert!(price_problem(ok).is_none(), "{ok}");
        }
        for bad in ["", "-1", "+1", ".5", "1.", "1e3", "1.2.3", "١"] {
            assert!(price_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn price_adjustment_pattern() {
        for ok in [
            "+1", "-0.5", "+.5", "-.5", "+10%", "+123%", "+.5%", "-15%", "-99.9%", "-0%", "-100%",
        ] {
            assert!(PriceAdjustment::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "1", "10%", "", "+", "+1.", "-101%", "-100.5%", "-150%", "-.5%", "+1%%", "++1", "-100.0%",
        ] {
            assert!(PriceAdjustment::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn percentage_decrease_at_most_100_percent() {
        let e = PriceAdjustment::parse("-150%").unwrap_err();
        assert!(e.contains("at most 100%"), "{e}");
        let o = overlay(json!({"requirements": [], "priceAdjustment": "-150%"}));
        assert_eq!(errors(&o).len(), 1);
        assert!(errors(&o)[0].starts_with("spec.priceAdjustment: "));
    }

    #[test]
    fn apply_price_override_and_adjustments() {
        let with = |field: &str, value: &str| overlay(json!({"requirements": [], field: value}));
        assert_eq!(with("price", "0.5").apply_price(2.0), 0.5);
        assert_eq!(with("priceAdjustment", "+0.5").apply_price(2.0), 2.5);
        assert_eq!(with("priceAdjustment", "-0.5").apply_price(2.0), 1.5);
        assert_eq!(
            with("priceAdjustment", "-5").apply_price(2.0),
            0.0,
            "never below zero"
        );
        assert!((with("priceAdjustment", "+10%").apply_price(2.0) - 2.2).abs() < 1e-12);
        assert!((with("priceAdjustment", "-25%").apply_price(2.0) - 1.5).abs() < 1e-12);
        assert_eq!(with("priceAdjustment", "-100%").apply_price(2.0), 0.0);
        assert_eq!(overlay(json!({"requirements": []})).apply_price(2.0), 2.0);
        assert_eq!(
            with("priceAdjustment", "garbage").apply_price(2.0),
            2.0,
            "unparseable leaves the price"
        );
    }

    #[test]
    fn capacity_may_not_set_standard_resources() {
        let o = overlay(json!({"requirements": [], "capacity": {"cpu": "1", "example.com/fuse": "1"}}));
        assert_eq!(errors(&o), vec![format!("spec.capacity: {RESTRICTED_CAPACITY}")]);
        let o = overlay(json!({"requirements": [], "capacity": {"example.com/fuse": "1"}}));
        assert!(errors(&o).is_empty());
    }

    #[test]
    fn weight_between_1_and_10000() {
        assert_eq!(
            errors(&overlay(json!({"requirements": [], "weight": 0}))),
            vec!["spec.weight: must be between 1 and 10000"]
        );
        assert_eq!(
            errors(&overlay(json!({"requirements": [], "weight": 10001}))).len(),
            1
        );
        assert!(errors(&overlay(json!({"requirements": [], "weight": 10000}))).is_empty());
    }

    #[test]
    fn requirements_not_in_needs_values_and_min_values_is_rejected() {
        let o =
            overlay(json!({"requirements": [{"key": "topology.kubernetes.io/zone", "operator": "NotIn"}]}));
        assert_eq!(
            errors(&o),
            vec![format!("spec.requirements[0]: {NOT_IN_NEEDS_VALUES}")]
        );
        let o = overlay(json!({"requirements": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"], "minValues": 1}
        ]}));
        assert_eq!(
            errors(&o),
            vec![
                "spec.requirements[0].minValues: unknown field: NodeOverlay requirements do not support minValues"
            ]
        );
    }

    #[test]
    fn requirements_capacity_type_needs_a_known_value() {
        let o = overlay(
            json!({"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["cheap"]}]}),
        );
        assert_eq!(errors(&o).len(), 1);
        let o = overlay(
            json!({"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "cheap"]}]}),
        );
        assert!(errors(&o).is_empty());
    }

    #[test]
    fn precedence_weight_then_name_descending() {
        let named = |name: &str, weight: Option<i32>| {
            let mut o = overlay(json!({"requirements": []}));
            o.metadata.name = Some(name.into());
            o.spec.weight = weight;
            o
        };
        let mut list = vec![
            named("a", None),
            named("b", Some(5)),
            named("c", Some(5)),
            named("z", Some(1)),
        ];
        sort_by_precedence(&mut list);
        let names: Vec<_> = list.iter().map(|o| o.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["c", "b", "z", "a"]);
    }

    #[test]
    fn crd_has_no_min_values_and_round_trips() {
        let crd = serde_json::to_value(crd()).unwrap();
        let items = crd
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/requirements/items")
            .unwrap();
        assert!(items.pointer("/properties/minValues").is_none());
        assert_eq!(crd.pointer("/spec/scope").unwrap(), "Cluster");
        assert_eq!(crd.pointer("/spec/names/shortNames/0").unwrap(), "overlays");
        let manifest = json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "x"},
                              "spec": {"requirements": [], "priceAdjustment": "-10%"}});
        let o: NodeOverlay = serde_json::from_value(manifest.clone()).unwrap();
        assert_eq!(serde_json::to_value(&o).unwrap(), manifest);
    }
}
