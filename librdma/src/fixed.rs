//! libibverbs calls whose answer is fixed for this library's devices: in-process iWARP RNICs
//! over the application's own memory, with no kernel driver behind them.

use std::ffi::{c_int, c_void};

use crate::abi::{
    __be16, ibv_ah_attr, ibv_context, ibv_fork_status, ibv_qp, ibv_wr_opcode, IBV_FORK_UNNEEDED,
};
use crate::entry::set_errno;
use crate::symver::symver;

/// Prepares for `fork()`: 0, nothing to do (no kernel driver pins the application's memory,
/// so a child's copy-on-write pages never break a registration).
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// Whether `fork()` is safe: `IBV_FORK_UNNEEDED`, it always is (see [`ibv_fork_init`]).
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> ibv_fork_status {
    IBV_FORK_UNNEEDED
}

/// Excludes a range from a child's address space on `fork()`: 0, not needed (see
/// [`ibv_fork_init`]).
#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// Undoes [`ibv_dontfork_range`]: 0, not needed.
#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// Whether the payload of `op` on `qp` is written to memory in order: 0, no guarantee (the
/// data plane places each DDP segment as it arrives).
#[no_mangle]
pub extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: ibv_wr_opcode,
    _flags: u32,
) -> c_int {
    0
}

/// Resolves the Ethernet neighbour of a RoCE address handle: `-EOPNOTSUPP` (libibverbs'
/// negative errno), since iWARP peers are reached through the connection manager, never
/// through an address handle.
#[no_mangle]
pub extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    set_errno(libc::EOPNOTSUPP);
    -libc::EOPNOTSUPP
}

/// The P_Key table index of `pkey`: iWARP has no partitions, its one P_Key (the default
/// 0xffff, or 0 as iWARP devices report it) is at index 0; any other is absent (-1, `ENOENT`).
#[no_mangle]
pub extern "C" fn ibv_get_pkey_index(
    _context: *mut ibv_context,
    _port_num: u8,
    pkey: __be16,
) -> c_int {
    if pkey == 0 || pkey == 0xffff {
        0
    } else {
        set_errno(libc::ENOENT);
        -1
    }
}

symver! {
    "IBVERBS_1.1": ibv_fork_init, ibv_dontfork_range, ibv_dofork_range,
        ibv_resolve_eth_l2_from_gid;
    "IBVERBS_1.5": ibv_get_pkey_index;
    "IBVERBS_1.13": ibv_is_fork_initialized;
    "IBVERBS_1.14": ibv_query_qp_data_in_order;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::IBV_WR_RDMA_WRITE;
    use std::ptr::null_mut;

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[test]
    fn fork_needs_no_preparation() {
        assert_eq!(ibv_fork_init(), 0);
        assert_eq!(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
        assert_eq!(ibv_is_fork_initialized(), 2);
        let mut page = [0_u8; 64];
        assert_eq!(ibv_dontfork_range(page.as_mut_ptr().cast(), page.len()), 0);
        assert_eq!(ibv_dofork_range(page.as_mut_ptr().cast(), page.len()), 0);
    }

    #[test]
    fn data_in_order_is_not_guaranteed() {
        assert_eq!(
            ibv_query_qp_data_in_order(null_mut(), IBV_WR_RDMA_WRITE, 0),
            0
        );
    }

    #[test]
    fn eth_l2_resolution_is_not_supported() {
        let mut mac = [0_u8; 6];
        let mut vid = 0_u16;
        let ret = ibv_resolve_eth_l2_from_gid(null_mut(), null_mut(), mac.as_mut_ptr(), &mut vid);
        assert_eq!(ret, -libc::EOPNOTSUPP);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        assert_eq!((mac, vid), ([0; 6], 0), "outputs untouched");
    }

    #[test]
    fn the_default_pkey_is_at_index_zero() {
        assert_eq!(ibv_get_pkey_index(null_mut(), 1, 0xffff), 0);
        assert_eq!(ibv_get_pkey_index(null_mut(), 1, 0), 0);
        assert_eq!(ibv_get_pkey_index(null_mut(), 1, 0x7fff_u16.to_be()), -1);
        assert_eq!(errno(), libc::ENOENT);
        assert_eq!(ibv_get_pkey_index(null_mut(), 1, 0x8001_u16.to_be()), -1);
    }
}
