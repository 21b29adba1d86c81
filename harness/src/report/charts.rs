//! One SVG bar chart per workload.

use std::path::Path;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::prelude::*;

use super::*;
use crate::results::{Record, ResultsFile};

pub(super) const PANEL_HEIGHT: u32 = 320;
pub(super) const TITLE_HEIGHT: u32 = 40;

/// Writes the chart of one workload to `path` (atomically): one panel per metric (at most
/// [`MAX_CHART_PANELS`], chosen by [`HEADLINE_METRICS`]), one above the other, each a bar chart of the median per allocator (grouped by thread count
/// when there are several) with min–max error bars, axes labelled with units, titled
/// `<suite>/<workload>`. Fails if the results have no record of that workload.
pub fn write_chart_svg(
    results: &ResultsFile,
    suite: &str,
    workload: &str,
    path: &Path,
) -> Result<(), ReportError> {
    let view = View::new(results);
    if view.records_in(suite, Some(workload)).next().is_none() {
        return Err(ReportError::Chart {
            path: path.to_path_buf(),
            message: format!("no records for {suite}/{workload}"),
        });
    }
    let svg = render_chart_svg(&view, suite, workload).map_err(|e| ReportError::Chart {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    write_atomic(path, svg.as_bytes())
}

/// Draws the chart into a string.
pub(super) fn render_chart_svg(
    view: &View<'_>,
    suite: &str,
    workload: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let metrics = headline(view.metrics_in(suite, Some(workload)));
    let allocators = view.allocators_in(suite, Some(workload));
    let threads = view.threads_in(suite, Some(workload));
    let groups = allocators.len().max(1);
    let per_group = (40 * threads.len() as u32).max(90);
    let width = (160 + groups as u32 * per_group).max(640);
    let height = TITLE_HEIGHT + PANEL_HEIGHT * metrics.len().max(1) as u32;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(&format!("{suite}/{workload}"), ("sans-serif", 24))?;
        let panels = body.split_evenly((metrics.len().max(1), 1));
        for (metric, panel) in metrics.iter().zip(&panels) {
            draw_panel(panel, view, suite, workload, metric, &allocators, &threads)?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// The x axis of a bar chart: group `i` spans `i..i + 1`, labelled at its centre.
pub(crate) struct GroupAxis {
    pub(crate) groups: usize,
}

impl Ranged for GroupAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let fraction = value / self.groups as f64;
        limit.0 + ((limit.1 - limit.0) as f64 * fraction).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            // No light mesh lines between groups.
            return Vec::new();
        }
        (0..self.groups).map(|i| i as f64 + 0.5).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.groups as f64
    }
}

/// Whether a metric's bars go on a logarithmic axis: durations in ns whose bars (and error
/// bars) are all positive and span at least [`LOG_AXIS_SPAN`] (a latency tail next to a fast
/// allocator's, a millisecond stall next to microseconds). Their ticks are in ns, µs or ms.
fn log_axis(metric: &MetricInfo<'_>, values: &[f64]) -> Option<(f64, f64)> {
    if metric.unit != "ns" || values.is_empty() || values.iter().any(|v| *v <= 0.0) {
        return None;
    }
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(0.0f64, f64::max);
    (hi / lo >= LOG_AXIS_SPAN).then_some((lo, hi))
}

/// The least max/min of a metric's values that puts its bars on a log axis.
pub(super) const LOG_AXIS_SPAN: f64 = 10.0;

/// Draws the bars of one metric.
pub(super) fn draw_panel<DB: DrawingBackend>(
    panel: &DrawingArea<DB, plotters::coord::Shift>,
    view: &View<'_>,
    suite: &str,
    workload: &str,
    metric: &MetricInfo<'_>,
    allocators: &[&str],
    threads: &[usize],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    // (allocator index, threads index, record) of every bar.
    let bars: Vec<(usize, usize, &Record)> = allocators
        .iter()
        .enumerate()
        .flat_map(|(ai, a)| {
            threads.iter().enumerate().filter_map(move |(ti, t)| {
                view.get(suite, workload, a, *t, metric.name)
                    .filter(|r| r.median.is_finite())
                    .map(|r| (ai, ti, r))
            })
        })
        .collect();

    let values: Vec<f64> = bars
        .iter()
        .flat_map(|(_, _, r)| [r.min, r.median, r.max])
        .filter(|v| v.is_finite())
        .collect();
    // Headroom above the highest bar: a margin, or room for the legend of the thread
    // counts (about 18 px per entry in a plot area about 220 px high).
    let legend_share = if threads.len() > 1 {
        ((18 * threads.len() + 20) as f64 / 220.0).min(0.6)
    } else {
        0.08
    };
    let n = allocators.len().max(1);
    let direction = if metric.lower_is_better {
        "lower is better"
    } else {
        "higher is better"
    };
    let y_desc = if metric.unit.is_empty() {
        metric.name.to_owned()
    } else {
        format!("{} ({})", metric.name, metric.unit)
    };
    let mut builder = ChartBuilder::on(panel);
    builder
        .margin(10)
        .caption(format!("{} ({direction})", metric.name), ("sans-serif", 18))
        .x_label_area_size(40)
        .y_label_area_size(70);
    let bars_of = Bars {
        bars: &bars,
        allocators,
        threads,
    };
    if let Some((lo, hi)) = log_axis(metric, &values) {
        // The same share of the axis for the legend, in decades.
        let (lo, hi) = (lo / 2.0, hi * 2.0);
        let decades = (hi / lo).log10();
        let hi = lo * 10f64.powf(decades / (1.0 - legend_share));
        let chart = builder.build_cartesian_2d(GroupAxis { groups: n }, (lo..hi).log_scale())?;
        let y_desc = format!("{} (log scale)", metric.name);
        return bars_of.draw(chart, lo, &|y| fmt_duration_ns(*y), &y_desc);
    }
    let (mut lo, mut hi) = values
        .iter()
        .fold((0.0f64, 0.0f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    if hi <= lo {
        hi = lo + 1.0;
    }
    let span = hi - lo;
    if lo < 0.0 {
        lo -= span * 0.08;
    }
    hi = lo + (hi - lo) / (1.0 - legend_share);
    let chart = builder.build_cartesian_2d(GroupAxis { groups: n }, lo..hi)?;
    bars_of.draw(chart, 0.0f64.clamp(lo, hi), &|y| fmt_tick(*y), &y_desc)
}

/// The bars of one metric, ready to draw on a chart of either axis.
struct Bars<'a, 'r> {
    /// (allocator index, threads index, record) of every bar.
    bars: &'a [(usize, usize, &'r Record)],
    allocators: &'a [&'a str],
    threads: &'a [usize],
}

impl Bars<'_, '_> {
    /// Draws the mesh (y ticks by `y_label`, the axis named `y_name`), the bars from `base`,
    /// their min–max error bars and the legend of the thread counts.
    fn draw<'c, DB, Y>(
        &self,
        mut chart: ChartContext<'c, DB, Cartesian2d<GroupAxis, Y>>,
        base: f64,
        y_label: &dyn Fn(&f64) -> String,
        y_name: &str,
    ) -> Result<(), Box<dyn std::error::Error>>
    where
        DB: DrawingBackend + 'c,
        DB::ErrorType: 'static,
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let (allocators, threads) = (self.allocators, self.threads);
        let n = allocators.len().max(1);
        let x_label = |x: &f64| -> String {
            let i = x.floor();
            if i >= 0.0 && (i as usize) < allocators.len() {
                allocators[i as usize].to_owned()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&x_label)
            .y_label_formatter(y_label)
            .x_desc("allocator")
            .y_desc(y_name)
            .draw()?;

        let groups = threads.len().max(1);
        let bar_width = 0.8 / groups as f64;
        let color = |ai: usize, ti: usize| {
            if groups > 1 {
                Palette99::pick(ti)
            } else {
                Palette99::pick(ai)
            }
        };
        for (ti, t) in threads.iter().enumerate() {
            let mine: Vec<&(usize, usize, &Record)> =
                self.bars.iter().filter(|b| b.1 == ti).collect();
            let series = chart.draw_series(mine.iter().map(|(ai, ti, r)| {
                let x0 = *ai as f64 + 0.1 + *ti as f64 * bar_width;
                Rectangle::new(
                    [(x0, base), (x0 + bar_width, r.median)],
                    color(*ai, *ti).filled(),
                )
            }))?;
            if groups > 1 {
                let c = color(0, ti);
                series.label(fmt_thread_count(*t)).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled())
                });
            }
            chart.draw_series(
                mine.iter()
                    .filter(|(_, _, r)| r.min.is_finite() && r.max.is_finite())
                    .map(|(ai, ti, r)| {
                        let x = *ai as f64 + 0.1 + (*ti as f64 + 0.5) * bar_width;
                        ErrorBar::new_vertical(x, r.min, r.median, r.max, BLACK.stroke_width(1), 8)
                    }),
            )?;
        }
        if groups > 1 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        Ok(())
    }
}
