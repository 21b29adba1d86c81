//! Why a report could not be written.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a report, chart or README could not be written. Every message is one line and
/// names the file concerned.
#[derive(Debug)]
pub enum ReportError {
    /// A file or directory could not be read, written or created.
    Io {
        /// What was being done: `"write"`, `"read"`, `"create directory"`.
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The results could not be serialised to JSON.
    Json {
        /// The file that was to be written.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// A chart could not be drawn.
    Chart {
        /// The SVG file that was to be written.
        path: PathBuf,
        /// What went wrong, on one line.
        message: String,
    },
    /// The README lacks the [`README_BEGIN`](super::README_BEGIN)/[`README_END`](super::README_END) marker lines, has one of them
    /// more than once, or has them out of order.
    MissingMarkers {
        /// The README.
        path: PathBuf,
        /// What is wrong with the markers.
        problem: String,
    },
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Io {
                action,
                path,
                source,
            } => write!(
                f,
                "cannot {action} {}: {}",
                path.display(),
                one_line(&source.to_string())
            ),
            ReportError::Json { path, source } => write!(
                f,
                "cannot serialise results for {}: {}",
                path.display(),
                one_line(&source.to_string())
            ),
            ReportError::Chart { path, message } => {
                write!(
                    f,
                    "cannot draw chart {}: {}",
                    path.display(),
                    one_line(message)
                )
            }
            ReportError::MissingMarkers { path, problem } => {
                write!(f, "cannot update {}: {}", path.display(), one_line(problem))
            }
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReportError::Io { source, .. } => Some(source),
            ReportError::Json { source, .. } => Some(source),
            ReportError::Chart { .. } | ReportError::MissingMarkers { .. } => None,
        }
    }
}

/// Joins the lines of `s` with spaces.
pub(super) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
