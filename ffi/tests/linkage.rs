//! The bindings link against the system's DPDK 22.11 and agree with its C headers (no EAL
//! needed for these calls).
// Calls the raw bindings directly, which is what this test checks.
#![allow(unsafe_code)]

use std::ffi::CStr;

#[test]
fn links_against_dpdk_22_11() {
    // SAFETY: rte_version returns a pointer to a static NUL-terminated string.
    let version = unsafe { CStr::from_ptr(dpdk_sys::rte_version()) };
    let version = version.to_str().unwrap();
    assert!(version.starts_with("DPDK 22.11"), "{version}");
}

#[test]
fn shim_constants_match_the_headers() {
    // SAFETY: returns a compile-time constant.
    let headroom = unsafe { dpdk_sys::dpdk_shim_pktmbuf_headroom_default() };
    assert_eq!(u32::from(headroom), dpdk_sys::RTE_PKTMBUF_HEADROOM);
    // SAFETY: returns a compile-time constant.
    let any = unsafe { dpdk_sys::dpdk_shim_socket_id_any() };
    assert_eq!(any, dpdk_sys::SOCKET_ID_ANY);
    // The VLAN offload bits of rte_ethdev.h in 22.11: RTE_BIT64(0) in the receive offloads
    // (strip) and in the transmit offloads (insert).
    // SAFETY: returns a compile-time constant.
    assert_eq!(unsafe { dpdk_sys::dpdk_shim_rx_offload_vlan_strip() }, 1);
    // SAFETY: returns a compile-time constant.
    assert_eq!(unsafe { dpdk_sys::dpdk_shim_tx_offload_vlan_insert() }, 1);
    // RSS over TCP of both families: RTE_ETH_RSS_IPV4 (bit 2), _NONFRAG_IPV4_TCP (4),
    // _IPV6 (8), _NONFRAG_IPV6_TCP (10).
    // SAFETY: returns a compile-time constant.
    assert_eq!(unsafe { dpdk_sys::dpdk_shim_rss_hf_tcp() }, 0x514);
    // rte_mbuf is two cache lines in DPDK 22.11 on x86-64.
    assert_eq!(std::mem::size_of::<dpdk_sys::rte_mbuf>(), 128);
}

#[test]
fn dpdk_error_texts_come_from_rte_strerror() {
    let text = |code: i32| {
        // SAFETY: rte_strerror returns a NUL-terminated string valid until the next call
        // on this thread; it is copied at once.
        unsafe { CStr::from_ptr(dpdk_sys::rte_strerror(code)) }
            .to_string_lossy()
            .into_owned()
    };
    // ENODEV (19 on Linux) is a libc code; rte_strerror passes it to strerror.
    assert_eq!(text(19), "No such device");
    assert!(
        text(dpdk_sys::E_RTE_NO_CONFIG as i32).contains("config"),
        "{}",
        text(dpdk_sys::E_RTE_NO_CONFIG as i32)
    );
}
