//! `dataplane stats`: what a running data plane shows through DPDK telemetry (its
//! `/dataplane/...` commands), as tables or JSON, once or every N seconds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use dataplane::dpdk::telemetry::{runtime_dir, TelemetryClient, PREFIX, SOCKET_NAME};
use dataplane::say;
use dataplane::stats::Table;
use serde_json::Value;

use super::common::{parse_secs, stop_flag, CmdError};

/// The sections shown, in order.
const SECTIONS: [&str; 8] = [
    "info", "ports", "lcores", "tcp", "qps", "mrs", "events", "rdma",
];

/// Arguments of `stats`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["file_prefix", "pid"])))]
pub struct Args {
    /// The EAL `--file-prefix` of the data plane (its default is `dataplane-<pid>`).
    #[arg(long, value_name = "PREFIX")]
    pub file_prefix: Option<String>,
    /// The process id of the data plane.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// One JSON object per report (`{"info": ..., "ports": ..., ...}`) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Report every SECS seconds until Ctrl-C (or --count reports).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub interval: Option<Duration>,
    /// Stop after this many reports (with --interval).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// Runs `dataplane stats`.
pub fn run(args: Args) -> Result<(), CmdError> {
    let path = match (&args.file_prefix, args.pid) {
        (Some(p), _) => runtime_dir(p).join(SOCKET_NAME),
        (None, Some(pid)) => socket_of_pid(pid)?,
        (None, None) => return Err(CmdError::Usage("give --file-prefix or --pid".into())),
    };
    let mut client = TelemetryClient::connect(&path, Duration::from_secs(5))
        .map_err(|e| CmdError::Runtime(e.to_string()))?;
    let stop = stop_flag()?;
    let mut reports = 0u64;
    loop {
        let report = query_all(&mut client)?;
        if args.json {
            say!("{report}");
        } else {
            if reports > 0 {
                say!("");
            }
            print_tables(&report);
        }
        reports += 1;
        let Some(every) = args.interval else {
            return Ok(());
        };
        if args.count.is_some_and(|n| reports >= n) {
            return Ok(());
        }
        let end = std::time::Instant::now() + every;
        while std::time::Instant::now() < end {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Every section, as `{"<section>": value}`.
fn query_all(client: &mut TelemetryClient) -> Result<Value, CmdError> {
    let mut out = serde_json::Map::new();
    for s in SECTIONS {
        let cmd = format!("{PREFIX}{s}");
        let reply = client
            .query(&cmd)
            .map_err(|e| CmdError::Runtime(e.to_string()))?;
        let value = reply.get(&cmd).cloned().unwrap_or(Value::Null);
        if value.is_null() {
            return Err(CmdError::Runtime(format!(
                "{cmd}: no answer (is this a dataplane process?)"
            )));
        }
        out.insert(s.to_string(), value);
    }
    Ok(Value::Object(out))
}

/// The telemetry socket of process `pid`: the default runtime directory of a data plane
/// (`dataplane-<pid>`), else the listening `dpdk_telemetry.v2` socket among the process's
/// open sockets (`/proc/<pid>/fd` and `/proc/net/unix`).
fn socket_of_pid(pid: u32) -> Result<PathBuf, CmdError> {
    let default = runtime_dir(&format!("dataplane-{pid}")).join(SOCKET_NAME);
    if default.exists() {
        return Ok(default);
    }
    let fd_dir = PathBuf::from(format!("/proc/{pid}/fd"));
    let entries = std::fs::read_dir(&fd_dir)
        .map_err(|e| CmdError::Runtime(format!("{}: {e}", fd_dir.display())))?;
    let inodes: BTreeSet<String> = entries
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::to_string)
        })
        .collect();
    let unix = std::fs::read_to_string("/proc/net/unix")
        .map_err(|e| CmdError::Runtime(format!("/proc/net/unix: {e}")))?;
    find_socket(&unix, &inodes).ok_or_else(|| {
        CmdError::Runtime(format!(
            "process {pid} has no DPDK telemetry socket (EAL started with --no-telemetry?)"
        ))
    })
}

/// The path of the telemetry socket among `/proc/net/unix` lines whose inode is in
/// `inodes` (columns: Num RefCount Protocol Flags Type St Inode Path).
fn find_socket(proc_net_unix: &str, inodes: &BTreeSet<String>) -> Option<PathBuf> {
    proc_net_unix.lines().skip(1).find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        let (inode, path) = (cols.get(6)?, cols.get(7)?);
        (inodes.contains(*inode) && Path::new(path).file_name()? == SOCKET_NAME)
            .then(|| PathBuf::from(path))
    })
}

/// The entries of a section that are dictionaries, by key in natural order (`c2` before
/// `c10`).
fn entries(v: &Value) -> Vec<(&String, &serde_json::Map<String, Value>)> {
    let mut e: Vec<_> = v
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_object().map(|o| (k, o)))
                .collect()
        })
        .unwrap_or_default();
    e.sort_by_key(|(k, _)| natural(k));
    e
}

/// A key's sort order: its text without the digits, then the number they make.
fn natural(k: &str) -> (String, u64) {
    let text: String = k.chars().filter(|c| !c.is_ascii_digit()).collect();
    let digits: String = k.chars().filter(char::is_ascii_digit).collect();
    (text, digits.parse().unwrap_or(0))
}

/// Field `k` of `o` as text ("" when missing).
fn f(o: &serde_json::Map<String, Value>, k: &str) -> String {
    match o.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// Microseconds as milliseconds with one decimal.
fn ms(o: &serde_json::Map<String, Value>, k: &str) -> String {
    o.get(k)
        .and_then(Value::as_u64)
        .map(|us| format!("{:.1}", us as f64 / 1000.0))
        .unwrap_or_default()
}

fn print_tables(r: &Value) {
    let info = &r["info"];
    say!(
        "dataplane pid {} (version {}), up {:.1} s, {} poll loop(s)",
        info["pid"],
        info["version"].as_str().unwrap_or("?"),
        info["uptime_ms"].as_u64().unwrap_or(0) as f64 / 1000.0,
        info["poll_loops"]
    );
    // Where each loop runs: its EAL lcore (none on a thread EAL does not manage), its thread.
    for (name, o) in entries(info) {
        let lcore = o
            .get("lcore")
            .map_or("no lcore".into(), |l| format!("lcore {l}"));
        say!(
            "  {name}: {lcore}, thread {}, snapshot {} ms old",
            f(o, "thread"),
            f(o, "snapshot_age_ms")
        );
    }
    let mut t = Table::new([
        "port",
        "kind",
        "driver",
        "link",
        "rx pkts",
        "rx bytes",
        "tx pkts",
        "tx bytes",
        "rx drop",
        "tx drop",
        "desc rx/tx",
    ]);
    for (name, o) in entries(&r["ports"]) {
        t.row([
            name.clone(),
            f(o, "kind"),
            f(o, "driver"),
            match o.get("link_up").and_then(Value::as_u64) {
                Some(1) => "up".into(),
                Some(_) => "down".into(),
                None => String::new(),
            },
            f(o, "rx_packets"),
            f(o, "rx_bytes"),
            f(o, "tx_packets"),
            f(o, "tx_bytes"),
            f(o, "rx_dropped"),
            f(o, "tx_dropped"),
            if o.contains_key("rx_desc") {
                format!("{}/{}", f(o, "rx_desc"), f(o, "tx_desc"))
            } else {
                String::new()
            },
        ]);
    }
    say!("\nports\n{t}");
    let mut t = Table::new([
        "loop",
        "rx",
        "tx",
        "handled",
        "unhandled",
        "malformed",
        "arp cache",
        "tx backlog",
        "tx deferred",
        "tx dropped",
        "arp failures",
    ]);
    for (name, o) in entries(&r["lcores"]) {
        t.row([
            name.clone(),
            f(o, "rx"),
            f(o, "tx"),
            f(o, "handled"),
            f(o, "unhandled"),
            f(o, "malformed"),
            f(o, "arp_cache"),
            f(o, "tx_backlog"),
            f(o, "tx_deferred"),
            f(o, "tx_dropped"),
            f(o, "arp_failures"),
        ]);
    }
    say!("\nlcores\n{t}");
    let mut t = Table::new([
        "conn",
        "state",
        "local",
        "remote",
        "mss",
        "cwnd",
        "ssthresh",
        "rtt ms",
        "rto ms",
        "in flight",
        "retrans",
        "rto fired",
        "ooo ranges",
    ]);
    for (name, o) in entries(&r["tcp"])
        .into_iter()
        .filter(|(k, _)| *k != "engine")
    {
        t.row([
            name.clone(),
            f(o, "state"),
            f(o, "local"),
            f(o, "remote"),
            f(o, "mss"),
            f(o, "cwnd"),
            f(o, "ssthresh"),
            ms(o, "srtt_us"),
            ms(o, "rto_us"),
            f(o, "in_flight"),
            f(o, "retransmits"),
            f(o, "timeouts"),
            f(o, "rx_ranges"),
        ]);
    }
    say!("\ntcp\n{t}");
    let mut t = Table::new([
        "qp",
        "state",
        "remote",
        "ird/ord",
        "tx msgs",
        "tx bytes",
        "rx msgs",
        "rx bytes",
        "ooo placed",
        "crc err",
        "term tx/rx",
    ]);
    for (name, o) in entries(&r["qps"]) {
        t.row([
            name.clone(),
            f(o, "state"),
            f(o, "remote"),
            format!("{}/{}", f(o, "ird"), f(o, "ord")),
            f(o, "tx_msgs"),
            f(o, "tx_bytes"),
            f(o, "rx_msgs"),
            f(o, "rx_bytes"),
            f(o, "ooo_placed"),
            f(o, "crc_errors"),
            format!("{}/{}", f(o, "terminates_tx"), f(o, "terminates_rx")),
        ]);
    }
    say!("\nqps\n{t}");
    let mut t = Table::new(["queue", "depth", "high-water", "capacity", "overflows"]);
    for (name, o) in entries(&r["events"]) {
        if o.contains_key("high_water") {
            t.row([
                name.clone(),
                f(o, "depth"),
                f(o, "high_water"),
                f(o, "capacity"),
                f(o, "overflows"),
            ]);
        }
    }
    say!("\nevent queues\n{t}");
    if let Some(m) = r["rdma"].as_object() {
        let line: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v}")).collect();
        say!("\nrdma: {}", line.join(", "));
    }
    if let Some(m) = r["mrs"].as_object() {
        say!(
            "memory: {} B registered memory, {} regions, {} windows",
            m.get("memory_bytes").cloned().unwrap_or_default(),
            m.get("regions").cloned().unwrap_or_default(),
            m.get("windows").cloned().unwrap_or_default()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_in_natural_order() {
        let v = serde_json::json!({"c10": {}, "c2": {}, "c1": {}, "engine": {}, "n": 3});
        let keys: Vec<&str> = entries(&v).iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["c1", "c2", "c10", "engine"]);
    }

    #[test]
    fn socket_found_by_inode() {
        let unix = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0005 01 4242 /var/run/dpdk/x/dpdk_telemetry.v2\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 4243 /var/run/dpdk/x/mp_socket\n";
        let mine: BTreeSet<String> = ["4243".to_string(), "4242".to_string()].into();
        assert_eq!(
            find_socket(unix, &mine),
            Some(PathBuf::from("/var/run/dpdk/x/dpdk_telemetry.v2"))
        );
        let other: BTreeSet<String> = ["4243".to_string()].into();
        assert_eq!(find_socket(unix, &other), None);
    }
}
