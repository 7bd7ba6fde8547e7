//! `karpenter disrupt -o table`: the command the pass would carry out, its savings, and every node left alone
//! with the reason.

use std::fmt::Write as _;

use super::output::DisruptOutput;

pub fn render(out: &DisruptOutput) -> String {
    let mut s = String::new();
    if out.commands.is_empty() && out.expirations.is_empty() {
        s.push_str("No disruption: the pass would do nothing now.\n");
    }
    if !out.expirations.is_empty() {
        let _ = writeln!(
            s,
            "Expired, deleted whatever the budgets ({}):",
            out.expirations.len()
        );
        for e in &out.expirations {
            let drain = e
                .drain_blocked_by
                .as_deref()
                .map(|why| format!("; the drain waits: {why}"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "  {} (NodeClaim {}) expired at {}{drain}",
                e.node, e.node_claim, e.expired_at
            );
        }
    }
    for (i, c) in out.commands.iter().enumerate() {
        let nodes: Vec<&str> = c.candidates.iter().map(|n| n.node.as_str()).collect();
        let _ = writeln!(
            s,
            "{}. {} ({}): {} {} — saves {:.4}/h",
            i + 1,
            c.method,
            c.reason,
            c.decision,
            nodes.join(", "),
            c.savings_per_hour
        );
        for r in &c.replacements {
            let launch = r
                .launch
                .as_ref()
                .map(|l| {
                    format!(
                        "{} in {} ({}) at {:.4}/h",
                        l.instance_type, l.zone, l.capacity_type, l.price
                    )
                })
                .unwrap_or_else(|| "no launchable offering".into());
            let _ = writeln!(
                s,
                "   replacement from NodePool {}: {launch}, {} pod(s)",
                r.node_pool,
                r.pods.len()
            );
        }
    }
    if !out.blocked.is_empty() {
        let _ = writeln!(s, "\nLeft alone ({}):", out.blocked.len());
        let width = out.blocked.iter().map(|b| b.node.len()).max().unwrap_or(0);
        for b in &out.blocked {
            let _ = writeln!(s, "  {:width$}  {}", b.node, b.reason);
        }
    }
    let limited: Vec<String> = out
        .budgets
        .iter()
        .filter_map(|b| b.allowed.map(|a| format!("{}/{}: {a}", b.node_pool, b.reason)))
        .collect();
    if !limited.is_empty() {
        let _ = writeln!(
            s,
            "\nBudgets (nodes that may still be disrupted): {}",
            limited.join(", ")
        );
    }
    for e in &out.errors {
        let _ = writeln!(s, "error: {e}");
    }
    s
}
