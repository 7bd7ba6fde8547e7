//! The part of the cluster's kube-scheduler configuration the simulation must mirror (`SCHEDULER_CONFIG`,
//! `--scheduler-config`, as upstream): today the PodTopologySpread plugin's `defaultConstraints`, which
//! kube-scheduler applies to every pod that declares no topology spread constraints of its own. A simulation
//! that ignores them launches nodes kube-scheduler then refuses to fill; see `snapshot::default_spread` for how
//! each pod's selector is deduced.
//!
//! The document has the shape upstream reads (`podTopologySpread.defaultConstraints`), not the versioned
//! KubeSchedulerConfiguration, and is checked as kube-scheduler checks its plugin arguments, so a value one of
//! them accepts the other accepts too.

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use karpenter_api::{
    manifest::{decode_strict, split_documents},
    validation::qualified_name_problem,
};
use serde::{Deserialize, Serialize};

/// What `SCHEDULER_CONFIG` holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_topology_spread: Option<PodTopologySpreadConfig>,
}

/// kube-scheduler's PodTopologySpread plugin arguments, as far as the simulation reads them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTopologySpreadConfig {
    /// Applied to a pod with no constraints of its own; each carries no selector (one is deduced per pod).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_constraints: Vec<TopologySpreadConstraint>,
}

impl SchedulerConfig {
    /// Reads a YAML or JSON document; an empty (or all-blank) value is no configuration. Errors name the field.
    pub fn parse(raw: &str) -> Result<Option<Self>, String> {
        if raw.trim().is_empty() {
            return Ok(None);
        }
        let mut documents = split_documents(raw).into_iter();
        let (Some(document), None) = (documents.next(), documents.next()) else {
            return Err("must be exactly one YAML or JSON document".into());
        };
        let value = document.map_err(|e| format!("{}: {}", e.path, e.message))?;
        let config: Self = decode_strict(&value).map_err(|e| format!("{}: {}", e.path, e.message))?;
        config.validate()?;
        Ok(Some(config))
    }

    /// The default topology spread constraints (none when not configured).
    pub fn default_constraints(&self) -> &[TopologySpreadConstraint] {
        self.pod_topology_spread
            .as_ref()
            .map(|p| p.default_constraints.as_slice())
            .unwrap_or_default()
    }

    /// kube-scheduler's checks of `defaultConstraints`: each valid on its own, no two with the same topology key
    /// and `whenUnsatisfiable`.
    pub fn validate(&self) -> Result<(), String> {
        let constraints = self.default_constraints();
        for (i, c) in constraints.iter().enumerate() {
            let field = format!("podTopologySpread.defaultConstraints[{i}]");
            validate_default_constraint(c).map_err(|e| format!("{field}.{e}"))?;
            if let Some(j) = constraints[..i].iter().position(|earlier| {
                earlier.topology_key == c.topology_key && earlier.when_unsatisfiable == c.when_unsatisfiable
            }) {
                return Err(format!(
                    "{field}: repeats defaultConstraints[{j}] ({}, {})",
                    c.topology_key, c.when_unsatisfiable
                ));
            }
        }
        Ok(())
    }
}

/// One default constraint's problem, as `field: why`.
fn validate_default_constraint(c: &TopologySpreadConstraint) -> Result<(), String> {
    if c.max_skew <= 0 {
        return Err(format!("maxSkew: {} must be greater than 0", c.max_skew));
    }
    if c.topology_key.is_empty() {
        return Err("topologyKey: must be set".into());
    }
    if let Some(problem) = qualified_name_problem(&c.topology_key) {
        return Err(format!("topologyKey: {problem}"));
    }
    if c.when_unsatisfiable != "DoNotSchedule" && c.when_unsatisfiable != "ScheduleAnyway" {
        return Err(format!(
            "whenUnsatisfiable: {:?} must be DoNotSchedule or ScheduleAnyway",
            c.when_unsatisfiable
        ));
    }
    // kube-scheduler deduces each pod's selector; a fixed one would count the wrong pods for every workload.
    if c.label_selector.is_some() {
        return Err("labelSelector: must not be set, a selector is deduced for each pod".into());
    }
    // kube-scheduler replaces the selector matchLabelKeys would add to, so it has no effect here.
    if c.match_label_keys.as_ref().is_some_and(|k| !k.is_empty()) {
        return Err("matchLabelKeys: must not be set, it has no effect on default constraints".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUITE_CONFIG: &str = "podTopologySpread:
  defaultConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: DoNotSchedule
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: DoNotSchedule
";

    #[test]
    fn reads_the_default_constraints_upstreams_suites_configure() {
        let config = SchedulerConfig::parse(SUITE_CONFIG).unwrap().unwrap();
        let keys: Vec<&str> = config
            .default_constraints()
            .iter()
            .map(|c| c.topology_key.as_str())
            .collect();
        assert_eq!(keys, ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]);
        assert!(config.default_constraints().iter().all(|c| c.max_skew == 1));
    }

    #[test]
    fn empty_means_not_configured() {
        assert_eq!(SchedulerConfig::parse("").unwrap(), None);
        assert_eq!(SchedulerConfig::parse("  \n").unwrap(), None);
        assert!(
            SchedulerConfig::parse("{}")
                .unwrap()
                .unwrap()
                .default_constraints()
                .is_empty()
        );
    }

    #[test]
    fn json_is_read_too() {
        let raw = r#"{"podTopologySpread":{"defaultConstraints":[{"maxSkew":2,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway"}]}}"#;
        let config = SchedulerConfig::parse(raw).unwrap().unwrap();
        assert_eq!(config.default_constraints()[0].max_skew, 2);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("podTopologySpred: {}", "podTopologySpred"),
            (
                "podTopologySpread: {defaultConstraints: [{maxSkew: 0, topologyKey: a, whenUnsatisfiable: DoNotSchedule}]}",
                "defaultConstraints[0].maxSkew",
            ),
            (
                "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: '', whenUnsatisfiable: DoNotSchedule}]}",
                "defaultConstraints[0].topologyKey",
            ),
            (
                "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: 'a b', whenUnsatisfiable: DoNotSchedule}]}",
                "defaultConstraints[0].topologyKey",
            ),
            (
                "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: a, whenUnsatisfiable: Never}]}",
                "defaultConstraints[0].whenUnsatisfiable",
            ),
            (
                "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: a, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]}",
                "defaultConstraints[0].labelSelector",
            ),
            (
                "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: a, whenUnsatisfiable: DoNotSchedule, matchLabelKeys: [app]}]}",
                "defaultConstraints[0].matchLabelKeys",
            ),
            (
                "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: a, whenUnsatisfiable: DoNotSchedule}, {maxSkew: 2, topologyKey: a, whenUnsatisfiable: DoNotSchedule}]}",
                "defaultConstraints[1]: repeats defaultConstraints[0]",
            ),
        ];
        for (raw, expected) in cases {
            let error = SchedulerConfig::parse(raw).unwrap_err();
            assert!(error.contains(expected), "{raw}: {error}");
        }
    }

    #[test]
    fn the_same_key_may_be_both_hard_and_soft() {
        let raw = "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: a, whenUnsatisfiable: DoNotSchedule}, {maxSkew: 3, topologyKey: a, whenUnsatisfiable: ScheduleAnyway}]}";
        assert_eq!(
            SchedulerConfig::parse(raw)
                .unwrap()
                .unwrap()
                .default_constraints()
                .len(),
            2
        );
    }
}
