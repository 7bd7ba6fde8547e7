//! Runs a suite's test binary against the cluster and reads Ginkgo's JUnit report back: every spec with its state,
//! written as a Markdown table beside the JUnit file, and the totals the command prints.

use std::{fmt::Write as _, fs::File, path::Path, process::Stdio, time::Instant};

use anyhow::{Context, bail};
use karpenter_e2e::control_plane::ControlPlane;

use super::{Suite, UpstreamArgs, build::UpstreamModule, supervisor::Crash};

/// One spec of a JUnit report.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub name: String,
    pub state: State,
    pub seconds: f64,
    /// The failure's (or skip's) first line.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Passed,
    Failed,
    Skipped,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub specs: Vec<Spec>,
    /// The suite binary ended without a report (a panic or a timeout outside Ginkgo's).
    pub unfinished: bool,
    pub crashes: Vec<Crash>,
}

#[derive(Debug, Default)]
pub struct Totals {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub errors: usize,
}

impl Totals {
    pub fn add(&mut self, outcome: &Outcome) {
        for spec in &outcome.specs {
            match spec.state {
                State::Passed => self.passed += 1,
                State::Failed => self.failed += 1,
                State::Skipped => self.skipped += 1,
            }
        }
        self.errors += usize::from(outcome.unfinished) + outcome.crashes.len();
    }
}

/// Runs `<suite>.test` with Ginkgo's flags and returns what its JUnit report says.
#[allow(clippy::too_many_arguments)]
pub fn run_suite_binary(
    root: &Path,
    cp: &ControlPlane,
    module: &UpstreamModule,
    suite: Suite,
    args: &UpstreamArgs,
    run_dir: &Path,
    output: &Path,
    name: &str,
) -> anyhow::Result<Outcome> {
    let junit = output.join(format!("{name}.junit.xml"));
    let _ = std::fs::remove_file(&junit);
    let log_path = run_dir.join("logs").join(format!("{suite}.test.log"));
    let log = File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    // The test process in a network namespace of its own, as on upstream's CI (see `suite_netns`).
    let netns = super::suite_netns::SuiteNetns::create(&suite.to_string())?;
    let kubeconfig = run_dir.join("suite.kubeconfig");
    netns.kubeconfig(&cp.kubeconfig, &kubeconfig)?;
    let mut command = netns.command(&UpstreamModule::suite_path(root, suite));
    command
        .current_dir(module.dir.join("test/suites").join(suite.to_string()))
        .env("KUBECONFIG", &kubeconfig)
        .env("OUTPUT_DIR", run_dir)
        .args([
            "-test.v",
            "-test.count=1",
            "-test.timeout=0",
            "-ginkgo.v",
            "-ginkgo.no-color",
        ])
        .arg(format!("-ginkgo.timeout={}", args.timeout))
        .arg(format!("-ginkgo.grace-period={}", args.grace_period))
        .arg(format!("-ginkgo.junit-report={}", junit.display()))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if let Some(focus) = &args.focus {
        command.arg(format!("-ginkgo.focus={focus}"));
    }
    if let Some(skip) = &args.skip {
        command.arg(format!("-ginkgo.skip={skip}"));
    }
    let started = Instant::now();
    let status = command.status().context("running the suite binary")?;
    eprintln!(
        "[{name}] suite exited ({status}) after {:.1?}; its log is {}",
        started.elapsed(),
        log_path.display()
    );
    let mut outcome = match std::fs::read_to_string(&junit) {
        Ok(xml) => Outcome {
            specs: parse_junit(&xml)?,
            ..Outcome::default()
        },
        Err(_) => {
            eprintln!(
                "[{name}] no JUnit report; the log's end:\n{}",
                super::supervisor::tail(&log_path, 40)
            );
            Outcome {
                unfinished: true,
                ..Outcome::default()
            }
        }
    };
    // Suite set-up and tear-down nodes are reported as test cases too; they count only when they fail. Specs
    // that --focus or --skip left out are reported as skipped with the bare message "skipped"; they were not run.
    outcome.specs.retain(|s| {
        (s.name.starts_with("[It]") || s.state == State::Failed)
            && !(s.state == State::Skipped && s.message == "skipped")
    });
    let summary = output.join(format!("{name}.md"));
    let mut text = markdown(name, &outcome);
    // The performance suite's own reports, kept beside the results for `cargo xtask e2e compare`.
    let reports = super::performance::collect(run_dir, &output.join(format!("{name}-reports")))?;
    if !reports.is_empty() {
        text.push_str("\n## Performance reports\n");
        text.push_str(&super::performance::markdown(&reports));
    }
    std::fs::write(&summary, text)?;
    print_failures(name, &outcome);
    eprintln!("[{name}] summary {}", summary.display());
    Ok(outcome)
}

fn print_failures(name: &str, outcome: &Outcome) {
    for spec in outcome.specs.iter().filter(|s| s.state == State::Failed) {
        eprintln!("[{name}] FAILED {}: {}", spec.name, spec.message);
    }
    for crash in &outcome.crashes {
        eprintln!(
            "[{name}] the controller of pod {} exited ({}); see {}",
            crash.pod,
            crash.status,
            crash.log.display()
        );
    }
}

/// The report as a Markdown table: spec, result, seconds, and the failure's first line.
pub fn markdown(name: &str, outcome: &Outcome) -> String {
    let mut totals = Totals::default();
    totals.add(outcome);
    let mut text = format!(
        "# {name}\n\n{} passed, {} failed, {} skipped\n\n| spec | result | seconds | message |\n|---|---|---|---|\n",
        totals.passed, totals.failed, totals.skipped
    );
    for spec in &outcome.specs {
        let state = match spec.state {
            State::Passed => "passed",
            State::Failed => "failed",
            State::Skipped => "skipped",
        };
        let _ = writeln!(
            text,
            "| {} | {state} | {:.1} | {} |",
            spec.name.replace('|', "\\|"),
            spec.seconds,
            spec.message.replace('|', "\\|")
        );
    }
    if outcome.unfinished {
        text.push_str("\nThe suite ended without a JUnit report.\n");
    }
    for crash in &outcome.crashes {
        let _ = writeln!(
            text,
            "\nThe controller of pod {} exited ({}).",
            crash.pod, crash.status
        );
    }
    text
}

/// The `<testcase>` elements of a Ginkgo JUnit report.
pub fn parse_junit(xml: &str) -> anyhow::Result<Vec<Spec>> {
    let mut specs = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find("<testcase") {
        rest = &rest[start..];
        let open_end = rest.find('>').context("an unterminated <testcase> element")?;
        let open = &rest[..open_end];
        let self_closing = open.ends_with('/');
        let body_end = if self_closing {
            open_end + 1
        } else {
            rest.find("</testcase>")
                .map(|i| i + "</testcase>".len())
                .context("a <testcase> without its end")?
        };
        let body = &rest[open_end + 1..body_end.max(open_end + 1)];
        let name = attribute(open, "name").unwrap_or_default();
        let status = attribute(open, "status").unwrap_or_default();
        let seconds = attribute(open, "time")
            .and_then(|t| t.parse().ok())
            .unwrap_or(0.0);
        let failed = body.contains("<failure") || body.contains("<error");
        let skipped = body.contains("<skipped");
        let state = if failed || status == "failed" || status == "panicked" || status == "timedout" {
            State::Failed
        } else if skipped || status == "skipped" || status == "pending" {
            State::Skipped
        } else if status == "passed" || status.is_empty() {
            State::Passed
        } else {
            bail!("spec {name:?} has an unknown status {status:?}");
        };
        let message = ["failure", "error", "skipped"]
            .iter()
            .find_map(|tag| {
                let at = body.find(&format!("<{tag}"))?;
                attribute(
                    &body[at..body[at..].find('>').map_or(body.len(), |e| at + e)],
                    "message",
                )
            })
            .map(|m| first_words(&m))
            .unwrap_or_default();
        specs.push(Spec {
            name,
            state,
            seconds,
            message,
        });
        rest = &rest[body_end..];
    }
    Ok(specs)
}

/// A failure message's start on one line: Gomega's first line is often just "Expected", so the next lines are
/// joined to it, up to 160 characters.
fn first_words(message: &str) -> String {
    let joined = message.split_whitespace().collect::<Vec<_>>().join(" ");
    match joined.char_indices().nth(160) {
        Some((at, _)) => format!("{}...", &joined[..at]),
        None => joined,
    }
}

/// An attribute's value in an element's opening tag, unescaped.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let needle = format!(" {name}=\"");
    let start = tag.find(&needle)? + needle.len();
    let end = tag[start..].find('"')? + start;
    Some(unescape(&tag[start..end]))
}

fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&apos;", "'")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#xA;", "\n")
        .replace("&#10;", "\n")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" disabled="0" errors="0" failures="1" time="12.5">
  <testsuite name="Regression" package="/x" tests="4" disabled="0" skipped="1" errors="0" failures="1" time="12.5">
    <testcase name="[BeforeSuite]" classname="Regression" status="passed" time="0.5"></testcase>
    <testcase name="[It] Validation should error when a &quot;restricted&quot; label is used" classname="Regression" status="passed" time="1.25">
      <system-err>log</system-err>
    </testcase>
    <testcase name="[It] NodeClaim should create a nodeclaim" classname="Regression" status="failed" time="10">
      <failure message="Timed out after 600s.&#xA;Expected &lt;int&gt;: 0" type="failed">[FAILED] ...</failure>
    </testcase>
    <testcase name="[It] DefaultTopologySpreadConstraints should spread" classname="Regression" status="skipped" time="0">
      <skipped message="skipped - cluster's kube-scheduler isn't configured"></skipped>
    </testcase>
  </testsuite>
</testsuites>"#;

    #[test]
    fn every_spec_of_a_ginkgo_report_is_read_with_its_state_and_first_message_line() {
        let specs = parse_junit(REPORT).unwrap();
        assert_eq!(specs.len(), 4);
        assert_eq!(
            specs[1].name,
            r#"[It] Validation should error when a "restricted" label is used"#
        );
        assert_eq!((specs[1].state, specs[1].seconds), (State::Passed, 1.25));
        assert_eq!(specs[2].state, State::Failed);
        assert_eq!(specs[2].message, "Timed out after 600s. Expected <int>: 0");
        assert_eq!(specs[3].state, State::Skipped);
        assert_eq!(
            specs[3].message,
            "skipped - cluster's kube-scheduler isn't configured"
        );
        let mut totals = Totals::default();
        totals.add(&Outcome {
            specs,
            ..Outcome::default()
        });
        assert_eq!((totals.passed, totals.failed, totals.skipped), (2, 1, 1));
    }

    #[test]
    fn the_markdown_summary_counts_and_lists_every_spec() {
        let outcome = Outcome {
            specs: parse_junit(REPORT).unwrap(),
            ..Outcome::default()
        };
        let text = markdown("regression-rust", &outcome);
        assert!(text.contains("2 passed, 1 failed, 1 skipped"), "{text}");
        assert!(text.contains("| [It] NodeClaim should create a nodeclaim | failed | 10.0 | Timed out after 600s. Expected <int>: 0 |"), "{text}");
    }
}
