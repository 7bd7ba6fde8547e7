//! Test support: a moto server (tests/moto/harness.py) per test, killed when the handle drops.
//!
//! `MotoServer::start` returns None, after printing why, only when python3 or moto is not installed (CI
//! installs moto through .ci/requirements.txt); any other failure to start panics.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use karpenter_aws::{AwsClients, ClientOptions};

/// How long the harness may take to answer (moto imports slowly on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);

pub struct MotoServer {
    child: Child,
    /// Held open: the harness exits when its stdin closes, so it cannot outlive this process.
    _stdin: Option<ChildStdin>,
    pub port: u16,
}

impl MotoServer {
    /// Starts the harness; `instance_types` are fnmatch patterns (HARNESS_INSTANCE_TYPES), empty for all.
    pub fn start(instance_types: &[&str]) -> Option<Self> {
        let harness = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/moto/harness.py");
        let spawned = Command::new("python3")
            .arg(&harness)
            .args(["--port", "0"])
            .env("HARNESS_INSTANCE_TYPES", instance_types.join(","))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!(
                    "SKIPPED: python3 is not installed; the moto tests need python3 and moto[server]==5.2.5"
                );
                return None;
            }
            Err(e) => panic!("cannot spawn {}: {e}", harness.display()),
        };
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
        let line = line.trim();
        if let Some(port) = line.strip_prefix("READY ") {
            let port = port.parse().expect("READY <port>");
            return Some(Self {
                child,
                _stdin: stdin,
                port,
            });
        }
        let _ = child.kill();
        let status = child.wait();
        if line.starts_with("MISSING") {
            eprintln!("SKIPPED: {line}; install it with `python3 -m pip install -r .ci/requirements.txt`");
            return None;
        }
        panic!("the moto harness failed to start: {line:?} ({status:?})");
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Clients for `region` pointed at this server, with one attempt per call.
    pub async fn clients(&self, region: &str) -> AwsClients {
        AwsClients::new(&ClientOptions::emulator(self.endpoint(), region))
            .await
            .expect("clients")
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a server or returns from the test (skipping it) when python3/moto are missing.
#[macro_export]
macro_rules! moto_or_skip {
    ($types:expr) => {
        match $crate::support::MotoServer::start($types) {
            Some(server) => server,
            None => return,
        }
    };
}
