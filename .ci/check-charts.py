#!/usr/bin/env python3
"""Checks the Helm charts, the Grafana dashboard and the CloudFormation template. Run from anywhere; CI runs it
from .ci/run after installing .ci/requirements.txt.

- charts/karpenter and charts/karpenter-crd: `helm lint` (Helm 4, embedded by helm-python-sdk: no helm binary),
  rendered with the minimal values (only the required settings.clusterName and controller.image.repository), with
  charts/karpenter/ci/all-options-values.yaml (every value set) and with
  charts/karpenter/ci/upstream-v1.14.1-values.yaml (every key of upstream's chart values set; the file is checked
  to hold them all);
- every rendered object validated with kubernetes-validate, strict, against Kubernetes 1.33.0. The Prometheus
  Operator kinds (ServiceMonitor, PodMonitor) are not in kubernetes-validate's schemas; they are validated against
  the small schema below, written from the monitoring.coreos.com/v1 API: the fields this chart may render, with
  unknown fields rejected;
- what the chart promises (hardened pod, settings wired to upstream's environment variable names, every variable it
  sets one the controller reads per docs/reference/settings.md, ports, probes, one role per RBAC template file,
  the roles' rules exactly those of charts/karpenter/rbac/) asserted on the rendered objects;
- values.schema.json enforced: each file in .ci/chart-values-invalid/ must be rejected, with the message naming the
  bad value, and a render without settings.clusterName or without controller.image.repository must fail with a
  message naming it;
- values as Helm users pass them: every boolean and integer as a string (--set-string, quoted values) plus a feature
  gate the chart does not know render exactly what the typed values render; serviceAccount.create false without a
  name runs the controller as the namespace's "default" ServiceAccount, as upstream's chart;
- docs/getting-started.md and docs/troubleshooting.md name only repository paths that exist; the NodePools
  getting-started applies have no budget that keeps empty nodes (its step 8 watches them go); no example
  EC2NodeClass gives a node more pods than the VPC CNI addresses on an instance type its NodePools in config/
  allow (crates/karpenter-aws-catalog's catalog);
- the ServiceMonitor and PodMonitor are rendered only where the cluster serves monitoring.coreos.com/v1 (rendered
  both with and without that API version);
- the karpenter-crd chart puts additionalAnnotations on every CRD;
- the dashboard's queries use only metric and label names of upstream Karpenter's metrics;
- deploy/cloudformation.yaml linted by cfn-lint, twice: as written, and with the IAM policy documents that are
  JSON strings under !Sub (their condition keys name the cluster) parsed, so cfn-lint checks their actions too;
  its resources carry upstream v1.14's logical IDs, types and physical names, its five EventBridge rules feed the
  queue, and every action its controller policies grant is called by crates/karpenter-aws or kept for a reason.

Exit status 1 with every failure listed when anything is wrong.
"""

from __future__ import annotations

import copy
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml
from cfnlint.api import lint_file
from cfnlint.decode import cfn_yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "karpenter"
CRD_CHART = ROOT / "charts" / "karpenter-crd"
INVALID_VALUES = ROOT / ".ci" / "chart-values-invalid"
CFN = ROOT / "deploy" / "cloudformation.yaml"
K8S_VERSION = "1.33.0"
RELEASE, NAMESPACE = "karpenter", "kube-system"
MINIMAL_VALUES = {"settings": {"clusterName": "ci-cluster"},
                  "controller": {"image": {"repository": "111122223333.dkr.ecr.us-east-1.amazonaws.com/karpenter-rs"}}}
MINIMAL_LABEL = "required values only"
ALL_OPTIONS_LABEL = "ci/all-options-values.yaml"
UPSTREAM_LABEL = "ci/upstream-v1.14.1-values.yaml"
# The API group/version of the Prometheus Operator's ServiceMonitor and PodMonitor.
MONITORING_API = "monitoring.coreos.com/v1"

failures: list[str] = []


def fail(message: str) -> None:
    failures.append(message)
    print(f"FAIL {message}")


def ok(message: str) -> None:
    print(f"ok   {message}")


def section(title: str) -> None:
    print(f"\n--- {title}")


# ---------------------------------------------------------------------------------------------------------------
# Helm: lint and render


def lint(chart: Path, values: dict | None, label: str) -> None:
    report = helm.lint(str(chart), values, strict=True, kube_version=f"v{K8S_VERSION}")
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    infos = [m for m in report.get("messages", []) if m.get("severity", 0) < 2]
    for m in problems:
        fail(f"helm lint {chart.name} ({label}): {m.get('path')}: {m.get('error')}")
    if not problems:
        notes = "; ".join(f"{m.get('path')}: {m.get('error')}" for m in infos)
        ok(f"helm lint {chart.name} ({label}): no warnings or errors" + (f" (info: {notes})" if notes else ""))


def render_manifests(chart: Path, values: dict | None, api_versions: list[str] | None = None) -> dict[str, str]:
    """{template: text}. api_versions are the API versions the simulated cluster serves beyond the built-in ones
    (.Capabilities.APIVersions); helm-python-sdk 0.2.2's Chart.render does not expose the option, but the render
    call of its libhelm_c (pinned in .ci/requirements.txt) takes it, as `helm template --api-versions` does."""
    with helm.Chart.load(str(chart)) as loaded:
        if not api_versions:
            return loaded.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        from helm_python import _native
        opts = {"name": RELEASE, "namespace": NAMESPACE, "is_install": True, "api_versions": api_versions}
        return json.loads(_native.call_string("helm_render", loaded._raw(), json.dumps(values), json.dumps(opts)))


def render(chart: Path, values: dict | None, api_versions: list[str] | None = None) -> list[tuple[str, dict]]:
    """Renders the chart; returns (template, object) for every object, NOTES.txt left out."""
    manifests = render_manifests(chart, values, api_versions)
    objects = []
    for template, text in sorted(manifests.items()):
        if template.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc is not None:
                objects.append((template, doc))
    return objects


def summary(objects: list[tuple[str, dict]]) -> str:
    kinds = Counter(obj["kind"] for _, obj in objects)
    return f"{len(objects)} objects (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")"


# ---------------------------------------------------------------------------------------------------------------
# Validation of rendered objects

_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer", "minimum": 0},
        "replacement": {"type": "string"},
        "action": {
            "type": "string",
            "enum": [
                a
                for base in ["replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
                             "lowercase", "uppercase", "keepequal", "dropequal"]
                for a in (base, base.capitalize(), base.title())
            ],
        },
    },
}
_ENDPOINT_COMMON = {
    "port": {"type": "string", "minLength": 1},
    "targetPort": {"type": ["string", "integer"]},
    "path": {"type": "string", "pattern": "^/"},
    "scheme": {"type": "string", "enum": ["http", "https", "HTTP", "HTTPS"]},
    "params": {"type": "object"},
    "interval": {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
    "scrapeTimeout": {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
    "tlsConfig": {"type": "object"},
    "bearerTokenSecret": {"type": "object"},
    "authorization": {"type": "object"},
    "basicAuth": {"type": "object"},
    "oauth2": {"type": "object"},
    "honorLabels": {"type": "boolean"},
    "honorTimestamps": {"type": "boolean"},
    "trackTimestampsStaleness": {"type": "boolean"},
    "metricRelabelings": {"type": "array", "items": _RELABEL},
    "relabelings": {"type": "array", "items": _RELABEL},
    "proxyUrl": {"type": "string"},
    "noProxy": {"type": "string"},
    "proxyFromEnvironment": {"type": "boolean"},
    "proxyConnectHeader": {"type": "object"},
    "followRedirects": {"type": "boolean"},
    "enableHttp2": {"type": "boolean"},
    "filterRunning": {"type": "boolean"},
}
_SPEC_COMMON = {
    "jobLabel": {"type": "string"},
    "podTargetLabels": {"type": "array", "items": {"type": "string"}},
    "selector": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {"type": "array", "items": {"type": "object"}},
        },
    },
    "namespaceSelector": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}},
    },
    "sampleLimit": {"type": "integer", "minimum": 0},
    "targetLimit": {"type": "integer", "minimum": 0},
    "labelLimit": {"type": "integer", "minimum": 0},
    "labelNameLengthLimit": {"type": "integer", "minimum": 0},
    "labelValueLengthLimit": {"type": "integer", "minimum": 0},
    "keepDroppedTargets": {"type": "integer", "minimum": 0},
    "scrapeClass": {"type": "string"},
    "scrapeProtocols": {"type": "array", "items": {"type": "string"}},
    "attachMetadata": {"type": "object"},
}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 253},
        "namespace": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def _monitor_schema(kind: str, endpoints_key: str, extra_endpoint: dict, extra_spec: dict) -> dict:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", endpoints_key],
                "properties": {
                    **_SPEC_COMMON,
                    **extra_spec,
                    endpoints_key: {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {**_ENDPOINT_COMMON, **extra_endpoint},
                        },
                    },
                },
            },
        },
    }


MONITOR_SCHEMAS = {
    "ServiceMonitor": _monitor_schema(
        "ServiceMonitor", "endpoints", {"bearerTokenFile": {"type": "string"}},
        {"targetLabels": {"type": "array", "items": {"type": "string"}}},
    ),
    "PodMonitor": _monitor_schema("PodMonitor", "podMetricsEndpoints", {"portNumber": {"type": "integer"}}, {}),
}


def validate_objects(objects: list[tuple[str, dict]], label: str) -> None:
    counts = Counter()
    for template, obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')} ({template})"
        if obj.get("apiVersion", "").startswith("monitoring.coreos.com/"):
            schema = MONITOR_SCHEMAS.get(obj.get("kind"))
            if schema is None:
                fail(f"{label}: {name}: no schema for this Prometheus Operator kind")
                continue
            errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.path))
            for e in errors:
                fail(f"{label}: {name}: {'.'.join(map(str, e.path)) or '(root)'}: {e.message}")
            counts["own schema"] += 1
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            counts["kubernetes-validate"] += 1
        except kubernetes_validate.ValidationError as e:
            fail(f"{label}: {name}: {'.'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            fail(f"{label}: {name}: kubernetes-validate has no schema: {e}")
    note = ""
    if counts["own schema"]:
        note = (f"; {counts['own schema']} Prometheus Operator objects against the chart check's own "
                "monitoring.coreos.com/v1 schema (kubernetes-validate has none for CRD kinds)")
    ok(f"{label}: {counts['kubernetes-validate']} objects valid for Kubernetes {K8S_VERSION} "
       f"(kubernetes-validate --strict){note}")


# ---------------------------------------------------------------------------------------------------------------
# What the karpenter chart promises

# settings.<key> (or a top-level value) -> the environment variable upstream Karpenter reads.
SETTING_ENV = {
    "clusterName": "CLUSTER_NAME",
    "clusterEndpoint": "CLUSTER_ENDPOINT",
    "interruptionQueue": "INTERRUPTION_QUEUE",
    "batchMaxDuration": "BATCH_MAX_DURATION",
    "batchIdleDuration": "BATCH_IDLE_DURATION",
    "preferencePolicy": "PREFERENCE_POLICY",
    "minValuesPolicy": "MIN_VALUES_POLICY",
    "vmMemoryOverheadPercent": "VM_MEMORY_OVERHEAD_PERCENT",
    "reservedENIs": "RESERVED_ENIS",
    "isolatedVPC": "ISOLATED_VPC",
    "disableDryRun": "DISABLE_DRY_RUN",
    "amiRefreshInterval": "AMI_REFRESH_INTERVAL",
    "subnetRefreshInterval": "SUBNET_REFRESH_INTERVAL",
    "ignoreDRARequests": "IGNORE_DRA_REQUESTS",
    "disableClusterStateObservability": "DISABLE_CLUSTER_STATE_OBSERVABILITY",
    "disableLeaderElection": "DISABLE_LEADER_ELECTION",
    "leaderElectionName": "LEADER_ELECTION_NAME",
    "kubeClientQPS": "KUBE_CLIENT_QPS",
    "kubeClientBurst": "KUBE_CLIENT_BURST",
    "clusterCABundle": "CLUSTER_CA_BUNDLE",
}
# Upstream's settings the values accept but the controller does not read: no variable may be set for them.
UNREAD_SETTING_ENV = {
    "eksControlPlane": "EKS_CONTROL_PLANE",
    "enableZonalShift": "ENABLE_ZONAL_SHIFT",
    "enableProfiling": "ENABLE_PROFILING",
    "logOutputPaths": "LOG_OUTPUT_PATHS",
    "logErrorOutputPaths": "LOG_ERROR_OUTPUT_PATHS",
    "securityGroupRefreshInterval": "SECURITY_GROUP_REFRESH_INTERVAL",
    "awsFeatureGates": "AWS_FEATURE_GATES",
}
FEATURE_GATES = {
    "reservedCapacity": "ReservedCapacity",
    "spotToSpotConsolidation": "SpotToSpotConsolidation",
    "nodeRepair": "NodeRepair",
    "nodeOverlay": "NodeOverlay",
    "staticCapacity": "StaticCapacity",
    "capacityBuffer": "CapacityBuffer",
}
ALWAYS_SET_ENV = {"SYSTEM_NAMESPACE", "LEADER_ELECTION_NAMESPACE", "POD_NAME", "MEMORY_LIMIT", "CPU_REQUESTS",
                  "METRICS_PORT", "HEALTH_PROBE_PORT", "LOG_LEVEL", "FEATURE_GATES"}
# docs/reference/settings.md, generated by `cargo xtask docs` from the controller's flag definitions (CI checks it
# is up to date): every environment variable the controller reads.
SETTINGS_REFERENCE = ROOT / "docs" / "reference" / "settings.md"


def known_settings() -> set[str]:
    """The environment variables of the flags of `karpenter controller`, from the settings reference."""
    return set(re.findall(r"^\| `--[a-z0-9-]+` \| `([A-Z0-9_]+)` \|", SETTINGS_REFERENCE.read_text(), re.M))


def env_string(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def expect(condition: bool, message: str, problems: list[str]) -> None:
    if not condition:
        problems.append(message)


def check_karpenter(objects: list[tuple[str, dict]], values: dict, label: str) -> None:
    problems: list[str] = []
    merged = helm.Chart.load(str(CHART))
    try:
        v = merged.merge_values(values)
    finally:
        merged.close()
    by_kind: dict[str, list[dict]] = {}
    for _, obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)

    deployments = by_kind.get("Deployment", [])
    expect(len(deployments) == 1, f"one Deployment, found {len(deployments)}", problems)
    if deployments:
        dep = deployments[0]
        spec = dep["spec"]
        pod = spec["template"]["spec"]
        expect(spec["replicas"] == v["replicas"], "replicas", problems)
        expect(pod.get("priorityClassName") == v["priorityClassName"], "priorityClassName", problems)
        expect(pod.get("serviceAccountName"), "serviceAccountName", problems)
        psc = pod.get("securityContext", {})
        expect(psc.get("runAsNonRoot") is True and psc.get("runAsUser") == 65532 and psc.get("runAsGroup") == 65532
               and psc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
               "pod securityContext is not hardened (non-root 65532, seccomp RuntimeDefault)", problems)
        expect(pod.get("schedulerName") == (v.get("schedulerName") or None),
               f"schedulerName {pod.get('schedulerName')!r}, want {v.get('schedulerName')!r}", problems)
        init = v.get("initContainers")
        expect(pod.get("initContainers") == (init if isinstance(init, list) and init else None),
               f"initContainers {pod.get('initContainers')!r}, want {init!r}", problems)
        name = v["controller"].get("containerName") or "controller"
        controller = next((c for c in pod["containers"] if c["name"] == name), None)
        expect(controller is not None, f"no container named {name} (controller.containerName)", problems)
        expect(pod["containers"][0]["name"] == name, "the controller is not the first container", problems)
        if controller:
            sc = controller.get("securityContext", {})
            profiles = v["controller"].get("securityContext") or {}
            expect(sc.get("runAsNonRoot") is True and sc.get("runAsUser") == 65532 and sc.get("runAsGroup") == 65532
                   and sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False
                   and sc.get("capabilities", {}).get("drop") == ["ALL"],
                   "container securityContext is not hardened", problems)
            expect(sc.get("seccompProfile") == (profiles.get("seccompProfile") or {"type": "RuntimeDefault"}),
                   f"container seccompProfile {sc.get('seccompProfile')}, want controller.securityContext's or "
                   "RuntimeDefault", problems)
            for key in ("appArmorProfile", "seLinuxOptions"):
                expect(sc.get(key) == (profiles.get(key) or None),
                       f"container {key} {sc.get(key)}, want controller.securityContext.{key}", problems)
            expect(controller.get("args") == ["controller", "--cloud-provider", v["cloudProvider"]],
                   f"args {controller.get('args')}", problems)
            env = {e["name"]: e for e in controller.get("env", [])}
            missing = ALWAYS_SET_ENV - env.keys()
            expect(not missing, f"env vars missing: {sorted(missing)}", problems)
            for var in ("MEMORY_LIMIT", "CPU_REQUESTS"):
                ref = env.get(var, {}).get("valueFrom", {}).get("resourceFieldRef", {})
                expect(ref.get("containerName") == name, f"{var} reads the resources of container "
                       f"{ref.get('containerName')!r}, not the controller's {name!r}", problems)
            known = known_settings()
            expect(len(known) > 20, f"{SETTINGS_REFERENCE.relative_to(ROOT)} lists only {len(known)} variables",
                   problems)
            own = {e["name"] for e in v["controller"]["env"]}
            unknown = sorted(set(env) - known - own)
            expect(not unknown, f"env vars the controller does not read (not in "
                   f"{SETTINGS_REFERENCE.relative_to(ROOT)}): {unknown}", problems)
            for key, name in UNREAD_SETTING_ENV.items():
                expect(name not in env, f"{name} set, but the controller does not read it ({key})", problems)
            for key, name in SETTING_ENV.items():
                want = v["settings"][key]
                if want in ("", None):
                    expect(name not in env, f"{name} set although settings.{key} is empty", problems)
                    continue
                got = env.get(name, {}).get("value")
                expect(got == env_string(want), f"{name}={got!r}, want {env_string(want)!r} (settings.{key})",
                       problems)
            gates = ",".join(f"{gate}={env_string(v['settings']['featureGates'][key])}"
                             for key, gate in FEATURE_GATES.items())
            expect(env.get("FEATURE_GATES", {}).get("value") == gates,
                   f"FEATURE_GATES={env.get('FEATURE_GATES', {}).get('value')!r}, want {gates!r}", problems)
            expect(env.get("LOG_LEVEL", {}).get("value") == v["logLevel"], "LOG_LEVEL", problems)
            expect(env.get("METRICS_PORT", {}).get("value") == str(v["controller"]["metrics"]["port"]),
                   "METRICS_PORT", problems)
            expect(env.get("HEALTH_PROBE_PORT", {}).get("value") == str(v["controller"]["healthProbe"]["port"]),
                   "HEALTH_PROBE_PORT", problems)
            ports = {p["name"]: p["containerPort"] for p in controller.get("ports", [])}
            expect(ports.get("http-metrics") == v["controller"]["metrics"]["port"], "metrics port", problems)
            expect(ports.get("http") == v["controller"]["healthProbe"]["port"], "health port", problems)
            for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                get = controller.get(probe, {}).get("httpGet", {})
                expect(get.get("path") == path and get.get("port") == "http", f"{probe} on {path}:http", problems)
        terms = (pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
                 .get("nodeSelectorTerms", []))
        expect(terms and all({"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"} in t.get("matchExpressions", [])
                             for t in terms),
               "node affinity does not keep the controller off Karpenter's nodes (karpenter.sh/nodepool DoesNotExist)",
               problems)
        expect(any(c.get("topologyKey") == "topology.kubernetes.io/zone" and c.get("labelSelector")
                   for c in pod.get("topologySpreadConstraints", [])), "no zone topology spread", problems)

    pdbs = by_kind.get("PodDisruptionBudget", [])
    expect(len(pdbs) == 1 and pdbs[0]["spec"].get("maxUnavailable") == v["podDisruptionBudget"]["maxUnavailable"],
           "PodDisruptionBudget maxUnavailable", problems)
    services = by_kind.get("Service", [])
    expect(len(services) == 1, "one Service", problems)
    if services:
        annotations = services[0]["metadata"].get("annotations") or {}
        want = {**(v.get("additionalAnnotations") or {}), **((v.get("service") or {}).get("annotations") or {})}
        expect(annotations == want, f"Service annotations {annotations}, want additionalAnnotations with "
               f"service.annotations over them: {want}", problems)
    sas = by_kind.get("ServiceAccount", [])
    expect(len(sas) == 1, "one ServiceAccount", problems)
    if sas:
        annotations = sas[0]["metadata"].get("annotations", {})
        for key, value in v["serviceAccount"]["annotations"].items():
            expect(annotations.get(key) == value, f"ServiceAccount annotation {key}", problems)
    roles = by_kind.get("Role", [])
    lease_role = [r for r in roles if r["metadata"]["namespace"] == NAMESPACE
                  and any("leases" in rule.get("resources", []) for rule in r["rules"])]
    expect(len(lease_role) == 1, "a Role for leases in the release namespace", problems)
    if lease_role:
        verbs = {verb for rule in lease_role[0]["rules"] if "leases" in rule["resources"] for verb in rule["verbs"]}
        expect(verbs == {"get", "create", "update"}, f"lease verbs {sorted(verbs)}", problems)
        named = [rule for rule in lease_role[0]["rules"] if rule.get("resourceNames")]
        expect(all(rule["resourceNames"] == [v["settings"]["leaderElectionName"]] for rule in named),
               "lease resourceNames match settings.leaderElectionName", problems)
    aggregate = [r for r in by_kind.get("ClusterRole", [])
                 if r["metadata"].get("labels", {}).get("rbac.authorization.k8s.io/aggregate-to-admin") == "true"]
    expect(len(aggregate) == 1, "one ClusterRole aggregated to admin", problems)

    monitors = {k: len(by_kind.get(k, [])) for k in ("ServiceMonitor", "PodMonitor")}
    expect(monitors["ServiceMonitor"] == int(v["serviceMonitor"]["enabled"]), "ServiceMonitor follows its switch",
           problems)
    expect(monitors["PodMonitor"] == int(v["podMonitor"]["enabled"]), "PodMonitor follows its switch", problems)
    dashboards = [cm for cm in by_kind.get("ConfigMap", []) if cm["metadata"].get("labels", {}).get("grafana_dashboard")]
    expect(bool(dashboards) == v["dashboards"]["enabled"], "dashboard ConfigMaps follow dashboards.enabled", problems)
    for cm in dashboards:
        expect(cm["metadata"]["labels"].get("grafana_dashboard") == "1", "dashboard label grafana_dashboard: \"1\"",
               problems)
        for key, text in cm.get("data", {}).items():
            try:
                json.loads(text)
            except ValueError as e:
                problems.append(f"dashboard ConfigMap {key} is not JSON: {e}")

    for p in problems:
        fail(f"karpenter ({label}): {p}")
    if not problems:
        ok(f"karpenter ({label}): hardened pod, settings on upstream's env var names, ports, probes, RBAC, "
           "monitors and dashboards as configured")


def check_rbac_files(objects: list[tuple[str, dict]]) -> None:
    """One Role or ClusterRole per template file; the controller's roles take their rules from charts/karpenter/rbac/,
    which tests/tests/rbac.rs compares with the calls the controller makes."""
    per_file = Counter(t for t, obj in objects if obj["kind"] in ("Role", "ClusterRole"))
    crowded = {t: n for t, n in per_file.items() if n > 1}
    if crowded:
        fail(f"RBAC templates holding more than one role: {crowded}")
    else:
        ok(f"RBAC: {len(per_file)} template files, one role each ({', '.join(sorted(Path(t).name for t in per_file))})")
    for template in per_file:
        name = Path(template).name
        source = (CHART / "templates" / name).read_text()
        if name in RBAC_SOURCES:
            if f'.Files.Get "rbac/{RBAC_SOURCES[name]}"' not in source:
                fail(f"{template}: its rules are not included from rbac/{RBAC_SOURCES[name]}")
        elif "API calls made" not in source:
            fail(f"{template}: the comment saying why this role is not compared against the controller's calls "
                 "is missing")


# The rules of each role the controller is bound to, in charts/karpenter/rbac/ (tests/tests/rbac.rs reads the same
# files): template file -> rules file.
RBAC_SOURCES = {
    "clusterrole-core.yaml": "clusterrole-core.yaml",
    "clusterrole-aws.yaml": "clusterrole-aws.yaml",
    "role.yaml": "role.yaml",
    "role-dns.yaml": "role-dns.yaml",
}


def check_rbac_sources(objects: list[tuple[str, dict]], values: dict, label: str) -> None:
    """The rendered roles hold exactly the rules of their file in charts/karpenter/rbac/ (plus
    additionalClusterRoleRules on the core role; the Lease's name from settings.leaderElectionName)."""
    merged = helm.Chart.load(str(CHART))
    try:
        v = merged.merge_values(values)
    finally:
        merged.close()
    rendered = {Path(t).name: obj for t, obj in objects if obj["kind"] in ("Role", "ClusterRole")}
    problems = []
    for template, source in RBAC_SOURCES.items():
        rules = yaml.safe_load((CHART / "rbac" / source).read_text())
        if not isinstance(rules, list):
            problems.append(f"rbac/{source} is not a list of rules")
            continue
        want = copy.deepcopy(rules)
        for rule in want:
            if template == "role.yaml" and rule.get("resourceNames"):
                rule["resourceNames"] = [v["settings"]["leaderElectionName"]]
        if template == "clusterrole-core.yaml":
            want += v.get("additionalClusterRoleRules") or []
        got = rendered.get(template, {}).get("rules")
        if got != want:
            problems.append(f"templates/{template} renders rules {got}, want rbac/{source}'s {want}")
    unused = sorted(p.name for p in (CHART / "rbac").glob("*.yaml") if p.name not in RBAC_SOURCES.values())
    if unused:
        problems.append(f"rules files no template includes: {unused}")
    for p in problems:
        fail(f"karpenter ({label}): {p}")
    if not problems:
        ok(f"karpenter ({label}): the roles render exactly the rules of charts/karpenter/rbac/ "
           f"({', '.join(sorted(RBAC_SOURCES.values()))})")


def check_invalid_values() -> None:
    files = sorted(INVALID_VALUES.glob("*.yaml"))
    if not files:
        fail(f"no invalid values files in {INVALID_VALUES}")
    with helm.Chart.load(str(CHART)) as chart:
        for path in files:
            text = path.read_text()
            m = re.search(r"^# expect: (.+)$", text, re.M)
            if not m:
                fail(f"{path.name}: no '# expect: <text the error must contain>' line")
                continue
            try:
                chart.render(yaml.safe_load(text), name=RELEASE, namespace=NAMESPACE)
                fail(f"{path.relative_to(ROOT)}: rendered, but values.schema.json should reject it")
            except helm.HelmValuesError as e:
                if m.group(1) in str(e):
                    ok(f"{path.name} rejected: {' '.join(str(e).split())[-110:]}")
                else:
                    fail(f"{path.name}: rejected, but the message does not mention {m.group(1)!r}: {e}")


# Every key of upstream Karpenter v1.14.1's chart values (aws/karpenter-provider-aws charts/karpenter/values.yaml,
# as its helm-docs README of chart version 1.14.1 lists them): charts/karpenter/ci/upstream-v1.14.1-values.yaml
# must set each, so that rendering it proves the schema accepts and the templates take all of upstream's keys.
UPSTREAM_VALUE_KEYS = [
    "additionalAnnotations", "additionalClusterRoleRules", "additionalLabels", "affinity",
    "controller.containerName", "controller.env", "controller.envFrom", "controller.extraVolumeMounts",
    "controller.healthProbe.port", "controller.image.digest", "controller.image.repository",
    "controller.image.tag", "controller.metrics.port", "controller.resources",
    "controller.securityContext.appArmorProfile", "controller.securityContext.seLinuxOptions",
    "controller.securityContext.seccompProfile", "controller.sidecarContainer", "controller.sidecarVolumeMounts",
    "dnsConfig", "dnsPolicy", "extraVolumes", "fullnameOverride", "hostNetwork", "imagePullPolicy",
    "imagePullSecrets", "initContainers", "logErrorOutputPaths", "logLevel", "logOutputPaths", "nameOverride",
    "nodeSelector", "podAnnotations", "podDisruptionBudget.maxUnavailable", "podDisruptionBudget.name",
    "podLabels", "podSecurityContext", "priorityClassName", "replicas", "revisionHistoryLimit", "schedulerName",
    "service.annotations", "serviceAccount.annotations", "serviceAccount.create", "serviceAccount.name",
    "serviceMonitor.additionalLabels", "serviceMonitor.enabled", "serviceMonitor.endpointConfig",
    "serviceMonitor.metricRelabelings", "serviceMonitor.relabelings", "serviceMonitor.sampleLimit",
    "settings.amiRefreshInterval", "settings.awsFeatureGates.nodeClassCEL", "settings.batchIdleDuration",
    "settings.batchMaxDuration", "settings.clusterCABundle", "settings.clusterEndpoint", "settings.clusterName",
    "settings.disableClusterStateObservability", "settings.disableDryRun", "settings.eksControlPlane",
    "settings.enableZonalShift", "settings.featureGates.capacityBuffer", "settings.featureGates.nodeOverlay",
    "settings.featureGates.nodeRepair", "settings.featureGates.podDeletionCostManagement",
    "settings.featureGates.reservedCapacity", "settings.featureGates.spotToSpotConsolidation",
    "settings.featureGates.staticCapacity", "settings.ignoreDRARequests", "settings.interruptionQueue",
    "settings.isolatedVPC", "settings.minValuesPolicy", "settings.preferencePolicy", "settings.reservedENIs",
    "settings.securityGroupRefreshInterval", "settings.subnetRefreshInterval", "settings.vmMemoryOverheadPercent",
    "strategy", "terminationGracePeriodSeconds", "tolerations", "topologySpreadConstraints",
]


def check_upstream_keys(values: dict) -> None:
    missing = []
    for key in UPSTREAM_VALUE_KEYS:
        node = values
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                missing.append(key)
                break
            node = node[part]
    if missing:
        fail(f"{UPSTREAM_LABEL} does not set upstream's keys {missing}")
    else:
        ok(f"{UPSTREAM_LABEL} sets all {len(UPSTREAM_VALUE_KEYS)} keys of upstream v1.14.1's chart values")


# Values a render cannot do without: (values with the key removed, the text the failure must contain).
REQUIRED_VALUES = {
    "settings.clusterName": "settings.clusterName is required",
    "controller.image.repository": "controller.image.repository is required",
}


def check_required_values() -> None:
    for key, message in REQUIRED_VALUES.items():
        values = copy.deepcopy(MINIMAL_VALUES)
        *parents, leaf = key.split(".")
        node = values
        for part in parents:
            node = node[part]
        del node[leaf]
        try:
            render(CHART, values)
            fail(f"a render without {key} succeeded")
        except helm.HelmError as e:
            if message in str(e):
                ok(f"a render without {key} fails: {message}")
            else:
                fail(f"a render without {key} failed without naming it: {e}")


def check_monitor_gating(values: dict, label: str) -> None:
    """With serviceMonitor and podMonitor enabled, the monitors are rendered only where the cluster serves
    monitoring.coreos.com/v1: an install into a cluster without the Prometheus Operator's CRDs must not fail."""
    kinds = {"ServiceMonitor", "PodMonitor"}
    without = sorted(obj["kind"] for _, obj in render(CHART, copy.deepcopy(values)) if obj["kind"] in kinds)
    served = sorted(obj["kind"] for _, obj in render(CHART, copy.deepcopy(values), [MONITORING_API])
                    if obj["kind"] in kinds)
    if without:
        fail(f"karpenter ({label}): {without} rendered although the cluster does not serve {MONITORING_API}")
    if served != sorted(kinds):
        fail(f"karpenter ({label}): {served} rendered where the cluster serves {MONITORING_API}, want "
             f"{sorted(kinds)}")
    if not without and served == sorted(kinds):
        ok(f"karpenter ({label}): ServiceMonitor and PodMonitor rendered where {MONITORING_API} is served, "
           "left out where it is not")


# The karpenter-crd chart rendered with annotations: every CRD must carry them (upstream's karpenter-crd chart has the
# same value), and a render with the defaults must carry none.
CRD_ANNOTATIONS_VALUES = {"additionalAnnotations": {"argocd.argoproj.io/sync-options": "ServerSideApply=true",
                                                    "example.com/owner": "platform"}}


def check_crd_annotations(defaults: list[tuple[str, dict]], annotated: list[tuple[str, dict]]) -> None:
    problems = []
    want = CRD_ANNOTATIONS_VALUES["additionalAnnotations"]
    if not defaults or len(defaults) != len(annotated):
        problems.append(f"{len(defaults)} CRDs with the defaults, {len(annotated)} with additionalAnnotations")
    for _, crd in defaults:
        if crd["metadata"].get("annotations"):
            problems.append(f"{crd['metadata']['name']}: annotations {crd['metadata']['annotations']} with the "
                            "defaults")
    for _, crd in annotated:
        got = crd["metadata"].get("annotations")
        if got != want:
            problems.append(f"{crd['metadata']['name']}: annotations {got}, want additionalAnnotations {want}")
    for p in problems:
        fail(f"karpenter-crd: {p}")
    if not problems:
        ok(f"karpenter-crd: additionalAnnotations on all {len(annotated)} CRDs, none by default")


# ---------------------------------------------------------------------------------------------------------------
# Values as Helm users pass them: strings (--set-string, quoted values), unknown feature gates, a ServiceAccount
# that is not created


def _boolean_or_number(schema: dict) -> bool:
    """Whether a schema node types a boolean or a number (an integer, or a number that is not also a string such as
    a resource quantity), alone or as one alternative of oneOf."""
    def types(node: dict) -> set[str]:
        t = node.get("type", [])
        return {t} if isinstance(t, str) else set(t)
    return any(t & {"boolean", "integer"} or ("number" in t and "string" not in t)
               for t in [types(schema)] + [types(alt) for alt in schema.get("oneOf", [])])


def stringify(values, schema: dict, path: str = "") -> tuple[object, list[str]]:
    """values with every boolean and number the schema types as one turned into a string, as `--set-string
    key=value` or a quoted value gives it; returns the new values and the keys turned. Objects the schema leaves
    free-form (Kubernetes objects passed through) are left alone."""
    if isinstance(values, dict) and ("properties" in schema or isinstance(schema.get("additionalProperties"), dict)):
        out, turned = {}, []
        for key, value in values.items():
            sub = schema.get("properties", {}).get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is None:
                out[key] = value
                continue
            out[key], more = stringify(value, sub, f"{path}.{key}".lstrip("."))
            turned += more
        return out, turned
    if _boolean_or_number(schema) and isinstance(values, (bool, int, float)):
        return (("true" if values else "false") if isinstance(values, bool) else str(values)), [path]
    return values, []


# A feature gate the chart does not know: accepted (upstream's chart ignores gates it does not read) and left out of
# FEATURE_GATES.
UNKNOWN_GATE = {"someFutureGate": "true"}


def check_string_values(runs: list[tuple[str, dict]], rendered: dict) -> None:
    """Each run's values (the chart's defaults merged with it) with every boolean and integer given as a string, plus
    an unknown feature gate, must pass the schema and render exactly the objects the typed values render."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    for label, values in runs:
        typed = rendered.get(f"karpenter, {label}")
        if typed is None:
            continue
        with helm.Chart.load(str(CHART)) as chart:
            merged = chart.merge_values(copy.deepcopy(values))
        strings, turned = stringify(merged, schema)
        strings["settings"]["featureGates"].update(UNKNOWN_GATE)
        try:
            objects = render(CHART, strings, [MONITORING_API])
        except helm.HelmError as e:
            fail(f"karpenter ({label}) with {len(turned)} booleans and integers as strings and an unknown feature "
                 f"gate: {' '.join(str(e).split())[:400]}")
            continue
        if len(turned) < 20:
            fail(f"karpenter ({label}): only {len(turned)} values given as strings: {turned}")
        differ = [f"{t} {o.get('kind')}/{o['metadata'].get('name')}" for (t, o), (_, p) in zip(objects, typed)
                  if o != p]
        if len(objects) != len(typed) or differ:
            fail(f"karpenter ({label}): the values as strings render otherwise than typed: "
                 f"{len(objects)} objects against {len(typed)}; differing: {differ}")
        else:
            ok(f"karpenter ({label}): {len(turned)} booleans and integers given as strings (serviceAccount.create, "
               f"replicas, settings.featureGates.*, ...) and an unknown feature gate render the same "
               f"{len(objects)} objects")


def check_service_account_fallback() -> None:
    """serviceAccount.create false: the controller runs as serviceAccount.name, or without a name as the namespace's
    "default" ServiceAccount, as upstream's chart's serviceAccountName helper returns; nothing is created and the
    roles are bound to it."""
    cases = [(False, "", "default"), ("false", "", "default"), (False, "karpenter-existing", "karpenter-existing")]
    for create, name, want in cases:
        values = copy.deepcopy(MINIMAL_VALUES)
        values["serviceAccount"] = {"create": create, "name": name}
        label = f"serviceAccount.create={create!r}, name={name!r}"
        try:
            objects = render(CHART, values)
        except helm.HelmError as e:
            fail(f"karpenter ({label}): {' '.join(str(e).split())[:300]}")
            continue
        problems = []
        kinds = [o["kind"] for _, o in objects]
        if "ServiceAccount" in kinds:
            problems.append("a ServiceAccount is rendered")
        pods = [o["spec"]["template"]["spec"] for _, o in objects if o["kind"] == "Deployment"]
        got = pods[0].get("serviceAccountName") if pods else None
        if got != want:
            problems.append(f"the pod runs as {got!r}, want {want!r}")
        subjects = [s for _, o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
                    for s in o.get("subjects", [])]
        if not subjects or any(s.get("name") != want or s.get("namespace") != NAMESPACE for s in subjects):
            problems.append(f"bindings' subjects {subjects}, want ServiceAccount {NAMESPACE}/{want}")
        for p in problems:
            fail(f"karpenter ({label}): {p}")
        if not problems:
            ok(f"karpenter ({label}): no ServiceAccount rendered; the pod runs as {want!r} and "
               f"{len(subjects)} bindings name it")


# ---------------------------------------------------------------------------------------------------------------
# docs/getting-started.md and the config/ examples it uses

GETTING_STARTED = ROOT / "docs" / "getting-started.md"
DOCS_WITH_PATHS = [GETTING_STARTED, ROOT / "docs" / "troubleshooting.md"]
CATALOG = ROOT / "crates" / "karpenter-aws-catalog" / "data" / "aws-catalog.json"


def check_doc_paths() -> None:
    """Every repository path the docs name (a word with a slash whose first part is a top-level entry of the
    repository, such as deploy/cloudformation.yaml or .ci/check-charts.py) exists."""
    top = {p.name for p in ROOT.iterdir() if p.name != "target"}
    for doc in DOCS_WITH_PATHS:
        paths = sorted({m.rstrip(".,:;") for m in re.findall(r"(?<![\w./$-])(\.?[\w-]+(?:/[\w.-]+)+)", doc.read_text())
                        if m.split("/", 1)[0] in top})
        missing = [p for p in paths if not (ROOT / p).exists()]
        for p in missing:
            fail(f"{doc.relative_to(ROOT)} names {p}, which does not exist")
        if not paths:
            fail(f"{doc.relative_to(ROOT)}: no repository paths found (the check's pattern is wrong)")
        elif not missing:
            ok(f"{doc.relative_to(ROOT)}: the {len(paths)} repository paths it names exist")


def _config_objects() -> list[tuple[str, dict]]:
    return [(p.name, doc) for p in sorted((ROOT / "config").glob("*.yaml"))
            for doc in yaml.safe_load_all(p.read_text()) if doc]


def check_walkthrough_budgets() -> None:
    """The NodePools getting-started applies let empty nodes go at any hour: step 8 scales the workload to zero and
    watches the nodes leave. No budget of zero nodes may cover Empty (a budget without reasons covers it), and
    consolidateAfter is not Never."""
    applied = re.findall(r"kubectl apply -f (config/[\w.-]+\.yaml)", GETTING_STARTED.read_text())
    pools = [(f, yaml.safe_load((ROOT / f).read_text())) for f in applied]
    pools = [(f, p) for f, p in pools if p.get("kind") == "NodePool"]
    if not pools:
        fail(f"{GETTING_STARTED.relative_to(ROOT)} applies no NodePool from config/ (the check's pattern is wrong?)")
    for f, pool in pools:
        problems = []
        disruption = pool["spec"].get("disruption", {})
        if disruption.get("consolidateAfter") == "Never":
            problems.append("consolidateAfter: Never keeps empty nodes")
        for budget in disruption.get("budgets", []):
            reasons = budget.get("reasons")
            if str(budget.get("nodes")).rstrip("%") == "0" and (not reasons or "Empty" in reasons):
                when = (f"on schedule {budget['schedule']!r} for {budget.get('duration')}" if "schedule" in budget
                        else "always")
                problems.append(f"budget {budget} disrupts no empty node {when}, so the walkthrough's nodes may "
                                "not go away")
        for p in problems:
            fail(f"{f} (applied by {GETTING_STARTED.relative_to(ROOT)}): {p}")
        if not problems:
            ok(f"{f}: no budget keeps empty nodes ({len(disruption.get('budgets', []))} budgets), consolidateAfter "
               f"{disruption.get('consolidateAfter')}")


def _requirement_holds(itype: dict, req: dict) -> bool:
    """A NodePool requirement on an instance type of the catalog; keys the catalog has no value for (os, zone)
    hold."""
    key = req["key"]
    if key.startswith("karpenter.k8s.aws/instance-"):
        label = itype["labels"].get(key.removeprefix("karpenter.k8s.aws/instance-"))
        have = None if label is None else [label]
    elif key == "kubernetes.io/arch":
        have = [itype["arch"]]
    elif key == "karpenter.sh/capacity-type":
        have = itype["capacityTypes"]
    elif key == "node.kubernetes.io/instance-type":
        have = [itype["name"]]
    else:
        return True
    op, want = req["operator"], req.get("values", [])
    if op == "In":
        return have is not None and any(v in want for v in have)
    if op == "NotIn":
        return have is None or not any(v in want for v in have)
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if have is None:
        return False
    x, n = int(have[0]), int(want[0])
    return {"Gt": x > n, "Lt": x < n, "Gte": x >= n, "Lte": x <= n}[op]


def check_example_max_pods() -> None:
    """No example EC2NodeClass gives a node more pods than the VPC CNI can address on any instance type a NodePool
    of config/ that uses it allows: ENIs * (IPv4 addresses per ENI - 1) + 2 (no prefix delegation), from
    crates/karpenter-aws-catalog's catalog. A node's pods are kubelet.maxPods (that limit when unset), lowered to
    podsPerCore * vCPUs when podsPerCore is set, as Karpenter computes them."""
    catalog = json.loads(CATALOG.read_text())["instanceTypes"]
    objects = _config_objects()
    classes = [(f, o) for f, o in objects if o.get("kind") == "EC2NodeClass"]
    pools = [(f, o) for f, o in objects if o.get("kind") == "NodePool"]
    checked = 0
    for cf, nodeclass in classes:
        kubelet = nodeclass["spec"].get("kubelet") or {}
        max_pods, per_core = kubelet.get("maxPods"), kubelet.get("podsPerCore")
        users = [(pf, p) for pf, p in pools
                 if p["spec"]["template"]["spec"]["nodeClassRef"]["name"] == nodeclass["metadata"]["name"]]
        for pf, pool in users:
            reqs = pool["spec"]["template"]["spec"].get("requirements", [])
            types = [t for t in catalog if all(_requirement_holds(t, r) for r in reqs)]
            if not types:
                fail(f"{pf}: its requirements allow no instance type of {CATALOG.relative_to(ROOT)}")
            over = []
            for t in types:
                limit = t["maxEnis"] * (t["ipv4PerEni"] - 1) + 2
                pods = limit if max_pods is None else max_pods
                if per_core:
                    pods = min(pods, per_core * t["vcpu"])
                if pods > limit:
                    over.append(f"{t['name']} {pods} > {limit}")
            checked += len(types)
            if over:
                fail(f"{cf}: kubelet maxPods {max_pods}, podsPerCore {per_core} give more pods than the VPC CNI "
                     f"addresses on {len(over)} of the {len(types)} types {pf} allows: {', '.join(over[:6])}"
                     + (", ..." if len(over) > 6 else ""))
    if checked:
        ok(f"config/: no example EC2NodeClass gives more pods than the VPC CNI addresses ({checked} NodePool "
           "instance types checked)")


# ---------------------------------------------------------------------------------------------------------------
# The Grafana dashboard: metric and label names from upstream Karpenter v1.14.1
# (shared/reference/upstream-features.md section 4).

_NODE_LABELS = {"nodepool", "zone", "region", "instance_type", "arch", "os", "capacity_type", "windows_build",
                "node_name", "phase", "managed"}
METRICS: dict[str, tuple[str, set[str]]] = {
    "karpenter_build_info": ("gauge", {"version", "goversion", "goarch", "commit"}),
    "karpenter_nodeclaims_created_total": ("counter", {"reason", "nodepool", "min_values_relaxed"}),
    "karpenter_nodeclaims_terminated_total": ("counter", {"nodepool", "capacity_type", "zone"}),
    "karpenter_nodeclaims_disrupted_total": ("counter", {"reason", "nodepool", "capacity_type"}),
    "karpenter_nodes_created_total": ("counter", {"nodepool", "zone"}),
    "karpenter_nodes_terminated_total": ("counter", {"nodepool", "zone"}),
    "karpenter_nodeclaims_unhealthy_disrupted_total": ("counter", {"condition", "nodepool", "capacity_type", "image_id"}),
    "karpenter_nodeclaims_instance_termination_duration_seconds": ("histogram", {"nodepool"}),
    "karpenter_nodeclaims_termination_duration_seconds": ("histogram", {"nodepool"}),
    "karpenter_nodes_termination_duration_seconds": ("summary", {"nodepool"}),
    "karpenter_nodes_drained_total": ("counter", {"nodepool"}),
    "karpenter_nodes_lifetime_duration_seconds": ("histogram", {"nodepool"}),
    "karpenter_pods_eviction_requests_total": ("counter", {"code"}),
    "karpenter_pods_drained_total": ("counter", {"reason"}),
    "karpenter_cloudprovider_duration_seconds": ("histogram", {"controller", "method", "provider"}),
    "karpenter_cloudprovider_errors_total": ("counter", {"controller", "method", "provider", "error"}),
    "karpenter_voluntary_disruption_decision_evaluation_duration_seconds": ("histogram", {"reason", "consolidation_type"}),
    "karpenter_voluntary_disruption_decisions_total": ("counter", {"decision", "reason", "consolidation_type"}),
    "karpenter_voluntary_disruption_decisions_by_nodepool_total": ("counter", {"nodepool", "decision", "reason", "consolidation_type"}),
    "karpenter_voluntary_disruption_eligible_nodes": ("gauge", {"reason"}),
    "karpenter_voluntary_disruption_consolidation_timeouts_total": ("counter", {"consolidation_type"}),
    "karpenter_voluntary_disruption_failed_validations_total": ("counter", {"consolidation_type"}),
    "karpenter_voluntary_disruption_queue_failures_total": ("counter", {"decision", "reason", "consolidation_type"}),
    "karpenter_nodepools_allowed_disruptions": ("gauge", {"nodepool", "reason"}),
    "karpenter_nodepools_nodes_consuming_budgets": ("gauge", {"nodepool", "reason"}),
    "karpenter_consolidation_score": ("histogram", {"decision", "nodepool", "policy"}),
    "karpenter_consolidation_moves_total": ("counter", {"decision", "nodepool", "policy"}),
    "karpenter_nodes_allocatable": ("gauge", _NODE_LABELS | {"resource_type"}),
    "karpenter_nodes_total_pod_requests": ("gauge", _NODE_LABELS | {"resource_type"}),
    "karpenter_nodes_total_pod_limits": ("gauge", _NODE_LABELS | {"resource_type"}),
    "karpenter_nodes_total_daemon_requests": ("gauge", _NODE_LABELS | {"resource_type"}),
    "karpenter_nodes_total_daemon_limits": ("gauge", _NODE_LABELS | {"resource_type"}),
    "karpenter_nodes_system_overhead": ("gauge", _NODE_LABELS | {"resource_type"}),
    "karpenter_nodes_current_lifetime_seconds": ("gauge", _NODE_LABELS),
    "karpenter_cluster_utilization_percent": ("gauge", {"resource_type"}),
    "karpenter_nodepools_limit": ("gauge", {"resource_type", "nodepool"}),
    "karpenter_nodepools_usage": ("gauge", {"resource_type", "nodepool"}),
    "karpenter_nodepools_cost_total": ("gauge", {"nodepool"}),
    "karpenter_nodepools_cost_tracker_errors_total": ("counter", {"nodepool"}),
    "karpenter_pods_state": ("gauge", {"name", "namespace", "owner", "node", "scheduled", "nodepool", "zone", "arch",
                                       "capacity_type", "instance_type", "phase", "ready", "managed"}),
    "karpenter_pods_startup_duration_seconds": ("summary", set()),
    "karpenter_pods_unstarted_time_seconds": ("gauge", {"name", "namespace"}),
    "karpenter_pods_unbound_time_seconds": ("gauge", {"name", "namespace"}),
    "karpenter_pods_provisioning_unbound_time_seconds": ("gauge", {"name", "namespace"}),
    "karpenter_pods_provisioning_unstarted_time_seconds": ("gauge", {"name", "namespace"}),
    "karpenter_pods_provisioning_scheduling_undecided_time_seconds": ("gauge", {"name", "namespace"}),
    "karpenter_pods_bound_duration_seconds": ("histogram", set()),
    "karpenter_pods_provisioning_bound_duration_seconds": ("histogram", set()),
    "karpenter_pods_provisioning_startup_duration_seconds": ("histogram", set()),
    "karpenter_pods_scheduling_decision_duration_seconds": ("histogram", set()),
    "karpenter_cluster_state_node_count": ("gauge", set()),
    "karpenter_cluster_state_synced": ("gauge", set()),
    "karpenter_cluster_state_unsynced_time_seconds": ("gauge", set()),
    "karpenter_scheduler_scheduling_duration_seconds": ("histogram", {"controller"}),
    "karpenter_scheduler_queue_depth": ("gauge", {"controller", "scheduling_id"}),
    "karpenter_scheduler_unfinished_work_seconds": ("gauge", {"controller", "scheduling_id"}),
    "karpenter_scheduler_ignored_pods_count": ("gauge", set()),
    "karpenter_scheduler_unschedulable_pods_count": ("gauge", {"controller"}),
    "karpenter_scheduler_pending_pods_by_effective_zone_count": ("gauge", {"controller", "zone"}),
    "karpenter_cloudprovider_batcher_batch_time_seconds": ("histogram", {"batcher"}),
    "karpenter_cloudprovider_batcher_batch_size": ("histogram", {"batcher"}),
    "karpenter_interruption_received_messages_total": ("counter", {"message_type"}),
    "karpenter_interruption_deleted_messages_total": ("counter", set()),
    "karpenter_interruption_message_queue_duration_seconds": ("histogram", set()),
    "karpenter_interruption_instance_status_unhealthy_total": ("counter", {"category"}),
    "karpenter_cloudprovider_instance_type_offering_available": ("gauge", {"instance_type", "capacity_type", "zone"}),
    "karpenter_cloudprovider_instance_type_offering_price_estimate": ("gauge", {"instance_type", "capacity_type", "zone"}),
    "karpenter_cloudprovider_instance_launch_failures_total": ("counter", {"zone", "zone_id", "capacity_type", "reason"}),
    "karpenter_cloudprovider_instance_termination_failures_total": ("counter", {"zone", "zone_id"}),
    "karpenter_cloudprovider_instance_type_cpu_cores": ("gauge", {"instance_type"}),
    "karpenter_cloudprovider_instance_type_memory_bytes": ("gauge", {"instance_type"}),
    "karpenter_ec2nodeclasses_userdata_bytes": ("gauge", {"nodeclass"}),
}
_PROMQL_WORDS = {"by", "without", "sum", "count", "max", "min", "avg", "rate", "increase", "histogram_quantile",
                 "label_values", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                 "offset", "topk", "bottomk", "quantile", "stddev", "irate", "delta", "abs", "clamp_min"}


def resolve_metric(name: str) -> tuple[str, set[str]] | None:
    """The metric a series name belongs to, with the labels its series carry."""
    if name in METRICS:
        kind, labels = METRICS[name]
        return name, labels | ({"quantile"} if kind == "summary" else set())
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and base in METRICS and METRICS[base][0] in ("histogram", "summary"):
            return base, METRICS[base][1] | ({"le"} if suffix == "_bucket" else set())
    return None


def check_dashboards() -> None:
    files = sorted((CHART / "dashboards").glob("*.json"))
    if not files:
        fail("no dashboards in charts/karpenter/dashboards")
    for path in files:
        problems: list[str] = []
        try:
            dash = json.loads(path.read_text())
        except ValueError as e:
            fail(f"{path.name}: not JSON: {e}")
            continue
        panels = [p for p in dash.get("panels", []) if p.get("type") != "row"]
        ids = [p.get("id") for p in dash.get("panels", [])]
        expect(len(ids) == len(set(ids)), "panel ids are not unique", problems)
        used: set[str] = set()
        queries = [("templating", t.get("definition", ""), "") for t in dash.get("templating", {}).get("list", [])
                   if t.get("type") == "query"]
        for p in panels:
            expect(bool(p.get("targets")), f"panel {p.get('title')!r} has no queries", problems)
            for t in p.get("targets", []):
                queries.append((p.get("title"), t.get("expr", ""), t.get("legendFormat", "")))
        for title, expr, legend in queries:
            names = set(re.findall(r"\b(karpenter_[a-z0-9_]+)\b", expr))
            labels_known: set[str] = set()
            for name in names:
                resolved = resolve_metric(name)
                if resolved is None:
                    problems.append(f"{title!r}: {name} is not one of upstream Karpenter's metrics")
                else:
                    used.add(resolved[0])
                    labels_known |= resolved[1]
            expect(bool(names), f"{title!r}: no Karpenter metric in {expr!r}", problems)
            labels = set()
            for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
                labels |= {x.strip() for x in group.split(",") if x.strip()}
            for matchers in re.findall(r"\{([^}]*)\}", expr):
                labels |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
            labels |= set(re.findall(r"label_values\(\s*\w+\s*,\s*(\w+)\s*\)", expr))
            for label in sorted(labels - labels_known):
                problems.append(f"{title!r}: label {label} is not a label of {sorted(names)}")
            # The labels a series of the result carries: the grouping labels once the query aggregates, else all.
            aggregates = re.search(r"\b(?:sum|count|max|min|avg|topk|bottomk)\b", expr)
            kept = {x.strip() for g in re.findall(r"\bby\s*\(([^)]*)\)", expr) for x in g.split(",")} \
                if aggregates else labels_known
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend):
                if label not in kept:
                    problems.append(f"{title!r}: the legend shows {label}, which the query's series do not carry")
        for p in problems:
            fail(f"dashboard {path.name}: {p}")
        if not problems:
            ok(f"dashboard {path.name}: {len(panels)} panels, {len(queries)} queries over {len(used)} of upstream's "
               "metrics, every metric and label name known")


# ---------------------------------------------------------------------------------------------------------------
# CloudFormation


def _substitute(text: str, params: set[str], resources: dict) -> tuple[str, list[str]]:
    sample = {"AWS::Partition": "aws", "AWS::Region": "us-east-1", "AWS::AccountId": "111122223333",
              "AWS::URLSuffix": "amazonaws.com", "AWS::StackName": "karpenter", "ClusterName": "example-cluster"}
    problems = []

    def replace(m: re.Match) -> str:
        name = m.group(1)
        if name in sample:
            return sample[name]
        if "." in name and name.split(".", 1)[0] in resources:
            resource = name.split(".", 1)[0]
            kind = resources[resource].get("Type", "")
            if kind == "AWS::IAM::Role":
                return f"arn:aws:iam::111122223333:role/{resource}"
            return f"arn:aws:{resource}"
        if name in params or name in resources:
            return name
        problems.append(f"${{{name}}} names no parameter, pseudo parameter or resource")
        return name

    return re.sub(r"\$\{([^}!]+)\}", replace, text), problems


def check_cloudformation() -> None:
    matches = lint_file(CFN)
    for m in matches:
        fail(f"cfn-lint {CFN.relative_to(ROOT)}:{m.linenumber}: {m.rule.id} {m.message}")
    template = cfn_yaml.load(str(CFN))
    params = set(template.get("Parameters", {}))
    resources = template.get("Resources", {})
    derived = json.loads(json.dumps(template))
    inlined = 0
    for name, resource in derived["Resources"].items():
        doc = resource.get("Properties", {}).get("PolicyDocument")
        if isinstance(doc, dict) and set(doc) == {"Fn::Sub"} and isinstance(doc["Fn::Sub"], str):
            text, problems = _substitute(doc["Fn::Sub"], params, resources)
            for p in problems:
                fail(f"{CFN.name}: {name}: {p}")
            try:
                resource["Properties"]["PolicyDocument"] = json.loads(text)
                inlined += 1
            except ValueError as e:
                fail(f"{CFN.name}: {name}: the PolicyDocument under !Sub is not JSON: {e}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cloudformation-policies-inlined.json"
        path.write_text(json.dumps(derived, indent=1))
        inline_matches = lint_file(path)
    for m in inline_matches:
        fail(f"cfn-lint (with the !Sub policy documents parsed): {m.rule.id} {m.message}")
    problems = check_upstream_resources(resources)
    problems += check_granted_actions(derived["Resources"])
    for p in problems:
        fail(f"{CFN.name}: {p}")
    if not matches and not inline_matches and not problems:
        ok(f"{CFN.relative_to(ROOT)}: cfn-lint clean ({len(resources)} resources; again with {inlined} !Sub policy "
           "documents parsed)")
        ok(f"{CFN.relative_to(ROOT)}: upstream v1.14's logical IDs, types and physical names "
           f"({len(UPSTREAM_CFN_RESOURCES)} resources), {len(UPSTREAM_CFN_RULES)} EventBridge rules to the queue; "
           "every granted action called by crates/karpenter-aws or kept for a stated reason")


# The resources of upstream Karpenter v1.14's getting-started template
# (website/content/en/v1.14/getting-started/getting-started-with-karpenter/cloudformation.yaml): logical ID -> (type,
# physical name). The same IDs and names let the template be deployed over a stack created from upstream's: under
# another logical ID a policy or role of the same name would be created before the old one is deleted
# (EntityAlreadyExists).
UPSTREAM_CFN_RESOURCES = {
    "KarpenterNodeRole": ("AWS::IAM::Role", "KarpenterNodeRole-${ClusterName}"),
    **{f"{p}Policy": ("AWS::IAM::ManagedPolicy", f"KarpenterController{p}Policy-${{ClusterName}}")
       for p in ("NodeLifecycle", "IAMIntegration", "EKSIntegration", "Interruption", "ZonalShift",
                 "ResourceDiscovery")},
    "KarpenterInterruptionQueue": ("AWS::SQS::Queue", "${ClusterName}"),
    "KarpenterInterruptionQueuePolicy": ("AWS::SQS::QueuePolicy", None),
    "ScheduledChangeRule": ("AWS::Events::Rule", None),
    "SpotInterruptionRule": ("AWS::Events::Rule", None),
    "RebalanceRule": ("AWS::Events::Rule", None),
    "InstanceStateChangeRule": ("AWS::Events::Rule", None),
    "CapacityReservationInterruptionRule": ("AWS::Events::Rule", None),
}
# Rule -> (source, detail-type) of its event pattern, as upstream's (the interruption controller parses all five).
UPSTREAM_CFN_RULES = {
    "ScheduledChangeRule": ("aws.health", "AWS Health Event"),
    "SpotInterruptionRule": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "RebalanceRule": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "InstanceStateChangeRule": ("aws.ec2", "EC2 Instance State-change Notification"),
    "CapacityReservationInterruptionRule": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}
_PHYSICAL_NAME = {"AWS::IAM::Role": "RoleName", "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
                  "AWS::SQS::Queue": "QueueName"}


def _name_text(value) -> str | None:
    """A physical name as a ${}-template string: !Sub "x" -> x, !Ref P -> ${P}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        return value["Fn::Sub"]
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return f"${{{value['Ref']}}}"
    return None


def check_upstream_resources(resources: dict) -> list[str]:
    problems = []
    for name in sorted(set(UPSTREAM_CFN_RESOURCES) - set(resources)):
        problems.append(f"upstream's resource {name} ({UPSTREAM_CFN_RESOURCES[name][0]}) is missing")
    for name in sorted(set(resources) - set(UPSTREAM_CFN_RESOURCES)):
        problems.append(f"resource {name} has no logical ID of upstream's template (a migrated stack would replace "
                        "rather than update the resource it corresponds to)")
    for name, (kind, physical) in UPSTREAM_CFN_RESOURCES.items():
        resource = resources.get(name)
        if resource is None:
            continue
        if resource.get("Type") != kind:
            problems.append(f"{name} is a {resource.get('Type')}, upstream's a {kind}")
        if physical is not None:
            got = _name_text(resource.get("Properties", {}).get(_PHYSICAL_NAME[kind]))
            if got != physical:
                problems.append(f"{name}: {_PHYSICAL_NAME[kind]} {got!r}, upstream's {physical!r}")
    for name, (source, detail_type) in UPSTREAM_CFN_RULES.items():
        rule = resources.get(name, {}).get("Properties", {})
        pattern = rule.get("EventPattern", {})
        if pattern.get("source") != [source] or pattern.get("detail-type") != [detail_type]:
            problems.append(f"{name}: event pattern {pattern.get('source')} {pattern.get('detail-type')}, want "
                            f"[{source!r}] [{detail_type!r}]")
        targets = rule.get("Targets", [])
        if [t.get("Arn") for t in targets] != [{"Fn::GetAtt": ["KarpenterInterruptionQueue", "Arn"]}]:
            problems.append(f"{name}: does not target the interruption queue alone")
    return problems


# Actions the controller policies grant that crates/karpenter-aws does not call by the SDK method of the same name,
# with the reason each is granted.
KEPT_ACTIONS = {
    "iam:PassRole": "EC2 authorizes it when a launch names the node role's instance profile",
    "eks:DescribeCluster": "discovers the API server endpoint when settings.clusterEndpoint is empty",
    "arc-zonal-shift:GetManagedResource": "upstream compatibility (ZonalShiftPolicy); karpenter-rs does not call it",
}


def _sdk_method(action: str) -> str:
    """ec2:DescribeInstanceTypeOfferings -> describe_instance_type_offerings (the Rust SDK's method name)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", action.split(":", 1)[1]).lower()


def check_granted_actions(resources: dict) -> list[str]:
    """Every action of the controller's managed policies is called by crates/karpenter-aws (`.method(` of the
    action's SDK method) or listed in KEPT_ACTIONS with why it is granted."""
    source = "\n".join(p.read_text() for p in sorted((ROOT / "crates" / "karpenter-aws" / "src").rglob("*.rs")))
    problems = []
    for name, resource in sorted(resources.items()):
        if resource.get("Type") != "AWS::IAM::ManagedPolicy":
            continue
        document = resource["Properties"]["PolicyDocument"]
        if not isinstance(document, dict) or "Statement" not in document:
            problems.append(f"{name}: the policy document could not be read")
            continue
        for statement in document["Statement"]:
            actions = statement.get("Action", [])
            for action in [actions] if isinstance(actions, str) else actions:
                if action in KEPT_ACTIONS:
                    continue
                if "*" in action or not re.search(rf"\.{_sdk_method(action)}\(", source):
                    problems.append(f"{name} grants {action}, which crates/karpenter-aws does not call and "
                                    "KEPT_ACTIONS does not explain")
    return problems


# ---------------------------------------------------------------------------------------------------------------


def main() -> int:
    print(f"helm-python-sdk {helm.__version__ if hasattr(helm, '__version__') else ''} (Helm {helm.helm_sdk_version()}), "
          f"kubernetes-validate {kubernetes_validate.__version__}")
    all_options = yaml.safe_load((CHART / "ci" / "all-options-values.yaml").read_text())
    upstream = yaml.safe_load((CHART / "ci" / "upstream-v1.14.1-values.yaml").read_text())
    karpenter_runs = [(MINIMAL_LABEL, MINIMAL_VALUES), (ALL_OPTIONS_LABEL, all_options), (UPSTREAM_LABEL, upstream)]

    section("helm lint")
    for label, values in karpenter_runs:
        lint(CHART, values, label)
    lint(CRD_CHART, None, "defaults")

    section("render and validate")
    # The karpenter chart is rendered for a cluster that serves the Prometheus Operator's API, so the monitors the
    # values enable are rendered and validated; check_monitor_gating renders without it.
    runs = [(CHART, values, f"karpenter, {label}", [MONITORING_API]) for label, values in karpenter_runs]
    runs.append((CRD_CHART, None, "karpenter-crd, defaults", None))
    runs.append((CRD_CHART, CRD_ANNOTATIONS_VALUES, "karpenter-crd, additionalAnnotations", None))
    rendered = {}
    for chart, values, label, api_versions in runs:
        try:
            objects = render(chart, copy.deepcopy(values), api_versions)
        except helm.HelmError as e:
            fail(f"render {label}: {e}")
            continue
        rendered[label] = objects
        ok(f"render {label}: {summary(objects)}")
        validate_objects(objects, label)

    section("what the karpenter chart promises")
    check_upstream_keys(upstream)
    for label, values in karpenter_runs:
        objects = rendered.get(f"karpenter, {label}")
        if objects is not None:
            check_karpenter(objects, copy.deepcopy(values), label)
    if f"karpenter, {ALL_OPTIONS_LABEL}" in rendered:
        check_rbac_files(rendered[f"karpenter, {ALL_OPTIONS_LABEL}"])
    for label, values in karpenter_runs:
        objects = rendered.get(f"karpenter, {label}")
        if objects is not None:
            check_rbac_sources(objects, copy.deepcopy(values), label)
    check_required_values()
    check_monitor_gating(all_options, ALL_OPTIONS_LABEL)
    check_string_values(karpenter_runs, rendered)
    check_service_account_fallback()

    section("what the karpenter-crd chart promises")
    crds = rendered.get("karpenter-crd, defaults", [])
    if crds and {o["kind"] for _, o in crds} != {"CustomResourceDefinition"}:
        fail("karpenter-crd renders something other than CustomResourceDefinitions")
    check_crd_annotations(crds, rendered.get("karpenter-crd, additionalAnnotations", []))

    section("values.schema.json rejects bad values")
    check_invalid_values()

    section("docs/getting-started.md and the config/ examples")
    check_doc_paths()
    check_walkthrough_budgets()
    check_example_max_pods()

    section("Grafana dashboards")
    check_dashboards()

    section("CloudFormation")
    check_cloudformation()

    print()
    if failures:
        print(f"check-charts: {len(failures)} failure(s):")
        for f in failures:
            print(f"  - {f}")
        return 1
    print("check-charts: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
