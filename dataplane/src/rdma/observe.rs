//! What the iWARP side of a poll core shows in telemetry: its QPs (`qps`, compact; `qp`,
//! one entry per QP in full), registered memory (`mrs`), event queues (`events`) and
//! totals (`rdma`).

use iwarp::conn::{OpCount, OpCounters};
use iwarp::verbs::{EventResource, QueueStats, Rnic, StagState};

use super::counters::{CmCounters, RdmaCounters};
use super::handler::{ConnManager, RdmaEngine};
use crate::telemetry::{Dict, Snapshot};

/// Telemetry names of the 16 RDMAP opcodes (RFC 5040 §4.2, RFC 7306 §6).
pub const OPCODE_NAMES: [&str; 16] = [
    "write",
    "read_req",
    "read_resp",
    "send",
    "send_inv",
    "send_se",
    "send_se_inv",
    "terminate",
    "imm",
    "imm_se",
    "atomic_req",
    "atomic_resp",
    "op12",
    "op13",
    "op14",
    "op15",
];

/// Sums of one direction's counters.
fn total(dir: &[OpCount; 16]) -> OpCount {
    dir.iter().fold(OpCount::default(), |a, c| OpCount {
        messages: a.messages + c.messages,
        segments: a.segments + c.segments,
        bytes: a.bytes + c.bytes,
    })
}

/// Per-opcode counters of both directions, the opcodes seen only.
fn put_opcodes(d: &mut Dict, ops: &OpCounters) {
    for (dir, counts) in [("tx", &ops.sent), ("rx", &ops.received)] {
        for (name, c) in OPCODE_NAMES.iter().zip(counts) {
            if c.segments > 0 {
                d.put(&format!("{dir}_{name}_msgs"), c.messages);
                d.put(&format!("{dir}_{name}_bytes"), c.bytes);
            }
        }
    }
}

fn queue(q: &QueueStats) -> Dict {
    Dict::new()
        .with("depth", q.depth)
        .with("capacity", q.capacity)
        .with("high_water", q.high_water)
        .with("offered", q.offered)
        .with("overflows", q.overflows)
}

impl ConnManager {
    /// Adds the `qps`, `qp`, `mrs`, `events` and `rdma` sections.
    pub(super) fn observe_into(
        &self,
        engine: &RdmaEngine,
        rnic: &Rnic,
        totals: &RdmaCounters,
        cm: &CmCounters,
        snap: &mut Snapshot,
    ) {
        for id in &self.ids() {
            let (Some(entry), Some(conn)) = (self.conns.get(id), engine.ulp(*id)) else {
                continue;
            };
            // A Request to a pending listener has no QP until the application accepts it.
            let Some(qp) = entry.qp else {
                continue;
            };
            let attrs = rnic.query_qp(qp).ok();
            let st = conn.stats();
            let ops = conn.op_counters();
            let (tx, rx) = (total(&ops.sent), total(&ops.received));
            let neg = conn.negotiated();
            let mut compact = Dict::new()
                .with("qp", qp.0)
                .with("conn", id.index())
                .with("remote", entry.addrs.remote.to_string())
                .with(
                    "state",
                    attrs.map_or("gone".to_string(), |a| format!("{:?}", a.state)),
                )
                .with("ird", neg.map_or(0, |n| u32::from(n.ird)))
                .with("ord", neg.map_or(0, |n| u32::from(n.ord)))
                .with("tx_msgs", tx.messages)
                .with("tx_bytes", tx.bytes)
                .with("rx_msgs", rx.messages)
                .with("rx_bytes", rx.bytes)
                .with("ooo_placed", st.fpdus_placed_ahead)
                .with("crc_errors", st.crc_errors)
                .with("terminates_tx", st.terminates_sent)
                .with("terminates_rx", st.terminates_received);
            let key = format!("qp{}", qp.0);
            snap.section("qps").dict(&key, compact.clone());
            if let Some(a) = attrs {
                compact.put("sq_depth", a.init.sq_depth);
                compact.put("rq_depth", a.init.rq_depth);
                compact.put("qp_ird", a.init.ird);
                compact.put("qp_ord", a.init.ord);
                if let Some((cause, origin)) = a.terminate {
                    compact.put("terminate", format!("{cause:?} ({origin:?})"));
                }
            }
            if let Some(n) = neg {
                compact.put("mpa_revision", u32::from(n.revision));
                compact.put("mpa_crc", n.crc);
                compact.put("mpa_markers", n.markers_tx || n.markers_rx);
            }
            compact.put("established", entry.established);
            compact.put("fpdus_tx", st.fpdus_sent);
            compact.put("fpdus_rx", st.fpdus_received);
            compact.put("ooo_placed_bytes", st.bytes_placed_ahead);
            compact.put("left_to_tcp_bytes", st.bytes_left_to_tcp);
            compact.put("stalled_fpdus", st.stalled_fpdus);
            compact.put("deferred_segments", st.deferred_segments);
            put_opcodes(&mut compact, ops);
            snap.section("qp").dict(&key, compact);
        }

        let mrs = snap.section("mrs");
        let stags = rnic.memory().stags();
        mrs.scalar("memory_bytes", rnic.memory().bytes().len());
        mrs.scalar("regions", stags.iter().filter(|s| !s.window).count());
        mrs.scalar("windows", stags.iter().filter(|s| s.window).count());
        for s in &stags {
            mrs.dict(
                &format!("stag{:#x}", s.index),
                Dict::new()
                    .with("kind", if s.window { "mw" } else { "mr" })
                    .with("pd", s.pd.0)
                    .with("valid", s.state == StagState::Valid)
                    .with("key", u32::from(s.key))
                    .with("len", s.len)
                    .with("base_to", format!("{:#x}", s.base_to))
                    .with("access", format!("{:?}", s.access))
                    .with("bound", s.bound),
            );
        }

        let ev = snap.section("events");
        let q = rnic.event_queue_stats();
        ev.dict("rnic_async_events", queue(&q.async_events));
        ev.dict("rnic_cq_events", queue(&q.cq_events));
        ev.dict(
            "cm_events",
            Dict::new()
                .with("depth", cm.events_waiting)
                .with("high_water", cm.events_high_water)
                .with("refused_events_full", cm.refused_events_full)
                .with("refused_no_qp", cm.refused_no_qp),
        );
        let h = self.event_log.counters();
        ev.dict(
            "handler",
            Dict::new()
                .with("async_events", h.async_events)
                .with("cq_events", h.cq_events)
                .with("forwarded", h.forwarded)
                .with("ring_full", h.ring_full)
                .with("kept_full", h.kept_full),
        );
        let mut kinds = Dict::new();
        let mut counts: Vec<_> = rnic.async_event_counts().collect();
        counts.sort_by_key(|(k, _)| format!("{k:?}"));
        for (k, n) in counts {
            kinds.put(&format!("{k:?}"), n);
        }
        ev.dict("raised", kinds);
        for cq in rnic.cq_handles() {
            if let Ok(a) = rnic.query_cq(cq) {
                ev.dict(
                    &format!("cq{}", cq.0),
                    Dict::new()
                        .with("entries", a.entries)
                        .with("occupancy", a.occupancy)
                        .with("overflows", a.overflows),
                );
            }
        }
        let mut recent = Dict::new();
        for (i, e) in self.event_log.recent().enumerate() {
            let res = match e.resource {
                EventResource::Qp(q) => format!("qp{}", q.0),
                EventResource::Cq(c) => format!("cq{}", c.0),
                EventResource::Srq(s) => format!("srq{}", s.0),
                EventResource::Rnic => "rnic".to_string(),
            };
            recent.put(&format!("e{i}"), format!("{res} {:?}", e.kind));
        }
        ev.dict("recent", recent);

        let r = snap.section("rdma");
        for (k, v) in [
            ("established", totals.established),
            ("fpdus_sent", totals.fpdus_sent),
            ("units_in_place", totals.units_in_place),
            ("tx_buffers_allocated", totals.tx_buffers_allocated),
            ("tx_pool_reused", totals.tx_pool_reused),
            ("tx_pool_freed", totals.tx_pool_freed),
            ("fpdus_received", totals.fpdus_received),
            ("ooo_placed", totals.fpdus_placed_ahead),
            ("ooo_placed_bytes", totals.bytes_placed_ahead),
            ("held_bytes", totals.bytes_held),
            ("held_tagged_bytes", totals.tagged_bytes_held),
            ("crc_errors", totals.crc_errors),
            ("terminates_sent", totals.terminates_sent),
            ("terminates_received", totals.terminates_received),
            ("tcp_retransmits", totals.tcp_retransmits),
            ("tcp_timeouts", totals.tcp_timeouts),
            ("tcp_spurious_timeouts", totals.tcp_spurious_timeouts),
            ("tcp_recoveries", totals.tcp_recoveries),
            ("tcp_spurious_recoveries", totals.tcp_spurious_recoveries),
            ("tcp_syn_retransmits", totals.tcp_syn_retransmits),
            ("tcp_loss_probes", totals.tcp_loss_probes),
            ("tcp_pure_acks", totals.tcp_pure_acks),
            ("tcp_delayed_acks", totals.tcp_delayed_acks),
        ] {
            r.scalar(k, v);
        }
        r.scalar("live_connections", self.conns.len());
    }
}
