//! redis-server under the heap being measured, loaded by redis-benchmark on loopback.
//!
//! The server runs under the heap (`LD_PRELOAD`), the benchmark client and this driver under
//! the C library's malloc. One run:
//!
//! 1. start `redis-server` on a free port of 127.0.0.1, nothing persisted, and wait until it
//!    answers `PING`;
//! 2. `redis-benchmark -P 8 -d 256 -r KEYS -n N -t set,get,lpush,lpop,sadd,hset --csv`:
//!    requests per second of each command;
//! 3. write a fixed data set (strings of many sizes, a list, a hash, a set), read it back and
//!    check every reply, and check that a sample of the benchmark's keys hold its 256-byte
//!    values: the digest of what was read back is the run's result, the same under every
//!    heap when the server kept what it was given;
//! 4. `SHUTDOWN NOSAVE`, and the server's peak RSS and CPU time from `wait4`.
//!
//! Debian's `redis-server` is linked with jemalloc: with nothing preloaded it runs on that,
//! not on the C library's malloc.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::process::{self, RunError, Spec};

/// The commands redis-benchmark runs, as its `-t` names them.
pub const COMMANDS: &[&str] = &["set", "get", "lpush", "lpop", "sadd", "hset"];

/// The figure that says whether the server mapped jemalloc's shared library (1) or not (0);
/// see [`Outcome::maps_libjemalloc`].
pub const MAPS_LIBJEMALLOC: &str = "maps_libjemalloc";

/// How much one run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    /// Requests of each command.
    pub requests: u64,
    /// Distinct keys the benchmark's requests draw from (`-r`).
    pub keys: u64,
    /// Value size in bytes (`-d`).
    pub value_bytes: u32,
    /// Requests in flight per connection (`-P`).
    pub pipeline: u32,
    /// Entries of each kind in the data set written and read back after the benchmark.
    pub check_entries: u32,
}

/// The fewest requests of a command that a run sends: redis-benchmark times a command in
/// whole milliseconds, and fewer requests can finish within one (a rate of `inf`).
pub const MIN_REQUESTS: u64 = 2_000;

impl Load {
    /// The load at the harness's default scale: 30,000 requests of each command, 60 ms or
    /// more each at the half million requests/s of a 2-core machine, so that
    /// redis-benchmark's whole-millisecond timing moves a rate by under 2% (15,000, about
    /// 30 ms, moved it by 3-5% a millisecond).
    pub const SMALL: Load = Load {
        requests: 30_000,
        keys: 100_000,
        value_bytes: 256,
        pipeline: 8,
        check_entries: 2_000,
    };
}

/// What one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Requests per second of each command of [`COMMANDS`], in that order.
    pub requests_per_s: Vec<(String, f64)>,
    /// The server's largest resident set, bytes.
    pub server_peak_rss_bytes: u64,
    /// The server's user + system CPU time.
    pub server_cpu: Duration,
    /// From the server's start to its exit.
    pub wall: Duration,
    /// Digest of the data read back (see the module documentation).
    pub digest: u64,
    /// Whether the server's process mapped a jemalloc shared library (a file named
    /// `libjemalloc.so*`): Debian's redis-server is linked with the `libjemalloc.so.2` that
    /// `LD_PRELOAD` puts in front of it as the `libjemalloc` peer, so that with nothing
    /// preloaded it runs on jemalloc too, and the two figures differ by what the machine did
    /// between their runs. (Which file was mapped is not compared with the peer's.)
    pub maps_libjemalloc: bool,
}

/// Why a run could not be measured.
#[derive(Debug)]
pub enum Error {
    /// A program could not be started or timed out.
    Run(RunError),
    /// The server exited or never answered.
    Server(String),
    /// The benchmark failed or printed something unreadable.
    Benchmark(String),
    /// The server gave back something else than it was given.
    WrongData(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Run(e) => e.fmt(f),
            Self::Server(m) => write!(f, "redis-server: {m}"),
            Self::Benchmark(m) => write!(f, "redis-benchmark: {m}"),
            Self::WrongData(m) => write!(f, "redis-server returned wrong data: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<RunError> for Error {
    fn from(e: RunError) -> Self {
        Self::Run(e)
    }
}

/// A port of 127.0.0.1 that was free a moment ago.
fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// One RESP reply.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reply {
    Status(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The reply's bytes as they enter the digest: a canonical encoding of its value.
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Status(s) => {
                out.push(b'+');
                out.extend_from_slice(s.as_bytes());
            }
            Reply::Error(s) => {
                out.push(b'-');
                out.extend_from_slice(s.as_bytes());
            }
            Reply::Integer(i) => out.extend_from_slice(format!(":{i}").as_bytes()),
            Reply::Bulk(None) => out.extend_from_slice(b"$nil"),
            Reply::Bulk(Some(b)) => {
                out.extend_from_slice(format!("${}:", b.len()).as_bytes());
                out.extend_from_slice(b);
            }
            Reply::Array(None) => out.extend_from_slice(b"*nil"),
            Reply::Array(Some(items)) => {
                out.extend_from_slice(format!("*{}:", items.len()).as_bytes());
                for item in items {
                    item.encode(out);
                }
            }
        }
        out.push(b'\n');
    }
}

/// A minimal RESP2 client: enough to write and read back a data set.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(port: u16) -> io::Result<Self> {
        let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Self {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    /// Sends `commands` in one write and reads their replies, in order.
    fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> io::Result<Vec<Reply>> {
        let mut buf = Vec::new();
        for args in commands {
            buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for a in args {
                buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                buf.extend_from_slice(a);
                buf.extend_from_slice(b"\r\n");
            }
        }
        self.writer.write_all(&buf)?;
        (0..commands.len()).map(|_| self.read_reply()).collect()
    }

    fn line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_owned())
    }

    fn read_reply(&mut self) -> io::Result<Reply> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        let line = self.line()?;
        let (kind, rest) = line.split_at_checked(1).ok_or_else(|| bad("empty reply"))?;
        let number = || rest.parse::<i64>().map_err(|_| bad("bad length"));
        Ok(match kind {
            "+" => Reply::Status(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            ":" => Reply::Integer(number()?),
            "$" => match number()? {
                n if n < 0 => Reply::Bulk(None),
                n => {
                    let mut data = vec![0; n as usize + 2];
                    self.reader.read_exact(&mut data)?;
                    data.truncate(n as usize);
                    Reply::Bulk(Some(data))
                }
            },
            "*" => match number()? {
                n if n < 0 => Reply::Array(None),
                n => Reply::Array(Some(
                    (0..n)
                        .map(|_| self.read_reply())
                        .collect::<io::Result<_>>()?,
                )),
            },
            _ => return Err(bad("unknown reply type")),
        })
    }
}

fn cmd(args: &[&[u8]]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.to_vec()).collect()
}

/// The value of entry `i` of the check data set: its length varies from 1 byte to 16 KiB, so
/// that many size classes hold live data at once.
fn check_value(i: u32) -> Vec<u8> {
    let len = 1 + (i.wrapping_mul(2_654_435_761) % 16_384) as usize;
    (0..len)
        .map(|j| b'a' + ((i as usize * 7 + j * 13) % 26) as u8)
        .collect()
}

/// Writes the check data set, reads it back, verifies every reply and returns the canonical
/// bytes of what was read.
fn write_and_read_back(client: &mut Client, load: &Load) -> Result<Vec<u8>, Error> {
    let io = |e: io::Error| Error::Server(format!("check connection: {e}"));
    let n = load.check_entries;
    let mut read = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
        let mut writes = Vec::new();
        for &i in chunk {
            let key = format!("alloclab:str:{i}");
            writes.push(cmd(&[b"SET", key.as_bytes(), &check_value(i)]));
            writes.push(cmd(&[
                b"RPUSH",
                b"alloclab:list",
                format!("item-{i}").as_bytes(),
            ]));
            writes.push(cmd(&[
                b"HSET",
                b"alloclab:hash",
                format!("field-{i}").as_bytes(),
                &check_value(i / 3),
            ]));
            writes.push(cmd(&[
                b"SADD",
                b"alloclab:set",
                format!("m{}", i % 977).as_bytes(),
            ]));
        }
        for reply in client.pipeline(&writes).map_err(io)? {
            if matches!(reply, Reply::Error(_)) {
                return Err(Error::WrongData(format!("a write failed: {reply:?}")));
            }
        }
    }
    for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
        let reads: Vec<_> = chunk
            .iter()
            .map(|i| cmd(&[b"GET", format!("alloclab:str:{i}").as_bytes()]))
            .collect();
        for (&i, reply) in chunk.iter().zip(client.pipeline(&reads).map_err(io)?) {
            if reply != Reply::Bulk(Some(check_value(i))) {
                return Err(Error::WrongData(format!("alloclab:str:{i} changed")));
            }
            reply.encode(&mut read);
        }
    }
    let whole = client
        .pipeline(&[
            cmd(&[b"LRANGE", b"alloclab:list", b"0", b"-1"]),
            cmd(&[b"HLEN", b"alloclab:hash"]),
            cmd(&[b"SCARD", b"alloclab:set"]),
            cmd(&[b"SMEMBERS", b"alloclab:set"]),
        ])
        .map_err(io)?;
    let list_ok = matches!(&whole[0], Reply::Array(Some(items)) if items.len() == n as usize
        && items.iter().enumerate().all(|(i, r)| *r == Reply::Bulk(Some(format!("item-{i}").into_bytes()))));
    if !list_ok {
        return Err(Error::WrongData("alloclab:list changed".to_owned()));
    }
    if whole[1] != Reply::Integer(i64::from(n)) || whole[2] != Reply::Integer(i64::from(n.min(977)))
    {
        return Err(Error::WrongData(format!(
            "hash or set sizes: {:?} {:?}",
            whole[1], whole[2]
        )));
    }
    whole[0].encode(&mut read);
    whole[1].encode(&mut read);
    whole[2].encode(&mut read);
    // Set members come in the server's order: sort them before they enter the digest.
    if let Reply::Array(Some(mut members)) = whole[3].clone() {
        members.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        Reply::Array(Some(members)).encode(&mut read);
    }
    let fields: Vec<_> = (0..n)
        .step_by(97)
        .map(|i| cmd(&[b"HGET", b"alloclab:hash", format!("field-{i}").as_bytes()]))
        .collect();
    for (reply, i) in client
        .pipeline(&fields)
        .map_err(io)?
        .into_iter()
        .zip((0..n).step_by(97))
    {
        if reply != Reply::Bulk(Some(check_value(i / 3))) {
            return Err(Error::WrongData(format!("alloclab:hash field-{i} changed")));
        }
        reply.encode(&mut read);
    }
    // The benchmark's SET keys hold its 256-byte values: sample some.
    let sample: Vec<_> = (0..200u64)
        .map(|i| {
            let key = format!("key:{:012}", (i * 7_919) % load.keys);
            cmd(&[b"GET", key.as_bytes()])
        })
        .collect();
    let mut found = 0;
    for reply in client.pipeline(&sample).map_err(io)? {
        match reply {
            Reply::Bulk(Some(v)) if v.len() == load.value_bytes as usize => found += 1,
            Reply::Bulk(None) => {}
            other => {
                return Err(Error::WrongData(format!(
                    "a benchmark key holds {other:?}, not a {}-byte value",
                    load.value_bytes
                )));
            }
        }
    }
    // With N random requests over K keys, about K(1 - e^(-N/K)) keys exist: at the default
    // load, 39% of them; some of the 200 sampled must be there.
    if found == 0 && load.requests >= load.keys / 10 {
        return Err(Error::WrongData(
            "none of 200 sampled benchmark keys exists".to_owned(),
        ));
    }
    Ok(read)
}

/// Parses redis-benchmark's `--csv` output: `"SET","123456.79",...` per command.
pub fn parse_csv(text: &str) -> Result<Vec<(String, f64)>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(',').map(|f| f.trim_matches('"')).collect();
        if fields.len() < 2 || fields[0] == "test" {
            continue;
        }
        // "LPUSH (needed to benchmark LRANGE)" and the like: the first word is the command.
        let name = fields[0]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_lowercase();
        let rps: f64 = fields[1]
            .parse()
            .ok()
            .filter(|r: &f64| r.is_finite() && *r >= 0.0)
            .ok_or_else(|| format!("unreadable rate in line '{line}'"))?;
        out.push((name, rps));
    }
    Ok(out)
}

/// The programs a run needs, and where they are.
#[derive(Clone, Debug)]
pub struct Programs {
    /// `redis-server`.
    pub server: PathBuf,
    /// `redis-benchmark`.
    pub benchmark: PathBuf,
}

impl Programs {
    /// Finds both in `PATH`, or says which is missing.
    pub fn find() -> Result<Self, String> {
        let server = process::find_program("redis-server").ok_or("redis-server not found")?;
        let benchmark =
            process::find_program("redis-benchmark").ok_or("redis-benchmark not found")?;
        Ok(Self { server, benchmark })
    }
}

/// Runs the server under `preload` (`None`: its own allocator), the benchmark against it, and
/// the read-back check; see the module documentation.
///
/// # Errors
///
/// If a program cannot be started or times out, the server dies or never answers, the
/// benchmark fails, or the server returns wrong data.
pub fn run(
    programs: &Programs,
    preload: Option<&Path>,
    load: &Load,
    timeout: Duration,
) -> Result<Outcome, Error> {
    let port = free_port().map_err(|e| Error::Server(format!("no free port: {e}")))?;
    let port_text = port.to_string();
    let mut spec = Spec::new(
        &programs.server,
        [
            "--port",
            &port_text,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--logfile",
            "",
            "--loglevel",
            "warning",
        ],
    );
    spec.preload = preload.map(Path::to_owned);
    spec.timeout = timeout;
    let prepared = spec.prepare();
    let started = Instant::now();
    let mut server = process::spawn(prepared, Stdio::null(), Stdio::piped())?;
    let pid = server.id() as libc::pid_t;
    // Whatever happens below, the server does not outlive the run.
    struct Reap {
        pid: libc::pid_t,
        armed: bool,
    }
    impl Drop for Reap {
        fn drop(&mut self) {
            if self.armed {
                // SAFETY: the group we created for the server; it is killed and reaped.
                unsafe {
                    libc::kill(-self.pid, libc::SIGKILL);
                    libc::waitpid(self.pid, std::ptr::null_mut(), 0);
                }
                process::unregister_group(self.pid);
            }
        }
    }
    let mut guard = Reap { pid, armed: true };
    let mut client = loop {
        if let Ok(mut c) = Client::connect(port)
            && matches!(c.pipeline(&[cmd(&[b"PING"])]).as_deref(), Ok([Reply::Status(s)]) if s == "PONG")
        {
            break c;
        }
        let mut status = 0;
        // SAFETY: `pid` is our unreaped child; WNOHANG does not block.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            guard.armed = false;
            process::unregister_group(pid);
            let mut message = String::new();
            if let Some(mut err) = server.stderr.take() {
                let _ = err.read_to_string(&mut message);
            }
            return Err(Error::Server(format!(
                "exited before answering ({}){}",
                process::status_text(std::os::unix::process::ExitStatusExt::from_raw(status)),
                message
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map_or(String::new(), |l| format!(": {}", l.trim()))
            )));
        }
        if started.elapsed() > Duration::from_secs(10) {
            return Err(Error::Server("did not answer PING within 10 s".to_owned()));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // The server's own process: `pid` is the launcher's that runs it (see `process`).
    let maps_libjemalloc =
        server_pid(&mut client).is_some_and(|server| maps_library(server, "libjemalloc.so"));
    let tests = COMMANDS.join(",");
    let requests = load.requests.to_string();
    let keys = load.keys.to_string();
    let value = load.value_bytes.to_string();
    let pipeline = load.pipeline.to_string();
    let mut bench = Spec::new(
        &programs.benchmark,
        [
            "-h",
            "127.0.0.1",
            "-p",
            &port_text,
            "-n",
            &requests,
            "-r",
            &keys,
            "-d",
            &value,
            "-P",
            &pipeline,
            "-t",
            &tests,
            "--csv",
        ],
    );
    bench.timeout = timeout.saturating_sub(started.elapsed());
    let exit = process::run(&bench)?;
    if !exit.status.success() {
        return Err(Error::Benchmark(format!(
            "{}: {}",
            exit.status_text(),
            exit.last_stderr_line().unwrap_or_default()
        )));
    }
    let rates = parse_csv(&String::from_utf8_lossy(&exit.stdout)).map_err(Error::Benchmark)?;
    let mut requests_per_s = Vec::new();
    for command in COMMANDS {
        let rate = rates
            .iter()
            .find(|(name, _)| name == command)
            .ok_or_else(|| Error::Benchmark(format!("no figure for {command}")))?;
        requests_per_s.push(rate.clone());
    }
    let read = write_and_read_back(&mut client, load)?;
    // The server closes the connection as it exits: no reply comes.
    let _ = client
        .writer
        .write_all(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n");
    drop(client);
    let reaped = process::wait_measured(&server, started, timeout)?
        .ok_or_else(|| Error::Server("did not exit after SHUTDOWN".to_owned()))?;
    guard.armed = false;
    if !reaped.status.success() {
        return Err(Error::Server(format!(
            "exited with {} after SHUTDOWN",
            process::status_text(reaped.status)
        )));
    }
    Ok(Outcome {
        requests_per_s,
        server_peak_rss_bytes: reaped.peak_rss_bytes,
        server_cpu: reaped.user + reaped.sys,
        wall: reaped.at - started,
        digest: process::digest(&read),
        maps_libjemalloc,
    })
}

/// The server's process id, as its `INFO server` reply gives it.
fn server_pid(client: &mut Client) -> Option<libc::pid_t> {
    match client
        .pipeline(&[cmd(&[b"INFO", b"server"])])
        .ok()?
        .as_slice()
    {
        [Reply::Bulk(Some(info))] => process_id(&String::from_utf8_lossy(info)),
        _ => None,
    }
}

/// The `process_id` field of an `INFO` reply.
fn process_id(info: &str) -> Option<libc::pid_t> {
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix("process_id:"))
        .and_then(|id| id.parse().ok())
}

/// Whether the process `pid` maps a file whose name starts with `prefix` (false when its
/// mappings cannot be read).
fn maps_library(pid: libc::pid_t, prefix: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|maps| {
        maps.lines().any(|line| {
            line.rsplit('/')
                .next()
                .is_some_and(|name| line.contains('/') && name.starts_with(prefix))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_id_comes_from_the_info_reply() {
        let info = "# Server\r\nredis_version:7.0.15\r\nprocess_id:4242\r\ntcp_port:6379\r\n";
        assert_eq!(process_id(info), Some(4242));
        assert_eq!(process_id("# Server\r\nredis_version:7.0.15\r\n"), None);
        assert_eq!(process_id("process_id:forty\r\n"), None);
    }

    #[test]
    fn a_mapped_library_is_found_by_its_file_name() {
        let me = std::process::id() as libc::pid_t;
        // Every Rust program on Linux maps the C library.
        assert!(maps_library(me, "libc.so"));
        // A prefix of no file mapped, and one that only a directory of a path matches.
        assert!(!maps_library(me, "liballoclab-no-such-library.so"));
        assert!(!maps_library(me, "usr"));
        // A process that does not exist maps nothing.
        assert!(!maps_library(-1, "libc.so"));
    }

    #[test]
    fn csv_lines_give_a_rate_per_command() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\"\n\"SET\",\"275000.00\",\"0.1\"\n\
                    \"LPUSH\",\"372000.50\",\"0.1\"\n";
        assert_eq!(
            parse_csv(text).unwrap(),
            vec![
                ("set".to_owned(), 275_000.0),
                ("lpush".to_owned(), 372_000.5)
            ]
        );
        assert!(parse_csv("\"SET\",\"fast\"\n").is_err());
        // A run too short for its clock: redis-benchmark divides by zero milliseconds.
        assert!(parse_csv("\"SET\",\"inf\"\n").is_err());
    }

    #[test]
    fn check_values_span_many_sizes() {
        let sizes: Vec<usize> = (0..2000).map(|i| check_value(i).len()).collect();
        assert!(sizes.iter().all(|&s| (1..=16_384).contains(&s)));
        assert!(sizes.iter().any(|&s| s < 64) && sizes.iter().any(|&s| s > 8192));
    }

    #[test]
    fn a_run_measures_the_server_and_checks_its_data() {
        let Ok(programs) = Programs::find() else {
            println!("skipped: redis-server or redis-benchmark not found");
            return;
        };
        let load = Load {
            requests: 2_000,
            keys: 1_000,
            check_entries: 300,
            ..Load::SMALL
        };
        let a = run(&programs, None, &load, Duration::from_secs(60)).unwrap();
        assert_eq!(a.requests_per_s.len(), COMMANDS.len());
        assert!(a.requests_per_s.iter().all(|(_, r)| *r > 0.0));
        assert!(a.server_peak_rss_bytes > 1 << 20);
        // The server maps libjemalloc.so exactly when its executable is linked with it, as
        // the dynamic loader reports (Debian's is).
        let ldd = std::process::Command::new("ldd")
            .arg(&programs.server)
            .output()
            .expect("ldd runs");
        let linked = String::from_utf8_lossy(&ldd.stdout).contains("libjemalloc.so");
        assert_eq!(a.maps_libjemalloc, linked);
        let b = run(&programs, None, &load, Duration::from_secs(60)).unwrap();
        assert_eq!(
            a.digest, b.digest,
            "the data read back is the same run to run"
        );
    }
}
