//! Upstream's own instance_types.json, provisioned with `go mod download` into the Go module cache and read from
//! there as `karpenter controller --cloud-provider kwok` reads it by default. Needs Go on PATH; without it the
//! test fails with the command that installs it.

use std::{path::PathBuf, process::Command};

use karpenter_api::kwoknodeclass as kwok;
use karpenter_kwok::{GoEnv, UPSTREAM_MODULE, catalog_file};

/// Downloads the module (a no-op when the cache has it) and answers its directory, or what went wrong and how
/// to fix it.
fn download() -> Result<PathBuf, String> {
    let work = std::env::temp_dir().join(format!("kwok-catalog-module-{}", std::process::id()));
    // `go mod download` needs a main module to run in.
    std::fs::create_dir_all(&work)
        .and_then(|()| std::fs::write(work.join("go.mod"), "module kwokcatalogtest\n\ngo 1.24\n"))
        .map_err(|e| format!("writing {}: {e}", work.display()))?;
    let output = Command::new("go")
        .args(["mod", "download", "-json", UPSTREAM_MODULE])
        .current_dir(&work)
        .env("GOFLAGS", "-mod=mod")
        // The module's go.mod asks for a newer Go than many machines have; go fetches this toolchain itself.
        .env("GOTOOLCHAIN", "go1.27.3")
        .output();
    let _ = std::fs::remove_dir_all(&work);
    let output = output.map_err(|e| {
        format!(
            "running `go` failed ({e}): this test needs Go on PATH (https://go.dev/doc/install, or \
             `apt-get install golang-go`) to fetch {UPSTREAM_MODULE}"
        )
    })?;
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    match info["Dir"].as_str() {
        Some(dir) if output.status.success() => Ok(PathBuf::from(dir)),
        _ => Err(format!(
            "go mod download -json {UPSTREAM_MODULE} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}

#[test]
fn upstreams_catalog_in_the_module_cache_becomes_kwok_instance_types() {
    let dir = download().unwrap_or_else(|problem| panic!("{problem}"));
    let env = GoEnv::from_process();
    assert_eq!(
        catalog_file::default_catalog_path(&env),
        Some(dir.join("kwok/cloudprovider/instance_types.json")),
        "the default path is where go put the module"
    );
    let types = catalog_file::load(None, &env).unwrap();

    assert!(
        types.len() > 100,
        "upstream's catalog has well over a hundred types, got {}",
        types.len()
    );
    let small = types
        .iter()
        .find(|t| t.name == "c-1x-amd64-linux")
        .expect("c-1x-amd64-linux");
    let label = |key: &str| -> Vec<String> {
        small
            .requirements
            .iter()
            .find(|r| r.key == key)
            .map(|r| r.values.clone())
            .unwrap_or_default()
    };
    assert_eq!(label(kwok::INSTANCE_SIZE_LABEL), ["1"]);
    assert_eq!(label(kwok::INSTANCE_FAMILY_LABEL), ["c"]);
    assert_eq!(label(kwok::INSTANCE_CPU_LABEL), ["1"]);
    assert_eq!(label(kwok::INSTANCE_MEMORY_LABEL), ["2Gi"]);
    assert!(small.offerings.iter().any(|o| o.capacity_type == "spot"));
    assert!(small.offerings.iter().all(|o| o.available && o.price > 0.0));
    // The e2e suites' default NodePool requires instance-size Lt 32: types on both sides of that line exist.
    let sizes: Vec<i64> = types
        .iter()
        .filter_map(|t| t.requirements.iter().find(|r| r.key == kwok::INSTANCE_SIZE_LABEL))
        .filter_map(|r| r.values.first()?.parse().ok())
        .collect();
    assert!(sizes.iter().any(|s| *s < 32) && sizes.iter().any(|s| *s >= 32));
}
