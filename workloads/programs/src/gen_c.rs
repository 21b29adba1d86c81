//! A generated C translation unit for the compiler workload.
//!
//! [`generated_c_source`] writes one C11 file of `functions` generated functions around a
//! handful of enums, structs and unions, static lookup tables and string tables, small
//! `static inline` helpers and tables of function pointers. The bodies are made for the
//! optimizer rather than the parser: loops with constant trip counts (unrolling,
//! vectorizing), switch-driven state machines (many basic blocks, jump tables), walks over
//! arrays of structs with a union for type punning, string copying and hashing through
//! `memcpy` and `strlen`, small matrix products, floating-point recurrences, calls to
//! earlier functions (inlining candidates, some with a single call site so the callee can
//! disappear) and indirect calls through the pointer tables. `gcc -O2 -c` keeps every
//! function body in memory until the end of the unit, so both its time and its peak memory
//! grow with `functions`; its allocation pattern (GIMPLE and RTL objects, bitmaps, hash
//! tables, obstacks) is what the workload measures.
//!
//! The text depends on `functions` and `seed` only (a splitmix64 generator inside), and
//! compiles without a warning under `gcc -O2 -std=c11 -Wall -Wextra -c`: every parameter,
//! variable, table and static function is used, every `switch` has a `default`, every case
//! ends in `break`, every shift count is below 64, every divisor is odd and every index is
//! masked to its array's length. The code would also run without undefined behaviour
//! (called with a zeroed `struct ctx`): all arithmetic is unsigned, calls only go to
//! functions defined earlier (no recursion) and every loop has a constant bound.

use std::fmt::Write as _;

/// The number of functions at the harness's small scale: `gcc -O2 -c` on the unit takes
/// about 0.4 s on a two-core development machine.
pub const SMALL_FUNCTIONS: usize = 12;

/// Functions per table of function pointers.
const FP_TABLE: usize = 8;
/// Entries in each `tab_*` lookup table (a power of two: indexes are masked).
const TAB_LEN: usize = 64;
/// Entries in each `str_*` string table (a power of two).
const STR_LEN: usize = 16;
/// Records per struct array in the context (a power of two).
const RECS: usize = 16;

/// A splitmix64 generator: tiny, and the same sequence everywhere for a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A value in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `num / den`.
    fn chance(&mut self, num: usize, den: usize) -> bool {
        self.below(den) < num
    }

    /// An odd 64-bit constant, written as a C literal.
    fn constant(&mut self) -> String {
        let v = match self.below(4) {
            0 => self.next() % 256,
            1 => self.next() % 65_536,
            _ => self.next(),
        };
        format!("0x{:X}ULL", v | 1)
    }
}

const WORDS: &[&str] = &[
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "\\n", "\\t", "\\\\", "\\\"", "%d",
    "{}", "::", "->",
];

/// What the generator knows while writing one function body.
struct Scope {
    /// The type group (enum, struct, union, tables) this function works with.
    group: usize,
    /// The number of `static inline` helpers (`h_0` .. `h_{n-1}`).
    helpers: usize,
    /// Scalar `uint64_t` expressions that are in scope here.
    vars: Vec<String>,
}

/// The unit being written, and which of its functions and helpers something calls.
struct Unit {
    rng: Rng,
    out: String,
    groups: usize,
    helpers: usize,
    helper_used: Vec<bool>,
    fn_used: Vec<bool>,
    table_used: Vec<bool>,
}

impl Unit {
    fn line(&mut self, indent: usize, text: &str) {
        for _ in 0..indent {
            self.out.push_str("    ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// A random, fully parenthesized `uint64_t` expression over the scope's variables, of
    /// at most `depth` levels of binary operators (a few dozen tokens at depth 3).
    fn expr(&mut self, scope: &Scope, depth: usize) -> String {
        if depth == 0 || self.rng.chance(1, 5) {
            return self.leaf(scope);
        }
        let a = self.expr(scope, depth - 1);
        match self.rng.below(14) {
            0..=5 => {
                let op = ["+", "-", "*", "^", "|", "&"][self.rng.below(6)];
                let b = self.expr(scope, depth - 1);
                format!("({a} {op} {b})")
            }
            6 => format!("({a} << {})", self.rng.range(1, 31)),
            7 => format!("({a} >> {})", self.rng.range(1, 40)),
            8 => {
                // A rotate of a variable (of a whole expression it would double its size).
                let v = self.var(scope);
                let r = self.rng.range(1, 63);
                format!("(({v} << {r}) | ({v} >> {}) | {a})", 64 - r)
            }
            9 => {
                let b = self.leaf(scope);
                format!("({a} / ({b} | 1u))")
            }
            10 => {
                let b = self.leaf(scope);
                format!("({a} % ({b} | 1u))")
            }
            11 => {
                // Both sides hold a variable, one mixed with a full-width constant: with a
                // bare constant on either side, a narrow operand (a cast loop counter, a
                // masked value, a folded constant) would be a type-limits or
                // tautological-compare warning, and so would the same expression twice.
                let v1 = self.var(scope);
                let v2 = self.var(scope);
                let b = format!("({v2} ^ 0x{:X}ULL)", self.rng.next() | (1 << 63));
                let t = self.expr(scope, depth.saturating_sub(2));
                let e = self.leaf(scope);
                let cmp = ["<", ">", "==", "!="][self.rng.below(4)];
                format!("(((({a}) + {v1}) {cmp} {b}) ? {t} : {e})")
            }
            12 => {
                let h = self.rng.below(scope.helpers);
                self.helper_used[h] = true;
                let b = self.leaf(scope);
                format!("h_{h}({a}, {b})")
            }
            _ => format!("tab_{}[({a}) & {}u]", scope.group, TAB_LEN - 1),
        }
    }

    /// One of the scope's variables.
    fn var(&mut self, scope: &Scope) -> String {
        scope.vars[self.rng.below(scope.vars.len())].clone()
    }

    fn leaf(&mut self, scope: &Scope) -> String {
        if self.rng.chance(1, 3) {
            self.rng.constant()
        } else {
            self.var(scope)
        }
    }

    /// A call to an earlier function, or to a helper when there is none.
    fn call_earlier(&mut self, index: usize, arg: &str) -> String {
        if index == 0 {
            let h = self.rng.below(self.helpers);
            self.helper_used[h] = true;
            return format!("h_{h}({arg}, c->k)");
        }
        // Mostly near neighbours, so call chains stay local, sometimes anything earlier.
        let j = if self.rng.chance(3, 4) {
            index - 1 - self.rng.below(index.min(12))
        } else {
            self.rng.below(index)
        };
        self.fn_used[j] = true;
        format!("f_{j}({arg}, c)")
    }

    fn header(&mut self, functions: usize, seed: u64) {
        let text = format!(
            "/* Generated by alloclab-programs (gen_c): {functions} functions, seed {seed}.\n \
             * A compiler workload: structs, unions, enums, static tables, loops, switches,\n \
             * calls and function pointers. Not meant to be read. */\n\
             #include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n"
        );
        self.out.push_str(&text);
    }

    fn types(&mut self) {
        for g in 0..self.groups {
            let kinds = self.rng.range(4, 12);
            let names: Vec<String> = (0..kinds).map(|k| format!("E{g}_{k}")).collect();
            let text = format!(
                "\nenum e_{g} {{ {} }};\n\
                 struct s_{g} {{\n    uint64_t key;\n    uint32_t w[4];\n    int32_t v;\n    \
                 unsigned char tag[8];\n    double f;\n    enum e_{g} kind;\n    \
                 struct s_{g} *next;\n}};\n\
                 union u_{g} {{\n    uint64_t q;\n    double d;\n    uint32_t w[2];\n    \
                 unsigned char b[8];\n}};\n",
                names.join(", ")
            );
            self.out.push_str(&text);
            // The enum's size, for the struct walks' switches.
            self.out
                .push_str(&format!("enum {{ E{g}_COUNT = {kinds} }};\n"));
            let mut tab = Vec::with_capacity(TAB_LEN);
            for _ in 0..TAB_LEN {
                tab.push(self.rng.constant());
            }
            self.line(0, &format!("static const uint64_t tab_{g}[{TAB_LEN}] = {{"));
            for chunk in tab.chunks(4) {
                self.line(1, &format!("{},", chunk.join(", ")));
            }
            self.line(0, "};");
            self.line(
                0,
                &format!("static const char *const str_{g}[{STR_LEN}] = {{"),
            );
            for _ in 0..STR_LEN {
                let n = self.rng.range(1, 6);
                let words: Vec<&str> = (0..n).map(|_| WORDS[self.rng.below(WORDS.len())]).collect();
                self.line(1, &format!("\"{}\",", words.join(" ")));
            }
            self.line(0, "};");
        }
        self.line(0, "");
        self.line(0, "struct ctx {");
        self.line(1, "uint64_t k;");
        self.line(1, &format!("uint64_t a[{TAB_LEN}];"));
        self.line(1, "unsigned char buf[256];");
        for g in 0..self.groups {
            self.line(1, &format!("struct s_{g} r_{g}[{RECS}];"));
        }
        self.line(0, "};");
    }

    fn helpers(&mut self) {
        let scope = Scope {
            group: 0,
            helpers: 1,
            vars: vec!["x".into(), "y".into()],
        };
        for h in 0..self.helpers {
            self.line(0, "");
            self.line(
                0,
                &format!("static inline uint64_t h_{h}(uint64_t x, uint64_t y)"),
            );
            self.line(0, "{");
            // Helpers call nothing (h_0 is not defined yet when h_0 is written): leaves only.
            let a = self.leaf_expr(&scope, 3);
            let b = self.leaf_expr(&scope, 2);
            // Both parameters appear whatever the random expressions picked.
            self.line(1, &format!("uint64_t t = {a} ^ x;"));
            let shift = self.rng.range(7, 33);
            self.line(1, &format!("return (t ^ (t >> {shift})) + ({b} ^ y);"));
            self.line(0, "}");
        }
    }

    /// Like [`Unit::expr`] without helper calls or table reads.
    fn leaf_expr(&mut self, scope: &Scope, depth: usize) -> String {
        if depth == 0 || self.rng.chance(1, 4) {
            return self.leaf(scope);
        }
        let a = self.leaf_expr(scope, depth - 1);
        let b = self.leaf_expr(scope, depth - 1);
        match self.rng.below(5) {
            0 => format!("({a} * {b})"),
            1 => format!("({a} + {b})"),
            2 => format!("({a} ^ {b})"),
            3 => format!("({a} >> {})", self.rng.range(1, 40)),
            _ => format!("(({a} & {b}) | ({a} << {}))", self.rng.range(1, 20)),
        }
    }

    fn prototypes(&mut self, functions: usize) {
        self.line(0, "");
        for i in 0..functions {
            self.line(
                0,
                &format!("static uint64_t f_{i}(uint64_t x, struct ctx *c);"),
            );
        }
    }

    /// The tables of function pointers that some body uses, each over 8 consecutive
    /// functions (a body only dispatches through tables of functions before it).
    fn pointer_tables(&self) -> String {
        let mut text = String::new();
        for (t, _) in self
            .table_used
            .iter()
            .enumerate()
            .filter(|(_, used)| **used)
        {
            let names: Vec<String> = (0..FP_TABLE)
                .map(|k| format!("f_{}", t * FP_TABLE + k))
                .collect();
            let _ = writeln!(
                text,
                "static uint64_t (*const fp_{t}[{FP_TABLE}])(uint64_t, struct ctx *) = {{ {} }};",
                names.join(", ")
            );
        }
        text
    }

    fn function(&mut self, i: usize) {
        let group = self.rng.below(self.groups);
        let mut scope = Scope {
            group,
            helpers: self.helpers,
            vars: vec!["acc".into(), "x".into(), "c->k".into()],
        };
        self.line(0, "");
        self.line(
            0,
            &format!("static uint64_t f_{i}(uint64_t x, struct ctx *c)"),
        );
        self.line(0, "{");
        let init = self.rng.constant();
        self.line(1, &format!("uint64_t acc = x ^ {init} ^ c->k;"));
        let parts = self.rng.range(1, 3);
        for _ in 0..parts {
            // Table t holds f_{8t} .. f_{8t+7}: usable when all of them come before f_i.
            let usable_tables = i / FP_TABLE;
            match self.rng.below(9) {
                0 => self.loop_arith(&mut scope),
                1 | 2 => self.state_machine(&mut scope, i),
                3 => self.struct_walk(&mut scope),
                4 => self.string_work(&mut scope),
                5 => self.matrix(&mut scope),
                6 => self.float_recurrence(&mut scope),
                7 if usable_tables > 0 => {
                    let t = self.rng.below(usable_tables);
                    self.table_used[t] = true;
                    for k in 0..FP_TABLE {
                        self.fn_used[t * FP_TABLE + k] = true;
                    }
                    let rounds = self.rng.range(2, 4);
                    self.line(1, &format!("for (unsigned i = 0; i < {rounds}u; i++)"));
                    let e = self.expr(&scope, 2);
                    self.line(
                        2,
                        &format!(
                            "acc = fp_{t}[(acc >> (i + 3u)) & {}u](acc + {e}, c);",
                            FP_TABLE - 1
                        ),
                    );
                }
                _ => self.branches(&mut scope, i),
            }
        }
        let e = self.expr(&scope, 2);
        self.line(1, &format!("c->k ^= {e};"));
        self.line(1, "return acc;");
        self.line(0, "}");
    }

    /// A loop with a constant trip count over the context's array and a table, sometimes
    /// with an inner loop: unrolling and vectorizing material.
    fn loop_arith(&mut self, scope: &mut Scope) {
        let n = [8, 16, 32, 64][self.rng.below(4)];
        self.line(1, "{");
        self.line(2, &format!("for (size_t i = 0; i < {n}u; i++) {{"));
        scope.vars.push("c->a[i]".into());
        scope.vars.push("(uint64_t)i".into());
        let e = self.expr(scope, 3);
        self.line(3, &format!("uint64_t t = {e};"));
        scope.vars.push("t".into());
        if self.rng.chance(1, 2) {
            let m = self.rng.range(2, 6);
            self.line(3, &format!("for (size_t j = 0; j < {m}u; j++)"));
            scope.vars.push("(uint64_t)j".into());
            let e = self.expr(scope, 3);
            self.line(4, &format!("t += {e};"));
            scope.vars.pop();
        }
        let e = self.expr(scope, 3);
        self.line(3, &format!("c->a[i] = {e};"));
        self.line(3, "acc += t;");
        scope.vars.truncate(scope.vars.len() - 3);
        self.line(2, "}");
        self.line(1, "}");
    }

    /// A switch inside a bounded loop: a state machine with many basic blocks.
    fn state_machine(&mut self, scope: &mut Scope, index: usize) {
        let states = self.rng.range(3, 12);
        let steps = self.rng.range(4, 16);
        self.line(1, "{");
        self.line(2, &format!("uint32_t state = (uint32_t)(acc % {states}u);"));
        self.line(
            2,
            &format!("for (unsigned step = 0; step < {steps}u; step++) {{"),
        );
        self.line(3, "switch (state) {");
        scope.vars.push("(uint64_t)step".into());
        for s in 0..states {
            self.line(3, &format!("case {s}:"));
            let e = self.expr(scope, 2);
            if self.rng.chance(1, 6) {
                let call = self.call_earlier(index, &e);
                self.line(4, &format!("acc = {call};"));
            } else {
                let op = ["+=", "^=", "-=", "|=", "*="][self.rng.below(5)];
                self.line(4, &format!("acc {op} {e};"));
            }
            let next = if self.rng.chance(1, 2) {
                format!("(uint32_t)((acc >> {}) % {states}u)", self.rng.range(1, 40))
            } else {
                format!("{}u", self.rng.below(states))
            };
            self.line(4, &format!("state = {next};"));
            self.line(4, "break;");
        }
        self.line(3, "default:");
        self.line(4, "state = 0;");
        self.line(4, "break;");
        self.line(3, "}");
        scope.vars.pop();
        self.line(2, "}");
        self.line(2, "acc += state;");
        self.line(1, "}");
    }

    /// A walk over an array of structs: field updates, a union for type punning, a switch
    /// on the enum, pointer chasing.
    fn struct_walk(&mut self, scope: &mut Scope) {
        let g = scope.group;
        self.line(1, &format!("for (size_t i = 0; i < {RECS}u; i++) {{"));
        self.line(2, &format!("struct s_{g} *r = &c->r_{g}[i];"));
        self.line(2, &format!("union u_{g} u;"));
        scope.vars.push("r->key".into());
        scope.vars.push("(uint64_t)r->w[i & 3u]".into());
        let e = self.expr(scope, 2);
        self.line(2, &format!("u.q = {e};"));
        self.line(2, "switch (r->kind) {");
        let cases = self.rng.range(2, 4);
        for k in 0..cases {
            self.line(2, &format!("case E{g}_{k}:"));
            let e = self.expr(scope, 2);
            self.line(3, &format!("r->key ^= {e};"));
            self.line(3, "break;");
        }
        self.line(2, "default:");
        let byte = self.rng.below(8);
        self.line(
            3,
            &format!("r->kind = (enum e_{g})(u.b[{byte}] % E{g}_COUNT);"),
        );
        self.line(3, "break;");
        self.line(2, "}");
        self.line(2, "r->w[(i + 1u) & 3u] += u.w[0] ^ u.w[1];");
        self.line(2, "r->v = (int32_t)(u.w[1] & 0x7FFFu);");
        self.line(2, "r->f = r->f * 0.5 + (double)u.b[3];");
        self.line(2, "r->tag[i & 7u] = (unsigned char)(acc >> 8);");
        self.line(
            2,
            "acc += r->w[i & 3u] + (uint64_t)r->v + r->tag[(i + 3u) & 7u];",
        );
        self.line(2, "if (r->next != NULL)");
        self.line(3, "acc ^= r->next->key;");
        self.line(
            2,
            &format!("r->next = &c->r_{g}[(acc >> 7) & {}u];", RECS - 1),
        );
        scope.vars.truncate(scope.vars.len() - 2);
        self.line(1, "}");
    }

    /// String handling: lengths, copies into the context's buffer, a byte hash, a local
    /// string literal.
    fn string_work(&mut self, scope: &mut Scope) {
        let g = scope.group;
        let n = self.rng.range(4, 16);
        let words: Vec<&str> = (0..self.rng.range(2, 8))
            .map(|_| WORDS[self.rng.below(WORDS.len())])
            .collect();
        self.line(1, "{");
        self.line(
            2,
            &format!("static const char lit[] = \"{}\";", words.join("_")),
        );
        self.line(2, "size_t len = 0;");
        self.line(2, &format!("for (size_t i = 0; i < {n}u; i++) {{"));
        self.line(
            3,
            &format!("const char *s = str_{g}[(acc + i) & {}u];", STR_LEN - 1),
        );
        self.line(3, "size_t m = strlen(s);");
        self.line(3, "if (m > sizeof c->buf - len)");
        self.line(4, "m = sizeof c->buf - len;");
        self.line(3, "memcpy(c->buf + len, s, m);");
        self.line(3, "len += m;");
        let e = self.expr(scope, 2);
        self.line(
            3,
            &format!("acc = (acc * 31u) + (unsigned char)s[0] + {e};"),
        );
        self.line(2, "}");
        self.line(2, "for (size_t i = 0; i < len; i++)");
        self.line(3, "acc = (acc ^ c->buf[i]) * 0x100000001B3ULL;");
        self.line(
            2,
            "acc += sizeof lit + (unsigned char)lit[acc % (sizeof lit - 1u)];",
        );
        self.line(1, "}");
    }

    /// A small dense matrix product with constant bounds.
    fn matrix(&mut self, scope: &mut Scope) {
        let n = [4, 6, 8][self.rng.below(3)];
        self.line(1, "{");
        self.line(2, &format!("uint64_t m[{n}][{n}], p[{n}][{n}];"));
        self.line(2, &format!("for (size_t i = 0; i < {n}u; i++)"));
        self.line(3, &format!("for (size_t j = 0; j < {n}u; j++) {{"));
        scope.vars.push("(uint64_t)(i * j)".into());
        let e = self.expr(scope, 2);
        scope.vars.pop();
        self.line(
            4,
            &format!(
                "m[i][j] = {e} + tab_{}[(i * {n}u + j) & {}u];",
                scope.group,
                TAB_LEN - 1
            ),
        );
        self.line(4, "p[i][j] = 0;");
        self.line(3, "}");
        self.line(2, &format!("for (size_t i = 0; i < {n}u; i++)"));
        self.line(3, &format!("for (size_t k = 0; k < {n}u; k++)"));
        self.line(4, &format!("for (size_t j = 0; j < {n}u; j++)"));
        self.line(5, "p[i][j] += m[i][k] * m[k][j];");
        self.line(2, &format!("for (size_t i = 0; i < {n}u; i++)"));
        self.line(3, &format!("acc ^= p[i][(i + acc) % {n}u];"));
        self.line(1, "}");
    }

    /// A bounded floating-point recurrence, converted back in range.
    fn float_recurrence(&mut self, scope: &mut Scope) {
        let steps = self.rng.range(4, 16);
        let a = 0.25 + self.rng.below(50) as f64 / 100.0;
        let b = self.rng.below(1000) as f64 / 10.0;
        self.line(1, "{");
        self.line(2, "double d = (double)(acc & 0xFFFFu);");
        self.line(2, &format!("for (unsigned i = 0; i < {steps}u; i++)"));
        self.line(3, &format!("d = d * {a:.2} + {b:.1} + (double)(i & 3u);"));
        let e = self.expr(scope, 2);
        self.line(2, &format!("acc += (uint64_t)d + {e};"));
        self.line(1, "}");
    }

    /// An if / else-if chain with calls to earlier functions and helpers.
    fn branches(&mut self, scope: &mut Scope, index: usize) {
        let arms = self.rng.range(2, 5);
        for a in 0..arms {
            let mask = (1u64 << self.rng.range(1, 6)) - 1;
            let value = self.rng.next() & mask;
            let cond = format!("(acc & {mask}u) == {value}u");
            let kw = if a == 0 { "if" } else { "} else if" };
            self.line(1, &format!("{kw} ({cond}) {{"));
            let e = self.expr(scope, 3);
            if self.rng.chance(1, 2) {
                let call = self.call_earlier(index, &e);
                self.line(2, &format!("acc = {call};"));
            } else {
                self.line(2, &format!("acc = {e};"));
            }
        }
        self.line(1, "} else {");
        let e = self.expr(scope, 3);
        self.line(2, &format!("acc ^= {e};"));
        self.line(1, "}");
    }

    /// The exported entry point: calls every function and helper nothing else calls, and
    /// reads every table, so the unit has no unused static.
    fn entry(&mut self, functions: usize) {
        self.line(0, "");
        self.line(
            0,
            "uint64_t alloclab_generated_entry(uint64_t x, struct ctx *c);",
        );
        self.line(
            0,
            "uint64_t alloclab_generated_entry(uint64_t x, struct ctx *c)",
        );
        self.line(0, "{");
        self.line(1, "uint64_t acc = x;");
        for g in 0..self.groups {
            self.line(
                1,
                &format!(
                    "acc += tab_{g}[acc & {}u] + strlen(str_{g}[acc & {}u]);",
                    TAB_LEN - 1,
                    STR_LEN - 1
                ),
            );
        }
        for h in 0..self.helpers {
            if !self.helper_used[h] {
                self.line(1, &format!("acc = h_{h}(acc, c->k);"));
            }
        }
        for i in 0..functions {
            if !self.fn_used[i] {
                self.line(1, &format!("acc = f_{i}(acc, c);"));
            }
        }
        self.line(1, "return acc;");
        self.line(0, "}");
    }
}

/// A C11 translation unit of `functions` generated functions (at least one), the same
/// text for the same `functions` and `seed`.
///
/// The unit has `4 + functions / 32` groups of an enum, a struct, a union, a 64-entry
/// `uint64_t` table and a 16-entry string table; `8 + functions / 16` small `static
/// inline` helpers; one table of 8 function pointers per 8 functions; the functions
/// themselves, each two to four of: a loop with a constant trip count, a switch-driven
/// state machine, a walk over an array of structs, string copying and hashing, a small
/// matrix product, a floating-point recurrence, an indirect call through a pointer table,
/// an if / else-if chain with calls; and one exported function,
/// `alloclab_generated_entry`, that calls whatever nothing else does. About 45 lines per
/// function; it compiles cleanly with `gcc -O2 -std=c11 -Wall -Wextra -c`.
pub fn generated_c_source(functions: usize, seed: u64) -> String {
    let functions = functions.max(1);
    let groups = 4 + functions / 32;
    let helpers = 8 + functions / 16;
    let mut unit = Unit {
        rng: Rng(seed ^ 0x00A1_10C1_AB00_0000),
        out: String::with_capacity(functions * 3000),
        groups,
        helpers,
        helper_used: vec![false; helpers],
        fn_used: vec![false; functions],
        table_used: vec![false; functions / FP_TABLE],
    };
    unit.header(functions, seed);
    unit.types();
    unit.helpers();
    unit.prototypes(functions);
    // The pointer tables go between the prototypes and the bodies, but only the ones some
    // body dispatches through: those are known once the bodies are written.
    let tables_at = unit.out.len();
    for i in 0..functions {
        unit.function(i);
    }
    unit.entry(functions);
    unit.out.push_str("/* end of generated unit */\n");
    let tables = unit.pointer_tables();
    unit.out.insert_str(tables_at, &tables);
    unit.out
}
