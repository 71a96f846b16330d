//! Engine configuration.

use core::time::Duration;
use std::net::IpAddr;

use crate::cc::CongestionAlgorithm;

/// TCP keepalive (RFC 9293 §3.8.4) parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe.
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub count: u32,
}

/// Engine-wide settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// IP MTU of the path; segments never exceed it. Transmit buffers must hold this much.
    pub mtu: usize,
    /// Window advertised while a connection has no sink attached yet, and the cap on any
    /// advertised window.
    pub max_rx_window: usize,
    /// Our window scale shift (RFC 7323 §2.3), offered when `max_rx_window` needs it.
    pub window_scale: u8,
    /// Offer SACK-permitted (RFC 2018).
    pub sack: bool,
    /// Offer timestamps (RFC 7323).
    pub timestamps: bool,
    /// RFC 6298 initial RTO.
    pub rto_initial: Duration,
    /// Lower bound on the RTO (RFC 6298 §2.4 says 1 s; data centers use far less).
    pub rto_min: Duration,
    /// Upper bound on the RTO.
    pub rto_max: Duration,
    /// Delayed-ACK timeout (RFC 5681 §4.2 allows up to 500 ms).
    pub delayed_ack: Duration,
    /// Maximum segment lifetime; TIME-WAIT lasts 2 MSL (RFC 9293 §3.4.2).
    pub msl: Duration,
    /// How long FIN-WAIT-2 may last once the application closed.
    pub fin_wait2_timeout: Duration,
    /// SYN retransmissions before an active open fails.
    pub syn_retries: u32,
    /// SYN-ACK retransmissions before a half-open connection is dropped.
    pub synack_retries: u32,
    /// Consecutive retransmission timeouts before a connection is dropped (RFC 9293 R2).
    pub max_retries: u32,
    /// SYN cookies (RFC 4987 §3.6): a SYN to a listener whose backlog of half-open
    /// connections is full is answered statelessly instead of dropped, and the ACK that
    /// completes the handshake makes the connection (as Linux's `tcp_syncookies = 1`). Off:
    /// such SYNs are dropped and their initiators retry after an initial RTO.
    pub syn_cookies: bool,
    /// Keepalive, off when `None`.
    pub keepalive: Option<Keepalive>,
    /// Congestion controller.
    pub congestion: CongestionAlgorithm,
    /// Initial window in segments (RFC 6928).
    pub initial_window: usize,
    /// Octets all connections of the engine keep in flight together ("TCP small queues"
    /// across connections; `None`: no bound). Beyond it a connection with new data waits
    /// its turn: the engine wakes waiting connections oldest first as acknowledgments free
    /// room, each for one turn (up to `TX_QUANTUM` segments, so the peer acknowledges at
    /// once, every second full segment, RFC 5681 §4.2). Many connections then keep about
    /// what one would, each still within its own congestion and peer windows.
    pub max_flight: Option<usize>,
    /// Tail loss probes (RFC 8985 §7) with SACK: two SRTTs after the last send or ACK with
    /// data outstanding, one segment (new, or the last one again) elicits the ACK that lets
    /// RACK find a loss at the tail of a flight, long before the RTO.
    pub tail_loss_probe: bool,
    /// Most connections the table holds (all states).
    pub max_connections: usize,
    /// Secret for RFC 6528 ISNs; random per process in production.
    pub isn_secret: [u8; 16],
    /// First and last ephemeral port for active opens.
    pub ephemeral_ports: (u16, u16),
    /// Verify IPv4 and TCP checksums on receive (off when the NIC did).
    pub verify_checksums: bool,
    /// Fill IPv4 and TCP checksums on transmit (off when the NIC does).
    pub fill_checksums: bool,
    /// How long a SYN to a port without a listener waits for one before it is refused
    /// (zero: refused at once, RFC 9293 §3.10.7.1). For a listener that comes up just after
    /// the peer was told to connect (see `syn_hold`).
    pub syn_hold: Duration,
    /// How long an active open keeps trying when its SYN is refused (an acceptable RST in
    /// SYN-SENT): the SYN goes out again every 20 ms until then, for a listener that comes
    /// up just after this side was told to connect (the other side of `syn_hold`, for
    /// peers that refuse at once). Zero: refused at once (RFC 9293 §3.10.7.3).
    pub refused_retry: Duration,
    /// Take the in-order data segments of a receive run (after the first of the run in a
    /// burst) through the run's narrow entry (on by default), and so the data segments
    /// ahead of RCV.NXT at or beyond the end of the last range held out of order; off, every segment
    /// goes through the general input, for comparisons. The result is the same either way.
    pub rx_run_entry: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mtu: 1500,
            max_rx_window: 4 << 20,
            window_scale: 7,
            sack: true,
            timestamps: true,
            rto_initial: Duration::from_secs(1),
            rto_min: Duration::from_millis(5),
            rto_max: Duration::from_secs(60),
            delayed_ack: Duration::from_millis(1),
            msl: Duration::from_secs(30),
            fin_wait2_timeout: Duration::from_secs(60),
            syn_retries: 6,
            synack_retries: 5,
            max_retries: 15,
            syn_cookies: true,
            keepalive: None,
            congestion: CongestionAlgorithm::Cubic,
            initial_window: 10,
            max_flight: None,
            tail_loss_probe: true,
            max_connections: 65_536,
            isn_secret: [0x5a; 16],
            ephemeral_ports: (49152, 65535),
            verify_checksums: true,
            fill_checksums: true,
            syn_hold: Duration::ZERO,
            refused_retry: Duration::ZERO,
            rx_run_entry: true,
        }
    }
}

impl Config {
    /// Where the search for a free ephemeral port starts: a point of the range chosen by
    /// the secret (RFC 6056 §3.3.1), so that a new process (a new secret) does not begin
    /// with the 4-tuple its predecessor used last. A peer still holding that 4-tuple in
    /// TIME-WAIT takes a new SYN only with a larger sequence number or timestamp
    /// (RFC 6191), which a new secret gives half the time each; Linux refused the others
    /// for 2 s (`TcpExtPAWSTimewait`).
    pub fn ephemeral_start(&self) -> u16 {
        let (lo, hi) = self.ephemeral_ports;
        let span = u64::from(hi.saturating_sub(lo)) + 1;
        let at = crate::isn::IsnGenerator::new(self.isn_secret).port_offset() % span;
        lo + at as u16
    }

    /// Our MSS toward addresses of `ip`'s family: the MTU less the IP header (20 octets for
    /// IPv4, 40 for IPv6) and the TCP base header (RFC 9293 §3.7.1, RFC 8200 §8.3).
    pub fn local_mss(&self, ip: IpAddr) -> u16 {
        let headers = crate::ip::ip_header_len(ip) + 20;
        u16::try_from(self.mtu.saturating_sub(headers)).unwrap_or(u16::MAX)
    }
}
