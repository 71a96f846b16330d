//! What a running data plane shows about itself: snapshots the poll loops publish and
//! DPDK's telemetry thread reads (`/dataplane/...` commands, `dataplane stats`).
//!
//! The poll loop owns every table it reports, and telemetry runs on another thread, so the
//! loop copies what it shows into a [`Snapshot`] and publishes it in a shared cell; readers
//! only ever see a finished snapshot. Snapshots are made on demand: a reader asks
//! ([`request`]), each loop sees the request between iterations ([`wanted`], two relaxed
//! loads per check), builds and publishes ([`publish`], which never blocks the loop: when a
//! reader holds the cell for its clone of the `Arc`, the loop tries again next time), and
//! the reader takes the fresh snapshot or, when no loop answers in time (stopped, or busy in
//! a long step), the latest one with its age.
//!
//! The shape follows what DPDK 22.11's telemetry can carry: a snapshot has sections (one
//! per command); a section is a dictionary whose values are scalars or flat dictionaries of
//! scalars ([`Section`], [`Dict`]); keys hold only letters, digits, `_` and `/`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A value DPDK telemetry can carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scalar {
    /// An unsigned counter or size.
    U64(u64),
    /// A string (DPDK cuts strings at 127 octets).
    Str(String),
}

impl From<u64> for Scalar {
    fn from(v: u64) -> Scalar {
        Scalar::U64(v)
    }
}

impl From<usize> for Scalar {
    fn from(v: usize) -> Scalar {
        Scalar::U64(v as u64)
    }
}

impl From<u32> for Scalar {
    fn from(v: u32) -> Scalar {
        Scalar::U64(u64::from(v))
    }
}

impl From<u16> for Scalar {
    fn from(v: u16) -> Scalar {
        Scalar::U64(u64::from(v))
    }
}

impl From<bool> for Scalar {
    fn from(v: bool) -> Scalar {
        Scalar::U64(u64::from(v))
    }
}

impl From<String> for Scalar {
    fn from(v: String) -> Scalar {
        Scalar::Str(v)
    }
}

impl From<&str> for Scalar {
    fn from(v: &str) -> Scalar {
        Scalar::Str(v.to_string())
    }
}

/// A flat dictionary of scalars, in insertion order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dict(pub Vec<(String, Scalar)>);

impl Dict {
    /// An empty dictionary.
    pub fn new() -> Dict {
        Dict::default()
    }

    /// Adds `key: value` (builder style).
    pub fn with(mut self, key: &str, value: impl Into<Scalar>) -> Dict {
        self.put(key, value);
        self
    }

    /// Adds `key: value`.
    pub fn put(&mut self, key: &str, value: impl Into<Scalar>) {
        self.0.push((key.to_string(), value.into()));
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Scalar> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// One entry of a section: a scalar or a flat dictionary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A scalar.
    Scalar(Scalar),
    /// A dictionary of scalars.
    Dict(Dict),
}

/// What one command returns: a dictionary of scalars and flat dictionaries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Section(pub Vec<(String, Entry)>);

impl Section {
    /// Adds a scalar entry.
    pub fn scalar(&mut self, key: &str, value: impl Into<Scalar>) {
        self.0.push((key.to_string(), Entry::Scalar(value.into())));
    }

    /// Adds a dictionary entry.
    pub fn dict(&mut self, key: &str, d: Dict) {
        self.0.push((key.to_string(), Entry::Dict(d)));
    }

    /// The dictionary under `key`.
    pub fn get_dict(&self, key: &str) -> Option<&Dict> {
        self.0.iter().find_map(|(k, e)| match e {
            Entry::Dict(d) if k == key => Some(d),
            _ => None,
        })
    }

    /// The section as JSON, the shape DPDK's telemetry gives it.
    pub fn to_json(&self) -> serde_json::Value {
        let scalar = |s: &Scalar| match s {
            Scalar::U64(v) => serde_json::Value::from(*v),
            Scalar::Str(v) => serde_json::Value::from(v.as_str()),
        };
        let mut map = serde_json::Map::new();
        for (k, e) in &self.0 {
            let v = match e {
                Entry::Scalar(s) => scalar(s),
                Entry::Dict(d) => serde_json::Value::Object(
                    d.0.iter().map(|(k, s)| (k.clone(), scalar(s))).collect(),
                ),
            };
            map.insert(k.clone(), v);
        }
        serde_json::Value::Object(map)
    }
}

/// What one poll loop showed at one moment, by section name (`ports`, `lcores`, `tcp`,
/// `qps`, `qp`, `mrs`, `events`, `rdma`), and where the loop ran.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The sections.
    pub sections: BTreeMap<&'static str, Section>,
    /// The EAL lcore the loop ran on, when it ran on one.
    pub lcore: Option<u32>,
    /// The name of the thread that ran the loop.
    pub thread: String,
}

impl Snapshot {
    /// The section `name`, created empty if new.
    pub fn section(&mut self, name: &'static str) -> &mut Section {
        self.sections.entry(name).or_default()
    }
}

/// The section names every snapshot may hold, with the help text of their commands.
pub const SECTIONS: &[(&str, &str)] = &[
    (
        "ports",
        "The data plane's ports: driver, MAC, MTU, queues and descriptors, offloads, counters",
    ),
    (
        "lcores",
        "Poll loops per lcore (or loop) and port: frames, classes, ARP, tx backlog, busy time",
    ),
    (
        "tcp",
        "TCP connections like ss -ti: state, addresses, cwnd, RTT, RTO, retransmits",
    ),
    (
        "qps",
        "iWARP QPs: state, IRD/ORD, operations and bytes per opcode, out-of-order, Terminates",
    ),
    (
        "qp",
        "One QP in full (/dataplane/qp,qp<N>): depths, MPA parameters, per-opcode messages and bytes",
    ),
    (
        "mrs",
        "Registered memory: regions and windows with their STag, length, access, state",
    ),
    (
        "events",
        "Event queues: RNIC async and CQ events, CM events, CQs, with high-water marks and losses",
    ),
    (
        "rdma",
        "iWARP totals: FPDUs, placements, CRC errors, Terminates, TCP retransmissions",
    ),
];

/// The latest snapshot of each poll loop and the request counter.
struct Hub {
    /// Per poll loop (by [`new_loop_id`]): when it was taken and what it showed.
    loops: Mutex<BTreeMap<u32, (Instant, Arc<Snapshot>)>>,
    /// Bumped by every reader that wants fresh snapshots.
    requested: AtomicU64,
    /// Process start, for the uptime.
    started: Mutex<Option<Instant>>,
}

static HUB: Hub = Hub {
    loops: Mutex::new(BTreeMap::new()),
    requested: AtomicU64::new(0),
    started: Mutex::new(None),
};

/// The last poll loop id handed out.
static LOOP_IDS: AtomicU32 = AtomicU32::new(0);

/// A poll loop id of its own, unique in the process (from 1): what a loop publishes under,
/// whatever lcore or thread runs it (lanes of one process, the libraries' stacks).
pub fn new_loop_id() -> u32 {
    LOOP_IDS.fetch_add(1, Ordering::Relaxed) + 1
}

/// Notes the process start (for `/dataplane/info`'s uptime); later calls do nothing.
pub fn mark_start() {
    let mut s = HUB.started.lock().unwrap_or_else(|e| e.into_inner());
    s.get_or_insert_with(Instant::now);
}

/// Seconds since [`mark_start`].
pub fn uptime() -> Duration {
    let s = *HUB.started.lock().unwrap_or_else(|e| e.into_inner());
    s.map(|t| t.elapsed()).unwrap_or_default()
}

/// Asks every poll loop for a fresh snapshot; returns the request's number.
pub fn request() -> u64 {
    HUB.requested.fetch_add(1, Ordering::Relaxed) + 1
}

/// The poll loop's side of a request: `seen` is the request number it last answered.
/// True when a newer request waits.
pub fn wanted(seen: u64) -> bool {
    HUB.requested.load(Ordering::Relaxed) > seen
}

/// The number of the latest request (what a loop answers when it publishes).
pub fn latest_request() -> u64 {
    HUB.requested.load(Ordering::Relaxed)
}

/// Publishes poll loop `id`'s snapshot. Never blocks: returns false when a reader
/// holds the cell at this instant (the loop tries again on its next check).
pub fn publish(id: u32, snapshot: Snapshot) -> bool {
    match HUB.loops.try_lock() {
        Ok(mut loops) => {
            loops.insert(id, (Instant::now(), Arc::new(snapshot)));
            true
        }
        Err(std::sync::TryLockError::Poisoned(e)) => {
            e.into_inner()
                .insert(id, (Instant::now(), Arc::new(snapshot)));
            true
        }
        Err(std::sync::TryLockError::WouldBlock) => false,
    }
}

/// Forgets poll loop `id`'s snapshot (the loop is gone).
pub fn withdraw(id: u32) {
    HUB.loops
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id);
}

/// Every loop's latest snapshot with its age, by loop id.
pub fn latest() -> Vec<(u32, Duration, Arc<Snapshot>)> {
    HUB.loops
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(l, (at, s))| (*l, at.elapsed(), Arc::clone(s)))
        .collect()
}

/// Asks for fresh snapshots and waits up to `wait` for every loop to publish one taken
/// after the request (for a first one when none has published yet); then returns what
/// there is (with ages).
pub fn fresh(wait: Duration) -> Vec<(u32, Duration, Arc<Snapshot>)> {
    let asked = Instant::now();
    request();
    loop {
        let all = latest();
        let done = !all.is_empty() && all.iter().all(|(_, age, _)| *age <= asked.elapsed());
        if done || asked.elapsed() >= wait {
            return all;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Section `name` of every loop's snapshot, merged: the entries of each loop in loop id
/// order (a key a later loop repeats gets the suffix `_l<id>`).
pub fn merged(snapshots: &[(u32, Duration, Arc<Snapshot>)], name: &str) -> Section {
    let mut out = Section::default();
    for (id, _, s) in snapshots {
        let Some(sec) = s.sections.get(name) else {
            continue;
        };
        for (k, e) in &sec.0 {
            let key = if out.0.iter().any(|(o, _)| o == k) {
                format!("{k}_l{id}")
            } else {
                k.clone()
            };
            out.0.push((key, e.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_merge_by_loop_and_render_as_json() {
        let mut a = Snapshot::default();
        a.section("ports").dict(
            "p0",
            Dict::new().with("rx", 5u64).with("driver", "net_null"),
        );
        let mut b = Snapshot::default();
        b.section("ports").dict("p0", Dict::new().with("rx", 7u64));
        b.section("ports").scalar("count", 1u64);
        let all = vec![
            (0, Duration::ZERO, Arc::new(a)),
            (3, Duration::ZERO, Arc::new(b)),
        ];
        let m = merged(&all, "ports");
        assert_eq!(
            m.to_json(),
            serde_json::json!({
                "p0": {"rx": 5, "driver": "net_null"},
                "p0_l3": {"rx": 7},
                "count": 1
            })
        );
        assert_eq!(
            m.get_dict("p0").and_then(|d| d.get("rx")),
            Some(&Scalar::U64(5))
        );
        assert!(merged(&all, "qps").0.is_empty());
    }

    #[test]
    fn requests_are_seen_and_publishing_never_blocks() {
        let seen = latest_request();
        request();
        assert!(wanted(seen));
        let guard = HUB.loops.lock().unwrap();
        assert!(!publish(42, Snapshot::default()), "a reader holds the cell");
        drop(guard);
        assert!(publish(42, Snapshot::default()));
        assert!(latest().iter().any(|(l, _, _)| *l == 42));
        withdraw(42);
        assert!(!latest().iter().any(|(l, _, _)| *l == 42));
    }
}
