//! The librdmacm calls for multicast (unreliable datagram ids; iWARP connects only reliable
//! QPs) and for enhanced connection establishment (ECE, carried in InfiniBand CM messages,
//! which iWARP's MPA exchange has no room for).

use std::ffi::{c_int, c_void};

use super::{minus_one, unsupported};
use crate::abi::{ibv_ece, rdma_cm_id, rdma_cm_join_mc_attr_ex, sockaddr};

unsupported! { "RDMACM_1.0", minus_one;
    /// Joins a multicast group: multicast is for UD ids, iWARP has only connected QPs.
    fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr, context: *mut c_void) -> c_int;
    /// Leaves a multicast group: none can be joined (see [`rdma_join_multicast`]).
    fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int;
}

unsupported! { "RDMACM_1.1", minus_one;
    /// Joins a multicast group with options: no multicast on iWARP.
    fn rdma_join_multicast_ex(
        id: *mut rdma_cm_id,
        mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
        context: *mut c_void,
    ) -> c_int;
}

unsupported! { "RDMACM_1.3", minus_one;
    /// Sets the ECE options to offer: ECE is an InfiniBand/RoCE CM feature.
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int;
    /// Reads the ECE options the peer offered: ECE is an InfiniBand/RoCE CM feature.
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int;
    /// Rejects a connection request for an ECE mismatch: ECE is an InfiniBand/RoCE CM feature
    /// (`rdma_reject` rejects an iWARP request).
    fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8)
        -> c_int;
}
