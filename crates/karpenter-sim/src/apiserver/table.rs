//! Server-side printing (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, what `kubectl get` asks for):
//! a meta.k8s.io/v1 Table with the columns kube-apiserver prints. Pods and Nodes get the columns of
//! k8s.io/kubernetes `pkg/printers/internalversion` (NAME READY STATUS RESTARTS AGE ... and NAME STATUS ROLES AGE
//! VERSION ...); custom resources get Name plus their CRD's `additionalPrinterColumns` (or Name and Age without
//! any), with cells from the columns' JSONPath. Other kinds are answered with the plain object or list, which
//! kubectl prints itself.

use http::HeaderMap;
use jiff::Timestamp;
use serde_json::{Value, json};

use super::resources::ResourceInfo;

/// Whether the client asked for a Table.
pub fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|accept| accept.split(',').any(|media| media.contains("as=Table")))
}

/// Whether this server prints the resource as a Table.
pub fn printable(info: &ResourceInfo) -> bool {
    !info.builtin || (info.group.is_empty() && matches!(info.plural.as_str(), "pods" | "nodes"))
}

fn column(name: &str, kind: &str, format: &str, priority: i64, description: &str) -> Value {
    json!({"name": name, "type": kind, "format": format, "description": description, "priority": priority})
}

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, \
                                although some resources may allow a client to request the generation of an \
                                appropriate name automatically. Name is primarily intended for creation \
                                idempotence and configuration definition. Cannot be updated.";
const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object \
                               was created.";

fn name_column() -> Value {
    column("Name", "string", "name", 0, NAME_DESCRIPTION)
}

fn columns(info: &ResourceInfo) -> Vec<Value> {
    match (info.builtin, info.plural.as_str()) {
        (true, "pods") => vec![
            name_column(),
            column(
                "Ready",
                "string",
                "",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            column(
                "Status",
                "string",
                "",
                0,
                "The aggregate status of the containers in this pod.",
            ),
            column(
                "Restarts",
                "string",
                "",
                0,
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            column("Age", "string", "", 0, AGE_DESCRIPTION),
            column(
                "IP",
                "string",
                "",
                1,
                "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            ),
            column(
                "Node",
                "string",
                "",
                1,
                "NodeName is a request to schedule this pod onto a specific node.",
            ),
            column(
                "Nominated Node",
                "string",
                "",
                1,
                "nominatedNodeName is set when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
            ),
            column(
                "Readiness Gates",
                "string",
                "",
                1,
                "If specified, all readiness gates will be evaluated for pod readiness.",
            ),
        ],
        (true, "nodes") => vec![
            name_column(),
            column("Status", "string", "", 0, "The status of the node"),
            column("Roles", "string", "", 0, "The roles of the node"),
            column("Age", "string", "", 0, AGE_DESCRIPTION),
            column(
                "Version",
                "string",
                "",
                0,
                "Kubelet Version reported by the node.",
            ),
            column(
                "Internal-IP",
                "string",
                "",
                1,
                "List of addresses reachable to the node. Queried from cloud provider, if available.",
            ),
            column(
                "External-IP",
                "string",
                "",
                1,
                "List of addresses reachable to the node. Queried from cloud provider, if available.",
            ),
            column(
                "OS-Image",
                "string",
                "",
                1,
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            ),
            column(
                "Kernel-Version",
                "string",
                "",
                1,
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            ),
            column(
                "Container-Runtime",
                "string",
                "",
                1,
                "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            ),
        ],
        _ if info.printer_columns.is_empty() => {
            vec![name_column(), column("Age", "date", "", 0, AGE_DESCRIPTION)]
        }
        _ => std::iter::once(name_column())
            .chain(info.printer_columns.iter().map(|c| {
                column(
                    c["name"].as_str().unwrap_or(""),
                    c["type"].as_str().unwrap_or("string"),
                    c["format"].as_str().unwrap_or(""),
                    c["priority"].as_i64().unwrap_or(0),
                    c["description"].as_str().unwrap_or(""),
                )
            }))
            .collect(),
    }
}

/// `duration.HumanDuration` of k8s.io/apimachinery: how kubectl shows an age.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    let (m, h) = (s / 60, s / 3600);
    let d = h / 24;
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if h < 24 * 365 * 2 {
        format!("{d}d")
    } else if h < 24 * 365 * 8 {
        let y = d / 365;
        if d % 365 == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{}d", d % 365)
        }
    } else {
        format!("{}y", d / 365)
    }
}

fn age(timestamp: &Value, now: Timestamp) -> Value {
    match timestamp.as_str().and_then(|t| t.parse::<Timestamp>().ok()) {
        Some(t) => json!(human_duration(now.as_second() - t.as_second())),
        None => json!("<unknown>"),
    }
}

fn or_none(value: &Value) -> Value {
    match value.as_str() {
        Some(s) if !s.is_empty() => json!(s),
        _ => json!("<none>"),
    }
}

fn pod_cells(pod: &Value, now: Timestamp) -> Vec<Value> {
    let statuses = pod["status"]["containerStatuses"].as_array();
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = statuses.map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
    let restarts: i64 = statuses.map_or(0, |s| s.iter().filter_map(|c| c["restartCount"].as_i64()).sum());
    let status = if pod["metadata"]["deletionTimestamp"].is_string() {
        "Terminating".to_string()
    } else {
        pod["status"]["reason"]
            .as_str()
            .or(pod["status"]["phase"].as_str())
            .unwrap_or("Pending")
            .to_string()
    };
    let gates = pod["spec"]["readinessGates"].as_array().filter(|g| !g.is_empty());
    let gates = match gates {
        None => json!("<none>"),
        Some(gates) => {
            let conditions = pod["status"]["conditions"].as_array();
            let met = gates
                .iter()
                .filter(|g| {
                    conditions.is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == g["conditionType"] && c["status"] == "True")
                    })
                })
                .count();
            json!(format!("{met}/{}", gates.len()))
        }
    };
    vec![
        pod["metadata"]["name"].clone(),
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts.to_string()),
        age(&pod["metadata"]["creationTimestamp"], now),
        or_none(&pod["status"]["podIP"]),
        or_none(&pod["spec"]["nodeName"]),
        or_none(&pod["status"]["nominatedNodeName"]),
        gates,
    ]
}

fn node_cells(node: &Value, now: Timestamp) -> Vec<Value> {
    let ready = node["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    let mut status = match ready {
        Some(c) if c["status"] == "True" => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if node["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<String> = node["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| {
            if let Some(role) = key.strip_prefix("node-role.kubernetes.io/") {
                (!role.is_empty()).then(|| role.to_string())
            } else if key == "kubernetes.io/role" {
                value.as_str().filter(|v| !v.is_empty()).map(str::to_string)
            } else {
                None
            }
        })
        .collect();
    roles.sort();
    roles.dedup();
    let address = |kind: &str| {
        node["status"]["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["type"] == kind))
            .map_or(json!("<none>"), |a| or_none(&a["address"]))
    };
    let info = &node["status"]["nodeInfo"];
    let unknown = |v: &Value| match v.as_str() {
        Some(s) if !s.is_empty() => json!(s),
        _ => json!("<unknown>"),
    };
    vec![
        node["metadata"]["name"].clone(),
        json!(status),
        json!(if roles.is_empty() {
            "<none>".to_string()
        } else {
            roles.join(",")
        }),
        age(&node["metadata"]["creationTimestamp"], now),
        json!(info["kubeletVersion"].as_str().unwrap_or("")),
        address("InternalIP"),
        address("ExternalIP"),
        unknown(&info["osImage"]),
        unknown(&info["kernelVersion"]),
        unknown(&info["containerRuntimeVersion"]),
    ]
}

/// The values a printer column's JSONPath selects: `.a.b`, `[N]`, `[*]` and `[?(@.key=="value")]`.
fn select<'a>(object: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![object];
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let (field, tail) = after.split_at(end);
            if !field.is_empty() {
                current = current.iter().filter_map(|v| v.get(field)).collect();
            }
            rest = tail;
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return Vec::new();
            };
            let (inner, tail) = (&after[..end], &after[end + 1..]);
            rest = tail;
            let items = current.iter().filter_map(|v| v.as_array()).flatten();
            current = if inner == "*" {
                items.collect()
            } else if let Ok(index) = inner.parse::<usize>() {
                current.iter().filter_map(|v| v.get(index)).collect()
            } else if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let Some((key, wanted)) = filter.split_once("==") else {
                    return Vec::new();
                };
                let wanted = wanted.trim().trim_matches(['"', '\'']);
                let key = key.trim();
                items
                    .filter(|item| {
                        let value = &item[key];
                        value
                            .as_str()
                            .map_or_else(|| *value.to_string() == *wanted, |s| s == wanted)
                    })
                    .collect()
            } else {
                return Vec::new();
            };
        } else {
            return Vec::new();
        }
    }
    current
}

fn custom_cells(info: &ResourceInfo, object: &Value, now: Timestamp) -> Vec<Value> {
    let mut cells = vec![object["metadata"]["name"].clone()];
    if info.printer_columns.is_empty() {
        cells.push(age(&object["metadata"]["creationTimestamp"], now));
        return cells;
    }
    for column in &info.printer_columns {
        let values = select(object, column["jsonPath"].as_str().unwrap_or(""));
        let cell = match (values.as_slice(), column["type"].as_str()) {
            ([], _) => Value::Null,
            ([one], Some("date")) => age(one, now),
            // A string column shows any scalar as text, as the real server's table convertor does.
            ([one], Some("string")) => match one {
                Value::String(_) => (*one).clone(),
                other => json!(other.to_string()),
            },
            ([one], _) => match one {
                Value::Array(_) | Value::Object(_) => json!(one.to_string()),
                scalar => (*scalar).clone(),
            },
            (many, _) => json!(
                many.iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        cells.push(cell);
    }
    cells
}

fn row(info: &ResourceInfo, object: &Value, include: &str, now: Timestamp) -> Value {
    let cells = match (info.builtin, info.plural.as_str()) {
        (true, "pods") => pod_cells(object, now),
        (true, "nodes") => node_cells(object, now),
        _ => custom_cells(info, object, now),
    };
    let mut row = json!({"cells": cells});
    match include {
        "None" => {}
        "Object" => row["object"] = object.clone(),
        _ => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"],
            });
        }
    }
    row
}

/// A meta.k8s.io/v1 Table of `objects`; `include` is the `includeObject` parameter (None, Metadata, Object).
pub fn table(
    info: &ResourceInfo,
    objects: &[&Value],
    metadata: Value,
    include: Option<&str>,
    now: Timestamp,
) -> Value {
    let include = include.unwrap_or("Metadata");
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
        "columnDefinitions": columns(info),
        "rows": objects.iter().map(|o| row(info, o, include, now)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        for (seconds, shown) in [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 3600, "3d1h"),
            (30 * 86400, "30d"),
        ] {
            assert_eq!(human_duration(seconds), shown);
        }
    }

    #[test]
    fn printer_column_paths_select_fields_and_filtered_conditions() {
        let object = json!({"status": {"conditions": [
            {"type": "Launched", "status": "True"}, {"type": "Ready", "status": "False"}
        ], "nodes": 3}});
        assert_eq!(select(&object, ".status.nodes"), vec![&json!(3)]);
        assert_eq!(
            select(&object, r#".status.conditions[?(@.type=="Ready")].status"#),
            vec![&json!("False")]
        );
        assert_eq!(
            select(&object, ".status.conditions[0].type"),
            vec![&json!("Launched")]
        );
        assert!(select(&object, ".spec.missing").is_empty());
    }
}
