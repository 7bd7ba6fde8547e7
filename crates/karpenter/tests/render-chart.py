#!/usr/bin/env python3
"""Renders charts/karpenter as `helm template` would, with helm-python-sdk (.ci/requirements.txt) exactly as
.ci/check-charts.py does (release `karpenter` in kube-system), and prints the rendered objects as one JSON array
on stdout, NOTES.txt left out. Used by crates/karpenter/tests/real_cluster.rs.

    render-chart.py --set settings.clusterName=test --set controller.image.repository=example.com/karpenter
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "karpenter"
RELEASE, NAMESPACE = "karpenter", "kube-system"


def set_value(values: dict, assignment: str) -> None:
    """`a.b.c=v` into values (v a string, as `helm --set-string`)."""
    key, sep, value = assignment.partition("=")
    if not sep or not key:
        sys.exit(f"--set {assignment!r}: expected KEY=VALUE")
    *parents, leaf = key.split(".")
    node = values
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    values: dict = {}
    for assignment in args.set:
        set_value(values, assignment)
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for template, text in sorted(manifests.items()):
        if template.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc is not None)
    json.dump(objects, sys.stdout)


if __name__ == "__main__":
    main()
