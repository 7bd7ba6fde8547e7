#!/usr/bin/env python3
"""A moto server for the karpenter-aws tests, with the gaps Karpenter cares about filled in.

Usage: python harness.py --port 0 --policies deploy/cloudformation.yaml --cluster-name NAME --region REGION
(port 0 picks a free port)

Prints "READY <port> <admin key id> <admin secret> <controller key id> <controller secret>" on stdout once the
server answers, then serves until stdin closes (the Rust test that spawned it dropped its handle or died) or it
is killed. Listens on 127.0.0.1 only. The Rust side runs it with the pinned moto from its own virtual
environment (tests/support/mod.rs provisions target/moto-venv).

IAM is enforced (moto's INITIAL_NO_AUTH_ACTION_COUNT=0: every request from the first one on is authenticated
and authorized). Two IAM users exist, created in-process before the server answers:
- `karpenter-admin` may do anything: tests seed subnets, AMIs, queues, clusters and harness parameters with it;
- `karpenter-controller` holds exactly the controller policies of deploy/cloudformation.yaml (every
  AWS::IAM::ManagedPolicy of the template, as inline user policies, with ${AWS::Partition}=aws,
  ${AWS::AccountId}=123456789012, ${AWS::Region}=--region, ${ClusterName}=--cluster-name and the template's
  !Ref/!GetAtt of its own resources resolved; the interruption queue is named after the cluster, as the
  template names it). The provider under test signs with these keys, so an action the template does not
  grant fails as it would on AWS.
What moto 5.2.5 checks (moto/iam/access_control.py) and what it does not:
- checked: the SigV4 signature (except of gzip-compressed requests: moto decompresses them first) and the
  access key; the action (`ec2:DescribeAvailabilityZones`, matched
  case-sensitively against the statements' Action with `*` wildcards, NotAction too); explicit Deny;
  the Resource where moto knows the request's resource: SQS (the queue's ARN) and IAM (moto: the role's ARN
  for calls naming a RoleName; patched here: the instance profile's ARN for calls naming an
  InstanceProfileName, as AWS authorizes them);
- not checked: every other service's Resource (moto passes "*" and we let any statement Resource match it,
  otherwise no resource-scoped statement could ever allow an EC2 call); every Condition of an identity policy
  (aws:RequestTag/..., aws:ResourceTag/..., aws:RequestedRegion, ec2:CreateAction, iam:PassedToService,
  aws:TagKeys: moto evaluates conditions only for role trust policies); the extra authorizations AWS makes
  inside a call (iam:PassRole for an instance profile in a launch, ec2:RunInstances and ec2:CreateTags
  behind CreateFleet); Pricing (moto has no Pricing backend: every call is a 500).
--request-log PATH: the conditions moto does not check are checked afterwards. The harness writes the
controller's policies (resolved as above) as the first JSON line of PATH, then one line per request the
controller signs: the call, whether moto let it through, and the authorizations IAM makes for it
(authorization_checks: each action on each resource ARN with the request's tags, the tags the resource had
before the call, ec2:CreateAction for tags on create, iam:PassedToService for iam:PassRole of the instance
profile's role in a launch and in AddRoleToInstanceProfile). tests/support/mod.rs evaluates them with
tests/support/iam_eval.rs when the server is dropped; a request the harness cannot model is a failure there.
HARNESS_WITHOUT_ACTIONS="ec2:DescribeAvailabilityZones,...": the controller's policies lack these actions (a
test of what a template without the grant does to the controller).
A refused EC2 call answers UnauthorizedOperation (403) as EC2 does; other services answer AccessDenied.

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
4. Capacity reservations, which moto does not implement: the SSM String parameter
   /moto-harness/capacity-reservations holds a JSON list of reservations in DescribeCapacityReservations'
   shape (CapacityReservationId, InstanceType, AvailabilityZone, AvailableInstanceCount and optionally
   TotalInstanceCount, State (active), InstanceMatchCriteria (open), ReservationType (default), OwnerId (the
   account), EndDate (ISO 8601), Interruptible, Tags [{Key, Value}]). DescribeCapacityReservations answers
   from that list with the CapacityReservationIds (an unknown id is InvalidCapacityReservationId.NotFound, as
   in EC2) and the filters state, owner-id, instance-match-criteria, instance-type, availability-zone,
   reservation-type, tag:<key> and tag-key. A CreateFleet whose launch template targets a reservation
   (CapacityReservationSpecification.CapacityReservationTarget) launches into it only while it is active and
   has instances available (AvailableInstanceCount minus the instances the harness launched into it); else
   each of that template's overrides comes back in Errors[] with ErrorCode ReservationCapacityExceeded. The
   launched instance carries CapacityReservationId; a `capacity-block` target capacity launches as on-demand
   (moto knows only spot and on-demand).
5. Placement groups, which moto does not implement: CreatePlacementGroup (GroupName, Strategy, PartitionCount
   (default 2 for partition groups), SpreadLevel; state available; a duplicate name is
   InvalidPlacementGroup.Duplicate) and DescribePlacementGroups (GroupNames, GroupIds (an unknown one is
   InvalidPlacementGroup.Unknown, as in EC2) and the filters group-name, group-id, state, strategy). A fleet
   instance whose launch template has a Placement naming a known group (GroupId or GroupName) is placed in it:
   DescribeInstances reports its Placement.GroupName, GroupId and, in a partition group, PartitionNumber (the
   template's, else the partitions in turn, as EC2 balances them).
6. Refused permissions: the SSM String parameter /moto-harness/unauthorized holds comma-separated EC2 actions
   (`CreateFleet,RunInstances`); a call of one of them (dry run or not) fails with UnauthorizedOperation, as
   EC2 answers a caller whose IAM policy does not allow it. moto itself answers every dry run with
   DryRunOperation (after checking that a RunInstances instance profile exists).
Nothing else is changed; in particular the Pricing API stays unimplemented (HTTP 500), as in moto.
After READY, stdout goes to stderr: moto prints notes there, and the parent reads only the READY line.
"""

import argparse
import fnmatch
import io
import logging
import os
import sys
import threading
import time
import urllib.request

# Every request is authenticated and authorized from the first one on (moto reads this when it is imported; the
# Rust side sets it for this process too).
os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"

try:
    import moto
    import yaml
    from moto import settings as moto_settings
    from moto.server import ThreadedMotoServer
except ImportError as e:
    print(f"MISSING moto: {e}", flush=True)
    sys.exit(3)

ICE_PARAMETER = "/moto-harness/ice"
UNAUTHORIZED_PARAMETER = "/moto-harness/unauthorized"
RESERVATIONS_PARAMETER = "/moto-harness/capacity-reservations"
EXPECTED_MOTO = "5.2.5"
ACCOUNT_ID = "123456789012"
ADMIN_USER = "karpenter-admin"
CONTROLLER_USER = "karpenter-controller"


class CloudFormationLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short-form intrinsics (!Sub, !Ref, !GetAtt) as their long forms."""


def _intrinsic(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


CloudFormationLoader.add_multi_constructor("!", _intrinsic)


def controller_policies(template_path, cluster_name, region, without=()):
    """{logical id: policy JSON} of every AWS::IAM::ManagedPolicy in the template, intrinsics resolved."""
    import json
    import re

    with open(template_path) as f:
        template = yaml.load(f, Loader=CloudFormationLoader)
    resources = template["Resources"]
    refs = {
        "AWS::Partition": "aws",
        "AWS::Region": region,
        "AWS::AccountId": ACCOUNT_ID,
        "AWS::URLSuffix": "amazonaws.com",
        "ClusterName": cluster_name,
    }
    attributes = {}

    def lookup(name):
        if name in refs:
            return refs[name]
        if name in attributes:
            return attributes[name]
        raise KeyError(f"{template_path}: the harness cannot resolve ${{{name}}}; teach controller_policies it")

    def resolve(node):
        if isinstance(node, list):
            return [resolve(n) for n in node]
        if not isinstance(node, dict):
            return node
        if set(node) == {"Ref"}:
            return lookup(node["Ref"])
        if set(node) == {"Fn::GetAtt"}:
            return lookup(".".join(node["Fn::GetAtt"]))
        if set(node) == {"Fn::Sub"}:
            text = node["Fn::Sub"]
            if not isinstance(text, str):
                raise KeyError(f"{template_path}: Fn::Sub with a variable map is not supported by the harness")
            return re.sub(r"\$\{([^}!]+)\}", lambda m: lookup(m.group(1)), text)
        if any(key.startswith("Fn::") for key in node):
            raise KeyError(f"{template_path}: the harness does not resolve {sorted(node)}")
        return {key: resolve(value) for key, value in node.items()}

    # The template's queues and roles, by logical id, as CloudFormation names them (!Ref and !GetAtt ...Arn).
    for logical_id, resource in resources.items():
        properties = resource.get("Properties") or {}
        if resource.get("Type") == "AWS::SQS::Queue":
            name = resolve(properties.get("QueueName", logical_id))
            refs[logical_id] = f"https://sqs.{region}.amazonaws.com/{ACCOUNT_ID}/{name}"
            attributes[f"{logical_id}.Arn"] = f"arn:aws:sqs:{region}:{ACCOUNT_ID}:{name}"
            attributes[f"{logical_id}.QueueName"] = name
        elif resource.get("Type") == "AWS::IAM::Role":
            name = resolve(properties.get("RoleName", logical_id))
            path = properties.get("Path", "/")
            refs[logical_id] = name
            attributes[f"{logical_id}.Arn"] = f"arn:aws:iam::{ACCOUNT_ID}:role{path}{name}"

    policies = {}
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::IAM::ManagedPolicy":
            continue
        document = resolve(resource["Properties"]["PolicyDocument"])
        if isinstance(document, str):  # a JSON document under !Sub
            document = json.loads(document)
        if without:  # a test's policy that lacks these actions
            statements = document["Statement"] if isinstance(document["Statement"], list) else [document["Statement"]]
            for statement in statements:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                statement["Action"] = [a for a in actions if a not in without] or ["harness:Nothing"]
        policies[logical_id] = json.dumps(document)
    if not policies:
        raise KeyError(f"{template_path}: no AWS::IAM::ManagedPolicy resources")
    return policies


def create_principals(policies):
    """The admin and controller users with their access keys: ((admin id, secret), (controller id, secret))."""
    import json

    from moto.iam.models import iam_backends

    iam = iam_backends[ACCOUNT_ID]["aws"]
    iam.create_user("us-east-1", ADMIN_USER)
    iam.put_user_policy(
        ADMIN_USER,
        "everything",
        json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}),
    )
    iam.create_user("us-east-1", CONTROLLER_USER)
    for name, document in policies.items():
        iam.put_user_policy(CONTROLLER_USER, name, document)
    keys = []
    for user in (ADMIN_USER, CONTROLLER_USER):
        key = iam.create_access_key(user)
        keys.append((key.access_key_id, key.secret_access_key))
    return keys


def patch_authorization():
    """Where moto's IAM enforcement needs help to act as AWS does (see the module documentation)."""
    from moto.core.exceptions import JsonRESTError, _RESTError
    from moto.iam import access_control
    from moto.iam.responses import IamResponse

    class Ec2Unauthorized(_RESTError):
        code = 403

        def __init__(self, user_arn, action):
            super().__init__("UnauthorizedOperation", "")
            from xml.sax.saxutils import escape

            message = escape(
                f"You are not authorized to perform this operation. User: {user_arn} is not authorized to "
                f"perform: {action} because no identity-based policy allows the {action} action"
            )
            self.message = message
            self.description = (
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error>"
                f"<Code>UnauthorizedOperation</Code><Message>{message}</Message></Error></Errors>"
                "<RequestID>harness</RequestID></Response>"
            )

    original_raise = access_control.IAMRequest._raise_access_denied

    json_protocol = {"sqs": "AccessDenied", "ssm": "AccessDeniedException", "eks": "AccessDeniedException"}

    def raise_access_denied(self):
        if self._service == "ec2":
            raise Ec2Unauthorized(self._access_key.arn, self._action)
        if self._service in json_protocol:  # these answer in JSON, not moto's XML
            error = JsonRESTError(
                json_protocol[self._service],
                f"User: {self._access_key.arn} is not authorized to perform: {self._action}",
            )
            error.code = 403
            raise error
        original_raise(self)

    access_control.IAMRequest._raise_access_denied = raise_access_denied

    original_matches = access_control.IAMPolicyStatement._check_element_matches

    def check_element_matches(self, statement_element, value):
        # moto passes "*" when it does not know the request's resource (every service but SQS and IAM).
        if statement_element in ("Resource", "NotResource") and value == "*":
            return statement_element == "Resource"
        return original_matches(self, statement_element, value)

    access_control.IAMPolicyStatement._check_element_matches = check_element_matches

    original_resource = IamResponse._determine_resource

    def determine_resource(self):
        names = self.data.get("InstanceProfileName")
        if names:
            name = names[0] if isinstance(names, list) else names
            try:
                return self.backend.get_instance_profile(name).arn
            except Exception:
                path = self.data.get("Path") or ["/"]
                path = path[0] if isinstance(path, list) else path
                return f"arn:{self.partition}:iam::{self.current_account}:instance-profile{path}{name}"
        return original_resource(self)

    IamResponse._determine_resource = determine_resource

    # moto signs a body-less request (a REST GET such as EKS DescribeCluster) over its parsed parameters,
    # which for those hold the headers; AWS signs the empty payload.
    original_request = access_control.IAMRequestBase._create_aws_request

    def create_aws_request(self):
        request = original_request(self)
        if not self._body and self._method in ("GET", "HEAD", "DELETE"):
            request.data = b""
        return request

    access_control.IAMRequestBase._create_aws_request = create_aws_request

    # moto checks the signature of a form-encoded request (EC2, IAM) over the body re-encoded from its parsed
    # parameters, which differs from the SDK's encoding (`%20` vs `+` in "Linux/UNIX (Amazon VPC)"): keep the
    # body as it came and sign over that.
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.core.responses import BaseResponse

    original_setup = BaseResponse.setup_class

    def setup_class(self, request, *args, **kwargs):
        self.harness_signed_body = None
        if request.content_encoding != "gzip" and request.mimetype == "application/x-www-form-urlencoded":
            raw = request.get_data(cache=False)
            request.stream = io.BytesIO(raw)
            self.harness_signed_body = raw
        return original_setup(self, request, *args, **kwargs)

    BaseResponse.setup_class = setup_class

    original_authorize = ActionAuthenticatorMixin._authenticate_and_authorize_action

    def authenticate_and_authorize_action(self, iam_request_cls, resource="*"):
        signed = getattr(self, "harness_signed_body", None)
        if not signed:
            return original_authorize(self, iam_request_cls, resource)
        parsed_body = self.raw_body
        self.raw_body = signed
        try:
            return original_authorize(self, iam_request_cls, resource)
        finally:
            self.raw_body = parsed_body

    ActionAuthenticatorMixin._authenticate_and_authorize_action = authenticate_and_authorize_action

    # The SDK gzips large request bodies; moto decompresses them before it checks the signature, which then
    # cannot match. The key and the action are still checked for those.
    original_check_signature = access_control.IAMRequestBase.check_signature

    def check_signature(self):
        encoding = next((v for k, v in self._headers.items() if k.lower() == "content-encoding"), "")
        if "gzip" in str(encoding).lower():
            return
        original_check_signature(self)

    access_control.IAMRequestBase.check_signature = check_signature


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


def harness_parameter(account_id, region, name):
    from moto.ssm.models import ssm_backends

    try:
        parameter = ssm_backends[account_id][region].get_parameter(name)
    except Exception:
        return None
    return None if parameter is None else parameter.value


# Instances the harness launched into each reservation: (account, region, reservation id) -> count.
LAUNCHED_INTO_RESERVATION = {}
LAUNCHED_LOCK = threading.Lock()


def registered_reservations(account_id, region):
    """The test's reservations with EC2's defaults filled in and the available count net of launches."""
    import datetime
    import json

    raw = harness_parameter(account_id, region, RESERVATIONS_PARAMETER)
    if not raw:
        return []
    reservations = []
    for entry in json.loads(raw):
        r = dict(entry)
        rid = r["CapacityReservationId"]
        r.setdefault("OwnerId", account_id)
        r.setdefault("State", "active")
        r.setdefault("InstanceMatchCriteria", "open")
        r.setdefault("ReservationType", "default")
        r.setdefault("Tenancy", "default")
        r.setdefault("InstancePlatform", "Linux/UNIX")
        r.setdefault("EndDateType", "limited" if r.get("EndDate") else "unlimited")
        r.setdefault("Tags", [])
        available = int(r.get("AvailableInstanceCount", 0))
        r.setdefault("TotalInstanceCount", available)
        with LAUNCHED_LOCK:
            launched = LAUNCHED_INTO_RESERVATION.get((account_id, region, rid), 0)
        r["AvailableInstanceCount"] = max(0, available - launched)
        r["CapacityReservationArn"] = f"arn:aws:ec2:{region}:{r['OwnerId']}:capacity-reservation/{rid}"
        if r.get("EndDate"):
            r["EndDate"] = datetime.datetime.fromisoformat(r["EndDate"].replace("Z", "+00:00"))
        reservations.append(r)
    return reservations


def reservation_matches(r, filters):
    tags = {t["Key"]: t.get("Value", "") for t in r.get("Tags", [])}
    fields = {
        "state": r["State"],
        "owner-id": r["OwnerId"],
        "instance-match-criteria": r["InstanceMatchCriteria"],
        "instance-type": r.get("InstanceType", ""),
        "availability-zone": r.get("AvailabilityZone", ""),
        "reservation-type": r["ReservationType"],
    }
    for name, values in filters.items():
        if name == "tag-key":
            ok = any(v in tags for v in values)
        elif name.startswith("tag:"):
            ok = tags.get(name[4:]) in values
        elif name in fields:
            ok = fields[name] in values
        else:
            ok = True  # a filter the harness does not model narrows nothing
        if not ok:
            return False
    return True


def patch_capacity_reservations():
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    def describe_capacity_reservations(self):
        backend = self.ec2_backend
        ids = self._get_param("CapacityReservationIds", []) or []
        filters = self._filters_from_querystring()
        reservations = registered_reservations(backend.account_id, backend.region_name)
        known = {r["CapacityReservationId"] for r in reservations}
        missing = [i for i in ids if i not in known]
        if missing:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{missing[0]}' does not exist",
            )
        selected = [
            r
            for r in reservations
            if (not ids or r["CapacityReservationId"] in ids) and reservation_matches(r, filters)
        ]
        return ActionResult({"CapacityReservations": selected})

    EC2Response.describe_capacity_reservations = describe_capacity_reservations


def template_data(backend, launch_template_spec):
    """The LaunchTemplateData of the version a fleet config's launch template specification names, if any."""
    try:
        if launch_template_spec.get("LaunchTemplateId"):
            template = backend.get_launch_template(template_id=launch_template_spec["LaunchTemplateId"])
        else:
            template = backend.get_launch_template_by_name(name=launch_template_spec.get("LaunchTemplateName"))
        version = launch_template_spec.get("Version") or "$Default"
        number = {
            "$Latest": template.latest_version_number,
            "$Default": template.default_version_number,
        }.get(version, version)
        return template.get_version(int(number)).data
    except Exception:
        return None


def template_reservation(backend, launch_template_spec):
    """The reservation id the fleet config's launch template targets, if any."""
    data = template_data(backend, launch_template_spec)
    if data is None:
        return None
    spec = data.get("CapacityReservationSpecification") or {}
    return (spec.get("CapacityReservationTarget") or {}).get("CapacityReservationId")


def reservation_has_room(backend, reservation_id):
    for r in registered_reservations(backend.account_id, backend.region_name):
        if r["CapacityReservationId"] == reservation_id:
            return r["State"] == "active" and r["AvailableInstanceCount"] > 0
    return False


# Placement groups by (account, region), then by name; and the next partition of each group.
PLACEMENT_GROUPS = {}
NEXT_PARTITION = {}
PLACEMENT_LOCK = threading.Lock()


def placement_group_matches(group, filters):
    fields = {
        "group-name": group["GroupName"],
        "group-id": group["GroupId"],
        "state": group["State"],
        "strategy": group["Strategy"],
    }
    return all(fields[name] in values for name, values in filters.items() if name in fields)


def patch_placement_groups():
    import uuid

    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    def create_placement_group(self):
        backend = self.ec2_backend
        name = self._get_param("GroupName")
        strategy = self._get_param("Strategy") or "cluster"
        self.error_on_dryrun()
        group = {
            "GroupName": name,
            "GroupId": "pg-" + uuid.uuid4().hex[:17],
            "Strategy": strategy,
            "State": "available",
        }
        group["GroupArn"] = f"arn:aws:ec2:{backend.region_name}:{backend.account_id}:placement-group/{name}"
        if strategy == "partition":
            group["PartitionCount"] = int(self._get_param("PartitionCount") or 2)
        if self._get_param("SpreadLevel"):
            group["SpreadLevel"] = self._get_param("SpreadLevel")
        with PLACEMENT_LOCK:
            groups = PLACEMENT_GROUPS.setdefault((backend.account_id, backend.region_name), {})
            if name in groups:
                raise EC2ClientError("InvalidPlacementGroup.Duplicate", f"The placement group '{name}' already exists.")
            groups[name] = group
        return ActionResult({"PlacementGroup": group})

    def describe_placement_groups(self):
        backend = self.ec2_backend
        names = self._get_param("GroupNames", []) or []
        ids = self._get_param("GroupIds", []) or []
        filters = self._filters_from_querystring()
        self.error_on_dryrun()
        with PLACEMENT_LOCK:
            groups = list(PLACEMENT_GROUPS.get((backend.account_id, backend.region_name), {}).values())
        for wanted, field in [(names, "GroupName"), (ids, "GroupId")]:
            for value in wanted:
                if not any(g[field] == value for g in groups):
                    raise EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{value}' is unknown.")
        selected = [
            g
            for g in groups
            if (not names or g["GroupName"] in names)
            and (not ids or g["GroupId"] in ids)
            and placement_group_matches(g, filters)
        ]
        return ActionResult({"PlacementGroups": selected})

    EC2Response.create_placement_group = create_placement_group
    EC2Response.describe_placement_groups = describe_placement_groups


def place_fleet_instances(backend, body):
    """Puts each instance a fleet launched into the placement group its launch template names."""
    if not isinstance(body, dict):
        return
    with PLACEMENT_LOCK:
        groups = list(PLACEMENT_GROUPS.get((backend.account_id, backend.region_name), {}).values())
    if not groups:
        return
    for launched in body.get("Instances") or []:
        spec = (launched.get("LaunchTemplateAndOverrides") or {}).get("LaunchTemplateSpecification") or {}
        placement = (template_data(backend, spec) or {}).get("Placement") or {}
        group = next(
            (
                g
                for g in groups
                if g["GroupId"] == placement.get("GroupId") or g["GroupName"] == placement.get("GroupName")
            ),
            None,
        )
        if group is None:
            continue
        for instance_id in launched.get("InstanceIds") or []:
            partition = None
            if group["Strategy"] == "partition":
                partition = placement.get("PartitionNumber")
                if not partition:
                    with PLACEMENT_LOCK:
                        key = (backend.account_id, backend.region_name, group["GroupId"])
                        partition = NEXT_PARTITION.get(key, 0) % group["PartitionCount"] + 1
                        NEXT_PARTITION[key] = partition
            try:
                instance = backend.get_instance(instance_id)
            except Exception:
                continue
            instance.placement.group_name = group["GroupName"]
            instance.placement.group_id = group["GroupId"]
            instance.placement.partition_number = int(partition) if partition else None


def patch_create_fleet():
    from moto.ec2.responses.fleets import Fleets
    from moto.ec2.utils import random_fleet_id
    from moto.core.responses import ActionResult

    original = Fleets.create_fleet

    def create_fleet_with_capacity(self):
        backend = self.ec2_backend
        rules = ice_rules(backend.account_id, backend.region_name)
        spec = self._get_param("TargetCapacitySpecification", {}) or {}
        lifecycle = spec.get("DefaultTargetCapacityType") or "on-demand"
        configs = self._get_param("LaunchTemplateConfigs", []) or []
        targets = [template_reservation(backend, c.get("LaunchTemplateSpecification") or {}) for c in configs]
        if not rules and not any(targets) and lifecycle != "capacity-block":
            return original(self)
        errors = []
        left = 0
        for config, reservation in zip(configs, targets):
            kept = []
            room = reservation is None or reservation_has_room(backend, reservation)
            for override in config.get("Overrides") or []:
                instance_type = override.get("InstanceType", "")
                zone = override_zone(backend, override)
                code = None
                if any(
                    fnmatch.fnmatchcase(lifecycle, l)
                    and fnmatch.fnmatchcase(instance_type, t)
                    and fnmatch.fnmatchcase(zone, z)
                    for (l, t, z) in rules
                ):
                    code = "InsufficientInstanceCapacity"
                    message = (
                        f"We currently do not have sufficient {instance_type} capacity in the Availability "
                        f"Zone you requested ({zone})."
                    )
                elif not room:
                    code = "ReservationCapacityExceeded"
                    message = f"The requested capacity reservation {reservation} has no available capacity."
                if code:
                    errors.append(
                        {
                            "LaunchTemplateAndOverrides": {
                                "LaunchTemplateSpecification": config.get("LaunchTemplateSpecification"),
                                "Overrides": override,
                            },
                            "Lifecycle": "on-demand" if lifecycle == "capacity-block" else lifecycle,
                            "ErrorCode": code,
                            "ErrorMessage": message,
                        }
                    )
                else:
                    kept.append(override)
            config["Overrides"] = kept
            left += len(kept)
        if left == 0:
            return ActionResult({"FleetId": random_fleet_id(), "Instances": [], "Errors": errors})
        # Let moto launch from what is left: its request parser reads the querystring, so rewrite the parsed
        # parameters it reads through _get_param. moto launches only spot and on-demand capacity.
        original_get_param = self._get_param
        launching = [c for c in configs if c.get("Overrides")]

        def get_param(name, if_none=None):
            if name == "LaunchTemplateConfigs":
                return launching
            if name == "TargetCapacitySpecification" and lifecycle == "capacity-block":
                return dict(spec, DefaultTargetCapacityType="on-demand")
            return original_get_param(name, if_none)

        self._get_param = get_param
        try:
            result = original(self)
        finally:
            self._get_param = original_get_param
        body = getattr(result, "result", None)
        # moto launched the first override left, so from the first config that still has overrides.
        reservation = targets[configs.index(launching[0])]
        if isinstance(body, dict) and reservation:
            for launched in body.get("Instances") or []:
                for instance_id in launched.get("InstanceIds") or []:
                    with LAUNCHED_LOCK:
                        key = (backend.account_id, backend.region_name, reservation)
                        LAUNCHED_INTO_RESERVATION[key] = LAUNCHED_INTO_RESERVATION.get(key, 0) + 1
                    try:
                        backend.get_instance(instance_id).capacity_reservation_id = reservation
                    except Exception:
                        pass
        if isinstance(body, dict) and errors:
            body["Errors"] = errors
        return result

    def create_fleet(self):
        result = create_fleet_with_capacity(self)
        place_fleet_instances(self.ec2_backend, getattr(result, "result", None))
        return result

    Fleets.create_fleet = create_fleet


def patch_unauthorized():
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses._base_response import EC2BaseResponse

    original = EC2BaseResponse.error_on_dryrun

    # Every EC2 action moto implements calls error_on_dryrun before it acts, so refusing there refuses the call.
    def error_on_dryrun(self):
        denied = harness_parameter(self.current_account, self.region, UNAUTHORIZED_PARAMETER) or ""
        action = self._get_action()
        if action in {a.strip() for a in denied.split(",")}:
            raise EC2ClientError(
                "UnauthorizedOperation",
                f"You are not authorized to perform this operation. User: "
                f"arn:aws:sts::{self.current_account}:assumed-role/KarpenterController/moto is not authorized to "
                f"perform: ec2:{action}",
            )
        original(self)

    EC2BaseResponse.error_on_dryrun = error_on_dryrun


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


# The controller's requests as IAM authorizes them, for tests/support/iam_eval.rs (see patch_request_log).
REQUEST_LOG = None
REQUEST_LOG_LOCK = threading.Lock()
CONTROLLER_KEY_ID = None
PARTITION = "aws"


def tag_map(tags):
    """{key: value} of a tag list in any of the shapes moto and the SDKs use ({Key, Value} or {key, value})."""
    result = {}
    for tag in tags or []:
        key = tag.get("Key", tag.get("key"))
        if key is not None:
            result[key] = tag.get("Value", tag.get("value")) or ""
    return result


def tag_specifications(specs):
    """{resource type: {key: value}} of TagSpecifications."""
    by_type = {}
    for spec in specs or []:
        by_type.setdefault(spec.get("ResourceType", ""), {}).update(tag_map(spec.get("Tags")))
    return by_type


def ec2_resource_tags(backend, resource_id):
    return tag_map(backend.describe_tags(filters={"resource-id": [resource_id]}))


def check(action, resource, request_tags=None, resource_tags=None, context=None):
    """One authorization IAM makes: `action` on `resource` with the request's tags (None: the request carries
    none), the resource's current tags (None: a resource being created, which has none) and other context keys."""
    return {
        "action": action,
        "resource": resource,
        "request_tags": request_tags,
        "resource_tags": resource_tags,
        "context": context or {},
    }


def skip(reason):
    """An authorization the request never reaches (the resource does not exist: EC2 and IAM answer NotFound)."""
    return {"skip": reason}


def pass_role_checks(iam, profile_name):
    """iam:PassRole of the role in instance profile `profile_name`, as a launch naming the profile needs."""
    if not profile_name:
        return []
    name = profile_name.rsplit("/", 1)[-1]
    try:
        profile = iam.get_instance_profile(name)
    except Exception:
        return [skip(f"instance profile {name} does not exist")]
    return [
        check("iam:PassRole", role.arn, context={"iam:PassedToService": "ec2.amazonaws.com"})
        for role in profile.roles
    ]


def launch_checks(response, action, params, account, region, template_specs, request_specs, create_action):
    """The authorizations of a launch (RunInstances, CreateFleet): the resources it creates with their request
    tags, the existing ones it uses, the launch templates with their tags, tags on create and iam:PassRole."""
    from moto.iam.models import iam_backends

    backend = response.ec2_backend
    iam = iam_backends[account][PARTITION]
    arn = lambda kind, rid="*", owner=account: f"arn:{PARTITION}:ec2:{region}:{owner}:{kind}/{rid}"
    checks = []
    template_tags = {}
    images = set(params.get("_images", []))
    subnets = set(params.get("_subnets", []))
    groups = set(params.get("SecurityGroupIds") or [])
    profile = (params.get("IamInstanceProfile") or {}).get("Name") or (params.get("IamInstanceProfile") or {}).get("Arn")
    reservations, placement_groups = set(), set()
    missing_template = False
    for spec in template_specs:
        try:
            if spec.get("LaunchTemplateId"):
                template = backend.get_launch_template(spec["LaunchTemplateId"])
            else:
                template = backend.get_launch_template_by_name(spec.get("LaunchTemplateName"))
        except Exception:
            checks.append(skip(f"launch template {spec} does not exist"))
            missing_template = True
            continue
        checks.append(check(action, arn("launch-template", template.id), resource_tags=ec2_resource_tags(backend, template.id)))
        data = template_data(backend, spec) or {}
        for kind, tags in tag_specifications(data.get("TagSpecifications")).items():
            template_tags.setdefault(kind, {}).update(tags)
        if data.get("ImageId"):
            images.add(data["ImageId"])
        groups.update(data.get("SecurityGroupIds") or [])
        for interface in data.get("NetworkInterfaces") or []:
            groups.update(interface.get("Groups") or [])
            if interface.get("SubnetId"):
                subnets.add(interface["SubnetId"])
        profile = profile or (data.get("IamInstanceProfile") or {}).get("Name")
        target = (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
        if target.get("CapacityReservationId"):
            reservations.add(target["CapacityReservationId"])
        if (data.get("Placement") or {}).get("GroupId"):
            placement_groups.add(data["Placement"]["GroupId"])
    for image in sorted(images):
        checks.append(check(action, arn("image", image, owner="")))
    for subnet in sorted(subnets):
        checks.append(check(action, arn("subnet", subnet)))
    for group in sorted(groups):
        checks.append(check(action, arn("security-group", group)))
    for reservation in sorted(reservations):
        checks.append(check(action, arn("capacity-reservation", reservation)))
    for group in sorted(placement_groups):
        checks.append(check(action, arn("placement-group", group)))
    # What the launch creates. Tags come from the request's TagSpecifications, over the template's. With a
    # template that does not exist AWS answers NotFound (a dry run included) and creates nothing, so what it
    # would have created is not authorized.
    if missing_template:
        checks.append(skip("nothing is created from a launch template that does not exist"))
        checks.extend(pass_role_checks(iam, profile))
        return checks
    for kind in ["instance", "volume", "network-interface"]:
        tags = dict(template_tags.get(kind, {}))
        tags.update(request_specs.get(kind, {}))
        checks.append(check(action, arn(kind), request_tags=tags))
        if tags:
            checks.append(check("ec2:CreateTags", arn(kind), request_tags=tags, context={"ec2:CreateAction": create_action}))
    checks.extend(pass_role_checks(iam, profile))
    return checks


def ec2_checks(response, action, account, region):
    backend = response.ec2_backend
    params = response.params or {}
    arn = lambda kind, rid="*": f"arn:{PARTITION}:ec2:{region}:{account}:{kind}/{rid}"
    name = f"ec2:{action}"
    if action.startswith("Describe"):
        return [check(name, "*")]
    if action == "CreateLaunchTemplate":
        tags = tag_specifications(params.get("TagSpecifications")).get("launch-template")
        checks = [check(name, arn("launch-template"), request_tags=tags or {})]
        if tags:
            checks.append(check("ec2:CreateTags", arn("launch-template"), request_tags=tags, context={"ec2:CreateAction": action}))
        return checks
    if action == "DeleteLaunchTemplate":
        try:
            if params.get("LaunchTemplateId"):
                template = backend.get_launch_template(params["LaunchTemplateId"])
            else:
                template = backend.get_launch_template_by_name(params.get("LaunchTemplateName"))
        except Exception:
            return [skip("the launch template does not exist")]
        return [check(name, arn("launch-template", template.id), resource_tags=ec2_resource_tags(backend, template.id))]
    if action == "CreateFleet":
        specs = tag_specifications(params.get("TagSpecifications"))
        configs = params.get("LaunchTemplateConfigs") or []
        overrides = [o for c in configs for o in c.get("Overrides") or []]
        launch = dict(
            params,
            _images=[o["ImageId"] for o in overrides if o.get("ImageId")],
            _subnets=[o["SubnetId"] for o in overrides if o.get("SubnetId")],
        )
        checks = [check(name, arn("fleet"), request_tags=specs.get("fleet", {}))]
        if specs.get("fleet"):
            checks.append(check("ec2:CreateTags", arn("fleet"), request_tags=specs["fleet"], context={"ec2:CreateAction": action}))
        templates = [c.get("LaunchTemplateSpecification") or {} for c in configs]
        # EC2 Fleet authorizes the launch as CreateFleet and as RunInstances of the caller.
        for launch_action in [name, "ec2:RunInstances"]:
            checks.extend(launch_checks(response, launch_action, launch, account, region, templates, specs, action))
        return checks
    if action == "RunInstances":
        specs = tag_specifications(params.get("TagSpecifications"))
        launch = dict(
            params,
            _images=[params["ImageId"]] if params.get("ImageId") else [],
            _subnets=[params["SubnetId"]] if params.get("SubnetId") else [],
        )
        templates = [params["LaunchTemplate"]] if params.get("LaunchTemplate") else []
        return launch_checks(response, name, launch, account, region, templates, specs, action)
    if action == "CreateTags":
        tags = tag_map(params.get("Tags"))
        checks = []
        for rid in params.get("Resources") or []:
            kind = "instance" if rid.startswith("i-") else "launch-template" if rid.startswith("lt-") else "volume" if rid.startswith("vol-") else None
            if kind is None:
                return None
            if kind == "instance":
                try:
                    backend.get_instance(rid)
                except Exception:
                    checks.append(skip(f"instance {rid} does not exist"))
                    continue
            checks.append(check(name, arn(kind, rid), request_tags=tags, resource_tags=ec2_resource_tags(backend, rid)))
        return checks
    if action == "TerminateInstances":
        checks = []
        for rid in params.get("InstanceIds") or []:
            try:
                backend.get_instance(rid)
            except Exception:
                checks.append(skip(f"instance {rid} does not exist"))
                continue
            checks.append(check(name, arn("instance", rid), resource_tags=ec2_resource_tags(backend, rid)))
        return checks
    return None


def iam_checks(response, action, account):
    from moto.iam.models import iam_backends

    iam = iam_backends[account][PARTITION]
    params = response.params or {}
    name = f"iam:{action}"
    if action == "ListInstanceProfiles":
        return [check(name, "*")]
    profile_name = params.get("InstanceProfileName")
    if profile_name is None:
        return None
    try:
        profile = iam.get_instance_profile(profile_name)
    except Exception:
        profile = None
    request_tags = tag_map(params.get("Tags")) if "Tags" in params else None
    if action == "CreateInstanceProfile":
        path = params.get("Path") or "/"
        return [check(name, f"arn:{PARTITION}:iam::{account}:instance-profile{path}{profile_name}", request_tags=request_tags or {})]
    if profile is None:
        return [skip(f"instance profile {profile_name} does not exist")]
    checks = [check(name, profile.arn, request_tags=request_tags, resource_tags=tag_map(profile.tags))]
    if action == "AddRoleToInstanceProfile":
        try:
            role = iam.get_role(params.get("RoleName"))
            checks.append(check("iam:PassRole", role.arn, context={"iam:PassedToService": "ec2.amazonaws.com"}))
        except Exception:
            checks.append(skip(f"role {params.get('RoleName')} does not exist"))
    if action in ("GetInstanceProfile", "AddRoleToInstanceProfile", "RemoveRoleFromInstanceProfile",
                  "DeleteInstanceProfile", "TagInstanceProfile"):
        return checks
    return None


def json_body(response):
    import json

    try:
        return json.loads(response.body or b"{}")
    except Exception:
        return {}


def other_checks(response, service, action, account, region):
    name = f"{service}:{action}"
    if service == "ssm" and action in ("GetParameter", "GetParameters"):
        body = json_body(response)
        names = body.get("Names") or ([body["Name"]] if body.get("Name") else [])

        def parameter_arn(parameter):
            if parameter.startswith("arn:"):
                return parameter
            # AWS's public parameters live under no account.
            owner = "" if parameter.startswith("/aws/") else account
            return f"arn:{PARTITION}:ssm:{region}:{owner}:parameter{parameter}"

        return [check(name, parameter_arn(n)) for n in names]
    if service == "sqs":
        params = response.params or {}
        queue = params.get("QueueName") or (params.get("QueueUrl") or "").rstrip("/").rsplit("/", 1)[-1]
        return [check(name, f"arn:{PARTITION}:sqs:{region}:{account}:{queue}")] if queue else None
    if service == "eks" and action == "DescribeCluster":
        from urllib.parse import urlparse

        cluster = urlparse(response.uri).path.rstrip("/").rsplit("/", 1)[-1]
        return [check(name, f"arn:{PARTITION}:eks:{region}:{account}:cluster/{cluster}")]
    if service == "pricing":
        return [check(name, "*")]
    return None


def authorization_checks(response, service, action):
    account, region = response.current_account, response.region
    if service == "ec2":
        checks = ec2_checks(response, action, account, region)
    elif service == "iam":
        checks = iam_checks(response, action, account)
    else:
        checks = other_checks(response, service, action, account, region)
    return checks


def patch_request_log():
    """Records every request the controller signs, as the authorizations IAM makes for it (action, resource
    ARN, request tags, the tags the resource has before the call, iam:PassedToService, ec2:CreateAction), one
    JSON line each, for tests/support/iam_eval.rs to evaluate against the policies with their conditions
    (which moto does not evaluate). Recorded before the call acts, so a deleted resource's tags are its own."""
    import json

    from moto.core.authorization import ActionAuthenticatorMixin

    authorize = ActionAuthenticatorMixin._authenticate_and_authorize_action

    def authenticate_and_authorize_action(self, iam_request_cls, resource="*"):
        authorization = str(self.headers.get("Authorization") or "")
        scope = authorization.split("Credential=", 1)[1].split(",", 1)[0].split("/") if "Credential=" in authorization else []
        if REQUEST_LOG is None or len(scope) < 4 or scope[0] != CONTROLLER_KEY_ID:
            return authorize(self, iam_request_cls, resource)
        service, action = scope[3], self._get_action()
        entry = {"call": f"{service}:{action}", "region": scope[2]}
        try:
            checks = authorization_checks(self, service, action)
            if checks is None:
                entry["unmodelled"] = "the harness does not know which authorizations this request makes"
            else:
                entry["checks"] = checks
        except Exception as e:  # a harness bug must show, not pass as "allowed"
            entry["unmodelled"] = f"the harness failed to model it: {e!r}"
        try:
            authorize(self, iam_request_cls, resource)
            entry["moto_allowed"] = True
        except Exception:
            entry["moto_allowed"] = False
            raise
        finally:
            with REQUEST_LOG_LOCK:
                REQUEST_LOG.write(json.dumps(entry, default=str) + "\n")
                REQUEST_LOG.flush()

    ActionAuthenticatorMixin._authenticate_and_authorize_action = authenticate_and_authorize_action


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
    parser.add_argument("--policies", required=True, help="deploy/cloudformation.yaml")
    parser.add_argument("--cluster-name", required=True)
    parser.add_argument("--region", required=True)
    parser.add_argument(
        "--request-log",
        help="write the controller policies and then every request the controller signs here, as JSON lines",
    )
    args = parser.parse_args()
    if moto.__version__ != EXPECTED_MOTO:
        print(f"FAILED moto {moto.__version__} is not the pinned {EXPECTED_MOTO}", flush=True)
        sys.exit(1)
    moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = 0

    # One line per request on stderr drowns the test output.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    patterns = [p.strip() for p in os.environ.get("HARNESS_INSTANCE_TYPES", "").split(",") if p.strip()]
    if patterns:
        patch_instance_types(patterns)
    patch_create_fleet()
    patch_capacity_reservations()
    patch_placement_groups()
    patch_unauthorized()
    patch_eks_amis(os.environ.get("HARNESS_K8S_VERSIONS", "1.32 1.33 1.34").split())
    patch_authorization()
    try:
        without = [a.strip() for a in os.environ.get("HARNESS_WITHOUT_ACTIONS", "").split(",") if a.strip()]
        policies = controller_policies(args.policies, args.cluster_name, args.region, without)
    except Exception as e:
        print(f"FAILED reading the controller policies: {e}", flush=True)
        sys.exit(1)
    (admin_key, admin_secret), (controller_key, controller_secret) = create_principals(policies)
    if args.request_log:
        import json

        global REQUEST_LOG, CONTROLLER_KEY_ID
        CONTROLLER_KEY_ID = controller_key
        REQUEST_LOG = open(args.request_log, "w")
        REQUEST_LOG.write(json.dumps({"policies": {k: json.loads(v) for k, v in policies.items()}}) + "\n")
        REQUEST_LOG.flush()
        patch_request_log()

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=args.port, verbose=False)
    server.start()
    port = server._server.server_port  # the port the OS chose for port 0
    if not wait_until_ready(port, time.time() + 30):
        print("FAILED server did not answer", flush=True)
        server.stop()
        sys.exit(1)
    print(f"READY {port} {admin_key} {admin_secret} {controller_key} {controller_secret}", flush=True)
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
