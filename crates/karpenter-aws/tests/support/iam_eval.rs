//! An IAM identity-policy evaluator with conditions, for the controller policies of deploy/cloudformation.yaml.
//!
//! moto checks the action (and for SQS and IAM the resource) of every request the provider signs, but never a
//! Condition of an identity policy, so a policy that requires a tag the provider does not send passes there and
//! refuses every launch on AWS. The moto harness records each request the controller signs as the
//! authorizations IAM makes for it ([`Check`]: action, resource ARN, request tags, the resource's tags,
//! `iam:PassedToService`, `ec2:CreateAction`), and this module gives IAM's answer for each: an explicit Deny
//! wins, then any Allow whose action, resource and every condition match, else the implicit deny.
//!
//! No maintained offline evaluator with conditions was found for Rust or Python (AWS's own is the
//! SimulatePrincipalPolicy API, which needs an account), so this one covers what the template uses and refuses
//! what it does not know (an unsupported operator or policy variable is an error, never a silent allow):
//! - `Action`/`NotAction` (case-insensitive, `*` and `?`), `Resource`/`NotResource` (case-sensitive globs);
//! - operators StringEquals, StringNotEquals, StringEqualsIgnoreCase, StringNotEqualsIgnoreCase, StringLike,
//!   StringNotLike, ArnEquals, ArnLike, ArnNotEquals, ArnNotLike, Bool and Null, each with `IfExists` (but
//!   Null) and the `ForAllValues:`/`ForAnyValue:` set qualifiers;
//! - keys `aws:RequestTag/<key>`, `aws:ResourceTag/<key>`, `aws:TagKeys`, `aws:RequestedRegion`,
//!   `iam:PassedToService`, `ec2:CreateAction`, `ec2:ResourceTag/<key>` (EC2's alias of aws:ResourceTag) and
//!   any other key a check carries in its context. Key names match case-insensitively, as in IAM.
//!
//! The semantics are IAM's documented ones: a condition block is the AND of its operators, an operator the AND
//! of its keys, a key the OR of its values (for a negated operator: none of them may match); a key missing
//! from the request fails a positive operator and passes a negated one; `...IfExists` passes on a missing key;
//! `ForAllValues` passes when every request value matches some policy value (also when the key is missing or
//! empty), `ForAnyValue` when at least one does (never when the key is missing).

#![allow(dead_code)] // each test binary that includes this uses part of it

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;

/// One authorization IAM makes for a request.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Check {
    pub action: String,
    pub resource: String,
    /// The tags the request sets (None: it carries no tags, so `aws:TagKeys` and `aws:RequestTag/*` are absent).
    #[serde(default)]
    pub request_tags: Option<BTreeMap<String, String>>,
    /// The tags the resource has before the call (None: it is being created, or has no tags to speak of).
    #[serde(default)]
    pub resource_tags: Option<BTreeMap<String, String>>,
    /// Other context keys (`iam:PassedToService`, `ec2:CreateAction`).
    #[serde(default)]
    pub context: BTreeMap<String, String>,
}

/// One statement of a named policy.
#[derive(Debug, Clone)]
pub struct Statement {
    /// `<policy>/<Sid or index>`, for messages.
    pub name: String,
    pub allow: bool,
    actions: Vec<String>,
    not_actions: Vec<String>,
    resources: Vec<String>,
    not_resources: Vec<String>,
    /// (operator, key, values) in document order.
    conditions: Vec<(String, String, Vec<String>)>,
}

/// IAM's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allowed {
        by: String,
    },
    ExplicitDeny {
        by: String,
    },
    /// No statement allowed it; each statement whose action and resource matched, with the condition that failed.
    ImplicitDeny {
        considered: Vec<String>,
    },
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allowed { .. })
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Allowed { by } => write!(f, "allowed by {by}"),
            Decision::ExplicitDeny { by } => write!(f, "explicitly denied by {by}"),
            Decision::ImplicitDeny { considered } if considered.is_empty() => {
                write!(
                    f,
                    "implicitly denied: no statement grants this action on this resource"
                )
            }
            Decision::ImplicitDeny { considered } => {
                write!(
                    f,
                    "implicitly denied; statements considered: {}",
                    considered.join("; ")
                )
            }
        }
    }
}

/// A set of identity policies, as the principal holds them.
#[derive(Debug, Clone, Default)]
pub struct Policies {
    pub statements: Vec<Statement>,
}

fn strings(value: Option<&Value>, what: &str) -> Result<Vec<String>, String> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Bool(b)) => Ok(vec![b.to_string()]),
        Some(Value::Number(n)) => Ok(vec![n.to_string()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                Value::Bool(b) => Ok(b.to_string()),
                Value::Number(n) => Ok(n.to_string()),
                other => Err(format!("{what}: {other} is not a string")),
            })
            .collect(),
        Some(other) => Err(format!("{what}: {other} is neither a string nor a list")),
    }
}

/// The operators this evaluator implements (without `IfExists` and the set qualifiers).
pub const OPERATORS: &[&str] = &[
    "StringEquals",
    "StringNotEquals",
    "StringEqualsIgnoreCase",
    "StringNotEqualsIgnoreCase",
    "StringLike",
    "StringNotLike",
    "ArnEquals",
    "ArnLike",
    "ArnNotEquals",
    "ArnNotLike",
    "Bool",
    "Null",
];

/// The operator of `qualified` without its qualifiers: (set qualifier, base operator, if-exists).
fn split_operator(qualified: &str) -> Result<(Option<&str>, &str, bool), String> {
    let (set, rest) = match qualified.split_once(':') {
        Some((set @ ("ForAllValues" | "ForAnyValue"), rest)) => (Some(set), rest),
        Some(_) => return Err(format!("unknown set qualifier in condition operator {qualified}")),
        None => (None, qualified),
    };
    let (base, if_exists) = match rest.strip_suffix("IfExists") {
        Some(base) => (base, true),
        None => (rest, false),
    };
    if !OPERATORS.contains(&base) || (base == "Null" && (if_exists || set.is_some())) {
        return Err(format!(
            "condition operator {qualified} is not supported by tests/support/iam_eval.rs"
        ));
    }
    Ok((set, base, if_exists))
}

impl Policies {
    /// Policies from `{name: policy document}`.
    pub fn from_documents(documents: &BTreeMap<String, Value>) -> Result<Self, String> {
        let mut statements = Vec::new();
        for (policy, document) in documents {
            let list = match &document["Statement"] {
                Value::Array(list) => list.clone(),
                single @ Value::Object(_) => vec![single.clone()],
                other => return Err(format!("{policy}: Statement {other}")),
            };
            for (index, statement) in list.iter().enumerate() {
                let sid = statement["Sid"]
                    .as_str()
                    .map_or_else(|| index.to_string(), str::to_string);
                let name = format!("{policy}/{sid}");
                let allow = match statement["Effect"].as_str() {
                    Some("Allow") => true,
                    Some("Deny") => false,
                    other => return Err(format!("{name}: Effect {other:?}")),
                };
                if statement.get("Principal").is_some() || statement.get("NotPrincipal").is_some() {
                    return Err(format!(
                        "{name}: a Principal belongs in a resource policy, not an identity policy"
                    ));
                }
                let mut conditions = Vec::new();
                if let Some(block) = statement.get("Condition") {
                    let block = block
                        .as_object()
                        .ok_or_else(|| format!("{name}: Condition is not a mapping"))?;
                    for (operator, keys) in block {
                        split_operator(operator).map_err(|e| format!("{name}: {e}"))?;
                        let keys = keys
                            .as_object()
                            .ok_or_else(|| format!("{name}: {operator} is not a mapping"))?;
                        for (key, values) in keys {
                            let values = strings(Some(values), &format!("{name}: {operator} {key}"))?;
                            for value in &values {
                                if value.contains("${") {
                                    return Err(format!(
                                        "{name}: {operator} {key}: policy variable in {value:?} is not supported"
                                    ));
                                }
                            }
                            conditions.push((operator.clone(), key.clone(), values));
                        }
                    }
                }
                let field = |key: &str| strings(statement.get(key), &format!("{name}: {key}"));
                let statement = Statement {
                    name: name.clone(),
                    allow,
                    actions: field("Action")?,
                    not_actions: field("NotAction")?,
                    resources: field("Resource")?,
                    not_resources: field("NotResource")?,
                    conditions,
                };
                for resource in statement.resources.iter().chain(&statement.not_resources) {
                    if resource.contains("${") {
                        return Err(format!(
                            "{name}: policy variable in Resource {resource:?} is not supported"
                        ));
                    }
                }
                statements.push(statement);
            }
        }
        Ok(Self { statements })
    }

    /// IAM's answer for `check`.
    pub fn evaluate(&self, check: &Check) -> Decision {
        let mut considered = Vec::new();
        let mut allowed_by = None;
        for statement in &self.statements {
            if !statement.applies_to(check) {
                continue;
            }
            match statement.failed_condition(check) {
                None if !statement.allow => {
                    return Decision::ExplicitDeny {
                        by: statement.name.clone(),
                    };
                }
                None => {
                    allowed_by.get_or_insert_with(|| statement.name.clone());
                }
                Some(failure) => considered.push(format!("{}: {failure}", statement.name)),
            }
        }
        match allowed_by {
            Some(by) => Decision::Allowed { by },
            None => Decision::ImplicitDeny { considered },
        }
    }
}

/// IAM's wildcard match: `*` any run of characters, `?` any one.
pub fn glob(pattern: &str, value: &str) -> bool {
    let (p, v): (Vec<char>, Vec<char>) = (pattern.chars().collect(), value.chars().collect());
    let (mut pi, mut vi) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while vi < v.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == v[vi]) {
            pi += 1;
            vi += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, vi));
            pi += 1;
        } else if let Some((sp, sv)) = star {
            pi = sp + 1;
            vi = sv + 1;
            star = Some((sp, sv + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// ARN matching: each of the six colon-separated parts on its own (`*` does not cross a part).
fn arn_like(pattern: &str, value: &str) -> bool {
    let p: Vec<&str> = pattern.splitn(6, ':').collect();
    let v: Vec<&str> = value.splitn(6, ':').collect();
    p.len() == 6 && v.len() == 6 && p.iter().zip(&v).all(|(p, v)| glob(p, v))
}

impl Statement {
    fn applies_to(&self, check: &Check) -> bool {
        let action = check.action.to_ascii_lowercase();
        let action_matches =
            |patterns: &[String]| patterns.iter().any(|p| glob(&p.to_ascii_lowercase(), &action));
        let actions = if self.not_actions.is_empty() {
            action_matches(&self.actions)
        } else {
            !action_matches(&self.not_actions)
        };
        let resource_matches = |patterns: &[String]| patterns.iter().any(|p| glob(p, &check.resource));
        let resources = if self.not_resources.is_empty() {
            resource_matches(&self.resources)
        } else {
            !resource_matches(&self.not_resources)
        };
        actions && resources
    }

    /// The first condition `check` fails, described; None when all hold.
    fn failed_condition(&self, check: &Check) -> Option<String> {
        for (operator, key, values) in &self.conditions {
            let request = context_values(check, key);
            // Operators were validated when the policy was read.
            let holds = condition_holds(operator, &request, values).unwrap_or(false);
            if !holds {
                let found = match &request {
                    None => "absent from the request".to_string(),
                    Some(values) => format!("the request has {values:?}"),
                };
                return Some(format!("{operator} {key} {values:?} fails: {found}"));
            }
        }
        None
    }
}

/// The values of context key `key` in `check`; None when the request does not carry it.
pub fn context_values(check: &Check, key: &str) -> Option<Vec<String>> {
    let lower = key.to_ascii_lowercase();
    let tag = |tags: &Option<BTreeMap<String, String>>, name: &str| {
        tags.as_ref().and_then(|tags| {
            tags.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| vec![v.clone()])
        })
    };
    if let Some(name) = key
        .get("aws:requesttag/".len()..)
        .filter(|_| lower.starts_with("aws:requesttag/"))
    {
        return tag(&check.request_tags, name);
    }
    for prefix in ["aws:resourcetag/", "ec2:resourcetag/", "iam:resourcetag/"] {
        if lower.starts_with(prefix) {
            return tag(&check.resource_tags, &key[prefix.len()..]);
        }
    }
    if lower == "aws:tagkeys" {
        return check
            .request_tags
            .as_ref()
            .map(|tags| tags.keys().cloned().collect());
    }
    check
        .context
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| vec![v.clone()])
}

/// Whether `operator` (qualified) holds for the request's values of its key (None: absent) and the policy's.
pub fn condition_holds(
    operator: &str,
    request: &Option<Vec<String>>,
    policy: &[String],
) -> Result<bool, String> {
    let (set, base, if_exists) = split_operator(operator)?;
    if base == "Null" {
        let wants_absent = policy.iter().any(|v| v.eq_ignore_ascii_case("true"));
        return Ok(request.is_none() == wants_absent);
    }
    let negated = base.contains("Not");
    let one = |value: &str| -> bool {
        let matches = |p: &String| match base {
            "StringEquals" | "StringNotEquals" => p == value,
            "StringEqualsIgnoreCase" | "StringNotEqualsIgnoreCase" => p.eq_ignore_ascii_case(value),
            "StringLike" | "StringNotLike" => glob(p, value),
            // IAM checks ArnEquals like ArnLike: part by part, wildcards allowed.
            "ArnEquals" | "ArnNotEquals" | "ArnLike" | "ArnNotLike" => arn_like(p, value),
            "Bool" => p.eq_ignore_ascii_case(value),
            _ => false,
        };
        let any = policy.iter().any(matches);
        if negated { !any } else { any }
    };
    Ok(match (set, request) {
        (Some("ForAllValues"), None) => true,
        (Some("ForAllValues"), Some(values)) => values.iter().all(|v| one(v)),
        (Some(_), None) => false,
        (Some(_), Some(values)) => values.iter().any(|v| one(v)),
        (None, None) => if_exists || negated,
        (None, Some(values)) => values.iter().any(|v| one(v)),
    })
}
