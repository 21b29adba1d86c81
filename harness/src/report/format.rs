//! Formatting of values, ratios, table cells, dates and counts.

use super::*;
use crate::results::Record;

/// A measured value with about three or four significant digits.
pub fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 1e-4 {
        // Three significant digits.
        let decimals = (2 - a.log10().floor() as i32).max(0) as usize;
        format!("{v:.decimals$}")
    } else {
        format!("{v:.2e}")
    }
}

/// An axis tick: [`fmt_value`] without trailing zeros after the decimal point.
pub(crate) fn fmt_tick(v: f64) -> String {
    let s = fmt_value(v);
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// Nanoseconds in the unit that keeps three figures: whole ns, or µs, ms or s.
pub fn fmt_duration_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "—".to_owned();
    }
    if ns < 1e3 {
        return format!("{ns:.0} ns");
    }
    let (value, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e3, "µs")
    };
    if value >= 100.0 {
        format!("{value:.0} {unit}")
    } else if value >= 10.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.2} {unit}")
    }
}

/// A ratio, two decimals, or `—`.
pub(super) fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| NONE.to_owned(), |r| format!("{r:.2}"))
}

/// `median (min–max) unit`, the median in bold if `bold`.
pub(super) fn fmt_cell(r: &Record, bold: bool) -> String {
    let median = fmt_value(r.median);
    let median = if bold {
        format!("**{median}**")
    } else {
        median
    };
    let unit = if r.unit.is_empty() {
        String::new()
    } else {
        format!(" {}", escape_cell(&r.unit))
    };
    format!("{median} ({}–{}){unit}", fmt_value(r.min), fmt_value(r.max))
}

/// Text safe inside a Markdown table cell.
pub(crate) fn escape_cell(s: &str) -> String {
    one_line(&s.replace('|', "\\|"))
}

/// A Markdown code span containing `s` verbatim.
pub(super) fn code_span(s: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// One Markdown table row.
pub(crate) fn table_row(out: &mut String, cells: &[String]) {
    out.push('|');
    for c in cells {
        out.push(' ');
        out.push_str(c);
        out.push_str(" |");
    }
    out.push('\n');
}

/// The header and alignment rows of a table; the first `left` columns are left-aligned,
/// the others right-aligned.
pub(crate) fn table_header(out: &mut String, headers: &[String], left: usize) {
    table_row(out, headers);
    let align: Vec<String> = (0..headers.len())
        .map(|i| if i < left { "---" } else { "--:" }.to_owned())
        .collect();
    table_row(out, &align);
}

/// `2026-11-30 12:34:56 UTC` for seconds since the Unix epoch.
pub fn format_utc(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// (year, month, day) of a day count since 1970-01-01 (proleptic Gregorian calendar;
/// Howard Hinnant's `civil_from_days`).
pub(super) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Bytes as GiB with one decimal.
pub(super) fn fmt_gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// `1 run`, `2 runs`.
pub(super) fn plural(count: u64, noun: &str) -> String {
    format!("{count} {noun}{}", if count == 1 { "" } else { "s" })
}

/// `1 thread`, `2 threads`.
pub(super) fn fmt_thread_count(threads: usize) -> String {
    plural(threads as u64, "thread")
}

pub(super) fn fmt_threads(threads: &[usize]) -> String {
    if threads.is_empty() {
        return NONE.to_owned();
    }
    threads
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The file name of the chart of one workload: `<suite>-<workload>.svg`, with any
/// character other than ASCII letters, digits, `.`, `_` and `-` replaced by `_`.
pub fn chart_file_name(suite: &str, workload: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("{}-{}.svg", clean(suite), clean(workload))
}
