//! `cargo xtask bench schedule --upstream`: upstream's scheduler and ours on the same workloads, one table.
//!
//! Upstream's side is built from the Go module pinned in `tests/upstream-bench/go.mod` (sigs.k8s.io/karpenter
//! v1.15.0, with `GOTOOLCHAIN=go1.27.3`, which the Go module proxy serves) into `target/upstream-bench/`:
//!
//! - `upstream-bench` (`tests/upstream-bench/main.go`, ours, a few hundred lines over upstream's exported API):
//!   writes the catalog upstream's benchmark schedules against (`fake.InstanceTypes(400)`) as a catalog file,
//!   draws the benchmark's pods from its seeded source in its order and writes them as JSON, and times one
//!   `Scheduler.Solve` per workload set up as the benchmark sets it up, printing one JSON line with the
//!   NodeClaims and their cost. Upstream's benchmark prints no cost, so its own binary cannot give this column.
//! - with `--upstream-benchmark`, upstream's benchmark itself (`go test -c -tags test_performance` of
//!   `pkg/controllers/provisioning/scheduling`), run with `-test.benchtime=1x` so each benchmark draws its pods
//!   once, in the same sequence as `upstream-bench`: its node counts must equal `upstream-bench`'s, which shows
//!   that both solved the same pods; its times go under the table.
//!
//! Our side reads the same catalog file and the same pods (through the snapshot loader, as `bench schedule`
//! does) and times one `schedule` per workload.

use std::{
    fmt::Write as _,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};
use karpenter_api::quantity::parse_milli;
use karpenter_core::{catalog::CatalogFile, scheduling::PreferencePolicy};
use serde_json::{Value, json};

use super::{
    catalogs,
    report::Row,
    workloads::{self, Requests, Workload},
};

/// Our pinned Go module: go.mod, go.sum and the `upstream-bench` program.
const MODULE: &str = "tests/upstream-bench";
/// Where the binaries and the workloads go.
const OUT: &str = "target/upstream-bench";
/// The package of upstream's scheduling benchmark.
const BENCHMARK_PACKAGE: &str = "sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling";
/// The sizes upstream's benchmark file has a `BenchmarkScheduling<N>` for.
pub const BENCHMARK_SIZES: [usize; 9] = [1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000];
/// Upstream's preference workload size.
const PREFERENCE_PODS: usize = 4000;

pub struct Options {
    pub json: bool,
    /// Diverse sizes, any order (run ascending, as upstream's benchmark runs them).
    pub sizes: Vec<usize>,
    pub preferences: bool,
    /// Also run upstream's benchmark binary and check its node counts.
    pub benchmark: bool,
}

/// One workload's figures from `upstream-bench`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamResult {
    pub workload: String,
    pub pods: usize,
    pub seconds: f64,
    pub nodes: usize,
    pub cost: f64,
    pub pod_errors: usize,
}

/// Parses one output line of `upstream-bench`.
pub fn parse_harness_line(line: &str) -> Result<UpstreamResult> {
    let v: Value = serde_json::from_str(line).with_context(|| format!("upstream-bench printed {line:?}"))?;
    let count = |key: &str| {
        v[key]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .with_context(|| format!("upstream-bench line {line:?}: {key} is not a count"))
    };
    let number = |key: &str| {
        v[key]
            .as_f64()
            .with_context(|| format!("upstream-bench line {line:?}: {key} is not a number"))
    };
    Ok(UpstreamResult {
        workload: v["workload"]
            .as_str()
            .with_context(|| format!("upstream-bench line {line:?}: no workload"))?
            .to_string(),
        pods: count("pods")?,
        seconds: number("seconds")?,
        nodes: count("nodes")?,
        cost: number("cost")?,
        pod_errors: count("podErrors")?,
    })
}

/// One result line of a Go benchmark binary.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchmarkLine {
    /// Our workload name for the benchmark (`diverse-1000`, `preferences-respect-4000`).
    pub workload: String,
    pub iterations: u64,
    pub ns_per_op: f64,
    pub nodes: Option<f64>,
    pub pods: Option<f64>,
    pub pods_per_second: Option<f64>,
}

/// Our workload name for one of upstream's benchmark functions (without the `-GOMAXPROCS` suffix).
pub fn benchmark_workload(name: &str) -> Option<String> {
    match name {
        "BenchmarkRespectPreferences" => Some(format!("preferences-respect-{PREFERENCE_PODS}")),
        "BenchmarkIgnorePreferences" => Some(format!("preferences-ignore-{PREFERENCE_PODS}")),
        _ => {
            let n: usize = name.strip_prefix("BenchmarkScheduling")?.parse().ok()?;
            Some(format!("diverse-{n}"))
        }
    }
}

/// The result lines of `go test -bench` output (`BenchmarkScheduling1000-2  1  8556458120 ns/op  200.0 nodes
/// 1000 pods  116.9 pods/sec`); other lines (goos, PASS, logs) are skipped, and so are benchmarks of other names.
pub fn parse_benchmark_output(text: &str) -> Vec<BenchmarkLine> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?;
            let base = match name.rsplit_once('-') {
                Some((base, procs)) if procs.chars().all(|c| c.is_ascii_digit()) => base,
                _ => name,
            };
            let workload = benchmark_workload(base)?;
            let iterations: u64 = fields.next()?.parse().ok()?;
            let rest: Vec<&str> = fields.collect();
            let mut out = BenchmarkLine {
                workload,
                iterations,
                ns_per_op: f64::NAN,
                nodes: None,
                pods: None,
                pods_per_second: None,
            };
            for pair in rest.chunks_exact(2) {
                let Ok(value) = pair[0].parse::<f64>() else {
                    continue;
                };
                match pair[1] {
                    "ns/op" => out.ns_per_op = value,
                    "nodes" => out.nodes = Some(value),
                    "pods" => out.pods = Some(value),
                    "pods/sec" => out.pods_per_second = Some(value),
                    _ => {}
                }
            }
            out.ns_per_op.is_finite().then_some(out)
        })
        .collect()
}

/// The `-test.bench` pattern for these sizes (and the preference benchmarks).
pub fn benchmark_pattern(sizes: &[usize], preferences: bool) -> String {
    let mut names: Vec<String> = sizes.iter().map(|n| format!("Scheduling{n}")).collect();
    if preferences {
        names.extend(["RespectPreferences".into(), "IgnorePreferences".into()]);
    }
    format!("^Benchmark({})$", names.join("|"))
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub upstream: UpstreamResult,
    pub ours: Row,
}

/// Seconds with three significant digits.
pub fn format_seconds(s: f64) -> String {
    match s {
        s if s >= 100.0 => format!("{s:.0}"),
        s if s >= 10.0 => format!("{s:.1}"),
        s if s >= 1.0 => format!("{s:.2}"),
        s if s >= 0.1 => format!("{s:.3}"),
        s if s >= 0.01 => format!("{s:.4}"),
        s => format!("{s:.5}"),
    }
}

fn per_second(pods: usize, seconds: f64) -> String {
    if seconds > 0.0 {
        format!("{:.0}", pods as f64 / seconds)
    } else {
        "-".into()
    }
}

fn ratio(a: f64, b: f64, digits: usize) -> String {
    if b > 0.0 {
        format!("{:.digits$}", a / b)
    } else {
        "-".into()
    }
}

/// What the table's heading says about the workloads (printed above it).
pub const TABLE_HEADING: &str = "Upstream (sigs.k8s.io/karpenter v1.15.0, Go) and ours on the same workloads: \
     upstream's benchmark catalog (fake.InstanceTypes(400), written by upstream's module at run time) and the \
     same pods (drawn by upstream's benchmark generator, seed 42, in its order), one NodePool. One Solve and one \
     `schedule` per row, wall clock, setup untimed. Cost: the hourly price of the cheapest compatible offering of \
     each new NodeClaim. Only difference: our NodePool's memory limit is 8,000,000Gi (upstream's 10,000,000Gi \
     exceeds our exact integers); neither binds. Speed-up = upstream time / our time; nodes and cost ratios \
     are ours / upstream's (at most 1.000 is no worse).";

/// The Markdown table.
pub fn markdown_table(rows: &[Comparison]) -> String {
    let mut out = String::new();
    out.push_str(
        "| Workload | Pods | Upstream s | Upstream pods/s | Upstream nodes | Upstream $/h \
         | Ours s | Ours pods/s | Ours nodes | Ours $/h | Speed-up | Nodes ours/up | Cost ours/up |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for c in rows {
        let (u, o) = (&c.upstream, &c.ours);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {:.2} | {}x | {} | {} |",
            u.workload,
            u.pods,
            format_seconds(u.seconds),
            per_second(u.pods, u.seconds),
            u.nodes,
            u.cost,
            format_seconds(o.seconds),
            per_second(o.pods, o.seconds),
            o.nodes,
            o.cost_per_hour,
            ratio(u.seconds, o.seconds, 0),
            ratio(o.nodes as f64, u.nodes as f64, 3),
            ratio(o.cost_per_hour, u.cost, 3),
        );
    }
    out
}

/// A relative cost difference below this is rounding, not a worse packing.
const COST_TOLERANCE: f64 = 1e-9;

/// One line for every row where ours is worse than upstream's (more nodes, higher cost, or pods left pending
/// that upstream scheduled), saying by how much.
pub fn worse_rows(rows: &[Comparison]) -> Vec<String> {
    let mut out = Vec::new();
    for c in rows {
        let (u, o) = (&c.upstream, &c.ours);
        if o.nodes > u.nodes {
            let more = o.nodes - u.nodes;
            out.push(format!(
                "{}: {} nodes, {} more than upstream's {} (+{:.2}%)",
                u.workload,
                o.nodes,
                more,
                u.nodes,
                100.0 * more as f64 / u.nodes.max(1) as f64
            ));
        }
        if o.cost_per_hour > u.cost * (1.0 + COST_TOLERANCE) {
            out.push(format!(
                "{}: cost {:.4}/h, {:.4} more than upstream's {:.4} (+{:.2}%)",
                u.workload,
                o.cost_per_hour,
                o.cost_per_hour - u.cost,
                u.cost,
                100.0 * (o.cost_per_hour - u.cost) / u.cost.max(f64::MIN_POSITIVE)
            ));
        }
        if o.pending > u.pod_errors {
            out.push(format!(
                "{}: {} pod(s) left pending, upstream {}",
                u.workload, o.pending, u.pod_errors
            ));
        }
    }
    out
}

/// Where `upstream` (the catalog upstream's module wrote) differs from [`catalogs::fake_catalog`], which
/// `bench schedule` without `--upstream` uses: requirements compared as sets, prices to 1e-9.
pub fn catalog_differences(ours: &CatalogFile, upstream: &CatalogFile) -> Vec<String> {
    let mut out = Vec::new();
    if ours.instance_types.len() != upstream.instance_types.len() {
        out.push(format!(
            "{} instance types here, {} upstream",
            ours.instance_types.len(),
            upstream.instance_types.len()
        ));
    }
    let canonical = |reqs: &[karpenter_core::catalog::CatalogRequirement]| {
        let mut v: Vec<(String, String, Vec<String>)> = reqs
            .iter()
            .map(|r| {
                let mut values = r.values.clone();
                values.sort();
                (r.key.clone(), format!("{:?}", r.operator), values)
            })
            .collect();
        v.sort();
        v
    };
    for (a, b) in ours.instance_types.iter().zip(&upstream.instance_types) {
        let mut fields = Vec::new();
        if a.name != b.name {
            fields.push("name");
        }
        if canonical(&a.requirements) != canonical(&b.requirements) {
            fields.push("requirements");
        }
        if a.capacity != b.capacity {
            fields.push("capacity");
        }
        if a.overhead != b.overhead {
            fields.push("overhead");
        }
        let same_offerings = a.offerings.len() == b.offerings.len()
            && a.offerings.iter().zip(&b.offerings).all(|(x, y)| {
                x.zone == y.zone
                    && x.capacity_type == y.capacity_type
                    && x.available == y.available
                    && (x.price - y.price).abs() <= 1e-9 * y.price.abs().max(1.0)
            });
        if !same_offerings {
            fields.push("offerings");
        }
        if !fields.is_empty() {
            out.push(format!("{} (upstream {}): {}", a.name, b.name, fields.join(", ")));
        }
    }
    let mut wk_a = ours.well_known_labels.clone();
    let mut wk_b = upstream.well_known_labels.clone();
    wk_a.sort();
    wk_b.sort();
    if wk_a != wk_b {
        out.push(format!("well-known labels {wk_a:?} here, {wk_b:?} upstream"));
    }
    out
}

/// A pod's summed container requests (CPU in millicores, memory in bytes), for the lower bounds.
pub fn pod_requests(pod: &Value) -> Requests {
    let mut r = Requests {
        cpu_milli: 0,
        memory_bytes: 0,
    };
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let requests = &c["resources"]["requests"];
        let milli = |key: &str| {
            requests[key]
                .as_str()
                .and_then(|q| parse_milli(q).ok())
                .unwrap_or(0)
        };
        r.cpu_milli += milli("cpu");
        r.memory_bytes += milli("memory") / 1000;
    }
    r
}

/// Whether a pod must be alone on its node among pods it selects (required hostname anti-affinity).
fn hostname_anti_affinity(pod: &Value) -> bool {
    pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .is_some_and(|terms| terms.iter().any(|t| t["topologyKey"] == "kubernetes.io/hostname"))
}

/// Our workload for one of `upstream-bench`'s pod files.
pub fn workload_from_pods(name: &str, catalog: &CatalogFile, pods: Vec<Value>) -> Workload {
    let requests = pods.iter().map(pod_requests).collect();
    // Every anti-affine pod of these workloads selects all the others (app=nginx), so each needs its own node.
    let forced_nodes = pods.iter().filter(|p| hostname_anti_affinity(p)).count();
    let preference_policy = if name.starts_with("preferences-ignore") {
        PreferencePolicy::Ignore
    } else {
        PreferencePolicy::Respect
    };
    Workload {
        name: name.to_string(),
        catalog: catalog.clone(),
        allowed: |_| true,
        capacity_type: None,
        nodepool: workloads::fake_nodepool(),
        pods,
        requests,
        forced_nodes,
        linear_price: None,
        preference_policy,
    }
}

/// The workload names, in the order upstream's benchmark (and `upstream-bench`) runs them.
pub fn workload_names(sizes: &[usize], preferences: bool) -> Vec<String> {
    let mut names: Vec<String> = sizes.iter().map(|n| format!("diverse-{n}")).collect();
    if preferences {
        names.push(format!("preferences-respect-{PREFERENCE_PODS}"));
        names.push(format!("preferences-ignore-{PREFERENCE_PODS}"));
    }
    names
}

fn go(root: &Path) -> Command {
    crate::go::go(&root.join(MODULE))
}

fn sizes_arg(sizes: &[usize]) -> String {
    sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

pub fn run(options: &Options) -> Result<()> {
    let root = crate::workspace_root();
    let out = root.join(OUT);
    let workloads_dir = out.join("workloads");
    let mut sizes = options.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    if options.benchmark
        && let Some(n) = sizes.iter().find(|n| !BENCHMARK_SIZES.contains(n))
    {
        bail!(
            "--upstream-benchmark: upstream's benchmark has no BenchmarkScheduling{n} (it has {BENCHMARK_SIZES:?})"
        );
    }
    let names = workload_names(&sizes, options.preferences);
    if names.is_empty() {
        bail!("--upstream: no workload to run (give --sizes, or drop --no-preferences)");
    }
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;

    let harness = out.join("upstream-bench");
    eprintln!("building upstream-bench ({}) from {MODULE}", harness.display());
    let mut build = go(&root);
    build.args(["build", "-o"]).arg(&harness).arg(".");
    crate::go::run(build, "building upstream-bench")?;
    let benchmark = out.join("scheduling.test");
    if options.benchmark {
        eprintln!(
            "building upstream's scheduling benchmark ({})",
            benchmark.display()
        );
        let mut build = go(&root);
        build
            .args(["test", "-c", "-tags", "test_performance", "-o"])
            .arg(&benchmark)
            .arg(BENCHMARK_PACKAGE);
        crate::go::run(build, "building upstream's scheduling benchmark")?;
    }

    // The catalog and the pods first (no solving), so ours runs while nothing else does.
    let mut dump = Command::new(&harness);
    dump.arg("-out")
        .arg(&workloads_dir)
        .arg(format!("-sizes={}", sizes_arg(&sizes)))
        .arg(format!("-preferences={}", options.preferences))
        .arg("-dump-only")
        .stdin(Stdio::null());
    crate::go::run(dump, "writing upstream's workloads")?;
    let catalog_path = workloads_dir.join("catalog.json");
    let text = std::fs::read_to_string(&catalog_path)
        .with_context(|| format!("reading {}", catalog_path.display()))?;
    let catalog =
        CatalogFile::from_json_str(&text).with_context(|| format!("reading {}", catalog_path.display()))?;
    let mut notes = Vec::new();
    let differences = catalog_differences(&catalogs::fake_catalog(catalogs::FAKE_INSTANCE_TYPES), &catalog);
    if !differences.is_empty() {
        notes.push(format!(
            "upstream's catalog differs from the one `bench schedule` builds by formula in {} place(s), first: {}",
            differences.len(),
            differences[0]
        ));
    }

    let mut ours = Vec::with_capacity(names.len());
    for name in &names {
        let path = workloads_dir.join(format!("{name}.pods.json"));
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let pods: Vec<Value> =
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        drop(text);
        let row = super::run_workload_runs(workload_from_pods(name, &catalog, pods), 1)?;
        eprintln!(
            "ours      {name}: {} s, {} nodes, {:.2}/h",
            format_seconds(row.seconds),
            row.nodes,
            row.cost_per_hour
        );
        ours.push(row);
    }

    eprintln!("running upstream's scheduler on the same workloads (the largest takes a long time)");
    let mut solve = Command::new(&harness);
    solve
        .arg("-out")
        .arg(&workloads_dir)
        .arg(format!("-sizes={}", sizes_arg(&sizes)))
        .arg(format!("-preferences={}", options.preferences))
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut child = solve.spawn().context("starting upstream-bench")?;
    let mut upstream = Vec::with_capacity(names.len());
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.context("reading upstream-bench's output")?;
            if line.trim().is_empty() {
                continue;
            }
            let r = parse_harness_line(&line)?;
            eprintln!(
                "upstream  {}: {} s, {} nodes, {:.2}/h",
                r.workload,
                format_seconds(r.seconds),
                r.nodes,
                r.cost
            );
            upstream.push(r);
        }
    }
    let status = child.wait().context("waiting for upstream-bench")?;
    if !status.success() {
        bail!("upstream-bench failed ({status})");
    }

    let mut rows = Vec::with_capacity(names.len());
    for o in ours {
        let Some(u) = upstream.iter().find(|u| u.workload == o.workload) else {
            bail!("upstream-bench printed no result for {}", o.workload);
        };
        if u.pods != o.pods {
            bail!(
                "{}: upstream scheduled {} pods, ours {}",
                o.workload,
                u.pods,
                o.pods
            );
        }
        rows.push(Comparison {
            upstream: u.clone(),
            ours: o,
        });
    }

    let benchmark_lines = if options.benchmark {
        run_benchmark(&benchmark, &sizes, options.preferences, &rows, &mut notes)?
    } else {
        Vec::new()
    };

    if options.json {
        for c in &rows {
            let bench = benchmark_lines.iter().find(|b| b.workload == c.upstream.workload);
            println!(
                "{}",
                json!({
                    "workload": c.upstream.workload,
                    "pods": c.upstream.pods,
                    "upstream": {
                        "seconds": c.upstream.seconds,
                        "nodes": c.upstream.nodes,
                        "cost_per_hour": c.upstream.cost,
                        "pod_errors": c.upstream.pod_errors,
                        "benchmark_seconds": bench.map(|b| b.ns_per_op / 1e9),
                        "benchmark_nodes": bench.and_then(|b| b.nodes),
                    },
                    "ours": serde_json::from_str::<Value>(&c.ours.to_json()).unwrap_or(Value::Null),
                })
            );
        }
    } else {
        println!("{TABLE_HEADING}\n");
        print!("{}", markdown_table(&rows));
        if !benchmark_lines.is_empty() {
            println!("\nUpstream's own benchmark binary (`-test.benchtime=1x`), same pods:\n");
            for b in &benchmark_lines {
                println!(
                    "- {}: {} s, {} nodes",
                    b.workload,
                    format_seconds(b.ns_per_op / 1e9),
                    b.nodes.map_or("-".into(), |n| format!("{n:.0}"))
                );
            }
        }
    }
    let worse = worse_rows(&rows);
    for line in &notes {
        eprintln!("note: {line}");
    }
    if worse.is_empty() {
        eprintln!("\nours is no worse than upstream on nodes and cost on every row");
    } else {
        eprintln!("\nWORSE THAN UPSTREAM:");
        for line in &worse {
            eprintln!("  {line}");
        }
    }
    Ok(())
}

/// Runs upstream's benchmark binary once per benchmark and checks its node counts against `upstream-bench`'s.
fn run_benchmark(
    binary: &PathBuf,
    sizes: &[usize],
    preferences: bool,
    rows: &[Comparison],
    notes: &mut Vec<String>,
) -> Result<Vec<BenchmarkLine>> {
    eprintln!("running upstream's benchmark binary on the same sizes (as long again)");
    let mut command = Command::new(binary);
    command
        .arg("-test.run=^$")
        .arg(format!("-test.bench={}", benchmark_pattern(sizes, preferences)))
        .arg("-test.benchtime=1x")
        .stdin(Stdio::null());
    let text = crate::go::run(command, "running upstream's benchmark")?;
    let lines = parse_benchmark_output(&text);
    for c in rows {
        match lines.iter().find(|b| b.workload == c.upstream.workload) {
            None => notes.push(format!(
                "upstream's benchmark printed no result for {}",
                c.upstream.workload
            )),
            Some(b) if b.nodes.is_some_and(|n| (n - c.upstream.nodes as f64).abs() > 0.5) => {
                notes.push(format!(
                    "{}: upstream's benchmark made {:?} nodes, upstream-bench {}: the pods differ",
                    c.upstream.workload, b.nodes, c.upstream.nodes
                ))
            }
            Some(_) => {}
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upstream_bench_lines() {
        let r = parse_harness_line(
            r#"{"workload":"diverse-1000","pods":1000,"seconds":10.25,"nodes":200,"cost":345.27,"podErrors":0}"#,
        )
        .unwrap();
        assert_eq!(
            r,
            UpstreamResult {
                workload: "diverse-1000".into(),
                pods: 1000,
                seconds: 10.25,
                nodes: 200,
                cost: 345.27,
                pod_errors: 0,
            }
        );
        assert!(parse_harness_line("not json").is_err());
        assert!(
            parse_harness_line(r#"{"workload":"x","pods":1,"seconds":1,"cost":1,"podErrors":0}"#).is_err()
        );
    }

    #[test]
    fn parses_go_benchmark_output() {
        let text = "goos: linux\ngoarch: amd64\npkg: sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling\n\
            cpu: Intel(R) Xeon(R) Processor\n\
            BenchmarkScheduling1000-2       \t       1\t8556458120 ns/op\t       200.0 nodes\t      1000 pods\t       116.9 pods/sec\n\
            BenchmarkRespectPreferences-2   \t       1\t176595554298 ns/op\t      4000 nodes\t      4000 pods\t        22.65 pods/sec\n\
            BenchmarkIgnorePreferences \t 1\t3305976894 ns/op\t        11.00 nodes\n\
            BenchmarkTopology-2 1 100 ns/op\n\
            PASS\nok  \tsigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling\t190.1s\n";
        let lines = parse_benchmark_output(text);
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0],
            BenchmarkLine {
                workload: "diverse-1000".into(),
                iterations: 1,
                ns_per_op: 8_556_458_120.0,
                nodes: Some(200.0),
                pods: Some(1000.0),
                pods_per_second: Some(116.9),
            }
        );
        assert_eq!(lines[1].workload, "preferences-respect-4000");
        assert_eq!(lines[1].nodes, Some(4000.0));
        assert_eq!(lines[2].workload, "preferences-ignore-4000");
        assert_eq!(lines[2].pods, None);
    }

    #[test]
    fn benchmark_names_and_pattern() {
        assert_eq!(
            benchmark_workload("BenchmarkScheduling20000").as_deref(),
            Some("diverse-20000")
        );
        assert_eq!(benchmark_workload("BenchmarkSchedulingX"), None);
        assert_eq!(benchmark_workload("TestSchedulingProfile"), None);
        assert_eq!(
            benchmark_pattern(&[1000, 5000], true),
            "^Benchmark(Scheduling1000|Scheduling5000|RespectPreferences|IgnorePreferences)$"
        );
        assert_eq!(benchmark_pattern(&[1000], false), "^Benchmark(Scheduling1000)$");
        assert_eq!(
            workload_names(&[1000], true),
            [
                "diverse-1000",
                "preferences-respect-4000",
                "preferences-ignore-4000"
            ]
        );
    }

    fn row(workload: &str, pods: usize, seconds: f64, nodes: usize, cost: f64) -> Row {
        Row {
            workload: workload.into(),
            pods,
            threads: 1,
            seconds,
            pods_per_second: pods as f64 / seconds,
            nodes,
            node_lower_bound: 0,
            cost_per_hour: cost,
            cost_lower_bound: 0.0,
            peak_rss_bytes: 0,
            pending: 0,
        }
    }

    fn upstream(workload: &str, pods: usize, seconds: f64, nodes: usize, cost: f64) -> UpstreamResult {
        UpstreamResult {
            workload: workload.into(),
            pods,
            seconds,
            nodes,
            cost,
            pod_errors: 0,
        }
    }

    #[test]
    fn table_has_both_sides_and_ratios() {
        let rows = [Comparison {
            upstream: upstream("diverse-1000", 1000, 8.5, 200, 345.28),
            ours: row("diverse-1000", 1000, 0.017, 200, 340.0),
        }];
        let table = markdown_table(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("| Workload | Pods | Upstream s |"));
        assert_eq!(lines[1].matches("---").count(), 13);
        assert_eq!(
            lines[2],
            "| diverse-1000 | 1000 | 8.50 | 118 | 200 | 345.28 | 0.0170 | 58824 | 200 | 340.00 | 500x | 1.000 | 0.985 |"
        );
        assert!(worse_rows(&rows).is_empty());
    }

    #[test]
    fn worse_rows_say_by_how_much() {
        let mut ours = row("diverse-5000", 5000, 0.1, 1010, 1100.0);
        ours.pending = 2;
        let rows = [
            Comparison {
                upstream: upstream("diverse-5000", 5000, 40.0, 1000, 1000.0),
                ours,
            },
            Comparison {
                upstream: upstream("preferences-ignore-4000", 4000, 3.0, 11, 1262.4556912128),
                // Equal up to float rounding: not worse.
                ours: row(
                    "preferences-ignore-4000",
                    4000,
                    0.1,
                    11,
                    1262.4556912128 * (1.0 + 1e-12),
                ),
            },
        ];
        let worse = worse_rows(&rows);
        assert_eq!(
            worse,
            [
                "diverse-5000: 1010 nodes, 10 more than upstream's 1000 (+1.00%)",
                "diverse-5000: cost 1100.0000/h, 100.0000 more than upstream's 1000.0000 (+10.00%)",
                "diverse-5000: 2 pod(s) left pending, upstream 0",
            ]
        );
    }

    #[test]
    fn seconds_keep_three_digits() {
        assert_eq!(format_seconds(176.59), "177");
        assert_eq!(format_seconds(17.659), "17.7");
        assert_eq!(format_seconds(8.556), "8.56");
        assert_eq!(format_seconds(0.35), "0.350");
        assert_eq!(format_seconds(0.0172), "0.0172");
        assert_eq!(format_seconds(0.00312), "0.00312");
    }

    #[test]
    fn requests_and_forced_nodes_come_from_the_pods() {
        let pod = json!({"spec": {
            "containers": [{"resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}}},
                           {"resources": {"requests": {"cpu": "100m"}}}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "nginx"}}, "topologyKey": "kubernetes.io/hostname"}]}},
        }});
        let r = pod_requests(&pod);
        assert_eq!((r.cpu_milli, r.memory_bytes), (1600, 2 << 30));
        let plain = json!({"spec": {"containers": [{"resources": {"requests": {"memory": "100Mi"}}}]}});
        let catalog = catalogs::fake_catalog(2);
        let w = workload_from_pods("preferences-ignore-4000", &catalog, vec![pod, plain]);
        assert_eq!(w.forced_nodes, 1);
        assert_eq!(w.requests[1].memory_bytes, 100 << 20);
        assert!(matches!(w.preference_policy, PreferencePolicy::Ignore));
        let w = workload_from_pods("diverse-1000", &catalog, Vec::new());
        assert!(matches!(w.preference_policy, PreferencePolicy::Respect));
    }

    #[test]
    fn catalog_differences_find_changed_types() {
        let ours = catalogs::fake_catalog(3);
        let mut upstream = ours.clone();
        // Order of requirements and of values does not matter.
        for it in &mut upstream.instance_types {
            let mut reqs = (*it.requirements).clone();
            reqs.reverse();
            it.requirements = reqs.into();
        }
        assert!(catalog_differences(&ours, &upstream).is_empty());
        upstream.instance_types[1].offerings[0].price += 0.01;
        upstream.instance_types[2].capacity.insert("pods".into(), 1000);
        assert_eq!(
            catalog_differences(&ours, &upstream),
            [
                "fake-it-1 (upstream fake-it-1): offerings",
                "fake-it-2 (upstream fake-it-2): capacity"
            ]
        );
        upstream.instance_types.pop();
        assert_eq!(
            catalog_differences(&ours, &upstream)[0],
            "3 instance types here, 2 upstream"
        );
    }
}
