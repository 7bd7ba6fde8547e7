//! Python tools the tests run, each from a virtual environment of its own under `target/`, provisioned by the
//! first test that needs it (under a file lock, so parallel test binaries wait for one another) with the exact
//! pins of `.ci/requirements.txt`, and reused afterwards. Nothing comes from the system's site-packages: a machine
//! whose earlier installs left the tools there must not pass where a new machine would fail. Only python3 with its
//! venv module is needed beforehand; without it the error names the package that provides it.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use crate::control_plane::{Error, workspace_root};

/// The pinned requirements the tests' Python tools are installed from.
const REQUIREMENTS: &str = ".ci/requirements.txt";

/// Written into a venv once its requirements are installed; it holds them, one a line, so a venv provisioned
/// with other pins (an older checkout's) is rebuilt rather than trusted.
const STAMP: &str = "installed-requirements.txt";

/// The `name==version` lines of `.ci/requirements.txt` for `names` (the name as written before any extras, e.g.
/// `moto` for `moto[server]==5.2.5`), in the order given. An error names the package that has no pin.
pub fn pinned(root: &Path, names: &[&str]) -> Result<Vec<String>, Error> {
    let path = root.join(REQUIREMENTS);
    let text = fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    names
        .iter()
        .map(|name| {
            text.lines()
                .map(str::trim)
                .find(|line| {
                    let package = line.split(['=', '[', '<', '>', ' ']).next().unwrap_or_default();
                    package.eq_ignore_ascii_case(name) && line.contains("==")
                })
                .map(str::to_string)
                .ok_or_else(|| format!("{}: no `{name}==VERSION` pin", path.display()).into())
        })
        .collect()
}

/// The Python of `target/<venv>` with exactly `requirements` installed, creating or repairing it first.
pub fn provision(venv: &str, requirements: &[String]) -> Result<PathBuf, Error> {
    let root = workspace_root();
    let target = crate::control_plane::state_dir(&root)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| root.join("target"));
    provision_at(&target.join(venv), requirements)
}

fn provision_at(venv: &Path, requirements: &[String]) -> Result<PathBuf, Error> {
    let python = venv.join("bin/python");
    let wanted = requirements.join("\n");
    if let Some(parent) = venv.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    // One test binary provisions at a time; the others wait here and then find it ready.
    let lock_path = venv.with_extension("lock");
    let lock = fs::File::create(&lock_path).map_err(|e| format!("creating {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
    let stamp = venv.join(STAMP);
    if python.is_file() && fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(python);
    }
    eprintln!(
        "provisioning {} with {} (once)",
        venv.display(),
        requirements.join(" ")
    );
    run(
        Command::new("python3").args(["-m", "venv", "--clear"]).arg(venv),
        "python3's venv module (with ensurepip) is needed; install it (e.g. `sudo apt-get install python3 \
         python3-venv`)",
    )?;
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
            .args(requirements),
        "pip could not install the pinned requirements (is PyPI reachable?)",
    )?;
    fs::write(&stamp, &wanted).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    Ok(python)
}

fn run(command: &mut Command, fix: &str) -> Result<(), Error> {
    match command.output() {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => Err(format!(
            "{command:?} failed ({}): {}{}\n{fix}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
        .into()),
        Err(e) => Err(format!("cannot run {command:?}: {e}\n{fix}").into()),
    }
}

/// The Python that renders the Helm chart (`crates/karpenter/tests/render-chart.py`): helm-python-sdk, which
/// embeds Helm, and PyYAML, at `.ci/requirements.txt`'s pins, in `target/chart-venv`.
pub fn chart_python() -> Result<PathBuf, Error> {
    let requirements = pinned(&workspace_root(), &["helm-python-sdk", "PyYAML"])?;
    provision("chart-venv", &requirements)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_read_by_package_name_with_or_without_extras() {
        let root = std::env::temp_dir().join(format!("python-venv-pins-{}", std::process::id()));
        fs::create_dir_all(root.join(".ci")).unwrap();
        fs::write(
            root.join(REQUIREMENTS),
            "# comment\nPyYAML==6.0.3\nmoto[server]==5.2.5\nhelm-python-sdk==0.2.2\n",
        )
        .unwrap();
        assert_eq!(
            pinned(&root, &["moto", "pyyaml", "helm-python-sdk"]).unwrap(),
            ["moto[server]==5.2.5", "PyYAML==6.0.3", "helm-python-sdk==0.2.2"]
        );
        let missing = pinned(&root, &["jsonschema"]).unwrap_err().to_string();
        assert!(missing.contains("no `jsonschema==VERSION` pin"), "{missing}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_repository_pins_what_the_chart_renderer_imports() {
        let pins = pinned(&workspace_root(), &["helm-python-sdk", "PyYAML"]).unwrap();
        assert_eq!(pins.len(), 2);
        assert!(pins.iter().all(|p| p.contains("==")), "{pins:?}");
    }
}
