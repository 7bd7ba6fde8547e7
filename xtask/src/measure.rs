//! `cargo xtask measure -- COMMAND [ARGS...]` (hidden): runs one command with its stdout discarded and its
//! stderr passed through, then prints `{"seconds": .., "peak_rss_bytes": .., "success": ..}`. Its only child
//! is that command, so the children's peak RSS getrusage reports is the command's own; the benches run a
//! binary through it to measure what a user would see (`/usr/bin/time -v` does the same).

use std::{
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, Result, bail};
use nix::sys::resource::{UsageWho, getrusage};
use serde_json::json;

pub fn run(command: &[String]) -> Result<()> {
    let Some((program, args)) = command.split_first() else {
        bail!("measure: no command given");
    };
    let start = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    let seconds = start.elapsed().as_secs_f64();
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).context("getrusage")?;
    // Linux reports ru_maxrss in KiB.
    let peak_rss_bytes = u64::try_from(usage.max_rss()).unwrap_or(0) * 1024;
    println!(
        "{}",
        json!({"seconds": seconds, "peak_rss_bytes": peak_rss_bytes, "success": status.success()})
    );
    Ok(())
}
