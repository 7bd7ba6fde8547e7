//! EC2NodeClass rules, checked three ways: every invalid object in the table is rejected by `validate()` with an
//! error naming the field, and — when the rule lives in the CRD — by the CRD's CEL rules or OpenAPI schema; a full
//! valid object passes all three.

mod support;

use karpenter_api::ec2nodeclass::{self, AmiFamily, EC2NODECLASS_HASH_VERSION, EC2NodeClass, messages as m};
use serde_json::{Value, json};

/// Where the CRD enforces a rule.
#[derive(Clone, Copy)]
enum Crd {
    /// A CEL rule with this message.
    Cel(&'static str),
    /// A structural schema keyword (pattern, enum, range, length, count); the violation is reported at a path
    /// containing this text.
    Schema(&'static str),
}

struct Row {
    rule: &'static str,
    /// A JSON merge patch (RFC 7386) applied to [`base`]: objects merge, `null` deletes.
    patch: Value,
    /// The exact path of the error `validate()` must report.
    path: &'static str,
    /// Text the message of that error must contain.
    message: &'static str,
    crd: Crd,
}

fn row(rule: &'static str, patch: Value, path: &'static str, message: &'static str, crd: Crd) -> Row {
    Row {
        rule,
        patch,
        path,
        message,
        crd,
    }
}

/// A small valid EC2NodeClass the rows modify.
fn base() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-cluster",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "cluster"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "cluster"}}]
        }
    })
}

/// Every field of the spec, valid.
fn full() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "full"},
        "spec": {
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "cluster", "tier": "*"}}, {"id": "subnet-0a1b2c3d"}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "cluster"}}, {"id": "sg-0123abcd"}, {"name": "nodes"}],
            "capacityReservationSelectorTerms": [
                {"tags": {"team": "ml"}, "ownerID": "123456789012"},
                {"id": "cr-0123456789abcdef0"},
                {"instanceMatchCriteria": "open"}
            ],
            "placementGroupSelector": {"name": "training"},
            "associatePublicIPAddress": false,
            "ipPrefixCount": 1,
            "amiSelectorTerms": [
                {"tags": {"karpenter.sh/discovery": "cluster"}, "owner": "self"},
                {"id": "ami-0123456789abcdef0"},
                {"name": "my-ami-*", "owner": "123456789012"},
                {"ssmParameter": "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"}
            ],
            "amiFamily": "AL2023",
            "userData": "#!/bin/bash\necho hello\n",
            "role": "KarpenterNodeRole-cluster",
            "tags": {"team": "platform", "karpenter.sh/discovery": "cluster"},
            "kubelet": {
                "clusterDNS": ["10.100.0.10"],
                "maxPods": 110,
                "podsPerCore": 10,
                "systemReserved": {"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi", "pid": "1000"},
                "kubeReserved": {"cpu": "200m", "memory": "1.5Gi"},
                "evictionHard": {"memory.available": "5%", "nodefs.available": "10%", "nodefs.inodesFree": "10%"},
                "evictionSoft": {"memory.available": "500Mi", "imagefs.available": "15.5%"},
                "evictionSoftGracePeriod": {"memory.available": "1m", "imagefs.available": "1m30s"},
                "evictionMaxPodGracePeriod": 60,
                "imageGCHighThresholdPercent": 85,
                "imageGCLowThresholdPercent": 80,
                "cpuCFSQuota": true
            },
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {
                    "volumeSize": "100Gi", "volumeType": "gp3", "iops": 10000, "throughput": 125, "encrypted": true,
                    "kmsKeyID": "arn:aws:kms:us-west-2:111122223333:key/1234abcd", "deleteOnTermination": true
                }},
                {"deviceName": "/dev/xvdb", "ebs": {"snapshotID": "snap-0123", "volumeInitializationRate": 200}}
            ],
            "instanceStorePolicy": "RAID0",
            "networkInterfaces": [
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
                {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
                {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "interface"}
            ],
            "detailedMonitoring": true,
            "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 2, "httpTokens": "required"},
            "connectionTracking": {"tcpEstablishedTimeout": 3600, "udpStreamTimeout": 120, "udpTimeout": 30},
            "context": "fleet-context",
            "cpuOptions": {"nestedVirtualization": "disabled"}
        },
        "status": {
            "subnets": [{"id": "subnet-0a1b2c3d", "zone": "us-west-2a", "zoneID": "usw2-az1"}],
            "securityGroups": [{"id": "sg-0123abcd", "name": "nodes"}],
            "capacityReservations": [{
                "availabilityZone": "us-west-2a", "endTime": "2030-01-01T00:00:00Z", "id": "cr-0123456789abcdef0",
                "instanceMatchCriteria": "targeted", "instanceType": "p5.48xlarge", "ownerID": "123456789012",
                "reservationType": "capacity-block", "interruptible": true, "state": "active"
            }],
            "amis": [{"id": "ami-0123456789abcdef0", "name": "al2023", "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
            ]}, {"id": "ami-0fedcba9876543210", "deprecated": true, "requirements": []}],
            "instanceProfile": "cluster_123",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z", "reason": "Ready", "message": ""}]
        }
    })
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn patched(patch: &Value) -> Value {
    let mut obj = base();
    merge(&mut obj, patch);
    obj
}

fn spec(patch: Value) -> Value {
    json!({"spec": patch})
}

fn nic(card: i64, device: i64, ty: &str) -> Value {
    json!({"networkCardIndex": card, "deviceIndex": device, "interfaceType": ty})
}

fn table() -> Vec<Row> {
    use Crd::{Cel, Schema};
    let no_alias = |extra: Value| {
        let mut s = json!({"amiSelectorTerms": [{"id": "ami-123"}], "amiFamily": "AL2023"});
        merge(&mut s, &extra);
        spec(s)
    };
    let ids =
        |prefix: &str, n: usize| -> Value { (0..n).map(|i| json!({"id": format!("{prefix}{i}")})).collect() };
    let many_tags: serde_json::Map<String, Value> = (0..21).map(|i| (format!("k{i}"), json!("v"))).collect();
    let many_bdms: Vec<Value> = (0..51)
        .map(|i| json!({"deviceName": format!("/dev/xvd{i}"), "ebs": {"volumeSize": "1Gi"}}))
        .collect();
    let many_nics: Vec<Value> = (0..151).map(|i| nic(0, i, "interface")).collect();

    vec![
        // identity
        row(
            "role xor instanceProfile (both)",
            spec(json!({"instanceProfile": "profile"})),
            "spec",
            m::ROLE_XOR_INSTANCE_PROFILE,
            Cel(m::ROLE_XOR_INSTANCE_PROFILE),
        ),
        row(
            "role xor instanceProfile (neither)",
            spec(json!({"role": null})),
            "spec",
            m::ROLE_XOR_INSTANCE_PROFILE,
            Cel(m::ROLE_XOR_INSTANCE_PROFILE),
        ),
        row(
            "role not empty",
            spec(json!({"role": ""})),
            "spec.role",
            m::ROLE_EMPTY,
            Cel(m::ROLE_EMPTY),
        ),
        row(
            "instanceProfile not empty",
            spec(json!({"role": null, "instanceProfile": ""})),
            "spec.instanceProfile",
            m::INSTANCE_PROFILE_EMPTY,
            Cel(m::INSTANCE_PROFILE_EMPTY),
        ),
        // AMI family
        row(
            "amiFamily required without alias",
            spec(json!({"amiSelectorTerms": [{"id": "ami-123"}]})),
            "spec.amiFamily",
            m::AMI_FAMILY_REQUIRED,
            Cel(m::AMI_FAMILY_REQUIRED),
        ),
        row(
            "amiFamily matches alias",
            spec(json!({"amiFamily": "Bottlerocket"})),
            "spec.amiFamily",
            m::AMI_FAMILY_MATCHES_ALIAS,
            Cel(m::AMI_FAMILY_MATCHES_ALIAS),
        ),
        row(
            "amiFamily matches alias (windows)",
            spec(json!({"amiFamily": "Windows2019", "amiSelectorTerms": [{"alias": "windows2022@latest"}]})),
            "spec.amiFamily",
            m::AMI_FAMILY_MATCHES_ALIAS,
            Cel(m::AMI_FAMILY_MATCHES_ALIAS),
        ),
        row(
            "amiFamily matches alias (family spelled as in the alias)",
            spec(json!({"amiFamily": "al2023"})),
            "spec.amiFamily",
            m::AMI_FAMILY_MATCHES_ALIAS,
            Cel(m::AMI_FAMILY_MATCHES_ALIAS),
        ),
        row(
            "amiFamily enum (with alias)",
            spec(json!({"amiFamily": "al2023"})),
            "spec.amiFamily",
            "is not one of",
            Schema("spec.amiFamily"),
        ),
        row(
            "amiFamily enum",
            no_alias(json!({"amiFamily": "Ubuntu"})),
            "spec.amiFamily",
            "is not one of",
            Schema("spec.amiFamily"),
        ),
        // subnet selector terms
        row(
            "subnetSelectorTerms at least one",
            spec(json!({"subnetSelectorTerms": []})),
            "spec.subnetSelectorTerms",
            "at least 1",
            Schema("spec.subnetSelectorTerms"),
        ),
        row(
            "subnetSelectorTerms at most 30",
            spec(json!({"subnetSelectorTerms": ids("subnet-", 31)})),
            "spec.subnetSelectorTerms",
            "at most 30",
            Schema("spec.subnetSelectorTerms"),
        ),
        row(
            "subnet term not empty",
            spec(json!({"subnetSelectorTerms": [{}]})),
            "spec.subnetSelectorTerms[0]",
            m::SUBNET_TERM_EMPTY,
            Cel(m::SUBNET_TERM_EMPTY),
        ),
        row(
            "subnet id exclusive (every term)",
            spec(json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]})),
            "spec.subnetSelectorTerms",
            m::SUBNET_ID_EXCLUSIVE,
            Cel(m::SUBNET_ID_EXCLUSIVE),
        ),
        row(
            "subnet id pattern",
            spec(json!({"subnetSelectorTerms": [{"id": "sg-123"}]})),
            "spec.subnetSelectorTerms[0].id",
            "does not match",
            Schema("spec.subnetSelectorTerms[0].id"),
        ),
        row(
            "subnet tags not empty",
            spec(json!({"subnetSelectorTerms": [{"tags": {"a": ""}}]})),
            "spec.subnetSelectorTerms[0].tags",
            m::SELECTOR_TAGS_EMPTY,
            Cel(m::SELECTOR_TAGS_EMPTY),
        ),
        row(
            "subnet tags at most 20",
            spec(json!({"subnetSelectorTerms": [{"tags": many_tags.clone()}]})),
            "spec.subnetSelectorTerms[0].tags",
            "at most 20",
            Schema("spec.subnetSelectorTerms[0].tags"),
        ),
        // security group selector terms
        row(
            "securityGroupSelectorTerms at least one",
            spec(json!({"securityGroupSelectorTerms": []})),
            "spec.securityGroupSelectorTerms",
            "at least 1",
            Schema("spec.securityGroupSelectorTerms"),
        ),
        row(
            "securityGroupSelectorTerms at most 30",
            spec(json!({"securityGroupSelectorTerms": ids("sg-", 31)})),
            "spec.securityGroupSelectorTerms",
            "at most 30",
            Schema("spec.securityGroupSelectorTerms"),
        ),
        row(
            "security group term not empty",
            spec(json!({"securityGroupSelectorTerms": [{}]})),
            "spec.securityGroupSelectorTerms[0]",
            m::SECURITY_GROUP_TERM_EMPTY,
            Cel(m::SECURITY_GROUP_TERM_EMPTY),
        ),
        row(
            "security group id exclusive",
            spec(json!({"securityGroupSelectorTerms": [{"id": "sg-1", "tags": {"a": "b"}}]})),
            "spec.securityGroupSelectorTerms",
            m::SECURITY_GROUP_ID_EXCLUSIVE,
            Cel(m::SECURITY_GROUP_ID_EXCLUSIVE),
        ),
        row(
            "security group name exclusive",
            spec(json!({"securityGroupSelectorTerms": [{"name": "nodes", "tags": {"a": "b"}}]})),
            "spec.securityGroupSelectorTerms",
            m::SECURITY_GROUP_NAME_EXCLUSIVE,
            Cel(m::SECURITY_GROUP_NAME_EXCLUSIVE),
        ),
        row(
            "security group id pattern",
            spec(json!({"securityGroupSelectorTerms": [{"id": "sg_1"}]})),
            "spec.securityGroupSelectorTerms[0].id",
            "does not match",
            Schema("spec.securityGroupSelectorTerms[0].id"),
        ),
        row(
            "security group tags not empty",
            spec(json!({"securityGroupSelectorTerms": [{"tags": {"": "x"}}]})),
            "spec.securityGroupSelectorTerms[0].tags",
            m::SELECTOR_TAGS_EMPTY,
            Cel(m::SELECTOR_TAGS_EMPTY),
        ),
        // capacity reservation selector terms
        row(
            "capacityReservationSelectorTerms at most 30",
            spec(json!({"capacityReservationSelectorTerms": ids("cr-", 31)})),
            "spec.capacityReservationSelectorTerms",
            "at most 30",
            Schema("spec.capacityReservationSelectorTerms"),
        ),
        row(
            "capacity reservation term not empty",
            spec(json!({"capacityReservationSelectorTerms": [{"ownerID": "123456789012"}]})),
            "spec.capacityReservationSelectorTerms[0]",
            m::CAPACITY_RESERVATION_TERM_EMPTY,
            Cel(m::CAPACITY_RESERVATION_TERM_EMPTY),
        ),
        row(
            "capacity reservation id exclusive",
            spec(json!({"capacityReservationSelectorTerms": [{"id": "cr-1", "ownerID": "123456789012"}]})),
            "spec.capacityReservationSelectorTerms",
            m::CAPACITY_RESERVATION_ID_EXCLUSIVE,
            Cel(m::CAPACITY_RESERVATION_ID_EXCLUSIVE),
        ),
        row(
            "capacity reservation id pattern",
            spec(json!({"capacityReservationSelectorTerms": [{"id": "cr-ABC"}]})),
            "spec.capacityReservationSelectorTerms[0].id",
            "does not match",
            Schema("spec.capacityReservationSelectorTerms[0].id"),
        ),
        row(
            "capacity reservation ownerID pattern",
            spec(json!({"capacityReservationSelectorTerms": [{"tags": {"a": "b"}, "ownerID": "12345"}]})),
            "spec.capacityReservationSelectorTerms[0].ownerID",
            "12-digit",
            Schema("spec.capacityReservationSelectorTerms[0].ownerID"),
        ),
        row(
            "capacity reservation instanceMatchCriteria enum",
            spec(json!({"capacityReservationSelectorTerms": [{"instanceMatchCriteria": "closed"}]})),
            "spec.capacityReservationSelectorTerms[0].instanceMatchCriteria",
            "is not one of",
            Schema("spec.capacityReservationSelectorTerms[0].instanceMatchCriteria"),
        ),
        row(
            "capacity reservation tags not empty",
            spec(json!({"capacityReservationSelectorTerms": [{"tags": {"a": ""}}]})),
            "spec.capacityReservationSelectorTerms[0].tags",
            m::SELECTOR_TAGS_EMPTY,
            Cel(m::SELECTOR_TAGS_EMPTY),
        ),
        // placement group
        row(
            "placementGroupSelector exactly one (both)",
            spec(json!({"placementGroupSelector": {"name": "pg", "id": "pg-1"}})),
            "spec.placementGroupSelector",
            m::PLACEMENT_GROUP_ONE_OF,
            Cel(m::PLACEMENT_GROUP_ONE_OF),
        ),
        row(
            "placementGroupSelector exactly one (neither)",
            spec(json!({"placementGroupSelector": {}})),
            "spec.placementGroupSelector",
            m::PLACEMENT_GROUP_ONE_OF,
            Cel(m::PLACEMENT_GROUP_ONE_OF),
        ),
        row(
            "placementGroupSelector id pattern",
            spec(json!({"placementGroupSelector": {"id": "pg_1"}})),
            "spec.placementGroupSelector.id",
            "does not match",
            Schema("spec.placementGroupSelector.id"),
        ),
        // ipPrefixCount
        row(
            "ipPrefixCount non-negative",
            spec(json!({"ipPrefixCount": -1})),
            "spec.ipPrefixCount",
            "at least 0",
            Schema("spec.ipPrefixCount"),
        ),
        // AMI selector terms
        row(
            "amiSelectorTerms at least one",
            no_alias(json!({"amiSelectorTerms": []})),
            "spec.amiSelectorTerms",
            "at least 1",
            Schema("spec.amiSelectorTerms"),
        ),
        row(
            "amiSelectorTerms at most 30",
            no_alias(json!({"amiSelectorTerms": ids("ami-", 31)})),
            "spec.amiSelectorTerms",
            "at most 30",
            Schema("spec.amiSelectorTerms"),
        ),
        row(
            "ami term not empty",
            no_alias(json!({"amiSelectorTerms": [{"owner": "self"}]})),
            "spec.amiSelectorTerms[0]",
            m::AMI_TERM_EMPTY,
            Cel(m::AMI_TERM_EMPTY),
        ),
        row(
            "ami id exclusive (name)",
            no_alias(json!({"amiSelectorTerms": [{"id": "ami-1", "name": "x"}]})),
            "spec.amiSelectorTerms[0]",
            m::AMI_ID_EXCLUSIVE,
            Cel(m::AMI_ID_EXCLUSIVE),
        ),
        row(
            "ami id exclusive (tags, in one term of several)",
            no_alias(json!({"amiSelectorTerms": [{"name": "x"}, {"id": "ami-1", "tags": {"a": "b"}}]})),
            "spec.amiSelectorTerms[1]",
            m::AMI_ID_EXCLUSIVE,
            Cel(m::AMI_ID_EXCLUSIVE),
        ),
        row(
            "ami alias exclusive",
            spec(json!({"amiSelectorTerms": [{"alias": "al2023@latest", "owner": "self"}]})),
            "spec.amiSelectorTerms[0]",
            m::AMI_ALIAS_EXCLUSIVE,
            Cel(m::AMI_ALIAS_EXCLUSIVE),
        ),
        row(
            "ami alias only term",
            spec(json!({"amiSelectorTerms": [{"id": "ami-1"}, {"alias": "al2023@latest"}]})),
            "spec.amiSelectorTerms[1]",
            m::AMI_ALIAS_ONLY_TERM,
            Cel(m::AMI_ALIAS_ONLY_TERM),
        ),
        row(
            "alias format",
            spec(json!({"amiSelectorTerms": [{"alias": "al2023"}]})),
            "spec.amiSelectorTerms[0].alias",
            m::ALIAS_FORMAT,
            Cel(m::ALIAS_FORMAT),
        ),
        row(
            "alias family",
            spec(json!({"amiFamily": "Custom", "amiSelectorTerms": [{"alias": "ubuntu@latest"}]})),
            "spec.amiSelectorTerms[0].alias",
            m::ALIAS_FAMILY,
            Cel(m::ALIAS_FAMILY),
        ),
        row(
            "alias windows only latest",
            spec(json!({"amiSelectorTerms": [{"alias": "windows2022@v20240101"}]})),
            "spec.amiSelectorTerms[0].alias",
            m::ALIAS_WINDOWS_LATEST,
            Cel(m::ALIAS_WINDOWS_LATEST),
        ),
        row(
            "alias at most 30 characters",
            spec(json!({"amiSelectorTerms": [{"alias": "bottlerocket@v1.20.0-0123456789abcdef"}]})),
            "spec.amiSelectorTerms[0].alias",
            "at most 30",
            Schema("spec.amiSelectorTerms[0].alias"),
        ),
        row(
            "ami id pattern",
            no_alias(json!({"amiSelectorTerms": [{"id": "ami_1"}]})),
            "spec.amiSelectorTerms[0].id",
            "does not match",
            Schema("spec.amiSelectorTerms[0].id"),
        ),
        row(
            "ami tags not empty",
            no_alias(json!({"amiSelectorTerms": [{"tags": {"a": ""}}]})),
            "spec.amiSelectorTerms[0].tags",
            m::SELECTOR_TAGS_EMPTY,
            Cel(m::SELECTOR_TAGS_EMPTY),
        ),
        row(
            "ami tags at most 20",
            no_alias(json!({"amiSelectorTerms": [{"tags": many_tags}]})),
            "spec.amiSelectorTerms[0].tags",
            "at most 20",
            Schema("spec.amiSelectorTerms[0].tags"),
        ),
        // tags
        row(
            "tags no empty key",
            spec(json!({"tags": {"": "x"}})),
            "spec.tags[\"\"]",
            m::TAG_KEY_EMPTY,
            Cel(m::TAG_KEY_EMPTY),
        ),
        row(
            "tags reserved eks:eks-cluster-name",
            spec(json!({"tags": {"eks:eks-cluster-name": "x"}})),
            "spec.tags[\"eks:eks-cluster-name\"]",
            m::TAG_RESERVED_EKS_CLUSTER_NAME,
            Cel(m::TAG_RESERVED_EKS_CLUSTER_NAME),
        ),
        row(
            "tags reserved kubernetes.io/cluster prefix",
            spec(json!({"tags": {"kubernetes.io/cluster/prod": "owned"}})),
            "spec.tags[\"kubernetes.io/cluster/prod\"]",
            m::TAG_RESERVED_CLUSTER,
            Cel(m::TAG_RESERVED_CLUSTER),
        ),
        row(
            "tags reserved karpenter.sh/nodepool",
            spec(json!({"tags": {"karpenter.sh/nodepool": "x"}})),
            "spec.tags[\"karpenter.sh/nodepool\"]",
            m::TAG_RESERVED_NODEPOOL,
            Cel(m::TAG_RESERVED_NODEPOOL),
        ),
        row(
            "tags reserved karpenter.sh/nodeclaim",
            spec(json!({"tags": {"karpenter.sh/nodeclaim": "x"}})),
            "spec.tags[\"karpenter.sh/nodeclaim\"]",
            m::TAG_RESERVED_NODECLAIM,
            Cel(m::TAG_RESERVED_NODECLAIM),
        ),
        row(
            "tags reserved karpenter.k8s.aws/ec2nodeclass",
            spec(json!({"tags": {"karpenter.k8s.aws/ec2nodeclass": "x"}})),
            "spec.tags[\"karpenter.k8s.aws/ec2nodeclass\"]",
            m::TAG_RESERVED_EC2NODECLASS,
            Cel(m::TAG_RESERVED_EC2NODECLASS),
        ),
        // kubelet
        row(
            "kubelet maxPods non-negative",
            spec(json!({"kubelet": {"maxPods": -1}})),
            "spec.kubelet.maxPods",
            "at least 0",
            Schema("spec.kubelet.maxPods"),
        ),
        row(
            "kubelet podsPerCore non-negative",
            spec(json!({"kubelet": {"podsPerCore": -1}})),
            "spec.kubelet.podsPerCore",
            "at least 0",
            Schema("spec.kubelet.podsPerCore"),
        ),
        row(
            "kubelet systemReserved keys",
            spec(json!({"kubelet": {"systemReserved": {"gpu": "1"}}})),
            "spec.kubelet.systemReserved[\"gpu\"]",
            m::KUBELET_RESERVED_KEYS,
            Cel(m::KUBELET_RESERVED_KEYS),
        ),
        row(
            "kubelet kubeReserved keys",
            spec(json!({"kubelet": {"kubeReserved": {"nvidia.com/gpu": "1"}}})),
            "spec.kubelet.kubeReserved[\"nvidia.com/gpu\"]",
            m::KUBELET_RESERVED_KEYS,
            Cel(m::KUBELET_RESERVED_KEYS),
        ),
        row(
            "kubelet systemReserved not negative",
            spec(json!({"kubelet": {"systemReserved": {"cpu": "-100m"}}})),
            "spec.kubelet.systemReserved[\"cpu\"]",
            m::KUBELET_RESERVED_NEGATIVE,
            Cel(m::KUBELET_RESERVED_NEGATIVE),
        ),
        row(
            "kubelet kubeReserved not negative",
            spec(json!({"kubelet": {"kubeReserved": {"memory": "-1Gi"}}})),
            "spec.kubelet.kubeReserved[\"memory\"]",
            m::KUBELET_RESERVED_NEGATIVE,
            Cel(m::KUBELET_RESERVED_NEGATIVE),
        ),
        row(
            "kubelet kubeReserved quantity",
            spec(json!({"kubelet": {"kubeReserved": {"memory": "lots"}}})),
            "spec.kubelet.kubeReserved[\"memory\"]",
            "not a resource quantity",
            Schema("spec.kubelet.kubeReserved.memory"),
        ),
        row(
            "kubelet evictionHard keys",
            spec(json!({"kubelet": {"evictionHard": {"memory.free": "5%"}}})),
            "spec.kubelet.evictionHard[\"memory.free\"]",
            m::KUBELET_EVICTION_KEYS,
            Cel(m::KUBELET_EVICTION_KEYS),
        ),
        row(
            "kubelet evictionHard threshold",
            spec(json!({"kubelet": {"evictionHard": {"memory.available": "105%"}}})),
            "spec.kubelet.evictionHard[\"memory.available\"]",
            "percentage",
            Schema("spec.kubelet.evictionHard.memory.available"),
        ),
        row(
            "kubelet evictionSoft keys",
            spec(
                json!({"kubelet": {"evictionSoft": {"disk.available": "5%"}, "evictionSoftGracePeriod": {"disk.available": "1m"}}}),
            ),
            "spec.kubelet.evictionSoft[\"disk.available\"]",
            m::KUBELET_EVICTION_KEYS,
            Cel(m::KUBELET_EVICTION_KEYS),
        ),
        row(
            "kubelet evictionSoftGracePeriod keys",
            spec(
                json!({"kubelet": {"evictionSoft": {"disk.available": "5%"}, "evictionSoftGracePeriod": {"disk.available": "1m"}}}),
            ),
            "spec.kubelet.evictionSoftGracePeriod[\"disk.available\"]",
            m::KUBELET_EVICTION_KEYS,
            Cel(m::KUBELET_EVICTION_KEYS),
        ),
        row(
            "kubelet evictionSoftGracePeriod duration",
            spec(
                json!({"kubelet": {"evictionSoft": {"memory.available": "5%"}, "evictionSoftGracePeriod": {"memory.available": "1d"}}}),
            ),
            "spec.kubelet.evictionSoftGracePeriod[\"memory.available\"]",
            "not a duration",
            Schema("spec.kubelet.evictionSoftGracePeriod.memory.available"),
        ),
        row(
            "kubelet evictionSoft needs grace period",
            spec(json!({"kubelet": {"evictionSoft": {"memory.available": "5%"}}})),
            "spec.kubelet.evictionSoft[\"memory.available\"]",
            m::KUBELET_SOFT_NEEDS_GRACE,
            Cel(m::KUBELET_SOFT_NEEDS_GRACE),
        ),
        row(
            "kubelet evictionSoft needs grace period (other key)",
            spec(
                json!({"kubelet": {"evictionSoft": {"memory.available": "5%", "nodefs.available": "5%"}, "evictionSoftGracePeriod": {"memory.available": "1m"}}}),
            ),
            "spec.kubelet.evictionSoft[\"nodefs.available\"]",
            m::KUBELET_SOFT_NEEDS_GRACE,
            Cel(m::KUBELET_SOFT_NEEDS_GRACE),
        ),
        row(
            "kubelet grace period needs evictionSoft",
            spec(json!({"kubelet": {"evictionSoftGracePeriod": {"memory.available": "1m"}}})),
            "spec.kubelet.evictionSoftGracePeriod[\"memory.available\"]",
            m::KUBELET_GRACE_NEEDS_SOFT,
            Cel(m::KUBELET_GRACE_NEEDS_SOFT),
        ),
        row(
            "kubelet imageGC high above low",
            spec(json!({"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}})),
            "spec.kubelet.imageGCHighThresholdPercent",
            m::KUBELET_IMAGE_GC,
            Cel(m::KUBELET_IMAGE_GC),
        ),
        row(
            "kubelet imageGC high at most 100",
            spec(json!({"kubelet": {"imageGCHighThresholdPercent": 101}})),
            "spec.kubelet.imageGCHighThresholdPercent",
            "between 0 and 100",
            Schema("spec.kubelet.imageGCHighThresholdPercent"),
        ),
        row(
            "kubelet imageGC low at least 0",
            spec(json!({"kubelet": {"imageGCLowThresholdPercent": -1}})),
            "spec.kubelet.imageGCLowThresholdPercent",
            "between 0 and 100",
            Schema("spec.kubelet.imageGCLowThresholdPercent"),
        ),
        // block device mappings
        row(
            "blockDeviceMappings one root volume",
            spec(json!({"blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}},
                {"deviceName": "/dev/xvdb", "rootVolume": false, "ebs": {"volumeSize": "20Gi"}},
                {"deviceName": "/dev/xvdc", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}
            ]})),
            "spec.blockDeviceMappings",
            m::BDM_ONE_ROOT_VOLUME,
            Cel(m::BDM_ONE_ROOT_VOLUME),
        ),
        row(
            "blockDeviceMappings at most 50",
            spec(json!({"blockDeviceMappings": many_bdms})),
            "spec.blockDeviceMappings",
            "at most 50",
            Schema("spec.blockDeviceMappings"),
        ),
        row(
            "ebs snapshotID or volumeSize",
            spec(json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]})),
            "spec.blockDeviceMappings[0].ebs",
            m::EBS_SNAPSHOT_OR_SIZE,
            Cel(m::EBS_SNAPSHOT_OR_SIZE),
        ),
        row(
            "ebs volumeInitializationRate needs snapshotID",
            spec(
                json!({"blockDeviceMappings": [{"ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 150}}]}),
            ),
            "spec.blockDeviceMappings[0].ebs.volumeInitializationRate",
            m::EBS_INIT_RATE_NEEDS_SNAPSHOT,
            Cel(m::EBS_INIT_RATE_NEEDS_SNAPSHOT),
        ),
        row(
            "ebs volumeInitializationRate needs non-empty snapshotID",
            spec(
                json!({"blockDeviceMappings": [{"ebs": {"volumeSize": "20Gi", "snapshotID": "", "volumeInitializationRate": 150}}]}),
            ),
            "spec.blockDeviceMappings[0].ebs.volumeInitializationRate",
            m::EBS_INIT_RATE_NEEDS_SNAPSHOT,
            Cel(m::EBS_INIT_RATE_NEEDS_SNAPSHOT),
        ),
        row(
            "ebs volumeInitializationRate range",
            spec(
                json!({"blockDeviceMappings": [{"ebs": {"snapshotID": "snap-1", "volumeInitializationRate": 99}}]}),
            ),
            "spec.blockDeviceMappings[0].ebs.volumeInitializationRate",
            "between 100 and 300",
            Schema("spec.blockDeviceMappings[0].ebs.volumeInitializationRate"),
        ),
        row(
            "ebs volumeSize unit",
            spec(json!({"blockDeviceMappings": [{"ebs": {"volumeSize": "100Mi"}}]})),
            "spec.blockDeviceMappings[0].ebs.volumeSize",
            "1-59000Gi",
            Schema("spec.blockDeviceMappings[0].ebs.volumeSize"),
        ),
        row(
            "ebs volumeSize too large",
            spec(json!({"blockDeviceMappings": [{"ebs": {"volumeSize": "65T"}}]})),
            "spec.blockDeviceMappings[0].ebs.volumeSize",
            "1-64T",
            Schema("spec.blockDeviceMappings[0].ebs.volumeSize"),
        ),
        row(
            "ebs volumeSize zero",
            spec(json!({"blockDeviceMappings": [{"ebs": {"volumeSize": "0Gi"}}]})),
            "spec.blockDeviceMappings[0].ebs.volumeSize",
            "1-59000Gi",
            Schema("spec.blockDeviceMappings[0].ebs.volumeSize"),
        ),
        row(
            "ebs volumeType enum",
            spec(json!({"blockDeviceMappings": [{"ebs": {"volumeSize": "20Gi", "volumeType": "gp4"}}]})),
            "spec.blockDeviceMappings[0].ebs.volumeType",
            "is not one of",
            Schema("spec.blockDeviceMappings[0].ebs.volumeType"),
        ),
        // instance store
        row(
            "instanceStorePolicy enum",
            spec(json!({"instanceStorePolicy": "RAID1"})),
            "spec.instanceStorePolicy",
            "is not one of",
            Schema("spec.instanceStorePolicy"),
        ),
        // network interfaces
        row(
            "networkInterfaces primary present",
            spec(json!({"networkInterfaces": [nic(0, 1, "efa-only")]})),
            "spec.networkInterfaces",
            m::NETWORK_INTERFACES_PRIMARY,
            Cel(m::NETWORK_INTERFACES_PRIMARY),
        ),
        row(
            "networkInterfaces primary present (primary is efa-only)",
            spec(json!({"networkInterfaces": [nic(0, 0, "efa-only")]})),
            "spec.networkInterfaces",
            m::NETWORK_INTERFACES_PRIMARY,
            Cel(m::NETWORK_INTERFACES_PRIMARY),
        ),
        row(
            "networkInterfaces primary present (empty list)",
            spec(json!({"networkInterfaces": []})),
            "spec.networkInterfaces",
            m::NETWORK_INTERFACES_PRIMARY,
            Cel(m::NETWORK_INTERFACES_PRIMARY),
        ),
        row(
            "networkInterfaces no duplicate",
            spec(
                json!({"networkInterfaces": [nic(0, 0, "interface"), nic(1, 0, "interface"), nic(1, 0, "efa-only")]}),
            ),
            "spec.networkInterfaces[2]",
            m::NETWORK_INTERFACES_UNIQUE,
            Cel(m::NETWORK_INTERFACES_UNIQUE),
        ),
        row(
            "networkInterfaces one efa-only per card",
            spec(
                json!({"networkInterfaces": [nic(0, 0, "interface"), nic(2, 0, "efa-only"), nic(2, 1, "efa-only")]}),
            ),
            "spec.networkInterfaces[2]",
            m::NETWORK_INTERFACES_ONE_EFA_ONLY,
            Cel(m::NETWORK_INTERFACES_ONE_EFA_ONLY),
        ),
        row(
            "networkInterfaces networkCardIndex non-negative",
            spec(json!({"networkInterfaces": [nic(0, 0, "interface"), nic(-1, 0, "interface")]})),
            "spec.networkInterfaces[1].networkCardIndex",
            "at least 0",
            Schema("spec.networkInterfaces[1].networkCardIndex"),
        ),
        row(
            "networkInterfaces deviceIndex non-negative",
            spec(json!({"networkInterfaces": [nic(0, 0, "interface"), nic(1, -1, "interface")]})),
            "spec.networkInterfaces[1].deviceIndex",
            "at least 0",
            Schema("spec.networkInterfaces[1].deviceIndex"),
        ),
        row(
            "networkInterfaces interfaceType enum",
            spec(json!({"networkInterfaces": [nic(0, 0, "interface"), nic(1, 0, "efa")]})),
            "spec.networkInterfaces[1].interfaceType",
            "is not one of",
            Schema("spec.networkInterfaces[1].interfaceType"),
        ),
        row(
            "networkInterfaces at most 150",
            spec(json!({"networkInterfaces": many_nics})),
            "spec.networkInterfaces",
            "at most 150",
            Schema("spec.networkInterfaces"),
        ),
        // metadata options
        row(
            "metadataOptions httpEndpoint enum",
            spec(json!({"metadataOptions": {"httpEndpoint": "on"}})),
            "spec.metadataOptions.httpEndpoint",
            "is not one of",
            Schema("spec.metadataOptions.httpEndpoint"),
        ),
        row(
            "metadataOptions httpProtocolIPv6 enum",
            spec(json!({"metadataOptions": {"httpProtocolIPv6": "yes"}})),
            "spec.metadataOptions.httpProtocolIPv6",
            "is not one of",
            Schema("spec.metadataOptions.httpProtocolIPv6"),
        ),
        row(
            "metadataOptions hop limit at least 1",
            spec(json!({"metadataOptions": {"httpPutResponseHopLimit": 0}})),
            "spec.metadataOptions.httpPutResponseHopLimit",
            "between 1 and 64",
            Schema("spec.metadataOptions.httpPutResponseHopLimit"),
        ),
        row(
            "metadataOptions hop limit at most 64",
            spec(json!({"metadataOptions": {"httpPutResponseHopLimit": 65}})),
            "spec.metadataOptions.httpPutResponseHopLimit",
            "between 1 and 64",
            Schema("spec.metadataOptions.httpPutResponseHopLimit"),
        ),
        row(
            "metadataOptions httpTokens enum",
            spec(json!({"metadataOptions": {"httpTokens": "sometimes"}})),
            "spec.metadataOptions.httpTokens",
            "is not one of",
            Schema("spec.metadataOptions.httpTokens"),
        ),
        // connection tracking
        row(
            "connectionTracking at least one",
            spec(json!({"connectionTracking": {}})),
            "spec.connectionTracking",
            m::CONNECTION_TRACKING_ONE,
            Cel(m::CONNECTION_TRACKING_ONE),
        ),
        row(
            "connectionTracking tcpEstablishedTimeout min",
            spec(json!({"connectionTracking": {"tcpEstablishedTimeout": 59}})),
            "spec.connectionTracking.tcpEstablishedTimeout",
            "between 60 and 432000",
            Schema("spec.connectionTracking.tcpEstablishedTimeout"),
        ),
        row(
            "connectionTracking tcpEstablishedTimeout max",
            spec(json!({"connectionTracking": {"tcpEstablishedTimeout": 432_001}})),
            "spec.connectionTracking.tcpEstablishedTimeout",
            "between 60 and 432000",
            Schema("spec.connectionTracking.tcpEstablishedTimeout"),
        ),
        row(
            "connectionTracking udpStreamTimeout range",
            spec(json!({"connectionTracking": {"udpStreamTimeout": 181}})),
            "spec.connectionTracking.udpStreamTimeout",
            "between 60 and 180",
            Schema("spec.connectionTracking.udpStreamTimeout"),
        ),
        row(
            "connectionTracking udpTimeout range",
            spec(json!({"connectionTracking": {"udpTimeout": 29}})),
            "spec.connectionTracking.udpTimeout",
            "between 30 and 60",
            Schema("spec.connectionTracking.udpTimeout"),
        ),
        // cpu options
        row(
            "cpuOptions nestedVirtualization enum",
            spec(json!({"cpuOptions": {"nestedVirtualization": "on"}})),
            "spec.cpuOptions.nestedVirtualization",
            "is not one of",
            Schema("spec.cpuOptions.nestedVirtualization"),
        ),
    ]
}

#[test]
fn every_invalid_row_is_rejected_by_validate_and_the_crd() {
    let crd = ec2nodeclass::crd();
    let mut failures = Vec::new();
    for row in table() {
        let obj = patched(&row.patch);
        let nc: EC2NodeClass = match serde_json::from_value(obj.clone()) {
            Ok(nc) => nc,
            Err(e) => {
                failures.push(format!("{}: does not decode: {e}", row.rule));
                continue;
            }
        };
        match nc.validate() {
            Ok(()) => failures.push(format!("{}: validate() accepted it", row.rule)),
            Err(errs) => {
                let hit = errs
                    .0
                    .iter()
                    .any(|e| e.path == row.path && e.message.contains(row.message));
                if !hit {
                    failures.push(format!(
                        "{}: no error at {} containing {:?}; got: {errs}",
                        row.rule, row.path, row.message
                    ));
                }
                if !errs
                    .0
                    .iter()
                    .all(|e| e.to_string().starts_with("EC2NodeClass default: spec"))
                {
                    failures.push(format!(
                        "{}: errors do not name the object and field: {errs}",
                        row.rule
                    ));
                }
            }
        }
        match row.crd {
            Crd::Cel(message) => {
                let cel = support::cel_errors(&crd, &obj, None);
                if !cel.iter().any(|e| e.contains(message)) {
                    failures.push(format!(
                        "{}: CRD CEL rules did not report {message:?}; got {cel:?}",
                        row.rule
                    ));
                }
            }
            Crd::Schema(path) => {
                let schema = support::schema_errors(&crd, &obj);
                if !schema.iter().any(|e| e.contains(path)) {
                    failures.push(format!(
                        "{}: CRD schema did not reject at {path}; got {schema:?}",
                        row.rule
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn base_and_full_objects_pass_validate_cel_and_schema() {
    let crd = ec2nodeclass::crd();
    for (name, obj) in [("base", base()), ("full", full())] {
        let nc: EC2NodeClass = serde_json::from_value(obj.clone()).unwrap();
        assert_eq!(nc.validate(), Ok(()), "{name}");
        assert_eq!(
            support::cel_errors(&crd, &obj, None),
            Vec::<String>::new(),
            "{name}"
        );
        assert_eq!(support::schema_errors(&crd, &obj), Vec::<String>::new(), "{name}");
    }
}

#[test]
fn valid_variants_pass_validate_and_the_crd() {
    let crd = ec2nodeclass::crd();
    let variants = [
        spec(json!({"role": null, "instanceProfile": "KarpenterNodeInstanceProfile"})),
        spec(json!({"amiFamily": "Custom"})),
        spec(json!({"amiFamily": "AL2023"})),
        spec(json!({"amiSelectorTerms": [{"alias": "windows2025@latest"}]})),
        spec(json!({"amiSelectorTerms": [{"alias": "bottlerocket@v1.20.0"}], "amiFamily": "Bottlerocket"})),
        spec(json!({"amiSelectorTerms": [{"alias": "al2@v20240625"}]})),
        spec(
            json!({"amiSelectorTerms": [{"id": "ami-1"}, {"name": "x", "owner": "amazon"}], "amiFamily": "Windows2025"}),
        ),
        spec(json!({"placementGroupSelector": {"id": "pg-0123456789abcdef0"}})),
        spec(
            json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "64T"}}, {"ebs": {"volumeSize": "59000Gi"}}]}),
        ),
        spec(json!({"networkInterfaces": [nic(0, 0, "interface")]})),
        spec(json!({"kubelet": {"imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 0}})),
        spec(
            json!({"kubelet": {"evictionHard": {"memory.available": "100%", "pid.available": "0.5%", "nodefs.available": "1Gi"}}}),
        ),
        spec(json!({"connectionTracking": {"udpTimeout": 60}})),
        spec(json!({"metadataOptions": {"httpTokens": "optional"}})),
        spec(json!({"tags": {"kubernetes.io/role": "x", "eks:other": "y"}})),
    ];
    for patch in variants {
        let obj = patched(&patch);
        let nc: EC2NodeClass = serde_json::from_value(obj.clone()).unwrap();
        assert_eq!(nc.validate(), Ok(()), "{patch}");
        assert_eq!(
            support::cel_errors(&crd, &obj, None),
            Vec::<String>::new(),
            "{patch}"
        );
        assert_eq!(
            support::schema_errors(&crd, &obj),
            Vec::<String>::new(),
            "{patch}"
        );
    }
}

#[test]
fn manifests_round_trip_without_fields_appearing() {
    for obj in [base(), full()] {
        let nc: EC2NodeClass = serde_json::from_value(obj.clone()).unwrap();
        assert_eq!(serde_json::to_value(&nc).unwrap(), obj);
    }
}

#[test]
fn crd_names_columns_and_subresources() {
    let crd = ec2nodeclass::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("ec2nodeclasses.karpenter.k8s.aws")
    );
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(crd.spec.names.kind, "EC2NodeClass");
    assert_eq!(
        crd.spec.names.short_names,
        Some(vec!["ec2nc".to_string(), "ec2ncs".to_string()])
    );
    assert_eq!(crd.spec.names.categories, Some(vec!["karpenter".to_string()]));
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1");
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let columns: Vec<(String, Option<i32>)> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), c.priority))
        .collect();
    assert_eq!(
        columns,
        vec![
            ("Ready".into(), None),
            ("Age".into(), None),
            ("Role".into(), Some(1))
        ]
    );
    let schema = support::schema_of(&crd);
    assert!(
        !serde_json::to_string(&schema).unwrap().contains("nullable"),
        "fields are not nullable, as upstream"
    );
    assert_eq!(
        schema.pointer("/properties/spec/properties/metadataOptions/default"),
        Some(
            &json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"})
        )
    );
}

#[test]
fn metadata_options_default_through_accessors_and_the_crd() {
    let nc: EC2NodeClass = serde_json::from_value(base()).unwrap();
    let o = nc.spec.metadata_options();
    assert_eq!(
        (
            o.http_endpoint(),
            o.http_protocol_ipv6(),
            o.http_put_response_hop_limit(),
            o.http_tokens()
        ),
        ("enabled", "disabled", 1, "required")
    );
    let partial: EC2NodeClass = serde_json::from_value(patched(&spec(
        json!({"metadataOptions": {"httpTokens": "optional"}}),
    )))
    .unwrap();
    let o = partial.spec.metadata_options();
    assert_eq!(
        (
            o.http_endpoint(),
            o.http_tokens(),
            o.http_put_response_hop_limit()
        ),
        ("enabled", "optional", 1)
    );
    assert!(
        nc.spec.metadata_options.is_none(),
        "defaults are not written into the object"
    );
}

#[test]
fn ami_family_resolution() {
    let family = |patch: Value| -> AmiFamily {
        let nc: EC2NodeClass = serde_json::from_value(patched(&patch)).unwrap();
        nc.ami_family()
    };
    assert_eq!(family(json!({})), AmiFamily::AL2023, "from the alias");
    assert_eq!(
        family(spec(
            json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]})
        )),
        AmiFamily::Bottlerocket
    );
    assert_eq!(
        family(spec(
            json!({"amiSelectorTerms": [{"alias": "windows2025@latest"}]})
        )),
        AmiFamily::Windows2025
    );
    assert_eq!(
        family(spec(json!({"amiFamily": "Custom"}))),
        AmiFamily::Custom,
        "Custom with an alias stays Custom"
    );
    assert_eq!(
        family(spec(
            json!({"amiSelectorTerms": [{"id": "ami-1"}], "amiFamily": "AL2"})
        )),
        AmiFamily::AL2
    );
    let nc: EC2NodeClass = serde_json::from_value(base()).unwrap();
    let alias = nc.alias().unwrap();
    assert!(alias.is_latest());
    assert_eq!(alias.to_string(), "al2023@latest");
}

#[test]
fn hash_version_is_ours_and_hash_is_decimal() {
    assert_eq!(EC2NODECLASS_HASH_VERSION, "v6-rs1");
    let nc: EC2NodeClass = serde_json::from_value(full()).unwrap();
    let hash = nc.hash();
    assert!(hash.parse::<u64>().is_ok(), "{hash}");
    assert_eq!(hash, nc.hash(), "deterministic");
}

#[test]
fn hash_ignores_selectors_status_defaults_and_order() {
    let hash = |obj: Value| serde_json::from_value::<EC2NodeClass>(obj).unwrap().hash();
    let before = hash(full());
    for patch in [
        spec(json!({"subnetSelectorTerms": [{"id": "subnet-9"}]})),
        spec(json!({"securityGroupSelectorTerms": [{"id": "sg-9"}]})),
        spec(json!({"capacityReservationSelectorTerms": null})),
        spec(json!({"amiSelectorTerms": [{"id": "ami-9"}]})),
        spec(json!({"placementGroupSelector": {"id": "pg-9"}})),
        spec(json!({"ipPrefixCount": 7})),
        json!({"status": null}),
        json!({"metadata": {"labels": {"a": "b"}}}),
        spec(
            json!({"subnetSelectorTerms": [{"id": "subnet-0a1b2c3d"}, {"tags": {"karpenter.sh/discovery": "cluster", "tier": "*"}}]}),
        ),
    ] {
        let mut obj = full();
        merge(&mut obj, &patch);
        assert_eq!(hash(obj), before, "{patch}");
    }
    // Reordering a list (block devices) does not drift.
    let mut reordered = full();
    let bdms = reordered["spec"]["blockDeviceMappings"].as_array_mut().unwrap();
    bdms.reverse();
    assert_eq!(hash(reordered), before);
    // A defaulted and an undefaulted copy hash alike.
    let mut undefaulted = base();
    let mut defaulted = base();
    merge(
        &mut defaulted,
        &spec(
            json!({"metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"}}),
        ),
    );
    assert_eq!(hash(defaulted), hash(undefaulted.clone()));
    // The resolved AMI family is hashed, not the field: adding the family the alias implies does not drift.
    let plain = hash(undefaulted.clone());
    merge(&mut undefaulted, &spec(json!({"amiFamily": "AL2023"})));
    assert_eq!(hash(undefaulted.clone()), plain);
    merge(&mut undefaulted, &spec(json!({"amiFamily": "Custom"})));
    assert_ne!(hash(undefaulted), plain, "switching to Custom user data drifts");
}

#[test]
fn hash_covers_launch_settings() {
    let hash = |obj: Value| serde_json::from_value::<EC2NodeClass>(obj).unwrap().hash();
    let before = hash(full());
    for patch in [
        spec(json!({"userData": "echo other"})),
        spec(json!({"tags": {"team": "other"}})),
        spec(json!({"kubelet": {"maxPods": 50}})),
        spec(json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "200Gi"}}]})),
        spec(json!({"metadataOptions": {"httpPutResponseHopLimit": 3}})),
        spec(json!({"detailedMonitoring": false})),
        spec(json!({"associatePublicIPAddress": true})),
        spec(json!({"instanceStorePolicy": null})),
        spec(json!({"networkInterfaces": null})),
        spec(json!({"connectionTracking": {"udpTimeout": 60}})),
        spec(json!({"cpuOptions": {"nestedVirtualization": "enabled"}})),
        spec(json!({"context": "other"})),
        spec(json!({"role": "OtherRole"})),
    ] {
        let mut obj = full();
        merge(&mut obj, &patch);
        assert_ne!(hash(obj), before, "{patch}");
    }
    let nc: EC2NodeClass = serde_json::from_value(full()).unwrap();
    assert_ne!(
        nc.hash_with_ca_bundle(Some("CA")),
        nc.hash(),
        "the CA bundle is hashed"
    );
}

#[test]
fn ready_dependents_follow_placement_group_and_gate() {
    let nc: EC2NodeClass = serde_json::from_value(base()).unwrap();
    assert_eq!(nc.ready_dependents(false).len(), 5);
    assert!(
        nc.ready_dependents(true)
            .contains(&ec2nodeclass::conditions::CAPACITY_RESERVATIONS_READY)
    );
    let with_pg: EC2NodeClass = serde_json::from_value(full()).unwrap();
    assert!(
        with_pg
            .ready_dependents(false)
            .contains(&ec2nodeclass::conditions::PLACEMENT_GROUP_READY)
    );
    assert!(with_pg.is_ready());
    assert_eq!(with_pg.zones(), vec!["us-west-2a".to_string()]);
}

/// Selector-term exclusivity as upstream v1.14.1's EC2NodeClass CRD has it (aws/karpenter-provider-aws
/// `pkg/apis/v1/ec2nodeclass.go` markers, `pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml`): the subnet,
/// security-group and capacity-reservation rules are `!self.all(...)`, so a list is rejected only when *every*
/// term mixes the fields (an explicit empty capacity-reservation list too); the AMI rules are `!self.exists(...)`
/// and do not name `ssmParameter`. Each object must get the same verdict from `validate()` and from the CRD.
#[test]
fn selector_term_exclusivity_matches_upstream() {
    let crd = ec2nodeclass::crd();
    let no_alias = |mut terms: Value| {
        merge(&mut terms, &json!({"amiFamily": "AL2023"}));
        spec(terms)
    };
    // (object, None = accepted, Some(message) = rejected with that message)
    let cases: Vec<(Value, Option<&str>)> = vec![
        // subnets
        (
            spec(
                json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}, {"tags": {"c": "d"}}]}),
            ),
            None,
        ),
        (
            spec(
                json!({"subnetSelectorTerms": [{"tags": {"c": "d"}}, {"id": "subnet-1", "tags": {"a": "b"}}]}),
            ),
            None,
        ),
        (
            spec(json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]})),
            Some(m::SUBNET_ID_EXCLUSIVE),
        ),
        (
            spec(
                json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}, {"id": "subnet-2", "tags": {"c": "d"}}]}),
            ),
            Some(m::SUBNET_ID_EXCLUSIVE),
        ),
        // security groups
        (
            spec(
                json!({"securityGroupSelectorTerms": [{"id": "sg-1", "tags": {"a": "b"}}, {"name": "nodes"}]}),
            ),
            None,
        ),
        (
            spec(json!({"securityGroupSelectorTerms": [{"id": "sg-1", "name": "x"}, {"tags": {"a": "b"}}]})),
            None,
        ),
        (
            spec(json!({"securityGroupSelectorTerms": [{"id": "sg-1", "name": "x"}]})),
            Some(m::SECURITY_GROUP_ID_EXCLUSIVE),
        ),
        (
            spec(json!({"securityGroupSelectorTerms": [{"name": "x", "tags": {"a": "b"}}]})),
            Some(m::SECURITY_GROUP_NAME_EXCLUSIVE),
        ),
        // capacity reservations
        (
            spec(
                json!({"capacityReservationSelectorTerms": [{"id": "cr-1", "tags": {"a": "b"}}, {"instanceMatchCriteria": "open"}]}),
            ),
            None,
        ),
        (
            spec(
                json!({"capacityReservationSelectorTerms": [{"id": "cr-1", "instanceMatchCriteria": "targeted"}]}),
            ),
            Some(m::CAPACITY_RESERVATION_ID_EXCLUSIVE),
        ),
        (
            spec(json!({"capacityReservationSelectorTerms": []})),
            Some(m::CAPACITY_RESERVATION_ID_EXCLUSIVE),
        ),
        // AMIs: ssmParameter may accompany id or alias; other fields may not, in any term.
        (
            no_alias(json!({"amiSelectorTerms": [{"id": "ami-1", "ssmParameter": "/p"}]})),
            None,
        ),
        (
            spec(json!({"amiSelectorTerms": [{"alias": "al2023@latest", "ssmParameter": "/p"}]})),
            None,
        ),
        (
            no_alias(json!({"amiSelectorTerms": [{"id": "ami-1", "owner": "self"}, {"name": "x"}]})),
            Some(m::AMI_ID_EXCLUSIVE),
        ),
        (
            spec(json!({"amiSelectorTerms": [{"alias": "al2023@latest", "name": "x"}]})),
            Some(m::AMI_ALIAS_EXCLUSIVE),
        ),
    ];
    let mut failures = Vec::new();
    for (patch, expected) in cases {
        let obj = patched(&patch);
        let nc: EC2NodeClass = serde_json::from_value(obj.clone()).unwrap();
        let rust = nc.validate().err().map(|e| e.to_string());
        let cel = support::cel_errors(&crd, &obj, None);
        let schema = support::schema_errors(&crd, &obj);
        match expected {
            None => {
                if rust.is_some() || !cel.is_empty() || !schema.is_empty() {
                    failures.push(format!(
                        "{patch}: expected accepted; validate: {rust:?}, CEL: {cel:?}, schema: {schema:?}"
                    ));
                }
            }
            Some(message) => {
                if !rust.as_deref().is_some_and(|e| e.contains(message)) {
                    failures.push(format!(
                        "{patch}: validate() did not report {message:?}: {rust:?}"
                    ));
                }
                if !cel.iter().any(|e| e.contains(message)) {
                    failures.push(format!("{patch}: CEL did not report {message:?}: {cel:?}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
