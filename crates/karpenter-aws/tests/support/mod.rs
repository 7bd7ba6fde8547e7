//! Test support: a moto server (tests/moto/harness.py) per test, killed when the handle drops.
//!
//! The harness runs under the pinned moto from a virtual environment of its own, `target/moto-venv`, created
//! by the first test that needs it (under a file lock, so parallel test binaries wait for one another) and
//! reused afterwards; nothing has to be installed beforehand but python3 with its venv module. A machine
//! without them fails the tests, naming what to install: the moto tests are never skipped.
//!
//! moto enforces IAM: [`MotoServer::clients`] sign as a user holding exactly the controller policies of
//! deploy/cloudformation.yaml (what the provider under test must use), [`MotoServer::admin_clients`] as a
//! user that may do anything (seeding subnets, AMIs, queues and clusters; reading back what a test checks).
//!
//! moto does not evaluate the policies' conditions, so the harness also logs every request the controller signs
//! as the authorizations IAM makes for it, and when the server is dropped [`iam_eval`] evaluates each against
//! the same policies, conditions included: a test whose provider sends a request IAM would refuse fails, naming
//! the call, the statements considered and the condition that failed.

pub mod iam_eval;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, mpsc};
use std::time::Duration;

use karpenter_aws::{AwsClients, ClientOptions};

/// How long the harness may take to answer (moto imports slowly on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The moto the harness patches; must match `EXPECTED_MOTO` in tests/moto/harness.py.
pub const MOTO_VERSION: &str = "5.2.5";

/// The cluster the controller policies are instantiated for; the interruption queue the policies allow is
/// named after it (deploy/cloudformation.yaml names the queue after the cluster).
pub const POLICY_CLUSTER: &str = "test-cluster";

/// The region the controller policies are instantiated for.
pub const POLICY_REGION: &str = "us-west-2";

fn workspace_root() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The Python of `target/moto-venv`, with moto [`MOTO_VERSION`] installed in it: created or repaired on first
/// use, checked once per test binary. Panics, naming the command that fixes it, when it cannot be provisioned.
pub fn moto_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = workspace_root().join("target/moto-venv");
        provision_venv(&venv).unwrap_or_else(|problem| panic!("the moto tests cannot run: {problem}"))
    })
}

/// The moto version installed in `python`'s environment, if any.
fn installed_moto(python: &Path) -> Option<String> {
    let output = Command::new(python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('moto')); import yaml, flask",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn provision_venv(venv: &Path) -> Result<PathBuf, String> {
    let python = venv.join("bin/python");
    std::fs::create_dir_all(venv.parent().unwrap_or(venv))
        .map_err(|e| format!("creating {}: {e}", venv.display()))?;
    // One test binary provisions at a time; the others wait and then find it ready.
    let lock_path = venv.with_extension("lock");
    let lock =
        std::fs::File::create(&lock_path).map_err(|e| format!("creating {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
    if installed_moto(&python).as_deref() == Some(MOTO_VERSION) {
        return Ok(python);
    }
    eprintln!(
        "provisioning {} with moto[server]=={MOTO_VERSION} (once; about a minute)",
        venv.display()
    );
    let run = |command: &mut Command, what: &str, fix: &str| -> Result<(), String> {
        match command.output() {
            Ok(output) if output.status.success() => Ok(()),
            Ok(output) => Err(format!(
                "`{what}` failed ({}): {}{}\n{fix}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
                "`{what}`: python3 is not installed; install it (e.g. `sudo apt-get install python3 python3-venv`)"
            )),
            Err(e) => Err(format!("`{what}`: {e}")),
        }
    };
    run(
        Command::new("python3").args(["-m", "venv", "--clear"]).arg(venv),
        &format!("python3 -m venv --clear {}", venv.display()),
        "python3's venv module (with ensurepip) is missing; install it (e.g. `sudo apt-get install python3-venv`)",
    )?;
    let requirement = format!("moto[server]=={MOTO_VERSION}");
    run(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &requirement,
        ]),
        &format!("{} -m pip install '{requirement}'", python.display()),
        "pip could not install moto (is PyPI reachable?)",
    )?;
    match installed_moto(&python) {
        Some(version) if version == MOTO_VERSION => Ok(python),
        found => Err(format!(
            "{} has moto {found:?} after installing {requirement}",
            venv.display()
        )),
    }
}

pub struct MotoServer {
    child: Child,
    /// Held open: the harness exits when its stdin closes, so it cannot outlive this process.
    _stdin: Option<ChildStdin>,
    pub port: u16,
    admin_keys: (String, String),
    controller_keys: (String, String),
    /// Where the harness logs the controller's policies and requests (`--request-log`).
    request_log: PathBuf,
    /// Refusals a test provokes on purpose ([`MotoServer::expect_refusal`]).
    expected_refusals: std::sync::Mutex<Vec<String>>,
}

impl MotoServer {
    /// Starts the harness; `instance_types` are fnmatch patterns (HARNESS_INSTANCE_TYPES), empty for all.
    /// Panics when it cannot (the moto tests are never skipped).
    pub fn start(instance_types: &[&str]) -> Self {
        Self::start_without(instance_types, &[])
    }

    /// [`MotoServer::start`] with controller policies that lack `actions` (`ec2:DescribeAvailabilityZones`).
    pub fn start_without(instance_types: &[&str], actions: &[&str]) -> Self {
        let python = moto_python();
        let root = workspace_root();
        let harness = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/moto/harness.py");
        static SERVERS: AtomicUsize = AtomicUsize::new(0);
        let request_log = std::env::temp_dir().join(format!(
            "karpenter-moto-requests-{}-{}.jsonl",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::Relaxed)
        ));
        let mut child = Command::new(python)
            .arg(&harness)
            .args(["--port", "0", "--policies"])
            .arg(root.join("deploy/cloudformation.yaml"))
            .args(["--cluster-name", POLICY_CLUSTER, "--region", POLICY_REGION])
            .arg("--request-log")
            .arg(&request_log)
            .env("HARNESS_INSTANCE_TYPES", instance_types.join(","))
            .env("HARNESS_WITHOUT_ACTIONS", actions.join(","))
            // IAM enforced from the first request on (the harness sets it too, before importing moto).
            .env("INITIAL_NO_AUTH_ACTION_COUNT", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {} {}: {e}", python.display(), harness.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Keep the pipe drained until the harness exits, so nothing it prints can block or break it.
            let mut rest = String::new();
            while reader.read_line(&mut rest).is_ok_and(|n| n > 0) {
                rest.clear();
            }
        });
        let line = match rx.recv_timeout(START_TIMEOUT) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the moto harness did not start within {START_TIMEOUT:?}");
            }
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [
            "READY",
            port,
            admin_key,
            admin_secret,
            controller_key,
            controller_secret,
        ] = fields[..]
        {
            return Self {
                child,
                _stdin: stdin,
                port: port.parse().expect("READY <port>"),
                admin_keys: (admin_key.into(), admin_secret.into()),
                controller_keys: (controller_key.into(), controller_secret.into()),
                request_log,
                expected_refusals: std::sync::Mutex::new(Vec::new()),
            };
        }
        let _ = child.kill();
        let status = child.wait();
        panic!("the moto harness failed to start: {:?} ({status:?})", line.trim());
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The options of clients for `region` pointed at this server, with one attempt per call, signed as the
    /// controller (the policies of deploy/cloudformation.yaml).
    pub fn controller_options(&self, region: &str) -> ClientOptions {
        ClientOptions {
            static_credentials: Some(self.controller_keys.clone()),
            ..ClientOptions::emulator(self.endpoint(), region)
        }
    }

    /// Clients for `region` signed as the controller: what the provider under test uses.
    pub async fn clients(&self, region: &str) -> AwsClients {
        AwsClients::new(&self.controller_options(region))
            .await
            .expect("clients")
    }

    /// Clients for `region` signed as an administrator: test setup and checks only. Built without the
    /// provider's interceptor, so their calls neither count in the SDK metrics nor need to be actions the
    /// provider declares (`karpenter_aws::permissions`).
    pub async fn admin_clients(&self, region: &str) -> AwsClients {
        let config = karpenter_aws::client::load_sdk_config(&ClientOptions {
            static_credentials: Some(self.admin_keys.clone()),
            ..ClientOptions::emulator(self.endpoint(), region)
        })
        .await;
        AwsClients {
            region: region.to_string(),
            ec2: aws_sdk_ec2::Client::new(&config),
            ssm: aws_sdk_ssm::Client::new(&config),
            sqs: aws_sdk_sqs::Client::new(&config),
            iam: aws_sdk_iam::Client::new(&config),
            pricing: aws_sdk_pricing::Client::new(&config),
            eks: aws_sdk_eks::Client::new(&config),
        }
    }
}

/// One logged request: the call and the authorizations IAM makes for it.
#[derive(serde::Deserialize)]
struct LoggedRequest {
    call: String,
    region: String,
    /// Whether moto let it through (moto refuses only a missing action; the test sees that refusal itself).
    #[serde(default)]
    moto_allowed: bool,
    #[serde(default)]
    checks: Vec<serde_json::Value>,
    /// Set when the harness cannot tell which authorizations the request makes.
    #[serde(default)]
    unmodelled: Option<String>,
}

/// What IAM would refuse of the requests in `log` (the harness's `--request-log`): one line per refused
/// authorization, with how often it was made.
pub fn refused_requests(log: &str) -> Result<Vec<String>, String> {
    let mut lines = log.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().ok_or("the request log is empty")?)
        .map_err(|e| format!("the request log's policies: {e}"))?;
    let documents: BTreeMap<String, serde_json::Value> =
        serde_json::from_value(header["policies"].clone())
            .map_err(|e| format!("the request log's policies: {e}"))?;
    let policies = iam_eval::Policies::from_documents(&documents)?;
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let request: LoggedRequest =
            serde_json::from_str(line).map_err(|e| format!("request log line {line}: {e}"))?;
        if !request.moto_allowed {
            continue;
        }
        if let Some(why) = &request.unmodelled {
            *refused
                .entry(format!(
                    "{}: {why}; teach authorization_checks in tests/moto/harness.py",
                    request.call
                ))
                .or_default() += 1;
            continue;
        }
        for raw in &request.checks {
            if raw.get("skip").is_some() {
                continue; // the resource does not exist: AWS answers NotFound, not an authorization
            }
            let mut check: iam_eval::Check = serde_json::from_value(raw.clone())
                .map_err(|e| format!("{}: check {raw}: {e}", request.call))?;
            check
                .context
                .entry("aws:RequestedRegion".into())
                .or_insert_with(|| request.region.clone());
            let decision = policies.evaluate(&check);
            if decision.allowed() {
                continue;
            }
            let mut what = format!(
                "{}: IAM refuses {} on {}",
                request.call, check.action, check.resource
            );
            if let Some(tags) = &check.request_tags {
                what.push_str(&format!(" with request tags {tags:?}"));
            }
            if let Some(tags) = &check.resource_tags {
                what.push_str(&format!(" (the resource's tags: {tags:?})"));
            }
            if !check.context.is_empty() {
                what.push_str(&format!(" (context {:?})", check.context));
            }
            *refused.entry(format!("{what}: {decision}")).or_default() += 1;
        }
    }
    Ok(refused
        .into_iter()
        .map(|(what, times)| {
            if times > 1 {
                format!("{what} [{times} times]")
            } else {
                what
            }
        })
        .collect())
}

impl MotoServer {
    /// A refusal the test provokes on purpose, which IAM would give on AWS too (a request the controller policies
    /// do not allow): refusals containing `fragment` do not fail the test, and the test fails if none happens.
    pub fn expect_refusal(&self, fragment: &str) {
        if let Ok(mut expected) = self.expected_refusals.lock() {
            expected.push(fragment.to_string());
        }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let log = std::fs::read_to_string(&self.request_log);
        let _ = std::fs::remove_file(&self.request_log);
        // A test that already failed says why itself; a second panic here would abort the test binary.
        if std::thread::panicking() {
            return;
        }
        let log = log.unwrap_or_else(|e| {
            panic!(
                "reading the harness's request log {}: {e}",
                self.request_log.display()
            )
        });
        let expected = self
            .expected_refusals
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default();
        let refused = refused_requests(&log).map(|refused| {
            for fragment in &expected {
                assert!(
                    refused.iter().any(|r| r.contains(fragment.as_str())),
                    "the test expected IAM to refuse a request matching {fragment:?}, and it refused none"
                );
            }
            refused
                .into_iter()
                .filter(|r| !expected.iter().any(|fragment| r.contains(fragment.as_str())))
                .collect::<Vec<_>>()
        });
        match refused {
            Ok(refused) if refused.is_empty() => {}
            Ok(refused) => panic!(
                "the provider sent requests the controller policies of deploy/cloudformation.yaml refuse on AWS \
                 (moto does not evaluate conditions; tests/support/iam_eval.rs does):\n{}",
                refused.join("\n")
            ),
            Err(e) => panic!("evaluating the controller's requests: {e}"),
        }
    }
}

/// Starts a server (panicking when it cannot: the moto tests are never skipped).
#[macro_export]
macro_rules! moto {
    ($types:expr) => {
        $crate::support::MotoServer::start($types)
    };
}
