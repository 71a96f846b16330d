//! Names of enum values and static-rate conversions: pure functions of their argument, with
//! the exact strings and tables of rdma-core 44 (libibverbs `enum_strs.c` and `verbs.c`,
//! librdmacm `cma.c`), since applications print them and scripts parse that output.

use std::ffi::{c_char, c_int, CStr};

use crate::abi::{
    self, ibv_event_type, ibv_node_type, ibv_port_state, ibv_rate, ibv_wc_status,
    rdma_cm_event_type, IBV_RATE_MAX,
};
use crate::symver::symver;

/// `ibv_node_type_str`'s names, indexed by `enum ibv_node_type` (CA = 1 .. UNSPECIFIED = 7).
const NODE_TYPES: [&CStr; 7] = [
    c"InfiniBand channel adapter",
    c"InfiniBand switch",
    c"InfiniBand router",
    c"iWARP NIC",
    c"usNIC",
    c"usNIC UDP",
    c"unspecified",
];

/// `ibv_port_state_str`'s names, indexed by `enum ibv_port_state` (NOP = 0 .. ACTIVE_DEFER = 5).
const PORT_STATES: [&CStr; 6] = [
    c"no state change (NOP)",
    c"down",
    c"init",
    c"armed",
    c"active",
    c"active defer",
];

/// `ibv_event_type_str`'s names, indexed by `enum ibv_event_type` (CQ_ERR = 0 .. WQ_FATAL = 19).
const EVENT_TYPES: [&CStr; 20] = [
    c"CQ error",
    c"local work queue catastrophic error",
    c"invalid request local work queue error",
    c"local access violation work queue error",
    c"communication established",
    c"send queue drained",
    c"path migrated",
    c"path migration request error",
    c"local catastrophic error",
    c"port active",
    c"port error",
    c"LID change",
    c"P_Key change",
    c"SM change",
    c"SRQ catastrophic error",
    c"SRQ limit reached",
    c"last WQE reached",
    c"client reregistration",
    c"GID table change",
    c"WQ fatal",
];

/// `ibv_wc_status_str`'s names, indexed by `enum ibv_wc_status` (SUCCESS = 0 ..
/// TM_RNDV_INCOMPLETE = 23).
const WC_STATUSES: [&CStr; 24] = [
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM software rendezvous",
];

/// `rdma_event_str`'s names, indexed by `enum rdma_cm_event_type` (ADDR_RESOLVED = 0 ..
/// TIMEWAIT_EXIT = 15).
const CM_EVENTS: [&CStr; 16] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

/// What the libibverbs `*_str` functions answer for a value outside their table.
const UNKNOWN: &CStr = c"unknown";

/// What `rdma_event_str` answers for a value outside its table.
const UNKNOWN_EVENT: &CStr = c"UNKNOWN EVENT";

/// The entry of `table` for `value`, whose first entry stands for `first`; `unknown` outside.
fn name(table: &[&'static CStr], first: i64, value: i64, unknown: &'static CStr) -> *const c_char {
    usize::try_from(value - first)
        .ok()
        .and_then(|i| table.get(i))
        .unwrap_or(&unknown)
        .as_ptr()
}

/// The name of a node type ("iWARP NIC" for `IBV_NODE_RNIC`), "unknown" if out of range.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: ibv_node_type) -> *const c_char {
    name(&NODE_TYPES, 1, node_type.into(), UNKNOWN)
}

/// The name of a port state ("active" for `IBV_PORT_ACTIVE`), "unknown" if out of range.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(port_state: ibv_port_state) -> *const c_char {
    name(&PORT_STATES, 0, port_state.into(), UNKNOWN)
}

/// The name of an asynchronous event type, "unknown" if out of range.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: ibv_event_type) -> *const c_char {
    name(&EVENT_TYPES, 0, event.into(), UNKNOWN)
}

/// The name of a work completion status, "unknown" if out of range.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char {
    name(&WC_STATUSES, 0, status.into(), UNKNOWN)
}

/// The name of a connection manager event ("RDMA_CM_EVENT_ESTABLISHED"), "UNKNOWN EVENT" if
/// out of range.
#[no_mangle]
pub extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
    name(&CM_EVENTS, 0, event.into(), UNKNOWN_EVENT)
}

/// `(rate, multiple of 2.5 Gb/s)` for the rates that are such a multiple.
const RATE_MULTS: [(ibv_rate, c_int); 15] = [
    (abi::IBV_RATE_2_5_GBPS, 1),
    (abi::IBV_RATE_5_GBPS, 2),
    (abi::IBV_RATE_10_GBPS, 4),
    (abi::IBV_RATE_20_GBPS, 8),
    (abi::IBV_RATE_30_GBPS, 12),
    (abi::IBV_RATE_40_GBPS, 16),
    (abi::IBV_RATE_60_GBPS, 24),
    (abi::IBV_RATE_80_GBPS, 32),
    (abi::IBV_RATE_120_GBPS, 48),
    (abi::IBV_RATE_28_GBPS, 11),
    (abi::IBV_RATE_50_GBPS, 20),
    (abi::IBV_RATE_400_GBPS, 160),
    (abi::IBV_RATE_600_GBPS, 240),
    (abi::IBV_RATE_800_GBPS, 320),
    (abi::IBV_RATE_1200_GBPS, 480),
];

/// `(rate, Mb/s)` for every rate of `enum ibv_rate` (the FDR/EDR ones are not round).
const RATE_MBPS: [(ibv_rate, c_int); 23] = [
    (abi::IBV_RATE_2_5_GBPS, 2500),
    (abi::IBV_RATE_5_GBPS, 5000),
    (abi::IBV_RATE_10_GBPS, 10000),
    (abi::IBV_RATE_20_GBPS, 20000),
    (abi::IBV_RATE_30_GBPS, 30000),
    (abi::IBV_RATE_40_GBPS, 40000),
    (abi::IBV_RATE_60_GBPS, 60000),
    (abi::IBV_RATE_80_GBPS, 80000),
    (abi::IBV_RATE_120_GBPS, 120000),
    (abi::IBV_RATE_14_GBPS, 14062),
    (abi::IBV_RATE_56_GBPS, 56250),
    (abi::IBV_RATE_112_GBPS, 112500),
    (abi::IBV_RATE_168_GBPS, 168750),
    (abi::IBV_RATE_25_GBPS, 25781),
    (abi::IBV_RATE_100_GBPS, 103125),
    (abi::IBV_RATE_200_GBPS, 206250),
    (abi::IBV_RATE_300_GBPS, 309375),
    (abi::IBV_RATE_28_GBPS, 28125),
    (abi::IBV_RATE_50_GBPS, 53125),
    (abi::IBV_RATE_400_GBPS, 425000),
    (abi::IBV_RATE_600_GBPS, 637500),
    (abi::IBV_RATE_800_GBPS, 850000),
    (abi::IBV_RATE_1200_GBPS, 1275000),
];

/// The static rate as a multiple of 2.5 Gb/s, -1 if it is not one (or not a rate).
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: ibv_rate) -> c_int {
    RATE_MULTS
        .iter()
        .find(|&&(r, _)| r == rate)
        .map_or(-1, |&(_, mult)| mult)
}

/// The static rate that is `mult` times 2.5 Gb/s, `IBV_RATE_MAX` if there is none.
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> ibv_rate {
    RATE_MULTS
        .iter()
        .find(|&&(_, m)| m == mult)
        .map_or(IBV_RATE_MAX, |&(rate, _)| rate)
}

/// The static rate in Mb/s, -1 if it is not a rate.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: ibv_rate) -> c_int {
    RATE_MBPS
        .iter()
        .find(|&&(r, _)| r == rate)
        .map_or(-1, |&(_, mbps)| mbps)
}

/// The static rate of exactly `mbps` Mb/s, `IBV_RATE_MAX` if there is none.
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> ibv_rate {
    RATE_MBPS
        .iter()
        .find(|&&(_, m)| m == mbps)
        .map_or(IBV_RATE_MAX, |&(rate, _)| rate)
}

symver! {
    "IBVERBS_1.0": ibv_rate_to_mult, mult_to_ibv_rate;
    "IBVERBS_1.1": ibv_node_type_str, ibv_port_state_str, ibv_event_type_str, ibv_wc_status_str,
        ibv_rate_to_mbps, mbps_to_ibv_rate;
    "RDMACM_1.0": rdma_event_str;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::*;

    fn text(p: *const c_char) -> &'static str {
        // SAFETY: every `*_str` function returns a pointer to a `'static` C string literal.
        unsafe { CStr::from_ptr(p) }.to_str().expect("ASCII")
    }

    /// Checks `f(value) == name` for each pair.
    fn assert_names<T: Copy + std::fmt::Debug>(
        f: extern "C" fn(T) -> *const c_char,
        names: &[(T, &str)],
    ) {
        for &(value, name) in names {
            assert_eq!(text(f(value)), name, "value {value:?}");
        }
    }

    #[test]
    fn node_types_have_rdma_core_names() {
        assert_names(
            ibv_node_type_str,
            &[
                (IBV_NODE_CA, "InfiniBand channel adapter"),
                (IBV_NODE_RNIC, "iWARP NIC"),
                (IBV_NODE_USNIC_UDP, "usNIC UDP"),
                (IBV_NODE_UNSPECIFIED, "unspecified"),
                (IBV_NODE_UNKNOWN, "unknown"),
                (0, "unknown"),
                (8, "unknown"),
                (c_int::MIN, "unknown"),
            ],
        );
    }

    #[test]
    fn port_states_have_rdma_core_names() {
        assert_names(
            ibv_port_state_str,
            &[
                (IBV_PORT_NOP, "no state change (NOP)"),
                (IBV_PORT_DOWN, "down"),
                (IBV_PORT_ACTIVE, "active"),
                (IBV_PORT_ACTIVE_DEFER, "active defer"),
                (6, "unknown"),
                (u32::MAX, "unknown"),
            ],
        );
    }

    #[test]
    fn event_types_have_rdma_core_names() {
        assert_names(
            ibv_event_type_str,
            &[
                (IBV_EVENT_CQ_ERR, "CQ error"),
                (IBV_EVENT_COMM_EST, "communication established"),
                (IBV_EVENT_PKEY_CHANGE, "P_Key change"),
                (IBV_EVENT_WQ_FATAL, "WQ fatal"),
                (IBV_EVENT_WQ_FATAL + 1, "unknown"),
                (u32::MAX, "unknown"),
            ],
        );
    }

    #[test]
    fn wc_statuses_have_rdma_core_names() {
        assert_names(
            ibv_wc_status_str,
            &[
                (IBV_WC_SUCCESS, "success"),
                (IBV_WC_WR_FLUSH_ERR, "Work Request Flushed Error"),
                (IBV_WC_REM_ACCESS_ERR, "remote access error"),
                (IBV_WC_RETRY_EXC_ERR, "transport retry counter exceeded"),
                (IBV_WC_TM_RNDV_INCOMPLETE, "TM software rendezvous"),
                (IBV_WC_TM_RNDV_INCOMPLETE + 1, "unknown"),
                (u32::MAX, "unknown"),
            ],
        );
    }

    #[test]
    fn cm_events_have_rdma_core_names() {
        assert_names(
            rdma_event_str,
            &[
                (RDMA_CM_EVENT_ADDR_RESOLVED, "RDMA_CM_EVENT_ADDR_RESOLVED"),
                (RDMA_CM_EVENT_ESTABLISHED, "RDMA_CM_EVENT_ESTABLISHED"),
                (RDMA_CM_EVENT_DISCONNECTED, "RDMA_CM_EVENT_DISCONNECTED"),
                (RDMA_CM_EVENT_TIMEWAIT_EXIT, "RDMA_CM_EVENT_TIMEWAIT_EXIT"),
                (RDMA_CM_EVENT_TIMEWAIT_EXIT + 1, "UNKNOWN EVENT"),
                (u32::MAX, "UNKNOWN EVENT"),
            ],
        );
    }

    #[test]
    fn every_table_entry_is_distinct_and_non_empty() {
        for table in [
            &NODE_TYPES[..],
            &PORT_STATES,
            &EVENT_TYPES,
            &WC_STATUSES,
            &CM_EVENTS,
        ] {
            let mut seen = std::collections::HashSet::new();
            for s in table {
                assert!(!s.is_empty());
                assert!(seen.insert(*s), "{s:?} twice");
            }
        }
    }

    #[test]
    fn rate_multiples_round_trip() {
        for &(rate, mult) in &RATE_MULTS {
            assert_eq!(ibv_rate_to_mult(rate), mult);
            assert_eq!(mult_to_ibv_rate(mult), rate);
        }
        assert_eq!(ibv_rate_to_mult(IBV_RATE_2_5_GBPS), 1);
        assert_eq!(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
        assert_eq!(ibv_rate_to_mult(IBV_RATE_28_GBPS), 11);
        assert_eq!(mult_to_ibv_rate(48), IBV_RATE_120_GBPS);
        assert_eq!(mult_to_ibv_rate(480), IBV_RATE_1200_GBPS);
    }

    #[test]
    fn rates_without_a_multiple() {
        for rate in [
            IBV_RATE_MAX,
            IBV_RATE_14_GBPS,
            IBV_RATE_56_GBPS,
            IBV_RATE_25_GBPS,
            IBV_RATE_100_GBPS,
            IBV_RATE_300_GBPS,
            99,
        ] {
            assert_eq!(ibv_rate_to_mult(rate), -1, "rate {rate}");
        }
        for mult in [0, 3, 5, 64, -1, c_int::MAX] {
            assert_eq!(mult_to_ibv_rate(mult), IBV_RATE_MAX, "mult {mult}");
        }
    }

    #[test]
    fn rate_mbps_round_trip() {
        let mut rates = 0;
        for rate in IBV_RATE_2_5_GBPS..=IBV_RATE_1200_GBPS {
            let mbps = ibv_rate_to_mbps(rate);
            assert!(mbps > 0, "rate {rate}");
            assert_eq!(mbps_to_ibv_rate(mbps), rate);
            rates += 1;
        }
        assert_eq!(rates, RATE_MBPS.len());
        assert_eq!(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
        assert_eq!(ibv_rate_to_mbps(IBV_RATE_14_GBPS), 14062);
        assert_eq!(mbps_to_ibv_rate(25781), IBV_RATE_25_GBPS);
        assert_eq!(ibv_rate_to_mbps(IBV_RATE_MAX), -1);
        assert_eq!(ibv_rate_to_mbps(IBV_RATE_1200_GBPS + 1), -1);
        assert_eq!(mbps_to_ibv_rate(100000), IBV_RATE_MAX);
        assert_eq!(mbps_to_ibv_rate(0), IBV_RATE_MAX);
    }
}
