//! `cargo xtask e2e upstream`: upstream Karpenter's own end-to-end suites (the Go module `sigs.k8s.io/karpenter`
//! pinned in `tests/upstream-e2e/go.mod`, `test/suites/<suite>`), compiled and run unchanged against a
//! controller on the project's real control plane: ours (`karpenter controller --cloud-provider kwok`) or
//! upstream's own KWOK controller built from the same module, in the same place, measured the same way.
//!
//! The suites expect an installed Karpenter: a `karpenter` Deployment in `kube-system`, its pod holding the
//! `karpenter-leader-election` Lease, `/metrics` on port 8080 of the pod's IP (read through the API server's pod
//! proxy), and a change to the Deployment's environment restarting the controller with it. There is no container
//! runtime here, so kwok plays the pod and [`supervisor`] keeps a real controller process in step with it: started
//! with the pod's name and environment when the pod runs, stopped when the pod goes. The whole run happens in a
//! network namespace of its own (`unshare --net`) in which the pod IPs kwok hands out are local addresses, so the
//! API server reaches the real process at the pod's IP without any traffic leaving the machine.

mod build;
mod performance;
mod report;
mod stand_in;
mod suite_netns;
mod supervisor;

use std::{
    fmt,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use karpenter_e2e::control_plane::{self, ControlPlane, StartOptions};

#[derive(Args)]
pub struct E2eArgs {
    #[command(subcommand)]
    command: E2eCommand,
}

#[derive(Subcommand)]
enum E2eCommand {
    /// Run upstream Karpenter's end-to-end suites against a controller on the real control plane.
    Upstream(UpstreamArgs),
    /// Print the performance suite's reports of both controllers side by side (Markdown), from the last
    /// `upstream --suite performance` run of each.
    Compare(CompareArgs),
}

#[derive(Args, Clone)]
pub struct CompareArgs {
    /// The suite whose reports to compare.
    #[arg(long, value_enum, default_value_t = Suite::Performance)]
    suite: Suite,
    /// Where `upstream` wrote its results.
    #[arg(long, default_value = "target/upstream-e2e/results")]
    output: PathBuf,
}

#[derive(Args, Clone)]
pub struct UpstreamArgs {
    /// The suites to run, in order (each on a fresh control plane).
    #[arg(long = "suite", value_enum, default_values_t = [Suite::Regression])]
    suites: Vec<Suite>,
    /// Ginkgo's --focus: run only the specs whose text matches this regular expression.
    #[arg(long)]
    focus: Option<String>,
    /// Ginkgo's --skip: leave out the specs whose text matches this regular expression.
    #[arg(long)]
    skip: Option<String>,
    /// The controller under test: `rust` (this project's) or `go` (upstream's KWOK controller from the module).
    #[arg(long, value_enum, default_value_t = Controller::Rust)]
    controller: Controller,
    /// Build our controller with the release profile (the default for the performance suite).
    #[arg(long)]
    release: bool,
    /// Ginkgo's --timeout for a suite; its cleanup still runs within --grace-period after it.
    #[arg(long, default_value = "2h")]
    timeout: String,
    /// Ginkgo's --grace-period: how long a timed-out spec's cleanup may take.
    #[arg(long, default_value = "5m")]
    grace_period: String,
    /// Where the JUnit reports, summaries and logs go.
    #[arg(long, default_value = "target/upstream-e2e/results")]
    output: PathBuf,
    /// Set when re-run inside the network namespace (internal).
    #[arg(long, hide = true)]
    inside: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Suite {
    Regression,
    Disruption,
    Performance,
    Dra,
}

impl fmt::Display for Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Suite::Regression => "regression",
            Suite::Disruption => "disruption",
            Suite::Performance => "performance",
            Suite::Dra => "dra",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Controller {
    Rust,
    Go,
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Controller::Rust => "rust",
            Controller::Go => "go",
        })
    }
}

/// The pod IPs kwok hands out (`--cidr` in `karpenter_e2e::control_plane`), made local in the run's network
/// namespace.
const POD_CIDR: &str = "10.244.0.0/16";

pub fn run(root: &Path, args: &E2eArgs) -> anyhow::Result<()> {
    let args = match &args.command {
        E2eCommand::Upstream(args) => args,
        E2eCommand::Compare(args) => return compare(root, args),
    };
    let output = if args.output.is_absolute() {
        args.output.clone()
    } else {
        root.join(&args.output)
    };
    if args.inside {
        return run_inside(root, args, &output);
    }
    // Everything that needs the network (Go modules, the toolchain) happens out here, before the namespace.
    let module = build::UpstreamModule::locate(root)?;
    eprintln!("upstream module {} at {}", module.version, module.dir.display());
    control_plane::ensure_binaries(root).map_err(|e| anyhow!(e))?;
    for suite in &args.suites {
        module.build_suite(root, *suite)?;
    }
    match args.controller {
        Controller::Go => drop(module.build_controller(root)?),
        Controller::Rust => drop(build::rust_controller(root, release(args))?),
    }
    std::fs::create_dir_all(&output)?;
    let exe = std::env::current_exe().context("the xtask binary's path")?;
    let status = Command::new("unshare")
        .arg("--net")
        .arg("--")
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .arg("--inside")
        .current_dir(root)
        .status()
        .context("running `unshare --net` (util-linux; needs root or CAP_SYS_ADMIN)")?;
    if !status.success() {
        bail!(
            "the upstream suites did not all pass ({status}); results in {}",
            output.display()
        );
    }
    Ok(())
}

/// Both controllers' reports of one suite, side by side.
fn compare(root: &Path, args: &CompareArgs) -> anyhow::Result<()> {
    let output = root.join(&args.output);
    let reports = |controller: Controller| {
        performance::read_dir(&output.join(format!("{}-{controller}-reports", args.suite)))
    };
    let (ours, upstream) = (reports(Controller::Rust)?, reports(Controller::Go)?);
    if ours.is_empty() && upstream.is_empty() {
        bail!(
            "no {} reports in {}: run `cargo xtask e2e upstream --suite {}` with each controller first",
            args.suite,
            output.display(),
            args.suite
        );
    }
    print!("{}", performance::compare(&ours, &upstream));
    Ok(())
}

fn release(args: &UpstreamArgs) -> bool {
    args.release || args.suites.contains(&Suite::Performance)
}

/// Inside the namespace: loopback up, the pod CIDR local, then each suite on a fresh control plane.
fn run_inside(root: &Path, args: &UpstreamArgs, output: &Path) -> anyhow::Result<()> {
    for ip_args in [
        &["link", "set", "lo", "up"][..],
        &["addr", "add", POD_CIDR, "dev", "lo"],
    ] {
        let status = Command::new("ip")
            .args(ip_args)
            .status()
            .context("running `ip` (iproute2)")?;
        if !status.success() {
            bail!(
                "`ip {}` failed in the run's network namespace ({status})",
                ip_args.join(" ")
            );
        }
    }
    let module = build::UpstreamModule::locate(root)?;
    let mut totals = report::Totals::default();
    for suite in &args.suites {
        let outcome = run_suite(root, args, &module, *suite, output)
            .with_context(|| format!("the {suite} suite against the {} controller", args.controller))?;
        totals.add(&outcome);
    }
    println!(
        "upstream e2e ({} controller): {} passed, {} failed, {} skipped",
        args.controller, totals.passed, totals.failed, totals.skipped
    );
    println!("{} passed, {} failed", totals.passed, totals.failed);
    if totals.failed > 0 || totals.errors > 0 {
        bail!(
            "{} spec(s) failed{}",
            totals.failed,
            if totals.errors > 0 {
                " and a suite did not finish"
            } else {
                ""
            }
        );
    }
    Ok(())
}

fn run_suite(
    root: &Path,
    args: &UpstreamArgs,
    module: &build::UpstreamModule,
    suite: Suite,
    output: &Path,
) -> anyhow::Result<report::Outcome> {
    let name = format!("{suite}-{}", args.controller);
    let run_dir = root.join("target/upstream-e2e").join(format!("run-{name}"));
    if run_dir.exists() {
        // A previous run's control plane may still be up if it was killed; stop it before reusing the folder.
        let _ = control_plane::stop(root, &run_dir.join("cluster"));
        std::fs::remove_dir_all(&run_dir).with_context(|| format!("removing {}", run_dir.display()))?;
    }
    std::fs::create_dir_all(run_dir.join("logs"))?;
    let started = Instant::now();
    let kubelet_config = run_dir.join("kwok-kubelet.yaml");
    std::fs::write(
        &kubelet_config,
        stand_in::kwok_kubelet_config(&run_dir.join("logs")),
    )?;
    let options = StartOptions {
        detach: false,
        scheduler_config: Some(module.scheduler_config()),
        kubelet: Some(control_plane::KubeletOptions {
            port: stand_in::KUBELET_PORT,
            config: kubelet_config,
        }),
        // The suite runs in a namespace of its own and reaches the API server over a veth.
        listen_on_all_addresses: true,
    };
    let cp = ControlPlane::start(root, &run_dir.join("cluster"), options).map_err(|e| anyhow!(e))?;
    // The control plane must not outlive this process however it ends.
    control_plane::kill_when_owner_exits(
        std::process::id(),
        &control_plane::control_plane_pids(&cp.run_dir).map_err(|e| anyhow!(e))?,
        None,
    )
    .map_err(|e| anyhow!(e))?;
    eprintln!("[{name}] control plane up in {:.1?}", started.elapsed());

    let result = (|| -> anyhow::Result<report::Outcome> {
        stand_in::install(root, &cp, module, args.controller)?;
        let program = match args.controller {
            Controller::Rust => supervisor::Program::rust(build::rust_controller_path(root, release(args))),
            Controller::Go => supervisor::Program::go(module.controller_path(root)),
        };
        let supervisor = supervisor::Supervisor::start(&cp, program, run_dir.join("logs"))?;
        let ready = supervisor.wait_for_leader(Duration::from_secs(180));
        let outcome = ready.and_then(|()| {
            eprintln!(
                "[{name}] controller {} holds the Lease; running the suite",
                args.controller
            );
            report::run_suite_binary(root, &cp, module, suite, args, &run_dir, output, &name)
        });
        let crashes = supervisor.stop();
        let mut outcome = outcome?;
        outcome.crashes = crashes;
        Ok(outcome)
    })();
    let stopped = control_plane::stop(root, &cp.run_dir);
    let outcome = result?;
    stopped.map_err(|e| anyhow!(e))?;
    eprintln!("[{name}] finished in {:.1?}", started.elapsed());
    Ok(outcome)
}
