//! The Prometheus text format 0.0.4, for scrapers that do not ask for OpenMetrics: client-go's pod proxy GET
//! (how upstream's end-to-end suites read the controller's memory and CPU), `curl`, older Prometheus servers.
//! [`crate::Metrics::encode_chunks`] writes OpenMetrics; [`ClassicText`] rewrites it chunk by chunk as it
//! streams. The two differ in little: a counter's family takes its sample's `_total` name, `unknown` is
//! `untyped`, and there is no `# UNIT`, no `# EOF` and no exemplar.

/// The `Content-Type` of the rewritten text.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a request's `Accept` header asks for OpenMetrics (Prometheus servers do); anything else gets the
/// classic text, as a Go client library's handler answers.
pub fn accepts_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',')
            .any(|part| part.trim().starts_with("application/openmetrics-text"))
    })
}

/// Rewrites OpenMetrics text into the classic format. Chunks must end at line ends; a family's `# HELP` may
/// end one chunk and its `# TYPE` start the next.
#[derive(Debug, Default)]
pub struct ClassicText {
    /// The last `# HELP` line's name and text, written once the `# TYPE` after it says what the family is called.
    pending_help: Option<(String, String)>,
    /// The current family's name, when it is a counter (its `_created` samples have no classic form).
    counter: Option<String>,
}

impl ClassicText {
    pub fn rewrite(&mut self, chunk: &str) -> String {
        let mut out = String::with_capacity(chunk.len());
        for line in chunk.lines() {
            self.line(line, &mut out);
        }
        out
    }

    fn line(&mut self, line: &str, out: &mut String) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            self.flush_help(out);
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            self.pending_help = Some((name.to_string(), help.to_string()));
            return;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (family, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_string(), kind),
                "gaugehistogram" => (name.to_string(), "histogram"),
                "stateset" => (name.to_string(), "gauge"),
                _ => (name.to_string(), "untyped"),
            };
            if let Some((help_name, help)) = self.pending_help.take() {
                let help_name = if help_name == name {
                    family.as_str()
                } else {
                    help_name.as_str()
                };
                push_line(out, &format!("# HELP {help_name} {help}"));
            }
            self.counter = (kind == "counter").then(|| name.to_string());
            push_line(out, &format!("# TYPE {family} {kind}"));
            return;
        }
        self.flush_help(out);
        if line.starts_with("# UNIT ") || line == "# EOF" || line.is_empty() {
            return;
        }
        if line.starts_with('#') {
            push_line(out, line);
            return;
        }
        if let Some(counter) = &self.counter {
            let sample = line.split(['{', ' ']).next().unwrap_or_default();
            if sample.strip_prefix(counter.as_str()) == Some("_created") {
                return;
            }
        }
        // An exemplar follows the value after ` # `; a label value may hold `#` too, so the marker is looked
        // for after the labels.
        let value_start = labels_end(line);
        match line[value_start..].find(" # ") {
            Some(at) => push_line(out, line[..value_start + at].trim_end()),
            None => push_line(out, line),
        }
    }

    fn flush_help(&mut self, out: &mut String) {
        if let Some((name, help)) = self.pending_help.take() {
            push_line(out, &format!("# HELP {name} {help}"));
        }
    }
}

/// Where a sample line's labels end (after the closing `}`, skipping quoted values), or 0 without labels.
fn labels_end(line: &str) -> usize {
    // A `{` after the first space is an exemplar's, not the sample's labels.
    let Some(open) = line.find('{').filter(|&at| !line[..at].contains(' ')) else {
        return 0;
    };
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in line[open..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return open + i + 1,
            _ => {}
        }
    }
    line.len()
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_take_their_samples_name_and_openmetrics_only_lines_go() {
        let openmetrics = "# HELP karpenter_nodeclaims_created Number of nodeclaims created.\n# TYPE karpenter_nodeclaims_created counter\nkarpenter_nodeclaims_created_total{nodepool=\"a\"} 3\nkarpenter_nodeclaims_created_created{nodepool=\"a\"} 1700000000.0\n# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\n# UNIT process_resident_memory_bytes bytes\nprocess_resident_memory_bytes 1024\n# EOF\n";
        let classic = ClassicText::default().rewrite(openmetrics);
        assert_eq!(
            classic,
            "# HELP karpenter_nodeclaims_created_total Number of nodeclaims created.\n# TYPE karpenter_nodeclaims_created_total counter\nkarpenter_nodeclaims_created_total{nodepool=\"a\"} 3\n# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1024\n"
        );
    }

    #[test]
    fn a_family_split_across_chunks_keeps_its_help() {
        let mut rewriter = ClassicText::default();
        let first = rewriter.rewrite("# HELP x_seconds Time.\n");
        let second = rewriter.rewrite("# TYPE x_seconds counter\nx_seconds_total 2\n");
        assert_eq!(
            first + &second,
            "# HELP x_seconds_total Time.\n# TYPE x_seconds_total counter\nx_seconds_total 2\n"
        );
    }

    #[test]
    fn histograms_and_unknowns_and_exemplars() {
        let text = "# TYPE d histogram\nd_bucket{le=\"+Inf\",path=\"a # b\"} 4 # {trace_id=\"t\"} 1.0\nd_sum 2 # {trace_id=\"u\"} 2.0\nd_count 4\n# TYPE q unknown\nq 1\n";
        let classic = ClassicText::default().rewrite(text);
        assert_eq!(
            classic,
            "# TYPE d histogram\nd_bucket{le=\"+Inf\",path=\"a # b\"} 4\nd_sum 2\nd_count 4\n# TYPE q untyped\nq 1\n"
        );
    }

    #[test]
    fn prometheus_asks_for_openmetrics_and_others_get_classic_text() {
        assert!(accepts_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )));
        assert!(!accepts_openmetrics(Some("application/json, */*")));
        assert!(!accepts_openmetrics(Some("text/plain")));
        assert!(!accepts_openmetrics(None));
    }
}
