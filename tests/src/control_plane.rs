//! A real Kubernetes control plane on 127.0.0.1 for the tests that need the real API server (its OpenAPI and CEL
//! validation, server-side apply, RBAC): etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
//! (fake Nodes whose pods become Running), built from the pinned Go modules in `tests/control-plane/`.
//!
//! `cargo xtask cluster up|down|kubeconfig` and the tests' [`shared`] fixture run the same code: [`ensure_binaries`]
//! builds the binaries into `target/control-plane/bin/` once (again only when a go.mod, go.sum or the Go toolchain
//! changes; under a file lock), and [`ControlPlane::start`] generates certificates with the `openssl` CLI, starts the
//! processes with their logs and PIDs in a run directory, waits for `/readyz`, a working ServiceAccount token and
//! the CRDs of `crds/` Established. Only `std`, `go`, `openssl` and `kubectl` are needed.

use std::{
    fs::{self, File},
    io::Write,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The binaries `tests/control-plane/` builds, in start order.
pub const BINARIES: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

/// The annotation kwok manages Nodes by (the same as upstream Karpenter's KWOK setup and our kwok provider).
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node=fake";

/// The Service CIDR given to kube-apiserver.
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.0.0.0/24";

/// The repository root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// `target/control-plane/`: the binaries, the build lock and the run directories.
pub fn state_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_absolute() { t } else { root.join(t) })
        .unwrap_or_else(|| root.join("target"))
        .join("control-plane")
}

/// Where `cargo xtask cluster up` keeps its state.
pub fn default_run_dir(root: &Path) -> PathBuf {
    state_dir(root).join("run")
}

fn err(message: impl Into<String>) -> Error {
    message.into().into()
}

/// The `go` command: `$GO`, `go` on the PATH, or the official tarball's `/usr/local/go/bin/go`.
fn go_command() -> Result<PathBuf, Error> {
    let candidates: Vec<PathBuf> = std::env::var_os("GO")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from("go"), PathBuf::from("/usr/local/go/bin/go")])
        .collect();
    for go in candidates {
        let works = Command::new(&go)
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if works {
            return Ok(go);
        }
    }
    Err(err(
        "Go 1.24 or newer is needed to build the test control plane (tests/control-plane/: kube-apiserver, \
         etcd, kwok, ...) and was not found ($GO, `go` on the PATH, /usr/local/go/bin/go). Install it from \
         https://go.dev/dl/, for example `curl -fsSL https://go.dev/dl/go1.26.0.linux-amd64.tar.gz | sudo tar -C \
         /usr/local -xz` and add /usr/local/go/bin to the PATH, or set GO to the go binary.",
    ))
}

fn output(command: &mut Command) -> Result<String, Error> {
    let out = command
        .output()
        .map_err(|e| err(format!("cannot run {command:?}: {e}")))?;
    if !out.status.success() {
        return Err(err(format!(
            "{command:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn run(command: &mut Command) -> Result<(), Error> {
    output(command).map(drop)
}

/// FNV-1a, stable across Rust versions (the stamp outlives the toolchain that wrote it).
fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The files and settings the binaries are built from.
const BUILD_INPUTS: [&str; 3] = ["go.mod", "go.sum", "cmd/etcd/main.go"];

/// The pinned k8s.io/kubernetes version, read from tests/control-plane/go.mod (stamped into the binaries).
fn kubernetes_version(module: &Path) -> Result<String, Error> {
    let go_mod = fs::read_to_string(module.join("go.mod"))?;
    go_mod
        .lines()
        .filter_map(|line| line.trim().strip_prefix("k8s.io/kubernetes v"))
        .map(|v| v.split_whitespace().next().unwrap_or(v).to_string())
        .next()
        .ok_or_else(|| err("tests/control-plane/go.mod does not require k8s.io/kubernetes"))
}

fn build_stamp(module: &Path, go: &Path) -> Result<String, Error> {
    let mut hash = 0xcbf2_9ce4_8422_2325;
    for input in BUILD_INPUTS {
        let path = module.join(input);
        let bytes = fs::read(&path).map_err(|e| err(format!("cannot read {}: {e}", path.display())))?;
        hash = fnv1a(hash, input.as_bytes());
        hash = fnv1a(hash, &bytes);
    }
    let version = output(Command::new(go).arg("version"))?;
    hash = fnv1a(hash, version.as_bytes());
    hash = fnv1a(hash, BUILD_FLAGS_VERSION.as_bytes());
    Ok(format!("{hash:016x} {}", version.trim()))
}

/// Bumped when the `go build` flags below change, so the stamp forces a rebuild.
const BUILD_FLAGS_VERSION: &str = "1";

fn binaries_current(bin: &Path, stamp: &str) -> bool {
    BINARIES.iter().all(|b| bin.join(b).is_file())
        && fs::read_to_string(bin.join(".stamp")).is_ok_and(|s| s.trim() == stamp)
}

/// Builds the control-plane binaries into `target/control-plane/bin/` unless they are current, and returns that
/// folder. Holds `target/control-plane/build.lock` while building, so concurrent callers build once. The first
/// (cold) build downloads the modules and compiles for about 15 minutes on 2 cores; later ones take seconds.
pub fn ensure_binaries(root: &Path) -> Result<PathBuf, Error> {
    let module = root.join("tests/control-plane");
    let state = state_dir(root);
    let bin = state.join("bin");
    let go = go_command()?;
    let stamp = build_stamp(&module, &go)?;
    if binaries_current(&bin, &stamp) {
        return Ok(bin);
    }
    fs::create_dir_all(&bin)?;
    let lock = File::create(state.join("build.lock"))?;
    lock.lock()?;
    if binaries_current(&bin, &stamp) {
        return Ok(bin);
    }
    let _ = fs::remove_file(bin.join(".stamp"));
    let version = kubernetes_version(&module)?;
    let minor = version.split('.').nth(1).unwrap_or_default();
    let ldflags = format!(
        "-s -w -X k8s.io/component-base/version.gitVersion=v{version} -X k8s.io/component-base/version.gitMajor=1 \
         -X k8s.io/component-base/version.gitMinor={minor} -X k8s.io/component-base/version.gitTreeState=clean"
    );
    eprintln!(
        "building the test control plane (k8s.io/kubernetes v{version}, etcd, kwok) into {}; the first build takes \
         about 15 minutes",
        bin.display()
    );
    let started = Instant::now();
    let out_dir = format!("{}/", bin.display());
    let packages = [
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "sigs.k8s.io/kwok/cmd/kwok",
        "./cmd/etcd",
    ];
    let status = Command::new(&go)
        .current_dir(&module)
        .env("CGO_ENABLED", "0")
        .env("GOFLAGS", "-mod=readonly")
        .args([
            "build",
            "-trimpath",
            "-buildvcs=false",
            "-ldflags",
            &ldflags,
            "-o",
            &out_dir,
        ])
        .args(packages)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| err(format!("cannot run {}: {e}", go.display())))?;
    if !status.success() {
        return Err(err(format!(
            "go build {packages:?} in {} failed ({status})",
            module.display()
        )));
    }
    fs::write(bin.join(".stamp"), format!("{stamp}\n"))?;
    eprintln!("built the test control plane in {:.0?}", started.elapsed());
    Ok(bin)
}

fn free_port() -> Result<u16, Error> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether `pid` is one of our control-plane processes (guards against a recycled PID after a reboot).
fn is_ours(pid: u32, bin: &Path) -> bool {
    match fs::read_link(format!("/proc/{pid}/exe")) {
        Ok(exe) => exe.starts_with(bin),
        // Without /proc (or for a process of another user), trust the PID file.
        Err(_) => true,
    }
}

fn alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// A running control plane.
#[derive(Debug)]
pub struct ControlPlane {
    pub run_dir: PathBuf,
    /// The admin kubeconfig (user `kubernetes-admin` in group `system:masters`).
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
}

/// How [`ControlPlane::start`] runs the processes.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Put the processes in their own process group, so they outlive the starting command and a Ctrl-C in its
    /// terminal (`cargo xtask cluster up`). Otherwise they share the caller's group.
    pub detach: bool,
    /// A KubeSchedulerConfiguration for kube-scheduler (`--config`); its `clientConnection.kubeconfig` is
    /// replaced with the admin kubeconfig. Upstream's end-to-end suites expect a profile with default topology
    /// spread constraints.
    pub scheduler_config: Option<PathBuf>,
    /// kwok also plays the nodes' kubelet API (what `kubectl logs` and `kubectl port-forward` reach) on this
    /// port, with the kwok documents in this file (ClusterLogs, ClusterPortForward: which pod's logs and ports
    /// are what), and gives every node it initialises `127.0.0.1` as its address. For a control plane in a
    /// network namespace of its own (`cargo xtask e2e upstream`): two such control planes in one namespace
    /// would want the same port.
    pub kubelet: Option<KubeletOptions>,
    /// kube-apiserver listens on every address of its network namespace, not only 127.0.0.1, so a client in
    /// another namespace joined to it (upstream's suites, see `cargo xtask e2e upstream`) reaches it. Only for a
    /// control plane in a network namespace of its own.
    pub listen_on_all_addresses: bool,
}

/// See [`StartOptions::kubelet`].
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    pub port: u16,
    pub config: PathBuf,
}

fn pki_commands(pki: &Path) -> Result<(), Error> {
    fs::create_dir_all(pki)?;
    let openssl = |args: &[&str]| -> Result<(), Error> {
        run(Command::new("openssl").current_dir(pki).args(args)).map_err(|e| {
            err(format!(
                "{e}\n(the test control plane generates its certificates with the openssl CLI: apt-get install openssl)"
            ))
        })
    };
    let ec_key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec_key,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "3650",
                "-subj",
                "/CN=karpenter-rs-test-ca",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        ]
        .concat(),
    )?;
    let leaf = |name: &str, subject: &str, extensions: &str| -> Result<(), Error> {
        fs::write(pki.join(format!("{name}.ext")), extensions)?;
        let (key, csr, crt, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        openssl(
            &[
                &["req", "-new"][..],
                &ec_key,
                &["-keyout", &key, "-out", &csr, "-subj", subject],
            ]
            .concat(),
        )?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-CAserial",
            "ca.srl",
            "-out",
            &crt,
            "-days",
            "3650",
            "-extfile",
            &ext,
        ])
    };
    leaf(
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n\
         subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,\
         DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.0.0.1\n",
    )?;
    leaf(
        "admin",
        "/O=system:masters/CN=kubernetes-admin",
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
    )?;
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        "sa.key",
    ])?;
    openssl(&["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"])
}

fn kubeconfig_yaml(server: &str, pki: &Path) -> String {
    let p = |f: &str| pki.join(f).display().to_string();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: karpenter-rs-test\n  cluster:\n    server: {server}\n    \
         certificate-authority: {ca}\nusers:\n- name: kubernetes-admin\n  user:\n    client-certificate: {crt}\n    \
         client-key: {key}\ncontexts:\n- name: karpenter-rs-test\n  context:\n    cluster: karpenter-rs-test\n    \
         user: kubernetes-admin\ncurrent-context: karpenter-rs-test\n",
        ca = p("ca.crt"),
        crt = p("admin.crt"),
        key = p("admin.key"),
    )
}

/// The last lines of a log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

struct Starter<'a> {
    bin: &'a Path,
    run_dir: &'a Path,
    options: StartOptions,
    children: Vec<(String, std::process::Child)>,
}

impl Starter<'_> {
    fn spawn(&mut self, name: &str, args: &[String], env: &[(&str, &Path)]) -> Result<(), Error> {
        let logs = self.run_dir.join("logs");
        let log = File::create(logs.join(format!("{name}.log")))?;
        let mut command = Command::new(self.bin.join(name));
        command
            .args(args)
            .envs(env.iter().copied())
            .current_dir(self.run_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if self.options.detach {
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
        }
        let child = command
            .spawn()
            .map_err(|e| err(format!("cannot start {}: {e}", self.bin.join(name).display())))?;
        let mut pids = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.run_dir.join("pids"))?;
        writeln!(pids, "{name} {}", child.id())?;
        self.children.push((name.to_string(), child));
        Ok(())
    }

    /// Kills and reaps what was started (a failed start).
    fn abort(&mut self) {
        for (_, child) in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
    }

    /// Fails naming the process and its log when one has exited.
    fn check_running(&mut self) -> Result<(), Error> {
        for (name, child) in &mut self.children {
            if let Some(status) = child.try_wait()? {
                let log = self.run_dir.join("logs").join(format!("{name}.log"));
                return Err(err(format!(
                    "{name} exited ({status}); {}:\n{}",
                    log.display(),
                    log_tail(&log)
                )));
            }
        }
        Ok(())
    }

    /// Polls `ready` every 200 ms until it holds, a process exits, or `timeout`.
    fn wait(&mut self, what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_running()?;
            if ready() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(err(format!(
                    "timed out after {timeout:?} waiting for {what} (logs in {})",
                    self.run_dir.join("logs").display()
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl ControlPlane {
    /// Builds the binaries if needed and starts a control plane with its state in `run_dir` (which must not hold a
    /// running one), then installs the CRDs of `crds/` (the AWS flavour). On failure, stops what it started and
    /// keeps the logs.
    pub fn start(root: &Path, run_dir: &Path, options: StartOptions) -> Result<Self, Error> {
        let bin = ensure_binaries(root)?;
        if run_dir.join("pids").exists() {
            if running_pids(run_dir, &bin).is_empty() {
                fs::remove_dir_all(run_dir)?;
            } else {
                return Err(err(format!(
                    "a control plane is already running in {} (`cargo xtask cluster down` stops it)",
                    run_dir.display()
                )));
            }
        }
        let _ = fs::remove_dir_all(run_dir);
        fs::create_dir_all(run_dir.join("logs"))?;
        let run_dir = fs::canonicalize(run_dir)?;
        let mut starter = Starter {
            bin: &bin,
            run_dir: &run_dir,
            options,
            children: Vec::new(),
        };
        match Self::start_in(root, &mut starter) {
            Ok(cp) => Ok(cp),
            Err(e) => {
                // The run directory stays, with the logs, until the next start or `down`.
                starter.abort();
                Err(e)
            }
        }
    }

    fn start_in(root: &Path, s: &mut Starter<'_>) -> Result<Self, Error> {
        let run_dir = s.run_dir.to_path_buf();
        let pki = run_dir.join("pki");
        pki_commands(&pki)?;
        let p = |f: &str| pki.join(f).display().to_string();
        let (etcd_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
        let server = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = run_dir.join("admin.kubeconfig");
        fs::write(&kubeconfig, kubeconfig_yaml(&server, &pki))?;
        let kc = kubeconfig.display().to_string();

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        s.spawn(
            "etcd",
            &[
                "--name=default".into(),
                format!("--data-dir={}", run_dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                // Test data: durability across a power cut does not matter, speed does.
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
            &[],
        )?;
        s.spawn(
            "kube-apiserver",
            &[
                format!("--etcd-servers={etcd_url}"),
                if s.options.listen_on_all_addresses {
                    "--bind-address=0.0.0.0".into()
                } else {
                    "--bind-address=127.0.0.1".into()
                },
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                format!("--cert-dir={}", run_dir.join("apiserver").display()),
                format!("--tls-cert-file={}", p("apiserver.crt")),
                format!("--tls-private-key-file={}", p("apiserver.key")),
                format!("--client-ca-file={}", p("ca.crt")),
                "--authorization-mode=Node,RBAC".into(),
                "--enable-admission-plugins=NodeRestriction".into(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", p("sa.pub")),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
                // A loopback address cannot be an Endpoints address; nothing in-cluster calls the API server.
                "--endpoint-reconciler-type=none".into(),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
            ],
            &[],
        )?;
        s.wait("kube-apiserver /readyz", Duration::from_secs(90), || {
            kubectl_at(&kubeconfig)
                .args(["get", "--raw=/readyz"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|st| st.success())
        })?;
        s.spawn(
            "kube-controller-manager",
            &[
                format!("--kubeconfig={kc}"),
                format!("--authentication-kubeconfig={kc}"),
                format!("--authorization-kubeconfig={kc}"),
                format!("--service-account-private-key-file={}", p("sa.key")),
                format!("--root-ca-file={}", p("ca.crt")),
                format!("--cluster-signing-cert-file={}", p("ca.crt")),
                format!("--cluster-signing-key-file={}", p("ca.key")),
                format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
                "--cluster-name=karpenter-rs-test".into(),
                "--leader-elect=false".into(),
                // The defaults (20 QPS) create a large Deployment's pods at 20 a second; `bench controller --real`
                // scales to tens of thousands of pods, as a production control plane's settings allow.
                "--kube-api-qps=300".into(),
                "--kube-api-burst=600".into(),
                "--concurrent-replicaset-syncs=10".into(),
                // No HTTPS endpoint: nothing scrapes it, and two control planes need no second port each.
                "--secure-port=0".into(),
                "--profiling=false".into(),
            ],
            &[],
        )?;
        let mut scheduler_args = vec![
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--leader-elect=false".into(),
            // As the controller-manager's: binding tens of thousands of pods at the default 50 QPS takes minutes.
            "--kube-api-qps=300".into(),
            "--kube-api-burst=600".into(),
            "--secure-port=0".into(),
            "--profiling=false".into(),
        ];
        if let Some(config) = &s.options.scheduler_config {
            scheduler_args.push(format!(
                "--config={}",
                scheduler_config(config, &kubeconfig, &run_dir)?.display()
            ));
        }
        s.spawn("kube-scheduler", &scheduler_args, &[])?;
        let kwok_dir = run_dir.join("kwok");
        fs::create_dir_all(&kwok_dir)?;
        let mut kwok_args = vec![
            format!("--kubeconfig={kc}"),
            "--manage-all-nodes=false".into(),
            format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}"),
            "--node-lease-duration-seconds=40".into(),
            // Pod IPs of fake pods, kept out of the Service CIDR.
            "--cidr=10.244.0.1/16".into(),
        ];
        if let Some(kubelet) = &s.options.kubelet {
            kwok_args.extend([
                // The address and kubelet port kwok writes into each node's status, where kube-apiserver
                // connects for logs and port-forwards; kwok serves them there (HTTPS: the API server speaks
                // nothing else to a kubelet, and checks no kubelet certificate without
                // --kubelet-certificate-authority).
                "--node-ip=127.0.0.1".into(),
                format!("--node-port={}", kubelet.port),
                format!("--tls-cert-file={}", p("apiserver.crt")),
                format!("--tls-private-key-file={}", p("apiserver.key")),
                format!("--config={}", kubelet.config.display()),
            ]);
        }
        s.spawn(
            "kwok",
            &kwok_args,
            // kwok reads ~/.kwok/kwok.yaml unless its work directory is elsewhere.
            &[("KWOK_WORKDIR", &kwok_dir)],
        )?;

        // The ServiceAccount controller creates `default` in every namespace; a token for it proves the signing key.
        s.wait("the default ServiceAccount", Duration::from_secs(60), || {
            kubectl_at(&kubeconfig)
                .args([
                    "create",
                    "token",
                    "default",
                    "--namespace=default",
                    "--duration=10m",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|st| st.success())
        })?;
        let cp = ControlPlane {
            run_dir: run_dir.clone(),
            kubeconfig,
            server,
        };
        cp.install_crds(root)?;
        s.check_running()?;
        // The processes stay up after the Child handles are gone; `stop` finds them through the PID file.
        s.children.clear();
        Ok(cp)
    }

    /// `kubectl` with this control plane's admin kubeconfig.
    pub fn kubectl(&self) -> Command {
        kubectl_at(&self.kubeconfig)
    }

    /// Applies `crds/*.yaml` (the AWS flavour; `crds/core/` holds the provider-neutral copies of the same CRDs)
    /// with server-side apply and waits until each is Established.
    pub fn install_crds(&self, root: &Path) -> Result<(), Error> {
        let mut files: Vec<PathBuf> = fs::read_dir(root.join("crds"))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        for file in &files {
            run(self
                .kubectl()
                .args(["apply", "--server-side", "--force-conflicts", "-f"])
                .arg(file))?;
        }
        for file in &files {
            run(self
                .kubectl()
                .args(["wait", "--for=condition=Established", "--timeout=60s", "-f"])
                .arg(file))?;
        }
        Ok(())
    }
}

/// `config` as the run's own copy, its client connection pointed at `kubeconfig`: with `--config`, kube-scheduler
/// ignores `--kubeconfig`, the QPS flags and `--leader-elect`, so they are written into the file.
fn scheduler_config(config: &Path, kubeconfig: &Path, run_dir: &Path) -> Result<PathBuf, Error> {
    let text =
        fs::read_to_string(config).map_err(|e| err(format!("cannot read {}: {e}", config.display())))?;
    let mut lines: Vec<String> = Vec::new();
    let mut in_client_connection = false;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            in_client_connection = line.starts_with("clientConnection:");
            if in_client_connection {
                lines.push(line.to_string());
                lines.push(format!("  kubeconfig: {}", kubeconfig.display()));
                lines.push("  qps: 300".into());
                lines.push("  burst: 600".into());
                continue;
            }
        }
        if !in_client_connection {
            lines.push(line.to_string());
        }
    }
    if !lines.iter().any(|l| l.starts_with("clientConnection:")) {
        return Err(err(format!(
            "{}: a KubeSchedulerConfiguration with a top-level clientConnection is expected",
            config.display()
        )));
    }
    if !lines.iter().any(|l| l.starts_with("leaderElection:")) {
        lines.push("leaderElection:".into());
        lines.push("  leaderElect: false".into());
    }
    let copy = run_dir.join("kube-scheduler-config.yaml");
    fs::write(&copy, lines.join("\n") + "\n")?;
    Ok(copy)
}

fn kubectl_at(kubeconfig: &Path) -> Command {
    let mut command = Command::new("kubectl");
    command.arg("--kubeconfig").arg(kubeconfig).stdin(Stdio::null());
    command
}

/// Whether a process of the control plane in `run_dir` is running.
pub fn is_running(root: &Path, run_dir: &Path) -> bool {
    !running_pids(run_dir, &state_dir(root).join("bin")).is_empty()
}

/// The PIDs in `run_dir/pids` that are still our processes.
fn running_pids(run_dir: &Path, bin: &Path) -> Vec<(String, u32)> {
    fs::read_to_string(run_dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (name, pid) = line.split_once(' ')?;
            Some((name.to_string(), pid.trim().parse().ok()?))
        })
        .filter(|(_, pid)| alive(*pid) && is_ours(*pid, bin))
        .collect()
}

/// Stops every process of the control plane in `run_dir` (TERM, then KILL after 10 s, in reverse start order) and
/// removes its state. Returns the processes it stopped. Nothing running is not an error.
pub fn stop(root: &Path, run_dir: &Path) -> Result<Vec<(String, u32)>, Error> {
    let bin = state_dir(root).join("bin");
    let mut pids = running_pids(run_dir, &bin);
    pids.reverse();
    for (_, pid) in &pids {
        signal(*pid, "-TERM");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|(_, pid)| alive(*pid) && is_ours(*pid, &bin)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for (_, pid) in &pids {
        if alive(*pid) && is_ours(*pid, &bin) {
            signal(*pid, "-KILL");
        }
    }
    if run_dir.exists() {
        fs::remove_dir_all(run_dir)?;
    }
    Ok(pids)
}

/// Kills the control plane in `run_dir` and removes it once the process `owner` has exited: a small `sh` loop,
/// so a test binary's control plane does not outlive it however it ends (a test harness has no teardown).
fn spawn_watchdog(owner: u32, run_dir: &Path) -> Result<(), Error> {
    kill_when_owner_exits(owner, &control_plane_pids(run_dir)?, Some(run_dir))
}

/// The PIDs of the control plane running in `run_dir`.
pub fn control_plane_pids(run_dir: &Path) -> Result<Vec<u32>, Error> {
    Ok(fs::read_to_string(run_dir.join("pids"))?
        .lines()
        .filter_map(|l| l.split_once(' ').and_then(|(_, pid)| pid.trim().parse().ok()))
        .collect())
}

/// Once the process `owner` has exited (however: a panic, a signal, a SIGKILL), a small `sh` loop sends `pids`
/// SIGTERM, then SIGKILL 5 s later, and removes `remove` if given. For whatever must not outlive its starter:
/// a test binary's control plane, a benchmark's control plane and controller.
pub fn kill_when_owner_exits(owner: u32, pids: &[u32], remove: Option<&Path>) -> Result<(), Error> {
    let script = r#"owner=$1; dir=$2; shift 2
while kill -0 "$owner" 2>/dev/null; do sleep 1; done
kill -TERM "$@" 2>/dev/null
sleep 5
kill -KILL "$@" 2>/dev/null
if [ -n "$dir" ]; then rm -rf "$dir"; fi"#;
    Command::new("sh")
        .args(["-c", script, "control-plane-watchdog", &owner.to_string()])
        .arg(remove.map(Path::as_os_str).unwrap_or_default())
        .args(pids.iter().map(u32::to_string))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok(())
}

/// One control plane for the whole test binary, started on first use (building the binaries if needed) in
/// `target/control-plane/test-<pid>/` and stopped by a watchdog when the test process exits. An error is returned
/// to every caller, never skipped.
pub fn shared() -> Result<&'static ControlPlane, String> {
    static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let root = workspace_root();
            let run_dir = state_dir(&root).join(format!("test-{}", std::process::id()));
            let started = Instant::now();
            let cp =
                ControlPlane::start(&root, &run_dir, StartOptions::default()).map_err(|e| e.to_string())?;
            spawn_watchdog(std::process::id(), &cp.run_dir).map_err(|e| e.to_string())?;
            eprintln!(
                "control plane up at {} in {:.1?} ({})",
                cp.server,
                started.elapsed(),
                cp.run_dir.display()
            );
            Ok(cp)
        })
        .as_ref()
        .map_err(Clone::clone)
}
