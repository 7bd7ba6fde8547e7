#!/usr/bin/env python3
"""A moto server for the karpenter-aws tests, with the gaps Karpenter cares about filled in.

Usage: python3 harness.py --port 0      (0 picks a free port)

Prints "READY <port>" on stdout once the server answers, then serves until stdin closes (the Rust test that
spawned it dropped its handle or died) or it is killed. Listens on 127.0.0.1 only.

Patches (moto internals, hence the exact pin moto[server]==5.2.5 in .ci/requirements.txt):
1. Insufficient capacity on CreateFleet: the SSM String parameter /moto-harness/ice (written by the test
   through the normal SSM API, in the fleet's account and region) holds comma-separated rules `TYPE`,
   `TYPE:ZONE` or `LIFECYCLE:TYPE:ZONE` (`*` matches anything). Matching overrides are removed before moto
   launches and reported in Errors[] with ErrorCode InsufficientInstanceCapacity; moto then launches the
   first override left. With none left, the answer has no Instances, only Errors, as EC2's does.
2. The EKS-optimised AMI SSM parameters
   /aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<x86_64|arm64>/standard/recommended/image_id,
   pointing at moto's built-in Amazon Linux 2023 AMIs of the right architecture (AWS refuses PutParameter
   under /aws/, so a test cannot create them). Versions: HARNESS_K8S_VERSIONS (default "1.32 1.33 1.34").
3. HARNESS_INSTANCE_TYPES="m5.*,c6g.large,...": shrinks the instance-type catalogue and its offerings to the
   matching names (fnmatch patterns), so DescribeInstanceTypes answers in a fraction of a second.
Nothing else is changed; in particular the Pricing API stays unimplemented (HTTP 500), as in moto.
After READY, stdout goes to stderr: moto prints notes there, and the parent reads only the READY line.
"""

import argparse
import fnmatch
import logging
import os
import sys
import threading
import time
import urllib.request

try:
    import moto
    from moto.server import ThreadedMotoServer
except ImportError as e:  # the Rust side turns this exit code into a skip
    print(f"MISSING moto: {e}", flush=True)
    sys.exit(3)

ICE_PARAMETER = "/moto-harness/ice"
EXPECTED_MOTO = "5.2.5"


def patch_instance_types(patterns):
    from moto.ec2.models import instance_types

    def keep(name):
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    instance_types.InstanceTypeBackend.instance_types = [
        t for t in instance_types.InstanceTypeBackend.instance_types if keep(t["InstanceType"])
    ]
    for by_region in instance_types.INSTANCE_TYPE_OFFERINGS.values():
        for region in list(by_region):
            by_region[region] = [o for o in by_region[region] if keep(o["InstanceType"])]


def ice_rules(account_id, region):
    from moto.ssm.models import ssm_backends

    try:
        parameter = ssm_backends[account_id][region].get_parameter(ICE_PARAMETER)
    except Exception:
        return []
    if parameter is None:
        return []
    rules = []
    for rule in parameter.value.split(","):
        parts = rule.strip().split(":")
        if not parts or parts == [""]:
            continue
        if len(parts) == 1:
            rules.append(("*", parts[0], "*"))
        elif len(parts) == 2:
            rules.append(("*", parts[0], parts[1]))
        else:
            rules.append((parts[0], parts[1], parts[2]))
    return rules


def override_zone(backend, override):
    zone = override.get("AvailabilityZone")
    if zone:
        return zone
    subnet_id = override.get("SubnetId")
    if subnet_id:
        try:
            return backend.get_subnet(subnet_id).availability_zone
        except Exception:
            return ""
    return ""


def patch_create_fleet():
    from moto.ec2.responses.fleets import Fleets
    from moto.ec2.utils import random_fleet_id
    from moto.core.responses import ActionResult

    original = Fleets.create_fleet

    def create_fleet(self):
        backend = self.ec2_backend
        rules = ice_rules(backend.account_id, backend.region_name)
        if not rules:
            return original(self)
        spec = self._get_param("TargetCapacitySpecification", {}) or {}
        lifecycle = spec.get("DefaultTargetCapacityType") or "on-demand"
        configs = self._get_param("LaunchTemplateConfigs", []) or []
        errors = []
        left = 0
        for config in configs:
            kept = []
            for override in config.get("Overrides") or []:
                instance_type = override.get("InstanceType", "")
                zone = override_zone(backend, override)
                if any(
                    fnmatch.fnmatchcase(lifecycle, l)
                    and fnmatch.fnmatchcase(instance_type, t)
                    and fnmatch.fnmatchcase(zone, z)
                    for (l, t, z) in rules
                ):
                    errors.append(
                        {
                            "LaunchTemplateAndOverrides": {
                                "LaunchTemplateSpecification": config.get("LaunchTemplateSpecification"),
                                "Overrides": override,
                            },
                            "Lifecycle": lifecycle,
                            "ErrorCode": "InsufficientInstanceCapacity",
                            "ErrorMessage": f"We currently do not have sufficient {instance_type} capacity in "
                            f"the Availability Zone you requested ({zone}).",
                        }
                    )
                else:
                    kept.append(override)
            config["Overrides"] = kept
            left += len(kept)
        if left == 0:
            return ActionResult({"FleetId": random_fleet_id(), "Instances": [], "Errors": errors})
        # Let moto launch from what is left: its request parser reads the querystring, so rewrite the parsed
        # parameters it reads through _get_param.
        original_get_param = self._get_param

        def get_param(name, if_none=None):
            if name == "LaunchTemplateConfigs":
                return [c for c in configs if c.get("Overrides")]
            return original_get_param(name, if_none)

        self._get_param = get_param
        try:
            result = original(self)
        finally:
            self._get_param = original_get_param
        body = getattr(result, "result", None)
        if isinstance(body, dict) and errors:
            body["Errors"] = errors
        return result

    Fleets.create_fleet = create_fleet


def patch_eks_amis(versions):
    from moto.ssm import models as ssm_models

    original = ssm_models.ParameterDict._check_loading_status
    prefix = "/aws/service/eks/optimized-ami"
    al2023 = {
        "x86_64": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64",
        "arm64": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64",
    }

    def check_loading_status(self, key):
        original(self, key)
        if not str(key or "").startswith(prefix) or getattr(self, "harness_eks_loaded", False):
            return
        self.harness_eks_loaded = True
        for arch, source in al2023.items():
            image = self[source]  # loads moto's AL2023 parameters
            if not image:
                continue
            image_id = image[-1].value
            for version in versions:
                for variant in ["standard", "nvidia"] + (["neuron"] if arch == "x86_64" else []):
                    name = f"{prefix}/{version}/amazon-linux-2023/{arch}/{variant}/recommended/image_id"
                    super(ssm_models.ParameterDict, self).__getitem__(name).append(
                        ssm_models.Parameter(
                            account_id=self.account_id,
                            name=name,
                            value=image_id,
                            parameter_type="String",
                            description=None,
                            allowed_pattern=None,
                            keyid=None,
                            last_modified_date=time.time(),
                            version=1,
                            data_type="aws:ec2:image",
                        )
                    )

    ssm_models.ParameterDict._check_loading_status = check_loading_status


def wait_until_ready(port, deadline):
    url = f"http://127.0.0.1:{port}/moto-api/"
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return True
        except Exception:
            time.sleep(0.05)
    return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if moto.__version__ != EXPECTED_MOTO:
        print(f"WARNING moto {moto.__version__} is not the pinned {EXPECTED_MOTO}", file=sys.stderr, flush=True)

    # One line per request on stderr drowns the test output.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    patterns = [p.strip() for p in os.environ.get("HARNESS_INSTANCE_TYPES", "").split(",") if p.strip()]
    if patterns:
        patch_instance_types(patterns)
    patch_create_fleet()
    patch_eks_amis(os.environ.get("HARNESS_K8S_VERSIONS", "1.32 1.33 1.34").split())

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=args.port, verbose=False)
    server.start()
    port = server._server.server_port  # the port the OS chose for port 0
    if not wait_until_ready(port, time.time() + 30):
        print("FAILED server did not answer", flush=True)
        server.stop()
        sys.exit(1)
    print(f"READY {port}", flush=True)
    # moto prints notes ("Unable to find appropriate backend ...") on stdout; the parent reads only the READY
    # line, so send everything after it to stderr rather than risk a full or closed pipe.
    sys.stdout = sys.stderr

    # Serve until stdin closes: the parent dropped its handle or died.
    stop = threading.Event()

    def watch_stdin():
        try:
            while sys.stdin.read(1024):
                pass
        finally:
            stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
