//! Public libibverbs calls for what an iWARP RNIC does not have: address handles and
//! multicast (both for unreliable datagram QPs; iWARP is connected-only), enhanced connection
//! establishment (an InfiniBand/RoCE CM feature), dmabuf memory, and importing objects of a
//! kernel uverbs context shared by another process.

use std::ffi::c_int;

use super::{eopnotsupp, minus_one, nothing, null, unsupported};
use crate::abi::{
    ibv_ah, ibv_ah_attr, ibv_context, ibv_dm, ibv_ece, ibv_gid, ibv_grh, ibv_mr, ibv_pd, ibv_qp,
    ibv_wc,
};

unsupported! { "IBVERBS_1.1", null;
    /// Creates an address handle: address handles are for UD QPs, an iWARP RNIC has none.
    fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah;
    /// Creates the address handle to reply to a received datagram: no UD QPs on iWARP.
    fn ibv_create_ah_from_wc(
        pd: *mut ibv_pd,
        wc: *mut ibv_wc,
        grh: *mut ibv_grh,
        port_num: u8,
    ) -> *mut ibv_ah;
}

unsupported! { "IBVERBS_1.1", eopnotsupp;
    /// Destroys an address handle: none can exist (see [`ibv_create_ah`]).
    fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int;
    /// Attaches a UD QP to a multicast group: iWARP QPs are connected, no multicast.
    fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    /// Detaches a UD QP from a multicast group: no multicast on iWARP.
    fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
}

unsupported! { "IBVERBS_1.1", minus_one;
    /// Fills the address handle attributes to reply to a datagram: no UD QPs on iWARP.
    fn ibv_init_ah_from_wc(
        context: *mut ibv_context,
        port_num: u8,
        wc: *mut ibv_wc,
        grh: *mut ibv_grh,
        ah_attr: *mut ibv_ah_attr,
    ) -> c_int;
}

unsupported! { "IBVERBS_1.10", null;
    /// Imports a device from a kernel uverbs file descriptor: these devices have no kernel side.
    fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context;
    /// Imports a PD of a kernel uverbs context shared by another process: no kernel objects.
    fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd;
    /// Imports an MR of a kernel uverbs context shared by another process: no kernel objects.
    fn ibv_import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr;
}

unsupported! { "IBVERBS_1.10", nothing;
    /// Forgets an imported PD: none can be imported (see [`ibv_import_pd`]).
    fn ibv_unimport_pd(pd: *mut ibv_pd);
    /// Forgets an imported MR: none can be imported (see [`ibv_import_mr`]).
    fn ibv_unimport_mr(mr: *mut ibv_mr);
}

unsupported! { "IBVERBS_1.10", eopnotsupp;
    /// Sets a QP's ECE options: enhanced connection establishment is an InfiniBand/RoCE feature.
    fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int;
    /// Reads a QP's ECE options: ECE is an InfiniBand/RoCE feature.
    fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int;
}

unsupported! { "IBVERBS_1.12", null;
    /// Registers dmabuf (device) memory: the data plane reaches only the process's own memory.
    fn ibv_reg_dmabuf_mr(
        pd: *mut ibv_pd,
        offset: u64,
        length: usize,
        iova: u64,
        fd: c_int,
        access: c_int,
    ) -> *mut ibv_mr;
}

unsupported! { "IBVERBS_1.13", null;
    /// Imports device memory of a shared kernel uverbs context: no device memory, no kernel side.
    fn ibv_import_dm(context: *mut ibv_context, dm_handle: u32) -> *mut ibv_dm;
}

unsupported! { "IBVERBS_1.13", nothing;
    /// Forgets imported device memory: none can be imported (see [`ibv_import_dm`]).
    fn ibv_unimport_dm(dm: *mut ibv_dm);
}
