//! Plots of a run, in the spirit of DASH's Figures 3 and 4: latency and
//! throughput against payload size, one line per implementation, written as
//! SVG by hand (a plotting library would be this crate's largest
//! dependency, and the picture is a few dozen lines and circles). SVG only:
//! no PNG is written.
//!
//! [`write_plots`] makes, for every (suite, case, touch, placement) measured
//! at two sizes or more, `BASE-SUITE-CASE[-TOUCH]-PLACEMENT-latency.svg`
//! and, where data moves, `…-throughput.svg`, with `BASE` the results file's
//! name less `.json`. Both axes are logarithmic; ferry's implementations are
//! drawn solid and thick, the peers dashed, the baselines thin.

use std::fmt::Write as _;
use std::io;

use crate::record::Record;

/// One line of a plot: an implementation's points, `(bytes, value)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The implementation's name (the legend).
    pub name: String,
    /// Points in increasing `x`; both coordinates positive.
    pub points: Vec<(f64, f64)>,
}

/// What a plot shows on its y axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Median nanoseconds per operation.
    Latency,
    /// Payload GB/s at the median.
    Throughput,
}

impl Measure {
    fn file_suffix(self) -> &'static str {
        match self {
            Measure::Latency => "latency",
            Measure::Throughput => "throughput",
        }
    }
    fn axis(self) -> &'static str {
        match self {
            Measure::Latency => "median time per operation",
            Measure::Throughput => "throughput at the median (GB/s)",
        }
    }
}

const W: f64 = 760.0;
const H: f64 = 460.0;
const LEFT: f64 = 92.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 12] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79",
    "#637939",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A size in bytes, in the unit that suits it.
pub fn fmt_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

/// A duration in ns, in the unit that suits it.
pub fn fmt_ns(ns: f64) -> String {
    if ns.abs() < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{} µs", trim(format!("{:.3}", ns / 1e3)))
    } else if ns < 1e9 {
        format!("{} ms", trim(format!("{:.3}", ns / 1e6)))
    } else {
        format!("{} s", trim(format!("{:.3}", ns / 1e9)))
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn fmt_y(m: Measure, v: f64) -> String {
    match m {
        Measure::Latency => fmt_ns(v),
        Measure::Throughput => trim(format!("{v:.3}")),
    }
}

/// How an implementation's line is drawn: (stroke width, dash pattern).
fn style(name: &str) -> (f64, &'static str) {
    if name.starts_with("ferry") {
        (3.0, "")
    } else if name == "iceoryx2" || name == "ipc-channel" {
        (2.0, "8 4")
    } else {
        (1.3, "3 3")
    }
}

/// An SVG document plotting `series` on log–log axes (x: bytes).
pub fn svg(title: &str, measure: Measure, series: &[Series]) -> String {
    let pts: Vec<(f64, f64)> =
        series.iter().flat_map(|s| s.points.iter().copied()).filter(|&(x, y)| x > 0.0 && y > 0.0 && y.is_finite()).collect();
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(o, r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#, (LEFT + W - RIGHT) / 2.0, esc(title));
    if pts.is_empty() {
        let _ = writeln!(o, r#"<text x="{}" y="{}" text-anchor="middle">not measured</text>"#, W / 2.0, H / 2.0);
        o.push_str("</svg>\n");
        return o;
    }
    let (mut x0, mut x1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (mut y0, mut y1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    if x1 / x0 < 4.0 {
        x0 /= 2.0;
        x1 *= 2.0;
    }
    // Whole decades on y.
    y0 = 10f64.powf(y0.log10().floor());
    y1 = 10f64.powf(y1.log10().ceil());
    if y1 <= y0 {
        y1 = y0 * 10.0;
    }
    let (lx0, lx1, ly0, ly1) = (x0.log2(), x1.log2(), y0.log10(), y1.log10());
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let px = |x: f64| LEFT + (x.log2() - lx0) / (lx1 - lx0) * pw;
    let py = |y: f64| TOP + ph - (y.log10() - ly0) / (ly1 - ly0) * ph;
    let _ = writeln!(o, r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##);
    // x ticks at the measured sizes.
    let mut xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for &x in &xs {
        let xp = px(x);
        let _ = writeln!(o, r##"<line x1="{xp:.1}" y1="{TOP}" x2="{xp:.1}" y2="{:.1}" stroke="#ddd"/>"##, TOP + ph);
        let _ = writeln!(o, r#"<text x="{xp:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, TOP + ph + 16.0, esc(&fmt_bytes(x as u64)));
    }
    // y ticks at decades (and 2, 5 within when there are few decades).
    let decades = (ly1 - ly0).round() as i32;
    for d in 0..=decades {
        let base = y0 * 10f64.powi(d);
        for m in [1.0, 2.0, 5.0] {
            let y = base * m;
            if y > y1 * 1.0001 || (m != 1.0 && decades > 3) {
                continue;
            }
            let yp = py(y);
            let _ = writeln!(o, r##"<line x1="{LEFT}" y1="{yp:.1}" x2="{:.1}" y2="{yp:.1}" stroke="{}"/>"##, LEFT + pw, if m == 1.0 { "#ccc" } else { "#eee" });
            let _ = writeln!(o, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, yp + 4.0, esc(&fmt_y(measure, y)));
        }
    }
    let _ = writeln!(o, r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">payload size (log scale)</text>"#, LEFT + pw / 2.0, H - 16.0);
    let _ = writeln!(
        o,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{} (log scale)</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        measure.axis()
    );
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let (width, dash) = style(&s.name);
        let good: Vec<(f64, f64)> = s.points.iter().copied().filter(|&(x, y)| x > 0.0 && y > 0.0 && y.is_finite()).collect();
        if good.len() > 1 {
            let path: Vec<String> = good.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
            let _ = writeln!(
                o,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="{width}"{}/>"#,
                path.join(" "),
                if dash.is_empty() { String::new() } else { format!(r#" stroke-dasharray="{dash}""#) }
            );
        }
        for &(x, y) in &good {
            let _ = writeln!(o, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#, px(x), py(y));
        }
        let ly = TOP + 10.0 + i as f64 * 18.0;
        let lx = W - RIGHT + 12.0;
        let _ = writeln!(
            o,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="{width}"{}/>"#,
            lx + 26.0,
            if dash.is_empty() { String::new() } else { format!(r#" stroke-dasharray="{dash}""#) }
        );
        let _ = writeln!(o, r#"<text x="{}" y="{:.1}">{}</text>"#, lx + 32.0, ly + 4.0, esc(&s.name));
    }
    o.push_str("</svg>\n");
    o
}

/// The plots of one group: the series of `measure` for each
/// implementation, in the order they first appear.
pub fn series_of(records: &[&Record], measure: Measure) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in records {
        let v = match measure {
            Measure::Latency => r.median_ns,
            Measure::Throughput => r.gbps,
        };
        let idx = match out.iter().position(|s| s.name == r.imp) {
            Some(i) => i,
            None => {
                out.push(Series { name: r.imp.clone(), points: Vec::new() });
                out.len() - 1
            }
        };
        if let Some(v) = v {
            out[idx].points.push((r.bytes as f64, v));
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out.retain(|s| !s.points.is_empty());
    out
}

/// The file-name stem plots of results file `json_path` start with: the path
/// less a final `.json`.
pub fn stem(json_path: &str) -> &str {
    json_path.strip_suffix(".json").unwrap_or(json_path)
}

/// Writes the plots of `records` next to `json_path` (see the module
/// documentation for the names) and returns the paths written.
pub fn write_plots(records: &[Record], json_path: &str) -> io::Result<Vec<String>> {
    let mut groups: Vec<(String, String, String, String)> = Vec::new();
    for r in records {
        let key = (r.suite.clone(), r.case.clone(), r.touch.name().to_string(), r.placement.name().to_string());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    let mut written = Vec::new();
    for (suite, case, touch, placement) in groups {
        let members: Vec<&Record> = records
            .iter()
            .filter(|r| r.suite == suite && r.case == case && r.touch.name() == touch && r.placement.name() == placement)
            .collect();
        let mut sizes: Vec<u64> = members.iter().map(|r| r.bytes).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.len() < 2 {
            continue;
        }
        let touch_part = if touch == "none" { String::new() } else { format!("-{touch}") };
        for measure in [Measure::Latency, Measure::Throughput] {
            let series = series_of(&members, measure);
            if series.is_empty() {
                continue;
            }
            let title = format!(
                "{suite} / {case}{} — {placement}: {}",
                if touch == "none" { String::new() } else { format!(" (receiver {touch}s)") },
                measure.file_suffix()
            );
            let path = format!("{}-{suite}-{case}{touch_part}-{placement}-{}.svg", stem(json_path), measure.file_suffix());
            std::fs::write(&path, svg(&title, measure, &series))?;
            written.push(path);
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_svg_has_a_line_per_series_and_escapes_names() {
        let s = svg(
            "t",
            Measure::Latency,
            &[
                Series { name: "ferry-x".into(), points: vec![(4096.0, 1000.0), (65536.0, 5000.0)] },
                Series { name: "a<b".into(), points: vec![(4096.0, 2000.0), (65536.0, 9000.0)] },
            ],
        );
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("a&lt;b"));
        assert!(s.contains("4 KiB") && s.contains("64 KiB"));
    }

    #[test]
    fn an_empty_plot_says_not_measured() {
        assert!(svg("t", Measure::Throughput, &[]).contains("not measured"));
    }
}
