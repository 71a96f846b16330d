//! What the iWARP connections of one poll core did, for the stats line and the summary.

use iwarp::conn::ConnStats;

/// Totals over every connection of a handler, live and closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RdmaCounters {
    /// Connections established (FPDU mode reached).
    pub established: u64,
    /// FPDUs framed and handed to TCP.
    pub fpdus_sent: u64,
    /// Units of one FPDU sent from the buffer their payload was read into (no copy into
    /// a unit buffer).
    pub units_in_place: u64,
    /// Send buffers allocated because the pool was empty (the RNIC's, shared by its
    /// connections).
    pub tx_buffers_allocated: u64,
    /// Send buffers taken from the RNIC's pool (reused: not allocated).
    pub tx_pool_reused: u64,
    /// Send buffers freed because the RNIC's pool was at its bound.
    pub tx_pool_freed: u64,
    /// FPDUs received and handed to DDP/RDMAP.
    pub fpdus_received: u64,
    /// FPDUs found ahead of RCV.NXT and placed at once (out-of-order placement).
    pub fpdus_placed_ahead: u64,
    /// ULPDU octets of those FPDUs.
    pub bytes_placed_ahead: u64,
    /// Octets ahead of RCV.NXT nobody could place, held by TCP for reassembly.
    pub bytes_held: u64,
    /// Of those, octets of tagged DDP segments.
    pub tagged_bytes_held: u64,
    /// FPDUs whose MPA CRC did not match.
    pub crc_errors: u64,
    /// Terminate messages sent.
    pub terminates_sent: u64,
    /// Terminate messages received.
    pub terminates_received: u64,
    /// TCP segments retransmitted.
    pub tcp_retransmits: u64,
    /// TCP retransmission timeouts.
    pub tcp_timeouts: u64,
    /// Of those, timeouts found spurious and undone (a peer that stalled).
    pub tcp_spurious_timeouts: u64,
    /// TCP fast-recovery episodes.
    pub tcp_recoveries: u64,
    /// Of those, episodes found spurious and undone (reordering, not loss).
    pub tcp_spurious_recoveries: u64,
    /// Of the retransmissions, SYNs and SYN-ACKs.
    pub tcp_syn_retransmits: u64,
    /// TCP tail loss probes sent.
    pub tcp_loss_probes: u64,
    /// TCP segments sent without data, SYN or FIN (ACKs, window updates).
    pub tcp_pure_acks: u64,
    /// Delayed-ACK timers that ran out with an ACK owed.
    pub tcp_delayed_acks: u64,
}

impl RdmaCounters {
    /// Adds one connection's counters.
    pub fn add(&mut self, s: &ConnStats) {
        self.fpdus_sent += s.fpdus_sent;
        self.units_in_place += s.units_in_place;
        self.tx_buffers_allocated += s.tx_buffers_allocated;
        self.fpdus_received += s.fpdus_received;
        self.fpdus_placed_ahead += s.fpdus_placed_ahead;
        self.bytes_placed_ahead += s.bytes_placed_ahead;
        self.bytes_held += s.bytes_left_to_tcp;
        self.tagged_bytes_held += s.tagged_bytes_left_to_tcp;
        self.crc_errors += s.crc_errors;
        self.terminates_sent += s.terminates_sent;
        self.terminates_received += s.terminates_received;
    }

    /// The compact form for the periodic stats line.
    pub fn line(&self) -> String {
        format!(
            "fpdu tx {} rx {} | ooo placed {} ({} B) | held {} B (tagged {} B) | crc err {} | term tx {} rx {} | tcp retx {} rto {} (spurious {}) recoveries {} (spurious {})",
            self.fpdus_sent,
            self.fpdus_received,
            self.fpdus_placed_ahead,
            self.bytes_placed_ahead,
            self.bytes_held,
            self.tagged_bytes_held,
            self.crc_errors,
            self.terminates_sent,
            self.terminates_received,
            self.tcp_retransmits,
            self.tcp_timeouts,
            self.tcp_spurious_timeouts,
            self.tcp_recoveries,
            self.tcp_spurious_recoveries
        )
    }

    /// `key: value` lines for the end-of-run summary (stable names, parsed by tests).
    pub fn summary(&self) -> String {
        format!(
            "rdma-fpdus-sent: {}\nrdma-units-in-place: {}\nrdma-tx-buffers-allocated: {}\nrdma-tx-pool-reused: {}\nrdma-tx-pool-freed: {}\nrdma-fpdus-received: {}\nrdma-ooo-placed: {}\nrdma-ooo-placed-bytes: {}\nrdma-held-bytes: {}\nrdma-held-tagged-bytes: {}\nrdma-crc-errors: {}\nrdma-terminates-sent: {}\nrdma-terminates-received: {}\ntcp-retransmits: {}\ntcp-timeouts: {}\ntcp-spurious-timeouts: {}\ntcp-recoveries: {}\ntcp-spurious-recoveries: {}\ntcp-syn-retransmits: {}\ntcp-loss-probes: {}\ntcp-pure-acks: {}\ntcp-delayed-acks: {}",
            self.fpdus_sent,
            self.units_in_place,
            self.tx_buffers_allocated,
            self.tx_pool_reused,
            self.tx_pool_freed,
            self.fpdus_received,
            self.fpdus_placed_ahead,
            self.bytes_placed_ahead,
            self.bytes_held,
            self.tagged_bytes_held,
            self.crc_errors,
            self.terminates_sent,
            self.terminates_received,
            self.tcp_retransmits,
            self.tcp_timeouts,
            self.tcp_spurious_timeouts,
            self.tcp_recoveries,
            self.tcp_spurious_recoveries,
            self.tcp_syn_retransmits,
            self.tcp_loss_probes,
            self.tcp_pure_acks,
            self.tcp_delayed_acks
        )
    }
}

/// The connection manager's bounds: CM events waiting for the application, and the
/// incoming connections refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// CM events waiting now.
    pub events_waiting: usize,
    /// Most CM events that ever waited at once.
    pub events_high_water: usize,
    /// Incoming connections reset because too many CM events waited unpolled.
    pub refused_events_full: u64,
    /// Incoming connections reset because no QP could be created (the RNIC's QP table or
    /// the ULP's quota was full).
    pub refused_no_qp: u64,
}
