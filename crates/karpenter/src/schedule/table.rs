//! `-o table`: the schedule output for people. One row per new NodeClaim, then how many pods went onto
//! existing nodes, then every pending pod with its reason, then the totals. Not a contract; scripts use
//! `-o json`.

use std::fmt::Write as _;

use super::output::ScheduleOutput;

const HEADERS: [&str; 8] = [
    "#",
    "NODEPOOL",
    "INSTANCE TYPE",
    "ZONE",
    "CAPACITY TYPE",
    "PRICE/H",
    "PODS",
    "OPTIONS",
];

/// Renders `out` as aligned text columns.
pub fn render(out: &ScheduleOutput) -> String {
    let mut text = String::new();
    if out.node_claims.is_empty() {
        text.push_str("No new NodeClaims.\n");
    } else {
        let rows: Vec<[String; 8]> = out
            .node_claims
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (it, zone, ct, price) = match &c.launch {
                    Some(l) => (
                        l.instance_type.clone(),
                        l.zone.clone(),
                        l.capacity_type.clone(),
                        format!("{:.4}", l.price),
                    ),
                    None => (
                        "(no launchable offering)".into(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                    ),
                };
                [
                    (i + 1).to_string(),
                    c.node_pool.clone(),
                    it,
                    zone,
                    ct,
                    price,
                    c.pods.len().to_string(),
                    c.instance_types.len().to_string(),
                ]
            })
            .collect();
        write_table(&mut text, &rows);
    }
    let placed: usize = out.existing_nodes.iter().map(|n| n.pods.len()).sum();
    let _ = writeln!(
        text,
        "\nExisting nodes: {placed} pod(s) placed on {} node(s)",
        out.existing_nodes.len()
    );
    for n in &out.existing_nodes {
        let _ = writeln!(text, "  {}: {} pod(s)", n.name, n.pods.len());
    }
    if out.pod_errors.is_empty() {
        text.push_str("\nPending pods: none\n");
    } else {
        let _ = writeln!(text, "\nPending pods ({}):", out.pod_errors.len());
        for e in &out.pod_errors {
            let _ = writeln!(text, "  {}: {}", e.pod, e.error);
        }
    }
    let s = &out.summary;
    let _ = writeln!(
        text,
        "\nSummary: {} of {} pending pod(s) scheduled, {} new NodeClaim(s), {:.4}/h",
        s.scheduled, s.pods, s.new_node_claims, s.cost_per_hour
    );
    text
}

fn write_table(text: &mut String, rows: &[[String; 8]]) {
    let mut widths = HEADERS.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: [&str; 8]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let _ = write!(l, "{cell:<w$}");
        }
        text.push_str(l.trim_end());
        text.push('\n');
    };
    line(HEADERS);
    for row in rows {
        line(row.each_ref().map(String::as_str));
    }
}
