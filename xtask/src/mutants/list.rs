//! The mutants cargo-mutants generates (`cargo mutants --list --json`), and how one is
//! applied to a source file.

use serde::Deserialize;

/// A position in a source file as cargo-mutants gives it: 1-based line, 1-based column in
/// characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct LineColumn {
    pub line: usize,
    pub column: usize,
}

/// The source a mutant replaces: from `start` up to, not including, `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct Span {
    pub start: LineColumn,
    pub end: LineColumn,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
struct Function {
    function_name: String,
}

/// One mutant.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Mutant {
    /// cargo-mutants's name (file, line, column, the change): unique, and the key of the
    /// campaign's results.
    pub name: String,
    /// The file, relative to the workspace root.
    pub file: String,
    function: Option<Function>,
    /// The text replaced.
    pub span: Span,
    /// The text put in its place.
    pub replacement: String,
}

impl Mutant {
    /// The function it changes (empty outside a function).
    pub fn function(&self) -> &str {
        self.function.as_ref().map_or("", |f| &f.function_name)
    }

    /// `source` (the file's text) with this mutant's change, or `None` if the span does
    /// not lie in it (the file changed since the listing).
    pub fn apply(&self, source: &str) -> Option<String> {
        let start = offset(source, self.span.start)?;
        let end = offset(source, self.span.end)?;
        if start > end {
            return None;
        }
        let mut out = String::with_capacity(source.len() + self.replacement.len());
        out.push_str(&source[..start]);
        out.push_str(&self.replacement);
        out.push_str(&source[end..]);
        Some(out)
    }
}

/// The byte offset of `at` in `source`: the line's start, then `column - 1` characters on.
/// A column one past the line's last character (an end) is the line's end.
fn offset(source: &str, at: LineColumn) -> Option<usize> {
    let line_start = if at.line == 1 {
        0
    } else {
        source
            .match_indices('\n')
            .nth(at.line.checked_sub(2)?)
            .map(|(i, _)| i + 1)?
    };
    let line = source[line_start..].split('\n').next()?;
    let skip = at.column.checked_sub(1)?;
    if skip == line.chars().count() {
        return Some(line_start + line.len());
    }
    line.char_indices().nth(skip).map(|(i, _)| line_start + i)
}

/// Reads cargo-mutants's JSON list.
pub fn parse(json: &str) -> Result<Vec<Mutant>, String> {
    serde_json::from_str(json).map_err(|e| format!("cannot read cargo-mutants's list: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"[
      {"diff": "...", "file": "allocators/randomized/src/heap/free.rs",
       "function": {"function_name": "prescrubbed", "return_type": "-> bool",
                    "span": {"end": {"column": 2, "line": 3}, "start": {"column": 1, "line": 1}}},
       "genre": "BinaryOperator",
       "name": "allocators/randomized/src/heap/free.rs:2:19: replace < with <= in prescrubbed",
       "package": "alloclab-randomized", "replacement": "<=",
       "span": {"end": {"column": 20, "line": 2}, "start": {"column": 19, "line": 2}}},
      {"diff": "...", "file": "src/lib.rs", "function": null, "genre": "FnValue",
       "name": "src/lib.rs:1:1: replace X with Y", "package": "p", "replacement": "é",
       "span": {"end": {"column": 3, "line": 1}, "start": {"column": 2, "line": 1}}}
    ]"#;

    const SOURCE: &str =
        "fn prescrubbed(size: usize) -> bool {\n    size - HEADER < fill::SCRUB_RELEASE\n}\n";

    #[test]
    fn a_listed_mutant_replaces_exactly_its_span() {
        let list = parse(LIST).unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].function(), "prescrubbed");
        assert_eq!(list[1].function(), "");
        let mutated = list[0].apply(SOURCE).unwrap();
        assert_eq!(
            mutated,
            "fn prescrubbed(size: usize) -> bool {\n    size - HEADER <= fill::SCRUB_RELEASE\n}\n"
        );
    }

    #[test]
    fn columns_count_characters_and_a_span_may_end_at_a_line_end() {
        let m = &parse(LIST).unwrap()[1];
        // Column 2 is the second character, whatever bytes the first takes.
        assert_eq!(m.apply("äbc\n").unwrap(), "äéc\n");
        let mut whole = m.clone();
        whole.span.end.column = 4;
        assert_eq!(whole.apply("äbc\nx").unwrap(), "äé\nx");
    }

    #[test]
    fn a_span_outside_the_file_is_refused() {
        let mut m = parse(LIST).unwrap()[0].clone();
        m.span.start.line = 40;
        m.span.end.line = 40;
        assert_eq!(m.apply(SOURCE), None);
        assert!(parse("{").unwrap_err().contains("cargo-mutants"));
    }
}
