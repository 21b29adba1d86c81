//! Compares two builds of the harness on host-heap workloads, run by run: an A/B test of a
//! change to an allocator on a shared, noisy machine.
//!
//! ```text
//! cargo run --release -p alloclab-harness --example interleave -- OLD NEW \
//!     [--alloc randomized] [--workloads glibc-simple,larson] [--rounds 9] [--threads 2] \
//!     [--scale small]
//! ```
//!
//! `OLD` and `NEW` are two `alloclab` binaries (copy `target/release/alloclab` aside before
//! the change). Each round runs every workload once with each binary's `--alloc` allocator
//! and once with glibc's (`system`, from the old binary), in that order, seeds `42 + round`:
//! a slow or fast spell of the machine then falls on both builds alike, which separate
//! runs of the suite do not ensure. It prints, per workload, the median time and peak
//! footprint of each and their ratios to glibc's medians.

use std::process::{Command, ExitCode};

use serde_json::Value;

const USAGE: &str = "usage: interleave OLD NEW [--alloc NAME] [--workloads W1,W2] [--rounds N] \
                     [--threads T] [--scale tiny|small|default|large]";

/// Prints what is wrong and the usage, and exits with status 2.
fn usage(why: &str) -> ! {
    eprintln!("interleave: {why}\n{USAGE}");
    std::process::exit(2)
}

struct Options {
    old: String,
    new: String,
    alloc: String,
    workloads: Vec<String>,
    rounds: usize,
    threads: usize,
    scale: String,
}

fn parse(args: &[String]) -> Options {
    let mut positional = Vec::new();
    let mut options = Options {
        old: String::new(),
        new: String::new(),
        alloc: "randomized".to_owned(),
        workloads: ["glibc-simple", "glibc-thread", "larson", "mstress"]
            .map(str::to_owned)
            .to_vec(),
        rounds: 9,
        threads: 2,
        scale: "small".to_owned(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .unwrap_or_else(|| usage(&format!("{name} needs a value")))
        };
        let number = |s: String, name: &str| match s.parse::<usize>() {
            Ok(n) if (1..=1024).contains(&n) => n,
            _ => usage(&format!("{name} must be a number in 1..=1024, not '{s}'")),
        };
        match arg.as_str() {
            "--alloc" => options.alloc = value("--alloc"),
            "--workloads" => {
                options.workloads = value("--workloads").split(',').map(str::to_owned).collect()
            }
            "--rounds" => options.rounds = number(value("--rounds"), "--rounds"),
            "--threads" => options.threads = number(value("--threads"), "--threads"),
            "--scale" => options.scale = value("--scale"),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            flag if flag.starts_with('-') => usage(&format!("unknown option '{flag}'")),
            path => positional.push(path.to_owned()),
        }
    }
    let [old, new] = <[String; 2]>::try_from(positional)
        .unwrap_or_else(|_| usage("expected two binaries, OLD and NEW"));
    for path in [&old, &new] {
        if !std::path::Path::new(path).is_file() {
            usage(&format!("'{path}' is not a file"));
        }
    }
    options.old = old;
    options.new = new;
    options
}

/// One worker run: `(time in ms, peak footprint in MiB)`.
fn run(binary: &str, workload: &str, alloc: &str, o: &Options, seed: usize) -> (f64, f64) {
    let threads = o.threads.to_string();
    let seed = seed.to_string();
    let out = Command::new(binary)
        .args(["__worker", "--workload", workload, "--alloc", alloc])
        .args(["--threads", &threads, "--scale", &o.scale, "--seed", &seed])
        .output()
        .unwrap_or_else(|e| usage(&format!("cannot run '{binary}': {e}")));
    if !out.status.success() {
        eprintln!(
            "interleave: {binary} {workload} {alloc} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        std::process::exit(1);
    }
    let samples: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        eprintln!("interleave: {binary} printed no samples ({e})");
        std::process::exit(1)
    });
    let metric = |name: &str| {
        samples
            .iter()
            .find(|s| s["metric"] == name)
            .and_then(|s| s["value"].as_f64())
            .unwrap_or(f64::NAN)
    };
    (metric("time"), metric("peak_footprint"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = parse(&args);
    // Per workload: (old, new, system) samples.
    let mut samples = vec![[Vec::new(), Vec::new(), Vec::new()]; o.workloads.len()];
    for round in 0..o.rounds {
        for (w, workload) in o.workloads.iter().enumerate() {
            let seed = 42 + round;
            samples[w][0].push(run(&o.old, workload, &o.alloc, &o, seed));
            samples[w][1].push(run(&o.new, workload, &o.alloc, &o, seed));
            samples[w][2].push(run(&o.old, workload, "system", &o, seed));
        }
        eprint!("\rround {}/{}", round + 1, o.rounds);
    }
    eprintln!();
    println!(
        "{} rounds, {} threads, scale {}; medians; × = over glibc's (system) median",
        o.rounds, o.threads, o.scale
    );
    println!(
        "{:<14} {:>10} {:>17} {:>17} {:>10} {:>17} {:>17}",
        "workload",
        "glibc ms",
        "old ms (×)",
        "new ms (×)",
        "glibc MiB",
        "old MiB (×)",
        "new MiB (×)"
    );
    for (workload, [old, new, system]) in o.workloads.iter().zip(samples) {
        let time = |v: &[(f64, f64)]| median(v.iter().map(|s| s.0).collect());
        let mib = |v: &[(f64, f64)]| median(v.iter().map(|s| s.1).collect());
        let (st, sm) = (time(&system), mib(&system));
        let (ot, om, nt, nm) = (time(&old), mib(&old), time(&new), mib(&new));
        println!(
            "{workload:<14} {st:>10.1} {:>17} {:>17} {sm:>10.3} {:>17} {:>17}",
            format!("{ot:.1} ({:.2})", ot / st),
            format!("{nt:.1} ({:.2})", nt / st),
            format!("{om:.3} ({:.2})", om / sm),
            format!("{nm:.3} ({:.2})", nm / sm),
        );
    }
    ExitCode::SUCCESS
}
