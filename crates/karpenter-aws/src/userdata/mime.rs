//! MIME multipart documents (hand-written, RFC 2046 subset): parsing the user's, writing Karpenter's, and the
//! user's data as parts.

use std::fmt::Write as _;

use super::{MIME_BOUNDARY, NODEADM_CONTENT_TYPE, UserDataError};

/// One part of a multipart document: its headers (without the trailing blank line) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MimePart {
    pub headers: String,
    pub body: String,
}

impl MimePart {
    pub(super) fn typed(content_type: &str, body: &str) -> Self {
        Self {
            headers: format!("Content-Type: {content_type}"),
            body: body.to_string(),
        }
    }
}

/// The boundary of a `multipart/*` document's top-level Content-Type, if `text` is one.
fn mime_boundary(text: &str) -> Option<Option<String>> {
    let (head, _) = split_headers(text)?;
    let unfolded = head
        .replace("\r\n", "\n")
        .replace("\n ", " ")
        .replace("\n\t", " ");
    let content_type = unfolded.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-type")
            .then(|| value.trim().to_string())
    })?;
    if !content_type.to_ascii_lowercase().starts_with("multipart/") {
        return None;
    }
    let boundary = content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"').to_string())
    });
    Some(boundary)
}

/// `(headers, body)` when `text` starts with RFC 822 style headers ended by a blank line.
fn split_headers(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start_matches(['\r', '\n']);
    let first = text.lines().next()?;
    if !first.contains(':') || first.starts_with('#') || first.starts_with('<') {
        return None;
    }
    let (head, body) = text.split_once("\r\n\r\n").or_else(|| text.split_once("\n\n"))?;
    head.lines()
        .all(|l| l.starts_with([' ', '\t']) || l.split_once(':').is_some_and(|(n, _)| !n.contains(' ')))
        .then_some((head, body))
}

/// The parts of a MIME multipart document, or None when `text` is not one.
pub fn parse_mime(text: &str) -> Result<Option<Vec<MimePart>>, UserDataError> {
    let Some(boundary) = mime_boundary(text) else {
        return Ok(None);
    };
    let boundary = boundary.ok_or(UserDataError::InvalidMime)?;
    let delimiter = format!("\n--{boundary}");
    let text = text.replace("\r\n", "\n");
    let mut parts = Vec::new();
    let mut sections = text.split(delimiter.as_str());
    // Everything before the first delimiter is the preamble (with the top-level headers).
    sections.next();
    for section in sections {
        if section.starts_with("--") {
            break;
        }
        let section = section
            .trim_start_matches([' ', '\t'])
            .strip_prefix('\n')
            .unwrap_or(section);
        let (headers, body) = section.split_once("\n\n").unwrap_or(("", section));
        parts.push(MimePart {
            headers: headers.to_string(),
            body: body.trim_end_matches('\n').to_string() + "\n",
        });
    }
    Ok(Some(parts))
}

/// A multipart/mixed document of `parts`.
pub fn render_mime(parts: &[MimePart]) -> String {
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{MIME_BOUNDARY}\"\n\n");
    for part in parts {
        let _ = write!(out, "--{MIME_BOUNDARY}\n{}\n\n{}", part.headers, part.body);
        if !part.body.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
    }
    let _ = writeln!(out, "--{MIME_BOUNDARY}--");
    out
}

/// The user's data as MIME parts: its own parts when it is MIME, else one part typed by its content.
pub(super) fn custom_parts(custom: Option<&str>) -> Result<Vec<MimePart>, UserDataError> {
    let Some(custom) = custom.filter(|c| !c.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    if let Some(parts) = parse_mime(custom)? {
        return Ok(parts);
    }
    let trimmed = custom.trim_start();
    let content_type = if trimmed.starts_with("#cloud-config") {
        "text/cloud-config"
    } else if trimmed.starts_with("#!") {
        "text/x-shellscript; charset=\"us-ascii\""
    } else if trimmed.contains("kind: NodeConfig") || trimmed.starts_with("apiVersion: node.eks.aws") {
        NODEADM_CONTENT_TYPE
    } else {
        "text/x-shellscript; charset=\"us-ascii\""
    };
    let mut body = custom.to_string();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Ok(vec![MimePart::typed(content_type, &body)])
}
