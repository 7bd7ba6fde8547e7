//! Running Go in the upstream modules the project pins (`tests/upstream-e2e`, `tests/upstream-bench`): with the
//! toolchain upstream v1.15.0 builds with and the module's go.sum as it stands.

use std::{
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context, bail};

/// The Go toolchain upstream v1.15.0 builds with (it needs 1.26.9 or newer; the module proxy serves this one).
const GO_TOOLCHAIN: &str = "go1.27.3";

/// `go`, run in `module_dir`.
pub fn go(module_dir: &Path) -> Command {
    let mut command = Command::new("go");
    command
        .current_dir(module_dir)
        .env("GOTOOLCHAIN", GO_TOOLCHAIN)
        .env("GOFLAGS", "-mod=readonly")
        .stdin(Stdio::null());
    command
}

/// Runs `command` and returns its standard output; a failure names `what` and shows both outputs.
pub fn run(mut command: Command, what: &str) -> anyhow::Result<String> {
    let out = command
        .output()
        .with_context(|| format!("{what}: cannot run {command:?} (is Go installed?)"))?;
    if !out.status.success() {
        bail!(
            "{what}: {command:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
