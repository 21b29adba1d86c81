//! Sweep points (`<metric>@<x>`): their tables and line charts.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::*;
use crate::results::ResultsFile;

/// The sweep points of one workload: base metric -> allocator -> (x, median), x ascending;
/// bases and allocators in report order. Thread counts are not distinguished (a sweeping
/// workload runs at one).
pub type Sweeps<'a> = Vec<(&'a str, Vec<(&'a str, Vec<(f64, f64)>)>)>;

pub(super) fn sweeps<'a>(view: &View<'a>, suite: &str, workload: &str) -> Sweeps<'a> {
    let mut bases: Vec<&'a str> = Vec::new();
    for r in view.records_in(suite, Some(workload)) {
        if let Some((base, _)) = sweep_point(&r.metric)
            && !bases.contains(&base)
        {
            bases.push(base);
        }
    }
    bases.sort_by_key(|b| metric_rank(b));
    bases
        .into_iter()
        .map(|base| {
            let per_allocator = view
                .allocators_in(suite, Some(workload))
                .into_iter()
                .map(|a| (a, view.sweep_of(suite, workload, a, base)))
                .filter(|(_, points)| !points.is_empty())
                .collect();
            (base, per_allocator)
        })
        .collect()
}

/// The chart file of a workload's sweeps.
pub fn sweep_chart_file_name(suite: &str, workload: &str) -> String {
    chart_file_name(suite, &format!("{workload}-sweep"))
}

/// The sweep table of one workload (one row per parameter value, one column per base
/// metric and allocator) and a link to its chart; nothing if it has no sweep.
pub(super) fn sweep_section(out: &mut String, view: &View<'_>, suite: &str, workload: &str) {
    let sweeps = sweeps(view, suite, workload);
    if sweeps.is_empty() {
        return;
    }
    let parameter = view.layout.sweep_parameter(suite, workload);
    let _ = writeln!(
        out,
        "
Sweep over the {parameter} (median of the runs at each point):
"
    );
    let mut headers = vec![escape_cell(parameter)];
    let mut xs: Vec<f64> = Vec::new();
    for (base, per_allocator) in &sweeps {
        for (a, points) in per_allocator {
            headers.push(escape_cell(&format!("{base} {a}")));
            xs.extend(points.iter().map(|p| p.0));
        }
    }
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    table_header(out, &headers, 1);
    for x in xs {
        let mut cells = vec![fmt_value(x)];
        for (_, per_allocator) in &sweeps {
            for (_, points) in per_allocator {
                cells.push(
                    points
                        .iter()
                        .find(|p| p.0 == x)
                        .map_or(NONE.to_owned(), |p| fmt_value(p.1)),
                );
            }
        }
        table_row(out, &cells);
    }
    let _ = writeln!(
        out,
        "
![{suite}/{workload} sweep]({})",
        sweep_chart_file_name(suite, workload)
    );
}

/// Writes the sweep chart of one workload to `path` (atomically): one panel per base
/// metric, one line per allocator, the parameter on the x axis. Fails if the workload has
/// no sweep.
pub fn write_sweep_chart_svg(
    results: &ResultsFile,
    layout: &'static ReportLayout,
    suite: &str,
    workload: &str,
    path: &Path,
) -> Result<(), ReportError> {
    let view = View::with_layout(results, layout);
    let sweeps = sweeps(&view, suite, workload);
    let error = |message: String| ReportError::Chart {
        path: path.to_path_buf(),
        message,
    };
    if sweeps.is_empty() {
        return Err(error(format!("no sweep for {suite}/{workload}")));
    }
    let title = format!("{suite}/{workload}: sweep");
    let parameter = layout.sweep_parameter(suite, workload);
    let svg = render_sweep_svg(&sweeps, &title, parameter).map_err(|e| error(e.to_string()))?;
    write_atomic(path, svg.as_bytes())
}

/// Draws `sweeps` into a string under `title`: one panel per base metric, one line per
/// allocator (or labelled curve), `parameter` on the x axis.
pub fn render_sweep_svg(
    sweeps: &Sweeps<'_>,
    title: &str,
    parameter: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let height = TITLE_HEIGHT + PANEL_HEIGHT * sweeps.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(title, ("sans-serif", 24))?;
        let panels = body.split_evenly((sweeps.len(), 1));
        for ((base, per_allocator), panel) in sweeps.iter().zip(&panels) {
            let all = || per_allocator.iter().flat_map(|(_, p)| p.iter());
            // An axis whose positive values span three decades or more (thread counts 1 ..
            // 2^20; a queue's probes against CoRW's) is drawn in log10.
            let log_axis = |values: Vec<f64>| {
                let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                lo > 0.0 && hi / lo >= 1000.0
            };
            let log_x = log_axis(all().map(|p| p.0).collect());
            let log_y = log_axis(all().map(|p| p.1).collect());
            let scale = |v: f64, log: bool| if log { v.log10() } else { v };
            let (x0, x1, y0, y1) = all().fold(
                (
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                ),
                |(x0, x1, y0, y1), &(x, y)| {
                    let (x, y) = (scale(x, log_x), scale(y, log_y));
                    (x0.min(x), x1.max(x), y0.min(y), y1.max(y))
                },
            );
            let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
            let y0 = if log_y { y0 - 0.1 } else { y0.min(0.0) };
            let y1 = if log_y {
                y1 + 0.1
            } else if y1 > y0 {
                y1 + 0.1 * (y1 - y0)
            } else {
                y0 + 1.0
            };
            let mut chart = ChartBuilder::on(panel)
                .margin(10)
                .caption(
                    format!(
                        "{base} (lower is better{})",
                        match (log_x, log_y) {
                            (true, true) => "; log axes",
                            (true, false) => "; log x axis",
                            (false, true) => "; log y axis",
                            (false, false) => "",
                        }
                    ),
                    ("sans-serif", 18),
                )
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(x0..x1, y0..y1)?;
            let x_tick = |v: &f64| fmt_tick(if log_x { 10f64.powf(*v) } else { *v });
            let y_tick = |v: &f64| fmt_tick(if log_y { 10f64.powf(*v) } else { *v });
            chart
                .configure_mesh()
                .x_desc(parameter)
                .y_desc(*base)
                .x_label_formatter(&x_tick)
                .y_label_formatter(&y_tick)
                .draw()?;
            for (i, (allocator, points)) in per_allocator.iter().enumerate() {
                let points: Vec<(f64, f64)> = points
                    .iter()
                    .map(|&(x, y)| (scale(x, log_x), scale(y, log_y)))
                    .collect();
                let points = &points;
                let color = Palette99::pick(i);
                chart
                    .draw_series(LineSeries::new(
                        points.iter().copied(),
                        color.stroke_width(2),
                    ))?
                    .label(*allocator)
                    .legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                    });
                chart.draw_series(
                    points
                        .iter()
                        .map(|&p| Circle::new(p, 3, Palette99::pick(i).filled())),
                )?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
    }
    Ok(svg)
}
