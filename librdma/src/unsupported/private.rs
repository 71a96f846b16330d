//! `IBVERBS_PRIVATE_34`: the interface between libibverbs and its provider libraries (the
//! real libmlx5 and libefa stay in the process: perftest links them, and DPDK's mlx PMDs
//! load them). Their constructors register with [`verbs_register_driver_34`], which is all
//! they ever do here: device discovery never hands a provider a device, so the kernel
//! commands (`ibv_cmd_*`) and context set-up calls below only fail, the way libibverbs
//! reports a kernel that cannot run the command. Signatures are rdma-core 44's `driver.h`
//! and `cmd_ioctl.h`; its private structs, which are never read, are [`Opaque`].

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::AtomicBool;

use super::{eopnotsupp, minus_one, nothing, null, unsupported};
use crate::abi::{
    ib_uverbs_advise_mr_advice, ib_uverbs_alloc_mw_resp, ib_uverbs_alloc_pd_resp, ib_uverbs_attr,
    ib_uverbs_create_ah_resp, ib_uverbs_create_cq_resp, ib_uverbs_create_qp_resp,
    ib_uverbs_create_srq_resp, ib_uverbs_ex_create_cq_resp, ib_uverbs_ex_create_qp_resp,
    ib_uverbs_ex_create_rwq_ind_table_resp, ib_uverbs_ex_create_wq_resp,
    ib_uverbs_ex_modify_qp_resp, ib_uverbs_ex_query_device_resp, ib_uverbs_get_context_resp,
    ib_uverbs_ioctl_hdr, ib_uverbs_open_xrcd_resp, ib_uverbs_reg_mr_resp, ib_uverbs_rereg_mr_resp,
    ib_uverbs_resize_cq_resp, ibv_ah, ibv_ah_attr, ibv_alloc_dm_attr, ibv_comp_channel,
    ibv_context, ibv_counters_init_attr, ibv_cq, ibv_cq_init_attr_ex, ibv_device,
    ibv_device_attr_ex, ibv_flow, ibv_flow_action_esp_attr, ibv_flow_attr, ibv_gid,
    ibv_modify_cq_attr, ibv_mw, ibv_mw_type, ibv_pd, ibv_port_attr, ibv_qp, ibv_qp_attr,
    ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_qp_open_attr, ibv_query_device_ex_input,
    ibv_recv_wr, ibv_rwq_ind_table, ibv_rwq_ind_table_init_attr, ibv_send_wr, ibv_sge, ibv_srq,
    ibv_srq_attr, ibv_srq_init_attr, ibv_srq_init_attr_ex, ibv_wc, ibv_wq, ibv_wq_attr,
    ibv_wq_init_attr, ibv_xrcd_init_attr, verbs_context,
};
use crate::entry::guard;
use crate::symver::symver;

/// A struct of rdma-core's private provider ABI that this library never reads: a provider's
/// `verbs_*` object wrappers, the kernel command structs of `kern-abi.h`, `verbs_device_ops`
/// and `verbs_context_ops`.
pub type Opaque = c_void;

/// The head of rdma-core 44's private `struct ibv_command_buffer` (`cmd_ioctl.h`), one link
/// of the chain of ioctl attribute buffers a provider hands to libibverbs.
#[repr(C)]
pub struct CommandBuffer {
    /// The next buffer of the chain.
    next: *mut CommandBuffer,
    /// One past the last attribute filled in `hdr.attrs`.
    next_attr: *mut ib_uverbs_attr,
    /// The end of `hdr.attrs`.
    last_attr: *mut ib_uverbs_attr,
    /// The `uhw_*` indices and the flag bits.
    _uhw_and_flags: [u8; 5],
    /// The ioctl header, followed by its attributes.
    hdr: ib_uverbs_ioctl_hdr,
}

/// Whether destroying an object of a disassociated device succeeds (libibverbs sets it from
/// `RDMAV_ALLOW_DISASSOC_DESTROY`; providers read it): false, no device here is ever
/// disassociated. A 1-byte `bool` like rdma-core's.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);

/// The attribute count of a command buffer with `num_attrs` of its own and the chain `link`:
/// a pure function of the provider's buffers, computed like libibverbs (it sizes the buffer
/// that [`execute_ioctl`] would then refuse).
///
/// # Safety
/// `link` is NULL or the head of a chain of valid `struct ibv_command_buffer`s.
#[no_mangle]
pub unsafe extern "C" fn __ioctl_final_num_attrs(
    num_attrs: c_uint,
    link: *mut CommandBuffer,
) -> c_uint {
    guard("__ioctl_final_num_attrs", num_attrs, || {
        let mut total = num_attrs;
        let mut link = link;
        // SAFETY: the caller's chain of command buffers is valid.
        while let Some(buffer) = unsafe { link.as_ref() } {
            // SAFETY: a buffer's filled attributes run from `hdr.attrs` to `next_attr`, both
            // inside that buffer.
            let filled = unsafe { buffer.next_attr.offset_from(buffer.hdr.attrs.as_ptr()) };
            total = total.wrapping_add(filled as c_uint);
            link = buffer.next;
        }
        total
    })
}

/// Allocates and initialises a provider's device context: NULL with `EOPNOTSUPP`, no provider
/// is ever given a device to open. Like libibverbs on failure, closes `cmd_fd`.
///
/// # Safety
/// `cmd_fd` is -1 or a file descriptor the caller hands over (libibverbs' contract).
#[no_mangle]
pub unsafe extern "C" fn _verbs_init_and_alloc_context(
    _device: *mut ibv_device,
    cmd_fd: c_int,
    _alloc_size: usize,
    _context_offset: *mut verbs_context,
    _driver_id: u32,
) -> *mut c_void {
    if cmd_fd >= 0 {
        // SAFETY: the caller handed `cmd_fd` over; nothing else closes or uses it.
        unsafe { libc::close(cmd_fd) };
    }
    null("_verbs_init_and_alloc_context")
}

/// A kernel post command: `EOPNOTSUPP`, with `*bad_wr` at the first work request (as no
/// provider QP or SRQ exists here, none can be posted).
///
/// # Safety
/// `bad_wr` is NULL or valid for a write.
unsafe fn refuse_post<W>(name: &str, wr: *mut W, bad_wr: *mut *mut W) -> c_int {
    // SAFETY: the caller's `bad_wr` is NULL or valid for a write.
    if let Some(bad_wr) = unsafe { bad_wr.as_mut() } {
        *bad_wr = wr;
    }
    eopnotsupp(name)
}

/// Posts send work requests through the kernel (`IB_USER_VERBS_CMD_POST_SEND`): `EOPNOTSUPP`
/// with `*bad_wr` at the first request, as no provider QP exists here.
///
/// # Safety
/// `bad_wr` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_send(
    _ibqp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the caller's `bad_wr` is NULL or valid for a write.
    unsafe { refuse_post("ibv_cmd_post_send", wr, bad_wr) }
}

/// Posts receive work requests through the kernel: `EOPNOTSUPP` with `*bad_wr` at the first
/// request, as no provider QP exists here.
///
/// # Safety
/// `bad_wr` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_recv(
    _ibqp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller's `bad_wr` is NULL or valid for a write.
    unsafe { refuse_post("ibv_cmd_post_recv", wr, bad_wr) }
}

/// Posts receive work requests to an SRQ through the kernel: `EOPNOTSUPP` with `*bad_wr` at
/// the first request, as no provider SRQ exists here.
///
/// # Safety
/// `bad_wr` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_srq_recv(
    _srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller's `bad_wr` is NULL or valid for a write.
    unsafe { refuse_post("ibv_cmd_post_srq_recv", wr, bad_wr) }
}

symver! {
    "IBVERBS_PRIVATE_34": verbs_allow_disassociate_destroy, __ioctl_final_num_attrs,
        _verbs_init_and_alloc_context, ibv_cmd_post_send, ibv_cmd_post_recv,
        ibv_cmd_post_srq_recv;
}

unsupported! { "IBVERBS_PRIVATE_34", nothing;
    /// A provider's log message (`verbs_log`; variadic in C, the arguments are never read):
    /// ignored, no provider runs here.
    fn __verbs_log(ctx: *mut verbs_context, level: u32, fmt: *const c_char);
    /// Registers a provider library (its constructor's call): ignored, this library's devices
    /// are its own and no provider is ever matched to one.
    fn verbs_register_driver_34(ops: *const Opaque);
    /// Installs a provider's context operations: ignored, no provider context exists here.
    fn verbs_set_ops(vctx: *mut verbs_context, ops: *const Opaque);
    /// Releases what libibverbs set up for a provider context: nothing was set up.
    fn verbs_uninit_context(context: *mut verbs_context);
    /// Initialises the libibverbs part of a provider's CQ: ignored, no provider CQ exists here.
    fn verbs_init_cq(
        cq: *mut ibv_cq,
        context: *mut ibv_context,
        channel: *mut ibv_comp_channel,
        cq_context: *mut c_void,
    );
}

unsupported! { "IBVERBS_PRIVATE_34", null;
    /// Opens a device through its provider: no provider ever gets a device here.
    fn verbs_open_device(device: *mut ibv_device, private_data: *mut c_void) -> *mut ibv_context;
}

unsupported! { "IBVERBS_PRIVATE_34", minus_one;
    /// Polls a CQ through the kernel (-1 on failure, like libibverbs): no provider CQ here.
    fn ibv_cmd_poll_cq(cq: *mut ibv_cq, ne: c_int, wc: *mut ibv_wc) -> c_int;
}

unsupported! { "IBVERBS_PRIVATE_34", eopnotsupp;
    /// Runs a provider's uverbs ioctl: there is no kernel uverbs device to run it on.
    fn execute_ioctl(context: *mut ibv_context, cmd: *mut CommandBuffer) -> c_int;
    /// Kernel command GET_CONTEXT of a provider: no kernel uverbs device here.
    fn ibv_cmd_get_context(
        context: *mut verbs_context,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_get_context_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command QUERY_CONTEXT of a provider: no kernel uverbs device here.
    fn ibv_cmd_query_context(ctx: *mut ibv_context, driver: *mut CommandBuffer) -> c_int;
    /// Kernel command QUERY_DEVICE of a provider: no kernel uverbs device here.
    fn ibv_cmd_query_device_any(
        context: *mut ibv_context,
        input: *const ibv_query_device_ex_input,
        attr: *mut ibv_device_attr_ex,
        attr_size: usize,
        resp: *mut ib_uverbs_ex_query_device_resp,
        resp_size: *mut usize,
    ) -> c_int;
    /// Kernel command QUERY_PORT of a provider: no kernel uverbs device here.
    fn ibv_cmd_query_port(
        context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut ibv_port_attr,
        cmd: *mut Opaque,
        cmd_size: usize,
    ) -> c_int;
    /// Kernel command ALLOC_PD of a provider: no kernel uverbs device here.
    fn ibv_cmd_alloc_pd(
        context: *mut ibv_context,
        pd: *mut ibv_pd,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_pd_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command DEALLOC_PD of a provider: no kernel uverbs device here.
    fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    /// Kernel command OPEN_XRCD of a provider: no kernel uverbs device here.
    fn ibv_cmd_open_xrcd(
        context: *mut ibv_context,
        xrcd: *mut Opaque,
        vxrcd_size: c_int,
        attr: *mut ibv_xrcd_init_attr,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_open_xrcd_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command CLOSE_XRCD of a provider: no kernel uverbs device here.
    fn ibv_cmd_close_xrcd(xrcd: *mut Opaque) -> c_int;
    /// Kernel command REG_MR of a provider: no kernel uverbs device here.
    fn ibv_cmd_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        hca_va: u64,
        access: c_int,
        vmr: *mut Opaque,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_reg_mr_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command REREG_MR of a provider: no kernel uverbs device here.
    fn ibv_cmd_rereg_mr(
        vmr: *mut Opaque,
        flags: u32,
        addr: *mut c_void,
        length: usize,
        hca_va: u64,
        access: c_int,
        pd: *mut ibv_pd,
        cmd: *mut Opaque,
        cmd_sz: usize,
        resp: *mut ib_uverbs_rereg_mr_resp,
        resp_sz: usize,
    ) -> c_int;
    /// Kernel command DEREG_MR of a provider: no kernel uverbs device here.
    fn ibv_cmd_dereg_mr(vmr: *mut Opaque) -> c_int;
    /// Kernel method QUERY_MR of a provider: no kernel uverbs device here.
    fn ibv_cmd_query_mr(pd: *mut ibv_pd, vmr: *mut Opaque, mr_handle: u32) -> c_int;
    /// Kernel method ADVISE_MR (prefetch of on-demand paging memory): no kernel uverbs device.
    fn ibv_cmd_advise_mr(
        pd: *mut ibv_pd,
        advice: ib_uverbs_advise_mr_advice,
        flags: u32,
        sg_list: *mut ibv_sge,
        num_sge: u32,
    ) -> c_int;
    /// Kernel method REG_DMABUF_MR of a provider: no kernel uverbs device here.
    fn ibv_cmd_reg_dmabuf_mr(
        pd: *mut ibv_pd,
        offset: u64,
        length: usize,
        iova: u64,
        fd: c_int,
        access: c_int,
        vmr: *mut Opaque,
    ) -> c_int;
    /// Kernel command ALLOC_MW of a provider: no kernel uverbs device here.
    fn ibv_cmd_alloc_mw(
        pd: *mut ibv_pd,
        type_: ibv_mw_type,
        mw: *mut ibv_mw,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_mw_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command DEALLOC_MW of a provider: no kernel uverbs device here.
    fn ibv_cmd_dealloc_mw(mw: *mut ibv_mw) -> c_int;
    /// Kernel command CREATE_CQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
        cq: *mut ibv_cq,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_cq_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command CREATE_CQ (extended) of a provider: no kernel uverbs device here.
    fn ibv_cmd_create_cq_ex(
        context: *mut ibv_context,
        cq_attr: *const ibv_cq_init_attr_ex,
        cq: *mut Opaque,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_ex_create_cq_resp,
        resp_size: usize,
        cmd_flags: u32,
    ) -> c_int;
    /// Kernel command REQ_NOTIFY_CQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
    /// Kernel command RESIZE_CQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_resize_cq(
        cq: *mut ibv_cq,
        cqe: c_int,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_resize_cq_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command DESTROY_CQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int;
    /// Kernel command MODIFY_CQ (moderation) of a provider: no kernel uverbs device here.
    fn ibv_cmd_modify_cq(
        cq: *mut ibv_cq,
        attr: *mut ibv_modify_cq_attr,
        cmd: *mut Opaque,
        cmd_size: usize,
    ) -> c_int;
    /// Kernel command CREATE_SRQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_create_srq(
        pd: *mut ibv_pd,
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_init_attr,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_srq_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command CREATE_XSRQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_create_srq_ex(
        context: *mut ibv_context,
        srq: *mut Opaque,
        attr_ex: *mut ibv_srq_init_attr_ex,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_srq_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command MODIFY_SRQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_modify_srq(
        srq: *mut ibv_srq,
        srq_attr: *mut ibv_srq_attr,
        srq_attr_mask: c_int,
        cmd: *mut Opaque,
        cmd_size: usize,
    ) -> c_int;
    /// Kernel command QUERY_SRQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_query_srq(
        srq: *mut ibv_srq,
        srq_attr: *mut ibv_srq_attr,
        cmd: *mut Opaque,
        cmd_size: usize,
    ) -> c_int;
    /// Kernel command DESTROY_SRQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int;
    /// Kernel command CREATE_QP of a provider: no kernel uverbs device here.
    fn ibv_cmd_create_qp(
        pd: *mut ibv_pd,
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_init_attr,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_qp_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command CREATE_QP (with init_attr_ex) of a provider: no kernel uverbs device here.
    fn ibv_cmd_create_qp_ex(
        context: *mut ibv_context,
        qp: *mut Opaque,
        attr_ex: *mut ibv_qp_init_attr_ex,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_qp_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command CREATE_QP (extended) of a provider: no kernel uverbs device here.
    fn ibv_cmd_create_qp_ex2(
        context: *mut ibv_context,
        qp: *mut Opaque,
        qp_attr: *mut ibv_qp_init_attr_ex,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_ex_create_qp_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command OPEN_QP (an XRC target QP) of a provider: no kernel uverbs device here.
    fn ibv_cmd_open_qp(
        context: *mut ibv_context,
        qp: *mut Opaque,
        vqp_sz: c_int,
        attr: *mut ibv_qp_open_attr,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_qp_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command QUERY_QP of a provider: no kernel uverbs device here.
    fn ibv_cmd_query_qp(
        qp: *mut ibv_qp,
        qp_attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        qp_init_attr: *mut ibv_qp_init_attr,
        cmd: *mut Opaque,
        cmd_size: usize,
    ) -> c_int;
    /// Kernel command MODIFY_QP of a provider: no kernel uverbs device here.
    fn ibv_cmd_modify_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        cmd: *mut Opaque,
        cmd_size: usize,
    ) -> c_int;
    /// Kernel command MODIFY_QP (extended) of a provider: no kernel uverbs device here.
    fn ibv_cmd_modify_qp_ex(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_ex_modify_qp_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command DESTROY_QP of a provider: no kernel uverbs device here.
    fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int;
    /// Kernel command CREATE_AH of a provider: no kernel uverbs device (and no UD on iWARP).
    fn ibv_cmd_create_ah(
        pd: *mut ibv_pd,
        ah: *mut ibv_ah,
        attr: *mut ibv_ah_attr,
        resp: *mut ib_uverbs_create_ah_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command DESTROY_AH of a provider: no kernel uverbs device here.
    fn ibv_cmd_destroy_ah(ah: *mut ibv_ah) -> c_int;
    /// Kernel command ATTACH_MCAST of a provider: no kernel uverbs device (and no multicast).
    fn ibv_cmd_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    /// Kernel command DETACH_MCAST of a provider: no kernel uverbs device (and no multicast).
    fn ibv_cmd_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    /// Kernel command CREATE_FLOW (steering rule) of a provider: no kernel uverbs device here.
    fn ibv_cmd_create_flow(
        qp: *mut ibv_qp,
        flow_id: *mut ibv_flow,
        flow_attr: *mut ibv_flow_attr,
        ucmd: *mut c_void,
        ucmd_size: usize,
    ) -> c_int;
    /// Kernel command DESTROY_FLOW of a provider: no kernel uverbs device here.
    fn ibv_cmd_destroy_flow(flow_id: *mut ibv_flow) -> c_int;
    /// Kernel method FLOW_ACTION_ESP_CREATE (IPsec offload) of a provider: no kernel device.
    fn ibv_cmd_create_flow_action_esp(
        ctx: *mut ibv_context,
        attr: *mut ibv_flow_action_esp_attr,
        flow_action: *mut Opaque,
        driver: *mut CommandBuffer,
    ) -> c_int;
    /// Kernel method FLOW_ACTION_ESP_MODIFY of a provider: no kernel uverbs device here.
    fn ibv_cmd_modify_flow_action_esp(
        flow_action: *mut Opaque,
        attr: *mut ibv_flow_action_esp_attr,
        driver: *mut CommandBuffer,
    ) -> c_int;
    /// Kernel method FLOW_ACTION_DESTROY of a provider: no kernel uverbs device here.
    fn ibv_cmd_destroy_flow_action(action: *mut Opaque) -> c_int;
    /// Kernel command CREATE_WQ (receive work queue) of a provider: no kernel uverbs device.
    fn ibv_cmd_create_wq(
        context: *mut ibv_context,
        wq_init_attr: *mut ibv_wq_init_attr,
        wq: *mut ibv_wq,
        cmd: *mut Opaque,
        cmd_size: usize,
        resp: *mut ib_uverbs_ex_create_wq_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command MODIFY_WQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_modify_wq(
        wq: *mut ibv_wq,
        attr: *mut ibv_wq_attr,
        cmd: *mut Opaque,
        cmd_size: usize,
    ) -> c_int;
    /// Kernel command DESTROY_WQ of a provider: no kernel uverbs device here.
    fn ibv_cmd_destroy_wq(wq: *mut ibv_wq) -> c_int;
    /// Kernel command CREATE_RWQ_IND_TBL (RSS) of a provider: no kernel uverbs device here.
    fn ibv_cmd_create_rwq_ind_table(
        context: *mut ibv_context,
        init_attr: *mut ibv_rwq_ind_table_init_attr,
        rwq_ind_table: *mut ibv_rwq_ind_table,
        resp: *mut ib_uverbs_ex_create_rwq_ind_table_resp,
        resp_size: usize,
    ) -> c_int;
    /// Kernel command DESTROY_RWQ_IND_TBL of a provider: no kernel uverbs device here.
    fn ibv_cmd_destroy_rwq_ind_table(rwq_ind_table: *mut ibv_rwq_ind_table) -> c_int;
    /// Kernel method COUNTERS_CREATE of a provider: no kernel uverbs device here.
    fn ibv_cmd_create_counters(
        context: *mut ibv_context,
        init_attr: *mut ibv_counters_init_attr,
        vcounters: *mut Opaque,
        link: *mut CommandBuffer,
    ) -> c_int;
    /// Kernel method COUNTERS_DESTROY of a provider: no kernel uverbs device here.
    fn ibv_cmd_destroy_counters(vcounters: *mut Opaque) -> c_int;
    /// Kernel method COUNTERS_READ of a provider: no kernel uverbs device here.
    fn ibv_cmd_read_counters(
        vcounters: *mut Opaque,
        counters_value: *mut u64,
        ncounters: u32,
        flags: u32,
        link: *mut CommandBuffer,
    ) -> c_int;
    /// Kernel method DM_ALLOC (device memory) of a provider: no kernel uverbs device here.
    fn ibv_cmd_alloc_dm(
        ctx: *mut ibv_context,
        dm_attr: *const ibv_alloc_dm_attr,
        dm: *mut Opaque,
        link: *mut CommandBuffer,
    ) -> c_int;
    /// Kernel method DM_FREE of a provider: no kernel uverbs device here.
    fn ibv_cmd_free_dm(dm: *mut Opaque) -> c_int;
    /// Kernel method DM_MR_REG of a provider: no kernel uverbs device here.
    fn ibv_cmd_reg_dm_mr(
        pd: *mut ibv_pd,
        dm: *mut Opaque,
        offset: u64,
        length: usize,
        access: c_uint,
        vmr: *mut Opaque,
        link: *mut CommandBuffer,
    ) -> c_int;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null_mut;

    /// A command buffer with room for `N` attributes, `filled` of them filled.
    #[repr(C)]
    struct Buffer<const N: usize> {
        head: CommandBuffer,
        attrs: [ib_uverbs_attr; N],
    }

    impl<const N: usize> Buffer<N> {
        fn new() -> Box<Self> {
            // SAFETY: all-zero is a valid command buffer (NULL pointers, zero counts).
            Box::new(unsafe { std::mem::zeroed() })
        }

        fn fill(&mut self, filled: usize, next: *mut CommandBuffer) -> *mut CommandBuffer {
            self.head.next = next;
            let attrs = self.head.hdr.attrs.as_mut_ptr();
            // SAFETY: `attrs` is followed by `N >= filled` attributes in this buffer.
            let (next, last) = unsafe { (attrs.add(filled), attrs.add(N)) };
            self.head.next_attr = next;
            self.head.last_attr = last;
            &mut self.head
        }
    }

    #[test]
    fn final_attribute_count_adds_the_linked_buffers() {
        // SAFETY: NULL is an empty chain.
        assert_eq!(unsafe { __ioctl_final_num_attrs(5, null_mut()) }, 5);
        let mut second = Buffer::<4>::new();
        let mut first = Buffer::<8>::new();
        let tail = second.fill(3, null_mut());
        let head = first.fill(2, tail);
        // SAFETY: a chain of two live buffers.
        assert_eq!(unsafe { __ioctl_final_num_attrs(6, head) }, 6 + 2 + 3);
    }

    #[test]
    fn command_buffer_head_matches_rdma_core_44() {
        assert_eq!(std::mem::offset_of!(CommandBuffer, hdr), 32);
        assert_eq!(std::mem::size_of::<CommandBuffer>(), 56);
        assert_eq!(std::mem::size_of::<ib_uverbs_attr>(), 16);
    }

    #[test]
    fn a_handed_over_command_fd_is_closed() {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: `fds[0]` is handed over and not used again.
        let ctx = unsafe { _verbs_init_and_alloc_context(null_mut(), fds[0], 64, null_mut(), 0) };
        assert!(ctx.is_null());
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EOPNOTSUPP)
        );
        // SAFETY: probing a descriptor number has no memory effects.
        assert_eq!(unsafe { libc::fcntl(fds[0], libc::F_GETFD) }, -1, "closed");
        // SAFETY: `fds[1]` is ours.
        unsafe { libc::close(fds[1]) };
    }
}
