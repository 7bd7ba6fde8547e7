use karpenter_api::common::TaintEffect;
use karpenter_api::labels::UNREGISTERED_TAINT_KEY;

use super::*;

fn cluster() -> ClusterInfo {
    ClusterInfo {
        name: "prod".into(),
        endpoint: Some("https://ABC.gr7.us-west-2.eks.amazonaws.com".into()),
        ca_bundle: Some("Q0EgYnVuZGxl".into()),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: Some("10.100.0.10".into()),
    }
}

fn kubelet() -> KubeletConfiguration {
    KubeletConfiguration {
        kube_reserved: Some(BTreeMap::from([("cpu".into(), "100m".into())])),
        eviction_hard: Some(BTreeMap::from([("memory.available".into(), "5%".into())])),
        ..Default::default()
    }
}

fn input<'a>(
    cluster: &'a ClusterInfo,
    kubelet: &'a KubeletConfiguration,
    custom: Option<&'a str>,
) -> UserDataInput<'a> {
    UserDataInput {
        cluster,
        kubelet: Some(kubelet),
        max_pods: Some(29),
        labels: BTreeMap::from([
            ("karpenter.sh/nodepool".into(), "default".into()),
            ("team".into(), "ml".into()),
            ("node-role.kubernetes.io/worker".into(), String::new()),
            ("node.kubernetes.io/instance-type".into(), "m5.large".into()),
        ]),
        taints: vec![Taint::new("gpu", Some("true"), TaintEffect::NoSchedule)],
        custom,
        instance_store_raid0: false,
    }
}

fn generated(family: AmiFamily, custom: Option<&str>) -> String {
    let cluster = cluster();
    let kubelet = kubelet();
    generate(family, &input(&cluster, &kubelet, custom))
        .unwrap()
        .unwrap()
}

const AL2023_NODE_CONFIG: &str = r#"apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    apiServerEndpoint: https://ABC.gr7.us-west-2.eks.amazonaws.com
    certificateAuthority: Q0EgYnVuZGxl
    cidr: "10.100.0.0/16"
    name: prod
  kubelet:
    config:
      clusterDNS:
      - "10.100.0.10"
      evictionHard:
        memory.available: "5%"
      kubeReserved:
        cpu: "100m"
      maxPods: 29
      registerWithTaints:
      - effect: NoSchedule
        key: gpu
        value: "true"
      - effect: NoExecute
        key: karpenter.sh/unregistered
    flags:
    - "--node-labels=karpenter.sh/nodepool=default,node.kubernetes.io/instance-type=m5.large,team=ml"
"#;

#[test]
fn al2023_is_a_nodeadm_node_config_in_mime() {
    let expected = format!(
        "MIME-Version: 1.0\n\
         Content-Type: multipart/mixed; boundary=\"//\"\n\
         \n\
         --//\n\
         Content-Type: application/node.eks.aws\n\
         \n\
         {AL2023_NODE_CONFIG}\n\
         --//--\n"
    );
    assert_eq!(generated(AmiFamily::AL2023, None), expected);
}

#[test]
fn al2023_keeps_the_users_parts_first() {
    let custom_mime = "MIME-Version: 1.0\n\
                       Content-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\
                       \n\
                       --BOUNDARY\n\
                       Content-Type: text/x-shellscript; charset=\"us-ascii\"\n\
                       \n\
                       #!/bin/bash\n\
                       echo hello\n\
                       \n\
                       --BOUNDARY\n\
                       Content-Type: application/node.eks.aws\n\
                       \n\
                       apiVersion: node.eks.aws/v1alpha1\n\
                       kind: NodeConfig\n\
                       spec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n\
                       \n\
                       --BOUNDARY--\n";
    let expected = format!(
        "MIME-Version: 1.0\n\
         Content-Type: multipart/mixed; boundary=\"//\"\n\
         \n\
         --//\n\
         Content-Type: text/x-shellscript; charset=\"us-ascii\"\n\
         \n\
         #!/bin/bash\n\
         echo hello\n\
         \n\
         --//\n\
         Content-Type: application/node.eks.aws\n\
         \n\
         apiVersion: node.eks.aws/v1alpha1\n\
         kind: NodeConfig\n\
         spec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n\
         \n\
         --//\n\
         Content-Type: application/node.eks.aws\n\
         \n\
         {AL2023_NODE_CONFIG}\n\
         --//--\n"
    );
    assert_eq!(generated(AmiFamily::AL2023, Some(custom_mime)), expected);

    // Not MIME: one part typed by its content.
    let script = generated(AmiFamily::AL2023, Some("#!/bin/bash\necho hi"));
    assert!(
        script.contains(
            "--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho hi\n\n--//\n"
        ),
        "{script}"
    );
    let node_config = generated(
        AmiFamily::AL2023,
        Some("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {}\n"),
    );
    assert!(
        node_config.starts_with(
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\n\
             Content-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n\
             spec: {}\n\n--//\n"
        ),
        "{node_config}"
    );
    assert_eq!(node_config.matches("kind: NodeConfig").count(), 2);
}

#[test]
fn mime_without_a_boundary_is_an_error() {
    let cluster = cluster();
    let kubelet = kubelet();
    let broken = "MIME-Version: 1.0\nContent-Type: multipart/mixed\n\nhello\n";
    assert_eq!(
        generate(AmiFamily::AL2023, &input(&cluster, &kubelet, Some(broken))),
        Err(UserDataError::InvalidMime)
    );
}

#[test]
fn bottlerocket_is_toml_merged_with_the_users() {
    let expected = r#"[settings.kubernetes]
cluster-name = "prod"
api-server = "https://ABC.gr7.us-west-2.eks.amazonaws.com"
cluster-certificate = "Q0EgYnVuZGxl"
cluster-dns-ip = "10.100.0.10"
max-pods = 29

[settings.kubernetes.kube-reserved]
cpu = "100m"

[settings.kubernetes.eviction-hard]
"memory.available" = "5%"

[settings.kubernetes.node-labels]
"karpenter.sh/nodepool" = "default"
"node.kubernetes.io/instance-type" = "m5.large"
team = "ml"

[settings.kubernetes.node-taints]
gpu = ["true:NoSchedule"]
"karpenter.sh/unregistered" = [":NoExecute"]
"#;
    assert_eq!(generated(AmiFamily::Bottlerocket, None), expected);

    let custom = r#"[settings.kubernetes]
cluster-name = "wrong"
kube-api-qps = 30

[settings.kubernetes.node-labels]
team = "override-me"
custom = "yes"

[settings.host-containers.admin]
enabled = true
"#;
    let expected = r#"[settings.kubernetes]
cluster-name = "prod"
kube-api-qps = 30
api-server = "https://ABC.gr7.us-west-2.eks.amazonaws.com"
cluster-certificate = "Q0EgYnVuZGxl"
cluster-dns-ip = "10.100.0.10"
max-pods = 29

[settings.kubernetes.node-labels]
team = "ml"
custom = "yes"
"karpenter.sh/nodepool" = "default"
"node.kubernetes.io/instance-type" = "m5.large"

[settings.kubernetes.kube-reserved]
cpu = "100m"

[settings.kubernetes.eviction-hard]
"memory.available" = "5%"

[settings.kubernetes.node-taints]
gpu = ["true:NoSchedule"]
"karpenter.sh/unregistered" = [":NoExecute"]

[settings.host-containers.admin]
enabled = true
"#;
    assert_eq!(generated(AmiFamily::Bottlerocket, Some(custom)), expected);

    let cluster = cluster();
    let kubelet = kubelet();
    let err = generate(
        AmiFamily::Bottlerocket,
        &input(&cluster, &kubelet, Some("[settings")),
    )
    .unwrap_err();
    assert!(matches!(err, UserDataError::InvalidToml(_)), "{err}");
}

#[test]
fn al2_is_the_bootstrap_script_in_mime() {
    let expected = "MIME-Version: 1.0\n\
Content-Type: multipart/mixed; boundary=\"//\"\n\
\n\
--//\n\
Content-Type: text/x-shellscript; charset=\"us-ascii\"\n\
\n\
#!/bin/bash -xe\n\
exec > >(tee /var/log/user-data.log | logger -t user-data -s 2>/dev/console) 2>&1\n\
/etc/eks/bootstrap.sh 'prod' \\\n  \
--apiserver-endpoint 'https://ABC.gr7.us-west-2.eks.amazonaws.com' \\\n  \
--b64-cluster-ca 'Q0EgYnVuZGxl' \\\n  \
--dns-cluster-ip '10.100.0.10' \\\n  \
--use-max-pods false \\\n  \
--kubelet-extra-args '--node-labels=karpenter.sh/nodepool=default,node.kubernetes.io/instance-type=m5.large,team=ml \
--register-with-taints=gpu=true:NoSchedule,karpenter.sh/unregistered:NoExecute --max-pods=29 \
--kube-reserved=cpu=100m --eviction-hard=memory.available<5%'\n\
\n\
--//--\n";
    assert_eq!(generated(AmiFamily::AL2, None), expected);
}

#[test]
fn al2_bootstraps_an_ipv6_node_when_its_cluster_dns_is_ipv6() {
    let ipv6 = ClusterInfo {
        service_cidr: Some("fd30:1c53:5f8a::/108".into()),
        dns_ip: Some("fd30:1c53:5f8a::a".into()),
        ..cluster()
    };
    let kubelet = kubelet();
    let script = al2_script(&input(&ipv6, &kubelet, None));
    assert!(
        script.contains(
            "--b64-cluster-ca 'Q0EgYnVuZGxl' \\\n  --ip-family ipv6 \\\n  --dns-cluster-ip 'fd30:1c53:5f8a::a' \\\n"
        ),
        "{script}"
    );
    // As upstream, the kubelet's first clusterDNS decides, not the discovered address.
    let node_local_v4 = KubeletConfiguration {
        cluster_dns: Some(vec!["169.254.20.10".into()]),
        ..kubelet.clone()
    };
    let script = al2_script(&input(&ipv6, &node_local_v4, None));
    assert!(!script.contains("--ip-family"), "{script}");
    let node_local_v6 = KubeletConfiguration {
        cluster_dns: Some(vec!["fd00::ec2:a".into()]),
        ..kubelet.clone()
    };
    let script = al2_script(&input(&cluster(), &node_local_v6, None));
    assert!(
        script.contains("--ip-family ipv6 \\\n  --dns-cluster-ip 'fd00::ec2:a'"),
        "{script}"
    );
    // An IPv4-mapped address is IPv4, as Go's To4 reads it; IPv4 clusters get no flag (see above).
    let mapped = KubeletConfiguration {
        cluster_dns: Some(vec!["::ffff:10.100.0.10".into()]),
        ..kubelet
    };
    assert!(!al2_script(&input(&cluster(), &mapped, None)).contains("--ip-family"));
}

#[test]
fn windows_runs_the_eks_bootstrap_script_after_the_users() {
    let expected = "<powershell>\n\
Write-Host 'hello'\n\
[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n\
& $EKSBootstrapScriptFile -EKSClusterName 'prod' -APIServerEndpoint 'https://ABC.gr7.us-west-2.eks.amazonaws.com' \
-Base64ClusterCA 'Q0EgYnVuZGxl' -DNSClusterIP '10.100.0.10' \
-KubeletExtraArgs '--node-labels=karpenter.sh/nodepool=default,node.kubernetes.io/instance-type=m5.large,team=ml \
--register-with-taints=gpu=true:NoSchedule,karpenter.sh/unregistered:NoExecute --max-pods=29 \
--kube-reserved=cpu=100m --eviction-hard=memory.available<5%'\n\
</powershell>\n";
    assert_eq!(
        generated(
            AmiFamily::Windows2022,
            Some("<powershell>\nWrite-Host 'hello'\n</powershell>")
        ),
        expected
    );
}

#[test]
fn custom_passes_the_users_data_through() {
    let cluster = cluster();
    let kubelet = kubelet();
    assert_eq!(
        generate(AmiFamily::Custom, &input(&cluster, &kubelet, Some("anything"))),
        Ok(Some("anything".to_string()))
    );
    assert_eq!(
        generate(AmiFamily::Custom, &input(&cluster, &kubelet, None)),
        Ok(None)
    );
}

#[test]
fn the_kubelets_max_pods_wins_and_the_unregistered_taint_is_added_once() {
    let cluster = cluster();
    let kubelet = KubeletConfiguration {
        max_pods: Some(50),
        cluster_dns: Some(vec!["169.254.20.10".into()]),
        ..Default::default()
    };
    let mut input = input(&cluster, &kubelet, None);
    input.taints = vec![Taint::new(UNREGISTERED_TAINT_KEY, None, TaintEffect::NoExecute)];
    let config = al2023_node_config(&input);
    assert!(config.contains("maxPods: 50\n"), "{config}");
    assert!(
        config.contains("clusterDNS:\n      - \"169.254.20.10\"\n"),
        "{config}"
    );
    assert_eq!(config.matches("karpenter.sh/unregistered").count(), 1);
}

#[test]
fn raid0_instance_stores_are_assembled_by_al2_and_al2023_bootstrap() {
    let cluster = cluster();
    let kubelet = kubelet();
    let mut input = input(&cluster, &kubelet, None);
    assert!(!al2023_node_config(&input).contains("localStorage"));
    assert!(!al2_script(&input).contains("--local-disks"));
    input.instance_store_raid0 = true;
    let config = al2023_node_config(&input);
    assert!(
        config.contains("  instance:\n    localStorage:\n      strategy: RAID0\n"),
        "{config}"
    );
    let script = al2_script(&input);
    assert!(script.contains(" \\\n  --local-disks raid0 \\\n"), "{script}");
}

#[test]
fn base64_round_trips() {
    for text in ["", "f", "fo", "foo", "foob", "fooba", "foobar"] {
        let encoded = base64_encode(text.as_bytes());
        assert_eq!(base64_decode(&encoded).unwrap(), text.as_bytes());
    }
    assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
    assert_eq!(base64_encode(b"fooba"), "Zm9vYmE=");
    assert_eq!(base64_encode(b"foob"), "Zm9vYg==");
    assert_eq!(base64_decode("not base64!"), None);
    let bundle = ca_bundle_from_der(&[vec![1, 2, 3]]);
    assert_eq!(
        String::from_utf8(base64_decode(&bundle).unwrap()).unwrap(),
        "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n"
    );
}
