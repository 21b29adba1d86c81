//! Writing the report directory, atomically.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::results::ResultsFile;

/// The files [`write_report`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportFiles {
    /// The report directory.
    pub dir: PathBuf,
    /// `results.json`.
    pub results_json: PathBuf,
    /// `report.md`.
    pub report_md: PathBuf,
    /// One `<suite>-<workload>.svg` per workload, in report order, each followed by its
    /// `<suite>-<workload>-sweep.svg` if it has sweep points.
    pub charts: Vec<PathBuf>,
    /// Every file written, in the order written: `results.json`, `report.md`, the charts.
    pub paths: Vec<PathBuf>,
}

/// Writes the report directory: creates `dir` (and its parents) if needed, then writes
/// `results.json`, `report.md`, `<suite>-<workload>.svg` for each workload,
/// `<suite>-<workload>-sweep.svg` for each workload with sweep points, and the charts a
/// suite's layout draws of its own ([`SuiteLayout::charts`]), each atomically.
pub fn write_report(
    dir: &Path,
    results: &ResultsFile,
    layout: &'static ReportLayout,
) -> Result<ReportFiles, ReportError> {
    fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        action: "create directory",
        path: dir.to_path_buf(),
        source,
    })?;
    let results_json = dir.join("results.json");
    write_results_json(&results_json, results)?;
    let report_md = dir.join("report.md");
    write_atomic(&report_md, render_markdown(results, layout).as_bytes())?;
    let view = View::with_layout(results, layout);
    let mut charts = Vec::new();
    for &suite in &view.suites {
        let own = layout.of(suite);
        if let Some(write) = own.charts {
            charts.extend(write(dir, results)?);
        }
        if !own.workload_charts {
            continue;
        }
        for workload in view.workloads(suite) {
            let path = dir.join(chart_file_name(suite, workload));
            write_chart_svg(results, suite, workload, &path)?;
            charts.push(path);
            if !sweeps(&view, suite, workload).is_empty() {
                let path = dir.join(sweep_chart_file_name(suite, workload));
                write_sweep_chart_svg(results, layout, suite, workload, &path)?;
                charts.push(path);
            }
        }
    }
    let mut paths = vec![results_json.clone(), report_md.clone()];
    paths.extend(charts.iter().cloned());
    Ok(ReportFiles {
        dir: dir.to_path_buf(),
        results_json,
        report_md,
        charts,
        paths,
    })
}

/// Writes `results` to `path` as pretty-printed JSON (with a final newline), atomically.
pub fn write_results_json(path: &Path, results: &ResultsFile) -> Result<(), ReportError> {
    let mut json = serde_json::to_string_pretty(results).map_err(|source| ReportError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    json.push('\n');
    write_atomic(path, json.as_bytes())
}

/// Replaces the lines between the [`README_BEGIN`] and [`README_END`] marker lines of
/// `readme` (the markers themselves stay) with `section`, atomically. Each marker must be
/// on a line of its own, exactly once, begin before end. The file is left alone if
/// nothing changes.
pub fn update_readme(readme: &Path, section: &str) -> Result<(), ReportError> {
    let text = fs::read_to_string(readme).map_err(|source| ReportError::Io {
        action: "read",
        path: readme.to_path_buf(),
        source,
    })?;
    let updated =
        replace_section(&text, section).map_err(|problem| ReportError::MissingMarkers {
            path: readme.to_path_buf(),
            problem,
        })?;
    if updated == text {
        return Ok(());
    }
    write_atomic(readme, updated.as_bytes())
}

/// `text` with the lines between the markers replaced by `section`, or what is wrong with
/// the markers.
pub(super) fn replace_section(text: &str, section: &str) -> Result<String, String> {
    // (start of line, end of line including its newline) of each marker line.
    let mut begins = Vec::new();
    let mut ends = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let span = (offset, offset + line.len());
        match line.trim() {
            README_BEGIN => begins.push(span),
            README_END => ends.push(span),
            _ => {}
        }
        offset += line.len();
    }
    let one = |found: &[(usize, usize)], marker: &str| match found {
        [one] => Ok(*one),
        [] => Err(format!("marker line `{marker}` not found")),
        many => Err(format!(
            "marker line `{marker}` appears {} times (once expected)",
            many.len()
        )),
    };
    let begin = one(&begins, README_BEGIN)?;
    let end = one(&ends, README_END)?;
    if end.0 < begin.1 {
        return Err(format!(
            "marker line `{README_END}` comes before `{README_BEGIN}`"
        ));
    }
    let mut out = String::with_capacity(text.len() + section.len());
    out.push_str(&text[..begin.1]);
    if !text[..begin.1].ends_with('\n') {
        out.push('\n');
    }
    out.push_str(section);
    if !section.is_empty() && !section.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&text[end.0..]);
    Ok(out)
}

/// Distinguishes the temporary files of one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `contents` to `path` atomically: into `.<name>.tmp-<pid>-<n>` in the same
/// directory, flushed to disk, then renamed over `path`. On failure the temporary file is
/// removed and `path` is untouched. An existing target's permissions are kept.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), ReportError> {
    let error = |source: io::Error| ReportError::Io {
        action: "write",
        path: path.to_path_buf(),
        source,
    };
    let Some(name) = path.file_name() else {
        return Err(error(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a file name",
        )));
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut attempt = 0;
    let (tmp, mut file) = loop {
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".tmp-{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = dir.join(tmp_name);
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => break (tmp, file),
            // A leftover of an earlier process with the same id: try another name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => return Err(error(e)),
        }
    };
    let result = (|| {
        file.write_all(contents)?;
        if let Ok(meta) = fs::metadata(path)
            && meta.is_file()
        {
            file.set_permissions(meta.permissions())?;
        }
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        error(e)
    })
}
