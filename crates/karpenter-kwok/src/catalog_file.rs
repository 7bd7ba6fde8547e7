//! Where the KWOK instance types come from at run time: a file the user names (`--kwok-instance-types`, or
//! upstream's INSTANCE_TYPES_FILE_PATH), else upstream's own `instance_types.json` in the Go module cache, read
//! where `go mod download sigs.k8s.io/karpenter@v1.15.0` puts it. The catalog is upstream's data, so it is read
//! from upstream's module rather than copied into this repository.

use std::path::{Path, PathBuf};

use karpenter_core::catalog::CatalogInstanceType;

use crate::{catalog, error::KwokError};

/// The upstream module whose catalog is the default.
pub const UPSTREAM_MODULE: &str = "sigs.k8s.io/karpenter@v1.15.0";
/// The catalog's path inside the module.
const CATALOG_IN_MODULE: &str = "kwok/cloudprovider/instance_types.json";

/// The environment a default location is derived from (read by the caller, so this stays testable).
#[derive(Debug, Clone, Default)]
pub struct GoEnv {
    /// `$GOMODCACHE`.
    pub gomodcache: Option<String>,
    /// `$GOPATH` (its first entry holds the module cache).
    pub gopath: Option<String>,
    /// `$HOME`, for Go's default GOPATH `~/go`.
    pub home: Option<String>,
}

impl GoEnv {
    /// The process's environment.
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self {
            gomodcache: var("GOMODCACHE"),
            gopath: var("GOPATH"),
            home: var("HOME"),
        }
    }

    /// The module cache as `go env GOMODCACHE` would answer without a go.env override: GOMODCACHE, else the
    /// first GOPATH entry's `pkg/mod`, else `~/go/pkg/mod`.
    pub fn module_cache(&self) -> Option<PathBuf> {
        if let Some(cache) = &self.gomodcache {
            return Some(PathBuf::from(cache));
        }
        let gopath = match &self.gopath {
            Some(list) => std::env::split_paths(list).next()?,
            None => Path::new(self.home.as_ref()?).join("go"),
        };
        Some(gopath.join("pkg/mod"))
    }
}

/// Upstream's catalog inside the module cache of `env`.
pub fn default_catalog_path(env: &GoEnv) -> Option<PathBuf> {
    Some(env.module_cache()?.join(UPSTREAM_MODULE).join(CATALOG_IN_MODULE))
}

/// The KWOK instance types from `explicit`, else from the module cache of `env`.
pub fn load(explicit: Option<&Path>, env: &GoEnv) -> Result<Vec<CatalogInstanceType>, KwokError> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let path = default_catalog_path(env).unwrap_or_else(|| {
                PathBuf::from("$HOME/go/pkg/mod")
                    .join(UPSTREAM_MODULE)
                    .join(CATALOG_IN_MODULE)
            });
            if !path.is_file() {
                return Err(KwokError::ModuleMissing {
                    path,
                    module: UPSTREAM_MODULE.into(),
                });
            }
            path
        }
    };
    let text = std::fs::read_to_string(&path).map_err(|source| KwokError::Read {
        path: path.clone(),
        source,
    })?;
    catalog::parse(&path.display().to_string(), &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_cache_is_found_as_go_finds_it() {
        let env = |gomodcache: Option<&str>, gopath: Option<&str>| GoEnv {
            gomodcache: gomodcache.map(String::from),
            gopath: gopath.map(String::from),
            home: Some("/home/u".into()),
        };
        assert_eq!(
            env(Some("/cache"), Some("/gp")).module_cache(),
            Some(PathBuf::from("/cache"))
        );
        assert_eq!(
            env(None, Some("/gp:/other")).module_cache(),
            Some(PathBuf::from("/gp/pkg/mod"))
        );
        assert_eq!(
            env(None, None).module_cache(),
            Some(PathBuf::from("/home/u/go/pkg/mod"))
        );
        assert_eq!(
            default_catalog_path(&env(None, None)),
            Some(PathBuf::from(
                "/home/u/go/pkg/mod/sigs.k8s.io/karpenter@v1.15.0/kwok/cloudprovider/instance_types.json"
            ))
        );
    }

    #[test]
    fn a_missing_module_names_the_path_and_the_command_that_fetches_it() {
        let empty = std::env::temp_dir().join(format!("kwok-empty-cache-{}", std::process::id()));
        let env = GoEnv {
            gomodcache: Some(empty.display().to_string()),
            ..GoEnv::default()
        };
        let error = load(None, &env).unwrap_err();
        assert_eq!(error.category(), "CatalogModuleMissing");
        let message = error.to_string();
        assert!(
            message.contains(&format!(
                "{}/sigs.k8s.io/karpenter@v1.15.0/kwok/cloudprovider/instance_types.json does not exist",
                empty.display()
            )),
            "{message}"
        );
        assert!(
            message.contains("go mod download sigs.k8s.io/karpenter@v1.15.0"),
            "{message}"
        );
    }

    #[test]
    fn a_named_file_is_read_and_its_errors_name_it() {
        let dir = std::env::temp_dir().join(format!("kwok-catalog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("types.json");
        std::fs::write(&file, crate::catalog::tests::SMALL_CATALOG).unwrap();
        let types = load(Some(&file), &GoEnv::default()).unwrap();
        assert_eq!(types.len(), 2);
        let missing = dir.join("missing.json");
        let error = load(Some(&missing), &GoEnv::default()).unwrap_err();
        assert_eq!(error.category(), "CatalogUnreadable");
        assert!(
            error
                .to_string()
                .starts_with(&format!("KWOK instance types {}", missing.display()))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
