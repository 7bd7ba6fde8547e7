//! `--chart PATH`: an SVG of running nodes and cost per hour over simulated time, two lines on one chart
//! (nodes on the left axis, cost on the right), written without a plotting library.

use std::fmt::Write as _;

use super::run::Sample;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 360.0;
const MARGIN: f64 = 60.0;

fn polyline(samples: &[Sample], max_x: f64, max_y: f64, y: impl Fn(&Sample) -> f64) -> String {
    let plot_w = WIDTH - 2.0 * MARGIN;
    let plot_h = HEIGHT - 2.0 * MARGIN;
    samples
        .iter()
        .map(|s| {
            let px = MARGIN + s.seconds as f64 / max_x * plot_w;
            let py = HEIGHT - MARGIN - y(s) / max_y * plot_h;
            format!("{px:.1},{py:.1}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The chart as SVG text.
pub fn svg(title: &str, samples: &[Sample]) -> String {
    let max_x = samples.iter().map(|s| s.seconds).max().unwrap_or(1).max(1) as f64;
    let max_nodes = samples.iter().map(|s| s.nodes).max().unwrap_or(1).max(1) as f64;
    let max_cost = samples
        .iter()
        .map(|s| s.cost_per_hour)
        .fold(0.0, f64::max)
        .max(0.01);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"##
    );
    let _ = writeln!(out, r##"<rect width="100%" height="100%" fill="white"/>"##);
    let _ = writeln!(
        out,
        r##"<text x="{MARGIN}" y="24" font-size="15">{title}</text>"##
    );
    let (x0, y0, x1, y1) = (MARGIN, HEIGHT - MARGIN, WIDTH - MARGIN, MARGIN);
    let _ = writeln!(
        out,
        r##"<path d="M{x0},{y1} L{x0},{y0} L{x1},{y0} L{x1},{y1}" fill="none" stroke="#888"/>"##
    );
    let _ = writeln!(
        out,
        r##"<text x="{x0}" y="{}" text-anchor="middle">0</text><text x="{x1}" y="{}" text-anchor="middle">{:.0} min</text>"##,
        y0 + 18.0,
        y0 + 18.0,
        max_x / 60.0
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" text-anchor="end" fill="#1f77b4">{max_nodes:.0} nodes</text>"##,
        x0 - 6.0,
        y1 + 4.0
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" fill="#d62728">${max_cost:.2}/h</text>"##,
        x1 + 6.0,
        y1 + 4.0
    );
    let _ = writeln!(
        out,
        r##"<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{}"/>"##,
        polyline(samples, max_x, max_nodes, |s| s.nodes as f64)
    );
    let _ = writeln!(
        out,
        r##"<polyline fill="none" stroke="#d62728" stroke-width="2" stroke-dasharray="6,3" points="{}"/>"##,
        polyline(samples, max_x, max_cost, |s| s.cost_per_hour)
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" fill="#1f77b4">nodes</text><text x="{}" y="{}" fill="#d62728">cost per hour</text>"##,
        x0 + 10.0,
        y0 - 10.0,
        x0 + 70.0,
        y0 - 10.0
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_has_a_line_per_series_over_the_samples() {
        let samples = [
            Sample {
                seconds: 0,
                nodes: 0,
                cost_per_hour: 0.0,
            },
            Sample {
                seconds: 1800,
                nodes: 10,
                cost_per_hour: 2.5,
            },
            Sample {
                seconds: 3600,
                nodes: 2,
                cost_per_hour: 0.4,
            },
        ];
        let svg = svg("test", &samples);
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("10 nodes") && svg.contains("$2.50/h") && svg.contains("60 min"));
        // The peak sits on the top edge of the plot.
        assert!(svg.contains(&format!(
            "{:.1},{:.1}",
            MARGIN + (WIDTH - 2.0 * MARGIN) / 2.0,
            MARGIN
        )));
    }
}
