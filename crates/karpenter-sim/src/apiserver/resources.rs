//! What the server serves: one [`ResourceInfo`] per resource, built in or from a CustomResourceDefinition.

use std::{collections::HashMap, sync::Arc};

use serde_json::Value;

/// The fields of a scalable resource that the scale subresource reads and writes (dotted paths, no leading dot).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    /// Built-in workloads keep a label selector object at `spec.selector`; CRDs name a string field.
    pub label_selector: Option<String>,
    pub selector_is_object: bool,
}

/// Everything the server needs to know about one resource.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    pub group: String,
    /// Served versions; the first is the preferred one. Objects are stored once, without conversion.
    pub versions: Vec<String>,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status_subresource: bool,
    pub scale: Option<ScalePaths>,
    /// Built-in kinds accept strategic merge patch and unconditional updates (PUT without resourceVersion).
    pub builtin: bool,
    /// Field selector labels beyond metadata.name and metadata.namespace.
    pub selectable_fields: Vec<String>,
    /// A custom resource's `additionalPrinterColumns` (name, type, jsonPath, priority...), for Table output.
    pub printer_columns: Vec<Value>,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        let version = self.versions.first().map(String::as_str).unwrap_or("v1");
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    pub fn id(&self) -> ResourceId {
        ResourceId::new(&self.group, &self.plural)
    }

    /// Subresources this resource serves besides status and scale.
    pub fn extra_subresources(&self) -> &'static [&'static str] {
        if self.group.is_empty() && self.plural == "pods" {
            &["eviction", "binding"]
        } else {
            &[]
        }
    }
}

/// A resource by API group and plural name, e.g. `("apps", "deployments")`; the core group is "".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId {
    pub group: String,
    pub resource: String,
}

impl ResourceId {
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }

    /// A resource of the core ("") group, such as pods or nodes.
    pub fn core(resource: &str) -> Self {
        Self::new("", resource)
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    status: bool,
    scale: bool,
    short: &'static [&'static str],
    fields: &'static [&'static str],
}

const fn b(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    status: bool,
) -> Builtin {
    Builtin {
        group,
        version,
        kind,
        plural,
        namespaced,
        status,
        scale: false,
        short: &[],
        fields: &[],
    }
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// The built-in resources Karpenter, its tests and kubectl touch.
const BUILTINS: &[Builtin] = &[
    Builtin {
        short: &["po"],
        fields: POD_FIELDS,
        ..b("", "v1", "Pod", "pods", true, true)
    },
    Builtin {
        short: &["no"],
        fields: &["spec.unschedulable"],
        ..b("", "v1", "Node", "nodes", false, true)
    },
    Builtin {
        short: &["ns"],
        fields: &["status.phase"],
        ..b("", "v1", "Namespace", "namespaces", false, true)
    },
    Builtin {
        short: &["ev"],
        fields: EVENT_FIELDS,
        ..b("", "v1", "Event", "events", true, false)
    },
    Builtin {
        short: &["pv"],
        ..b("", "v1", "PersistentVolume", "persistentvolumes", false, true)
    },
    Builtin {
        short: &["pvc"],
        ..b(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            true,
        )
    },
    Builtin {
        short: &["svc"],
        ..b("", "v1", "Service", "services", true, true)
    },
    Builtin {
        short: &["cm"],
        ..b("", "v1", "ConfigMap", "configmaps", true, false)
    },
    Builtin {
        fields: &["type"],
        ..b("", "v1", "Secret", "secrets", true, false)
    },
    Builtin {
        short: &["sa"],
        ..b("", "v1", "ServiceAccount", "serviceaccounts", true, false)
    },
    // What CapacityBuffers' podTemplateRef names.
    b("", "v1", "PodTemplate", "podtemplates", true, false),
    // Read (with Services) for the selector of default topology spread constraints; no controller runs them.
    Builtin {
        short: &["rc"],
        ..b(
            "",
            "v1",
            "ReplicationController",
            "replicationcontrollers",
            true,
            true,
        )
    },
    Builtin {
        short: &["deploy"],
        scale: true,
        ..b("apps", "v1", "Deployment", "deployments", true, true)
    },
    Builtin {
        short: &["rs"],
        scale: true,
        fields: &["status.replicas"],
        ..b("apps", "v1", "ReplicaSet", "replicasets", true, true)
    },
    Builtin {
        short: &["ds"],
        ..b("apps", "v1", "DaemonSet", "daemonsets", true, true)
    },
    Builtin {
        short: &["sts"],
        scale: true,
        ..b("apps", "v1", "StatefulSet", "statefulsets", true, true)
    },
    // batch/v1 Jobs, for the simulated Job controller (no CronJobs).
    b("batch", "v1", "Job", "jobs", true, true),
    Builtin {
        short: &["pdb"],
        ..b(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            true,
        )
    },
    Builtin {
        short: &["sc"],
        ..b(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            false,
            false,
        )
    },
    b("storage.k8s.io", "v1", "CSINode", "csinodes", false, false),
    b("storage.k8s.io", "v1", "CSIDriver", "csidrivers", false, false),
    b(
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        false,
        true,
    ),
    b("coordination.k8s.io", "v1", "Lease", "leases", true, false),
    // No short name: "ev" is the core group's, as upstream.
    b("events.k8s.io", "v1", "Event", "events", true, false),
    Builtin {
        short: &["pc"],
        ..b(
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
            "priorityclasses",
            false,
            false,
        )
    },
    Builtin {
        short: &["crd", "crds"],
        ..b(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            true,
        )
    },
];

fn builtin_info(def: &Builtin) -> ResourceInfo {
    ResourceInfo {
        group: def.group.to_string(),
        versions: vec![def.version.to_string()],
        kind: def.kind.to_string(),
        list_kind: format!("{}List", def.kind),
        plural: def.plural.to_string(),
        singular: def.kind.to_lowercase(),
        namespaced: def.namespaced,
        short_names: def.short.iter().map(|s| s.to_string()).collect(),
        // `kubectl get all` expands the "all" category.
        categories: if matches!(
            def.plural,
            "pods" | "services" | "deployments" | "replicasets" | "daemonsets" | "statefulsets" | "jobs"
        ) {
            vec!["all".to_string()]
        } else {
            Vec::new()
        },
        status_subresource: def.status,
        scale: def.scale.then(|| ScalePaths {
            spec_replicas: "spec.replicas".into(),
            status_replicas: "status.replicas".into(),
            label_selector: Some("spec.selector".into()),
            selector_is_object: true,
        }),
        builtin: true,
        selectable_fields: def.fields.iter().map(|s| s.to_string()).collect(),
        printer_columns: Vec::new(),
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn dotted(path: &str) -> String {
    path.trim_start_matches('.').to_string()
}

/// The resource a CustomResourceDefinition declares, or why it cannot be served.
pub fn from_crd(crd: &Value) -> Result<ResourceInfo, String> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let text = |v: &Value, what: &str| {
        v.as_str()
            .map(str::to_string)
            .ok_or(format!("spec.{what} is required"))
    };
    let group = text(&spec["group"], "group")?;
    let kind = text(&names["kind"], "names.kind")?;
    let plural = text(&names["plural"], "names.plural")?;
    let versions: Vec<&Value> = spec["versions"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter(|v| v["served"].as_bool().unwrap_or(true))
                .collect()
        })
        .unwrap_or_default();
    // The storage version first, so discovery prefers it.
    let mut sorted = versions.clone();
    sorted.sort_by_key(|v| !v["storage"].as_bool().unwrap_or(false));
    let first = sorted.first().ok_or("spec.versions has no served version")?;
    let subresources = &first["subresources"];
    let scale = &subresources["scale"];
    Ok(ResourceInfo {
        versions: sorted
            .iter()
            .filter_map(|v| v["name"].as_str().map(str::to_string))
            .collect(),
        list_kind: names["listKind"]
            .as_str()
            .map(str::to_string)
            .unwrap_or(format!("{kind}List")),
        singular: names["singular"]
            .as_str()
            .map(str::to_string)
            .unwrap_or(kind.to_lowercase()),
        namespaced: spec["scope"].as_str() != Some("Cluster"),
        short_names: strings(&names["shortNames"]),
        categories: strings(&names["categories"]),
        status_subresource: subresources.get("status").is_some(),
        scale: scale.is_object().then(|| ScalePaths {
            spec_replicas: dotted(scale["specReplicasPath"].as_str().unwrap_or(".spec.replicas")),
            status_replicas: dotted(scale["statusReplicasPath"].as_str().unwrap_or(".status.replicas")),
            label_selector: scale["labelSelectorPath"].as_str().map(dotted),
            selector_is_object: false,
        }),
        builtin: false,
        selectable_fields: first["selectableFields"]
            .as_array()
            .map(|f| {
                f.iter()
                    .filter_map(|f| f["jsonPath"].as_str().map(dotted))
                    .collect()
            })
            .unwrap_or_default(),
        printer_columns: first["additionalPrinterColumns"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
        group,
        kind,
        plural,
    })
}

/// The served resources, looked up by (group, version, plural) as URLs name them.
#[derive(Debug, Default)]
pub struct Registry {
    resources: Vec<Arc<ResourceInfo>>,
    by_path: HashMap<(String, String, String), Arc<ResourceInfo>>,
}

impl Registry {
    pub fn with_builtins() -> Self {
        let mut registry = Self::default();
        for def in BUILTINS {
            registry.insert(builtin_info(def));
        }
        registry
    }

    /// Adds or replaces a resource (a CRD created or updated through the API).
    pub fn insert(&mut self, info: ResourceInfo) -> Arc<ResourceInfo> {
        let info = Arc::new(info);
        self.remove(&info.id());
        for version in &info.versions {
            self.by_path.insert(
                (info.group.clone(), version.clone(), info.plural.clone()),
                Arc::clone(&info),
            );
        }
        self.resources.push(Arc::clone(&info));
        info
    }

    pub fn remove(&mut self, id: &ResourceId) {
        self.resources
            .retain(|r| r.group != id.group || r.plural != id.resource);
        self.by_path
            .retain(|_, r| r.group != id.group || r.plural != id.resource);
    }

    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.by_path
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    pub fn by_id(&self, id: &ResourceId) -> Option<Arc<ResourceInfo>> {
        self.resources
            .iter()
            .find(|r| r.group == id.group && r.plural == id.resource)
            .cloned()
    }

    pub fn all(&self) -> &[Arc<ResourceInfo>] {
        &self.resources
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_with_scale_subresource_maps_its_paths() -> Result<(), String> {
        let crd = json!({"spec": {"group": "karpenter.sh", "scope": "Cluster",
            "names": {"kind": "NodePool", "plural": "nodepools", "singular": "nodepool"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {
                "status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}}}]}});
        let info = from_crd(&crd)?;
        assert!(!info.namespaced);
        assert!(info.status_subresource);
        let scale = info.scale.ok_or("no scale")?;
        assert_eq!(
            (scale.spec_replicas.as_str(), scale.status_replicas.as_str()),
            ("spec.replicas", "status.nodes")
        );
        Ok(())
    }

    #[test]
    fn builtins_are_found_by_url_parts() {
        let registry = Registry::with_builtins();
        assert!(
            registry
                .lookup("apps", "v1", "deployments")
                .is_some_and(|r| r.scale.is_some())
        );
        assert!(registry.lookup("", "v1", "pods").is_some_and(|r| r.namespaced));
        assert!(registry.lookup("apps", "v2", "deployments").is_none());
    }
}
