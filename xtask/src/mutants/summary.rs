//! A campaign's results: one record per mutant (`results.jsonl`), and the summary written
//! from them (`summary.json`, `summary.md`).
//!
//! `summary.json`, field by field:
//!
//! | field | what it is |
//! |---|---|
//! | `crate` | the crate mutated |
//! | `listed` | mutants cargo-mutants generated (with the `--files` filters) |
//! | `tested` | of those, mutants with a result on file (any shard, any run) |
//! | `caught`, `missed`, `timed_out`, `unviable` | tested mutants by outcome; `missed` leaves out the equivalent ones |
//! | `equivalent` | missed mutants reviewed and found equivalent to the original (see `equivalent.rs`) |
//! | `caught_share` | `caught / (caught + missed)`: of the mutants that built, ended and are not equivalent, the share some layer caught (null if none) |
//! | `by_layer` | caught mutants by the layer credited: `checked`, `crash-test`, `loom`, `assertion`, `crash-or-hang` |
//! | `functions` | per file and function: the same counts |
//! | `missed_mutants` | the name of every missed mutant not yet reviewed (cargo-mutants's: file, line, column, the change) |
//! | `out_of_reach_mutants` | missed mutants reviewed and not equivalent, that no test can drive, each with why (counted in `missed`) |
//! | `equivalent_mutants` | the equivalent ones, each with why |

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::equivalent;
use super::verdict::{Layer, Outcome};

/// One mutant's result, a line of `results.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// cargo-mutants's name of the mutant (file, line, column and the change): its key.
    pub name: String,
    /// The file mutated, relative to the workspace.
    pub file: String,
    /// The function mutated (empty outside a function).
    pub function: String,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The tests that failed (at most a few), for a caught mutant.
    pub failed_tests: Vec<String>,
    /// Seconds its build and test runs took.
    pub seconds: f64,
}

/// Counts of one group of mutants.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Counts {
    pub tested: u64,
    pub caught: u64,
    pub missed: u64,
    pub equivalent: u64,
    pub timed_out: u64,
    pub unviable: u64,
    pub by_layer: BTreeMap<&'static str, u64>,
}

impl Counts {
    fn add(&mut self, outcome: Outcome, equivalent: bool) {
        self.tested += 1;
        match outcome {
            Outcome::Caught(layer) => {
                self.caught += 1;
                *self.by_layer.entry(layer.name()).or_default() += 1;
            }
            Outcome::Missed if equivalent => self.equivalent += 1,
            Outcome::Missed => self.missed += 1,
            Outcome::TimedOut => self.timed_out += 1,
            Outcome::Unviable => self.unviable += 1,
        }
    }

    /// Caught over caught and missed.
    pub fn caught_share(&self) -> Option<f64> {
        let ended = self.caught + self.missed;
        (ended > 0).then(|| self.caught as f64 / ended as f64)
    }
}

/// One file and function's counts.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionCounts {
    pub file: String,
    pub function: String,
    #[serde(flatten)]
    pub counts: Counts,
}

/// The summary of a campaign (see the module documentation for the fields).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    #[serde(rename = "crate")]
    pub krate: String,
    pub listed: usize,
    #[serde(flatten)]
    pub counts: Counts,
    pub caught_share: Option<f64>,
    pub functions: Vec<FunctionCounts>,
    pub missed_mutants: Vec<String>,
    pub out_of_reach_mutants: Vec<Equivalent>,
    pub equivalent_mutants: Vec<Equivalent>,
}

/// A missed mutant reviewed (found equivalent, or out of any test's reach), and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Equivalent {
    pub name: String,
    pub why: &'static str,
}

impl Summary {
    /// The summary of the `records` whose mutant is among the `listed` names (a record of
    /// a mutant no longer generated, the source having changed, is left out).
    pub fn new(krate: &str, listed: &[String], records: &[Record]) -> Self {
        let wanted: std::collections::HashSet<&str> = listed.iter().map(String::as_str).collect();
        let mut counts = Counts::default();
        let mut functions: BTreeMap<(String, String), Counts> = BTreeMap::new();
        let mut missed = Vec::new();
        let mut out_of_reach = Vec::new();
        let mut equivalents = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for r in records {
            if !wanted.contains(r.name.as_str()) || !seen.insert(r.name.as_str()) {
                continue;
            }
            let why = equivalent::reason(&r.name);
            counts.add(r.outcome, why.is_some());
            functions
                .entry((r.file.clone(), r.function.clone()))
                .or_default()
                .add(r.outcome, why.is_some());
            if r.outcome == Outcome::Missed {
                match why {
                    Some(why) => equivalents.push(Equivalent {
                        name: r.name.clone(),
                        why,
                    }),
                    None => match equivalent::out_of_reach(&r.name) {
                        Some(why) => out_of_reach.push(Equivalent {
                            name: r.name.clone(),
                            why,
                        }),
                        None => missed.push(r.name.clone()),
                    },
                }
            }
        }
        Summary {
            krate: krate.to_owned(),
            listed: listed.len(),
            caught_share: counts.caught_share(),
            counts,
            functions: functions
                .into_iter()
                .map(|((file, function), counts)| FunctionCounts {
                    file,
                    function,
                    counts,
                })
                .collect(),
            missed_mutants: missed,
            out_of_reach_mutants: out_of_reach,
            equivalent_mutants: equivalents,
        }
    }

    /// The summary as a Markdown report.
    pub fn markdown(&self) -> String {
        let c = &self.counts;
        let share = |c: &Counts| {
            c.caught_share()
                .map_or("-".to_owned(), |s| format!("{:.1}%", 100.0 * s))
        };
        let mut out = format!(
            "# Mutation campaign: {}\n\n{} mutants listed, {} tested: {} caught, {} missed, {} equivalent, {} timed out, {} unviable. Caught of those that built, ended and are not equivalent: {}.\n\n",
            self.krate,
            self.listed,
            c.tested,
            c.caught,
            c.missed,
            c.equivalent,
            c.timed_out,
            c.unviable,
            share(c)
        );
        out.push_str("| layer | caught |\n|---|--:|\n");
        for layer in Layer::ALL {
            let n = c.by_layer.get(layer.name()).copied().unwrap_or(0);
            out.push_str(&format!("| {} | {n} |\n", layer.name()));
        }
        out.push_str(
            "\n| file | function | tested | caught | missed | equivalent | timed out | unviable | caught share |\n|---|---|--:|--:|--:|--:|--:|--:|--:|\n",
        );
        for f in &self.functions {
            let k = &f.counts;
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                f.file,
                if f.function.is_empty() {
                    "-"
                } else {
                    &f.function
                },
                k.tested,
                k.caught,
                k.missed,
                k.equivalent,
                k.timed_out,
                k.unviable,
                share(k)
            ));
        }
        if !self.missed_mutants.is_empty() {
            out.push_str("\nMissed:\n\n");
            for m in &self.missed_mutants {
                out.push_str(&format!("- `{m}`\n"));
            }
        }
        if !self.out_of_reach_mutants.is_empty() {
            out.push_str("\nMissed, reviewed: not equivalent, and out of any test's reach:\n\n");
            for e in &self.out_of_reach_mutants {
                out.push_str(&format!("- `{}`: {}\n", e.name, e.why));
            }
        }
        if !self.equivalent_mutants.is_empty() {
            out.push_str("\nEquivalent (missed, and no test could catch them):\n\n");
            for e in &self.equivalent_mutants {
                out.push_str(&format!("- `{}`: {}\n", e.name, e.why));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, function: &str, outcome: Outcome) -> Record {
        Record {
            name: name.to_owned(),
            file: "src/heap.rs".to_owned(),
            function: function.to_owned(),
            outcome,
            failed_tests: Vec::new(),
            seconds: 1.0,
        }
    }

    #[test]
    fn records_round_trip_through_their_json_line() {
        for outcome in [
            Outcome::Caught(Layer::Loom),
            Outcome::Missed,
            Outcome::TimedOut,
            Outcome::Unviable,
        ] {
            let r = record("src/heap.rs:1:1: replace f -> bool with true", "f", outcome);
            let line = serde_json::to_string(&r).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), r);
        }
        let caught =
            serde_json::to_string(&record("x", "f", Outcome::Caught(Layer::Checked))).unwrap();
        assert!(
            caught.contains(r#""outcome":"caught","layer":"checked""#),
            "{caught}"
        );
    }

    #[test]
    fn the_summary_counts_each_listed_mutant_once_and_ignores_stale_records() {
        let listed = [
            "a".to_owned(),
            "b".to_owned(),
            "c".to_owned(),
            "d".to_owned(),
        ];
        let records = [
            record("a", "alloc", Outcome::Caught(Layer::Checked)),
            record("a", "alloc", Outcome::Missed), // a repeat: the first record counts
            record("b", "alloc", Outcome::Missed),
            record("c", "free", Outcome::Caught(Layer::Loom)),
            record("gone", "free", Outcome::Missed), // no longer generated
        ];
        let s = Summary::new("alloclab-x", &listed, &records);
        assert_eq!(s.listed, 4);
        assert_eq!(
            (s.counts.tested, s.counts.caught, s.counts.missed),
            (3, 2, 1)
        );
        assert_eq!(s.caught_share, Some(2.0 / 3.0));
        assert_eq!(s.counts.by_layer.get("checked"), Some(&1));
        assert_eq!(s.counts.by_layer.get("loom"), Some(&1));
        assert_eq!(s.missed_mutants, ["b"]);
        assert_eq!(s.functions.len(), 2);
        let alloc = &s.functions[0];
        assert_eq!((alloc.function.as_str(), alloc.counts.tested), ("alloc", 2));
        let md = s.markdown();
        assert!(
            md.contains("4 mutants listed, 3 tested: 2 caught, 1 missed, 0 equivalent"),
            "{md}"
        );
        assert!(
            md.contains("| src/heap.rs | alloc | 2 | 1 | 1 | 0 | 0 | 0 | 50.0% |"),
            "{md}"
        );
        assert!(md.contains("- `b`"));
    }

    #[test]
    fn an_equivalent_mutant_is_neither_missed_nor_in_the_share() {
        let name =
            "allocators/randomized/src/heap/free.rs:199:5: replace prescrubbed -> bool with false";
        let listed = [name.to_owned(), "x".to_owned()];
        let records = [
            record(name, "prescrubbed", Outcome::Missed),
            record("x", "prescrubbed", Outcome::Caught(Layer::Assertion)),
        ];
        let s = Summary::new("alloclab-randomized", &listed, &records);
        assert_eq!((s.counts.missed, s.counts.equivalent), (0, 1));
        assert_eq!(s.caught_share, Some(1.0));
        assert!(s.missed_mutants.is_empty());
        assert_eq!(s.equivalent_mutants.len(), 1);
        assert!(s.markdown().contains("Equivalent (missed"));
    }

    #[test]
    fn a_mutant_out_of_reach_stays_missed_with_its_reason() {
        let name = "allocators/wfspan/src/allocator/mod.rs:157:23: replace * with + in step_bound";
        let listed = [name.to_owned(), "x".to_owned()];
        let records = [
            record(name, "step_bound", Outcome::Missed),
            record("x", "step_bound", Outcome::Caught(Layer::Assertion)),
        ];
        let s = Summary::new("alloclab-wfspan", &listed, &records);
        assert_eq!((s.counts.missed, s.counts.equivalent), (1, 0));
        assert_eq!(s.caught_share, Some(0.5));
        assert!(s.missed_mutants.is_empty());
        assert_eq!(s.out_of_reach_mutants.len(), 1);
        assert!(s.markdown().contains("out of any test's reach"));
    }

    #[test]
    fn a_campaign_with_nothing_ended_has_no_share() {
        let s = Summary::new(
            "x",
            &["a".to_owned()],
            &[record("a", "f", Outcome::Unviable)],
        );
        assert_eq!(s.caught_share, None);
        assert!(s.markdown().contains("not equivalent: -."));
    }
}
