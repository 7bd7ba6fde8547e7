//! Validation errors that name the object and the field path, and the small syntax checks (qualified names, label
//! values, durations) that the CRD schemas express as patterns.
//!
//! Every kind's `validate()` walks its spec with a [`Validator`], which keeps the current field path, so a message
//! reads like `NodePool default: spec.disruption.budgets[1]: schedule and duration must be set together`.

use std::fmt;

/// One rule an object breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `Kind name`, for example `NodePool default`.
    pub object: String,
    /// The JSON path of the field, for example `spec.template.spec.requirements[0].key`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.object, self.message)
        } else {
            write!(f, "{}: {}: {}", self.object, self.path, self.message)
        }
    }
}

/// Every rule an object breaks, in the order the fields were checked.
#[derive(Debug, Clone, PartialEq, Eq, Default, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl ValidationErrors {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems as `path: message`, joined, without the object's name (for callers that name it already).
    pub fn fields(&self) -> String {
        let each: Vec<String> = self
            .0
            .iter()
            .map(|e| {
                if e.path.is_empty() {
                    e.message.clone()
                } else {
                    format!("{}: {}", e.path, e.message)
                }
            })
            .collect();
        each.join("; ")
    }

    /// True when some error is at `path` or below it.
    pub fn has_path(&self, path: &str) -> bool {
        self.0.iter().any(|e| {
            e.path == path
                || e.path.starts_with(&format!("{path}."))
                || e.path.starts_with(&format!("{path}["))
        })
    }
}

/// Walks an object, tracking the field path, and collects errors.
pub struct Validator {
    object: String,
    path: Vec<String>,
    errors: Vec<FieldError>,
}

impl Validator {
    /// Starts validating `kind name`.
    pub fn new(kind: &str, name: Option<&str>) -> Self {
        let object = format!("{kind} {}", name.filter(|n| !n.is_empty()).unwrap_or("<unnamed>"));
        Self {
            object,
            path: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Runs `f` with `field` pushed onto the path.
    pub fn field<R>(&mut self, field: &str, f: impl FnOnce(&mut Self) -> R) -> R {
        self.path.push(format!(".{field}"));
        let r = f(self);
        self.path.pop();
        r
    }

    /// Runs `f` with `[index]` pushed onto the path.
    pub fn index<R>(&mut self, index: usize, f: impl FnOnce(&mut Self) -> R) -> R {
        self.path.push(format!("[{index}]"));
        let r = f(self);
        self.path.pop();
        r
    }

    /// Runs `f` with `[key]` (a map key) pushed onto the path.
    pub fn key<R>(&mut self, key: &str, f: impl FnOnce(&mut Self) -> R) -> R {
        self.path.push(format!("[{key:?}]"));
        let r = f(self);
        self.path.pop();
        r
    }

    /// The current path, without a leading dot.
    pub fn path(&self) -> String {
        let joined: String = self.path.concat();
        joined.strip_prefix('.').map(str::to_string).unwrap_or(joined)
    }

    /// Records an error at the current path.
    pub fn error(&mut self, message: impl Into<String>) {
        let path = self.path();
        self.errors.push(FieldError {
            object: self.object.clone(),
            path,
            message: message.into(),
        });
    }

    /// Records an error at `field` below the current path.
    pub fn error_at(&mut self, field: &str, message: impl Into<String>) {
        let message = message.into();
        self.field(field, |v| v.error(message));
    }

    /// Records an error when `ok` is false.
    pub fn check(&mut self, ok: bool, message: impl Into<String>) {
        if !ok {
            self.error(message);
        }
    }

    /// Finishes, returning every error found.
    pub fn finish(self) -> Result<(), ValidationErrors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(self.errors))
        }
    }
}

/// The pattern of a Kubernetes qualified name (an optional DNS-subdomain prefix and a name of at most 63 chars).
pub const QUALIFIED_NAME_PATTERN: &str = r"^(([a-zA-Z0-9]|[a-zA-Z0-9][-a-zA-Z0-9_.]*[a-zA-Z0-9])?\/)?([a-zA-Z0-9]|[a-zA-Z0-9][-a-zA-Z0-9_.]*[a-zA-Z0-9])$";
/// The pattern of a label value (empty, or at most 63 alphanumerics with `-_.` inside).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// The pattern of a taint value: a qualified name (an optional DNS-subdomain prefix and `/`, then a name), as
/// upstream's CRDs have it, so `example.com/gpu` is a valid value. It needs at least one character.
pub const TAINT_VALUE_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
/// Go durations of hours, minutes and seconds, as NodePool durations allow.
pub const DURATION_PATTERN: &str = r"^([0-9]+(s|m|h))+$";
/// A duration or the word `Never`.
pub const NILLABLE_DURATION_PATTERN: &str = r"^(([0-9]+(s|m|h))+|Never)$";

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

fn is_name_part(s: &str) -> bool {
    // [a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?
    let mut chars = s.chars();
    match (chars.next(), s.chars().last()) {
        (Some(first), Some(last)) if is_alnum(first) && is_alnum(last) => {}
        _ => return false,
    }
    s.chars().all(|c| is_alnum(c) || matches!(c, '-' | '_' | '.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    if s.is_empty() || s.len() > 253 {
        return false;
    }
    s.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    })
}

/// Checks a qualified name (label key, taint key): why it is invalid, or `None`.
pub fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Some(format!(
            "{key:?}: prefix part must be a lowercase DNS subdomain of at most 253 characters"
        ));
    }
    if name.is_empty() || name.len() > 63 {
        return Some(format!("{key:?}: name part must be 1 to 63 characters"));
    }
    if !is_name_part(name) {
        return Some(format!(
            "{key:?}: name part must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
        ));
    }
    None
}

/// Checks a label value: why it is invalid, or `None`.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.len() > 63 {
        return Some(format!("{value:?}: must be at most 63 characters"));
    }
    if !value.is_empty() && !is_name_part(value) {
        return Some(format!(
            "{value:?}: must be empty or consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_object_and_path() {
        let mut v = Validator::new("NodePool", Some("default"));
        v.field("spec", |v| {
            v.field("disruption", |v| {
                v.field("budgets", |v| {
                    v.index(1, |v| v.error("schedule and duration must be set together"))
                })
            })
        });
        let err = v.finish().unwrap_err();
        assert_eq!(
            err.to_string(),
            "NodePool default: spec.disruption.budgets[1]: schedule and duration must be set together"
        );
        assert!(err.has_path("spec.disruption"));
    }

    #[test]
    fn qualified_names() {
        assert!(qualified_name_problem("karpenter.sh/capacity-type").is_none());
        assert!(qualified_name_problem("team").is_none());
        assert!(qualified_name_problem("Example.com/x").is_some());
        assert!(qualified_name_problem("example.com/").is_some());
        assert!(qualified_name_problem("-bad").is_some());
        assert!(qualified_name_problem(&"a".repeat(64)).is_some());
    }

    #[test]
    fn label_values() {
        assert!(label_value_problem("").is_none());
        assert!(label_value_problem("m5.large").is_none());
        assert!(label_value_problem("bad value").is_some());
        assert!(label_value_problem(&"a".repeat(64)).is_some());
    }
}
