//! The scripts that the `programs` suite runs under python3, lua5.4, perl and sqlite3.
//!
//! Each script is an input for an unmodified interpreter from the distribution; the
//! allocator under test reaches the interpreter through `LD_PRELOAD`. The scripts are
//! written to stress a heap the way real programs in those languages do (many small,
//! short-lived objects, tables that grow and shrink, large buffers) and to print a few
//! lines that depend on the size argument only: the same bytes under every allocator, so a
//! difference is an allocator bug. Each exits non-zero when an internal cross-check fails.
//!
//! Contract: a script in [`SCRIPTS`] runs as `INTERPRETER SCRIPT N`, with N its
//! [`Script::small_size`] at the harness's small scale (0.2 to 0.6 s of wall time under
//! glibc on a two-core machine), and its work grows linearly with N. The sqlite script
//! ([`SQLITE_BULK`]) has its size in the text instead, as the placeholder `@ROWS@`
//! ([`sqlite_script`] substitutes it), and is fed on standard input to
//! `sqlite3 -batch :memory:`.
//!
//! Python note: CPython serves objects of up to 512 bytes from its own pools (pymalloc)
//! and asks malloc only for larger blocks and for its 256 KiB arenas, so under plain
//! `python3` the preloaded allocator sees dict and list tables, long strings and the JSON
//! buffers, not every small object; `PYTHONMALLOC=malloc` sends every object to malloc.

/// A script for an interpreter, run as `interpreter <script file> <size>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Script {
    /// The workload's name in the suite (`python-json`, `lua`, ...).
    pub name: &'static str,
    /// The interpreter's executable, looked up on `PATH`.
    pub interpreter: &'static str,
    /// The script's text, to be written to a file and passed as the first argument.
    pub text: &'static str,
    /// The size argument at the small scale; the work grows linearly with it.
    pub small_size: u64,
}

/// `python3 json_roundtrip.py N`: builds a nested document of N records (lists of dicts
/// of strings, ints, floats, booleans and None; about 21 values per record), then
/// `json.dumps` and `json.loads` it three times in different shapes (compact with sorted
/// keys, the default ASCII-escaped form, a dump of a parsed copy), checks every copy
/// equals the original and prints the value count, the text sizes and a sha256 of the
/// canonical dump. Exercises the JSON encoder's growing output buffer (megabytes), the
/// decoder's many small objects, and dropping a whole document at once.
pub const PYTHON_JSON: &str = include_str!("../scripts/python/json_roundtrip.py");
/// The record count of [`PYTHON_JSON`] at small scale (about 32 000 values).
pub const PYTHON_JSON_SMALL: u64 = 1_500;

/// `python3 dict_churn.py N`: N operations on a dict of short-lived string keys whose
/// working set grows and shrinks in four waves (inserts, deletes, hits and misses), with
/// small lists as values, bucket lists that swing between empty and hundreds of items,
/// short-lived records and, every 4096 operations, a temporary dict and list over a
/// slice of the working set. Exercises dict resizes up and down, list growth and string
/// churn. Prints operation counts, sizes, a checksum and a sha256 of the final set.
pub const PYTHON_DICT: &str = include_str!("../scripts/python/dict_churn.py");
/// The operation count of [`PYTHON_DICT`] at small scale.
pub const PYTHON_DICT_SMALL: u64 = 15_000;

/// `python3 object_tree.py N`: four rounds, each building a tree of about N small objects
/// (instances of a class with `__slots__`, of one without, whose attributes live in a
/// per-instance dict, and tuples and strings as payloads), with parent pointers that make
/// every tree a reference cycle; walks it depth first and breadth first, replaces half of
/// the top subtrees with fresh ones, walks it again and drops it to the cyclic garbage
/// collector (enabled throughout). Exercises many small objects of a few sizes, born
/// together and freed together, interleaved with younger ones.
pub const PYTHON_TREE: &str = include_str!("../scripts/python/object_tree.py");
/// The node count per tree of [`PYTHON_TREE`] at small scale.
pub const PYTHON_TREE_SMALL: u64 = 2_000;

/// `lua5.4 churn.lua N`: N steps over a hash table of string-keyed entries that grows and
/// shrinks in waves; each step formats and concatenates strings, inserts an entry (a table
/// with a closure that captures upvalues) or removes one, calls a closure, joins and
/// rewrites a small buffer with `table.concat` and `gsub`, and pushes to or pops from a
/// queue table; every 2000 steps a window of the working set is copied and sorted with a
/// comparison closure. Exercises Lua's strings, tables and closures under its incremental
/// collector. Prints counts, sizes and a 64-bit FNV-1a digest.
pub const LUA_CHURN: &str = include_str!("../scripts/lua/churn.lua");
/// The step count of [`LUA_CHURN`] at small scale.
pub const LUA_CHURN_SMALL: u64 = 10_000;

/// `perl churn.pl N`: N synthetic log lines formatted with `sprintf`, parsed back with a
/// regex of thirteen captures and checked, then folded into hashes (per host, per status),
/// a hash of arrays (paths per user, trimmed with `splice`) and a hash of hashes (sessions
/// that grow and shrink in waves), with `split`, `join`, `lc`/`uc`, `reverse`, `tr///` and
/// `s///g` making new strings from every line; every 2000 lines a report over the sorted
/// session keys. Prints counts, sizes and an MD5 of the lines and the aggregates.
pub const PERL_CHURN: &str = include_str!("../scripts/perl/churn.pl");
/// The line count of [`PERL_CHURN`] at small scale.
pub const PERL_CHURN_SMALL: u64 = 6_000;

/// The interpreter scripts, in the suite's order: `python-json`, `python-dict`,
/// `python-tree`, `lua`, `perl`.
pub const SCRIPTS: &[Script] = &[
    Script {
        name: "python-json",
        interpreter: "python3",
        text: PYTHON_JSON,
        small_size: PYTHON_JSON_SMALL,
    },
    Script {
        name: "python-dict",
        interpreter: "python3",
        text: PYTHON_DICT,
        small_size: PYTHON_DICT_SMALL,
    },
    Script {
        name: "python-tree",
        interpreter: "python3",
        text: PYTHON_TREE,
        small_size: PYTHON_TREE_SMALL,
    },
    Script {
        name: "lua",
        interpreter: "lua5.4",
        text: LUA_CHURN,
        small_size: LUA_CHURN_SMALL,
    },
    Script {
        name: "perl",
        interpreter: "perl",
        text: PERL_CHURN,
        small_size: PERL_CHURN_SMALL,
    },
];

/// The sqlite3 shell script, with its row count as the placeholder [`ROWS_PLACEHOLDER`]:
/// in an in-memory database (so every page is in SQLite's malloc'd page cache), one
/// transaction bulk-loads `@ROWS@` orders, `@ROWS@ / 10` customers and 500 products, each
/// generated inside SQL by a recursive CTE that carries a deterministic LCG; then three
/// indexes are built, and joins with GROUP BY aggregates, a top-ten ORDER BY ... LIMIT, a
/// full sort on a computed text key and a window function run, a seventh of the orders is
/// updated and a tenth deleted, the database is VACUUMed, and `PRAGMA integrity_check`
/// prints `ok` as the last line. Every printed row is ordered by a unique key and holds
/// integers and text only. Fed on standard input to `sqlite3 -batch :memory:`.
pub const SQLITE_BULK: &str = include_str!("../scripts/sqlite/bulk.sql");
/// The placeholder in [`SQLITE_BULK`] for the number of rows.
pub const ROWS_PLACEHOLDER: &str = "@ROWS@";
/// The row count of [`SQLITE_BULK`] at small scale.
pub const SQLITE_SMALL_ROWS: u64 = 15_000;

/// [`SQLITE_BULK`] with `rows` in place of every [`ROWS_PLACEHOLDER`] (at least one row).
pub fn sqlite_script(rows: u64) -> String {
    SQLITE_BULK.replace(ROWS_PLACEHOLDER, &rows.max(1).to_string())
}
