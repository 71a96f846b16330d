//! Devices and contexts: the device list, opening and closing a device, and the queries
//! (device, port, GID, P_Key) as Linux siw answers them, with this RNIC's limits.

use std::os::raw::{c_char, c_int, c_uint};
use std::sync::Arc;

use crate::abi::*;
use crate::device::{device_attributes, device_objects, Device, DeviceInfo, VENDOR_ID};
use crate::entry::{errno_call, guard, ptr_call, set_errno};
use crate::runtime::runtime;
use crate::shared::verbs::AsyncShared;
use crate::verbs::objects::{context, publish, reclaim, Context};
use crate::verbs::{cq, qp, srq};

crate::symver::symver! {
    "IBVERBS_1.1": ibv_get_device_list, ibv_free_device_list, ibv_get_device_name, ibv_get_device_guid, ibv_open_device, ibv_close_device, ibv_query_device, ibv_query_port, ibv_query_gid, ibv_query_pkey;
    "IBVERBS_1.11": _ibv_query_gid_ex, _ibv_query_gid_table;
    "IBVERBS_1.9": ibv_get_device_index;
    "IBVERBS_PRIVATE_34": ibv_query_gid_type;
}

/// Bytes of `struct ibv_port_attr` the exported `ibv_query_port` writes: the layout
/// before `port_cap_flags2` (applications built with today's headers call it through an
/// inline that zeroes the full struct first; older ones pass the 48-byte struct).
const COMPAT_PORT_ATTR_LEN: usize = 48;

/// The device behind an `ibv_device` pointer and what it is.
///
/// # Safety
/// `dev` must be NULL or a device pointer from [`ibv_get_device_list`].
unsafe fn device<'a>(dev: *mut ibv_device) -> Result<(&'a Device, &'static DeviceInfo), i32> {
    // SAFETY: by the contract, a non-NULL `dev` is the first field of a static `Device`.
    let d = unsafe { dev.cast::<Device>().as_ref() }.ok_or(libc::EINVAL)?;
    let info = runtime()?.devices.get(d.index).ok_or(libc::ENODEV)?;
    Ok((d, info))
}

/// The device of a context, as its port runs.
fn info_of(ctx: &Context) -> Result<DeviceInfo, i32> {
    ctx.core.device(ctx.dev).ok_or(libc::ENODEV)
}

/// `ibv_get_device_list`: the devices the configuration describes (an empty list, and the
/// reason on stderr, when there is no usable configuration).
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    ptr_call("ibv_get_device_list", || {
        let devices: &[Device] = match runtime() {
            Ok(rt) => device_objects(&rt.devices),
            Err(_) => &[],
        };
        // SAFETY: calloc of n + 1 pointers; NULL is checked.
        let list = unsafe { libc::calloc(devices.len() + 1, std::mem::size_of::<usize>()) }
            .cast::<*mut ibv_device>();
        if list.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, d) in devices.iter().enumerate() {
            // SAFETY: `i` < n + 1 slots of the array just allocated.
            unsafe { *list.add(i) = (&d.dev as *const ibv_device).cast_mut() };
        }
        if !num_devices.is_null() {
            // SAFETY: the caller passes a writable int (or NULL, checked).
            unsafe { *num_devices = devices.len() as c_int };
        }
        Ok(list)
    })
}

/// `ibv_free_device_list`: frees the array (the devices stay valid).
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: `list` came from `ibv_get_device_list`, which allocated it with calloc.
    unsafe { libc::free(list.cast()) };
}

/// `ibv_get_device_name`: the port's name.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    if dev.is_null() {
        set_errno(libc::EINVAL);
        return std::ptr::null();
    }
    // SAFETY: a device pointer from our list; `name` is NUL-terminated.
    unsafe { (*dev).name.as_ptr() }
}

/// `ibv_get_device_guid`: the node GUID (EUI-64 of the port's MAC), big-endian.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    guard("ibv_get_device_guid", 0, || {
        // SAFETY: by the caller's contract.
        match unsafe { device(dev) } {
            Ok((_, info)) => info.guid().to_be(),
            Err(e) => {
                set_errno(e);
                0
            }
        }
    })
}

/// `ibv_get_device_index`: the device's position in the list.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    guard("ibv_get_device_index", -1, || {
        // SAFETY: by the caller's contract.
        match unsafe { device(dev) } {
            Ok((d, _)) => d.index as c_int,
            Err(_) => -1,
        }
    })
}

/// The operations applications call through `ibv_context::ops` (the inline
/// `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_send`, `ibv_post_recv`,
/// `ibv_post_srq_recv`); memory windows are not offered (the inline `ibv_alloc_mw` sees NULL
/// and reports EOPNOTSUPP).
fn context_ops() -> ibv_context_ops {
    ibv_context_ops {
        poll_cq: Some(cq::poll_cq),
        req_notify_cq: Some(cq::req_notify_cq),
        post_send: Some(qp::post_send),
        post_recv: Some(qp::post_recv),
        post_srq_recv: Some(srq::post_srq_recv),
        ..Default::default()
    }
}

/// `ibv_open_device`: a new context; the first one starts the data plane.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    ptr_call("ibv_open_device", || {
        // SAFETY: by the caller's contract.
        let (d, _) = unsafe { device(dev) }?;
        let core = runtime()?.core()?;
        let asyncs = Arc::new(AsyncShared::new()?);
        let index = d.index;
        let a = Arc::clone(&asyncs);
        // Device-wide async events may come from any lane.
        core.call_each(move |b| b.add_context(index, Arc::clone(&a)))?;
        let ctx = ibv_context {
            device: dev,
            ops: context_ops(),
            cmd_fd: -1,
            async_fd: asyncs.fd.fd(),
            num_comp_vectors: 1,
            ..Default::default()
        };
        Ok(publish(Context {
            ctx,
            dev: index,
            core,
            asyncs,
        }))
    })
}

/// `ibv_close_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    errno_call("ibv_close_device", || {
        // SAFETY: by the caller's contract, a context we returned.
        let c = unsafe { context(ctx) }?;
        let a = Arc::clone(&c.asyncs);
        c.core.call_each(move |b| b.remove_context(&a))?;
        // SAFETY: published by `ibv_open_device`; the application gives it up here.
        drop(unsafe { reclaim::<ibv_context, Context>(ctx) });
        Ok(())
    })
}

/// The device attributes of `info`.
pub fn device_attr(info: &DeviceInfo) -> ibv_device_attr {
    let a = device_attributes();
    let mut attr = ibv_device_attr {
        node_guid: info.guid().to_be(),
        sys_image_guid: info.guid().to_be(),
        max_mr_size: a.max_mr_size,
        page_size_cap: 4096,
        vendor_id: VENDOR_ID,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: a.max_qps as c_int,
        max_qp_wr: a.max_wrs_per_wq as c_int,
        device_cap_flags: 0,
        max_sge: a.max_send_recv_sges as c_int,
        max_sge_rd: 1,
        max_cq: a.max_cqs as c_int,
        max_cqe: a.max_cqes_per_cq as c_int,
        max_mr: a.max_mrs as c_int,
        max_pd: a.max_pds as c_int,
        max_qp_rd_atom: a.max_ord_per_qp as c_int,
        max_qp_init_rd_atom: a.max_ird_per_qp as c_int,
        max_res_rd_atom: (a.max_qps.saturating_mul(a.max_ird_per_qp)).min(i32::MAX as u32) as c_int,
        // RFC 7306 atomics between two of these RNICs.
        atomic_cap: IBV_ATOMIC_HCA,
        max_srq: a.max_srqs as c_int,
        max_srq_wr: a.max_srq_wrs as c_int,
        max_srq_sge: a.max_send_recv_sges as c_int,
        max_pkeys: 1,
        phys_port_cnt: 1,
        ..Default::default()
    };
    for (d, b) in attr
        .fw_ver
        .iter_mut()
        .zip(env!("CARGO_PKG_VERSION").bytes())
    {
        *d = b as c_char;
    }
    attr
}

/// `ibv_query_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    errno_call("ibv_query_device", || {
        // SAFETY: by the caller's contract.
        let c = unsafe { context(ctx) }?;
        let a = device_attr(&info_of(c)?);
        // SAFETY: the caller passes a writable `ibv_device_attr` (NULL is refused).
        unsafe { attr.as_mut() }.map(|p| *p = a).ok_or(libc::EINVAL)
    })
}

/// The attributes of port 1 of `info`.
pub fn port_attr(info: &DeviceInfo) -> ibv_port_attr {
    ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: info.ib_mtu(),
        active_mtu: info.ib_mtu(),
        gid_tbl_len: 1,
        port_cap_flags: IBV_PORT_CM_SUP | IBV_PORT_DEVICE_MGMT_SUP,
        max_msg_sz: 0x8000_0000,
        pkey_tbl_len: 1,
        // 1X at 25 Gb/s: a virtual port has no negotiated speed; the figure is nominal.
        active_width: 1,
        active_speed: 32,
        phys_state: 5,
        link_layer: IBV_LINK_LAYER_ETHERNET as u8,
        ..Default::default()
    }
}

/// `ibv_query_port` (the exported one: writes the 48-byte layout that predates
/// `port_cap_flags2`). Port 1 is the only port.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    ctx: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    errno_call("ibv_query_port", || {
        // SAFETY: by the caller's contract.
        let c = unsafe { context(ctx) }?;
        if port_num != 1 || attr.is_null() {
            return Err(libc::EINVAL);
        }
        let a = port_attr(&info_of(c)?);
        // SAFETY: the caller passes at least the 48-byte compat struct; we copy no more.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&a as *const ibv_port_attr).cast::<u8>(),
                attr.cast::<u8>(),
                COMPAT_PORT_ATTR_LEN,
            )
        };
        Ok(())
    })
}

/// GID 0: the port's MAC in the first six bytes (siw's convention).
fn gid0(info: &DeviceInfo) -> ibv_gid {
    let mut raw = [0u8; 16];
    raw[..6].copy_from_slice(&info.mac);
    ibv_gid { raw }
}

/// `ibv_query_gid`: 0, or -1 for a GID that does not exist.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard("ibv_query_gid", -1, || {
        // SAFETY: by the caller's contract.
        let Ok(info) = unsafe { context(ctx) }.and_then(info_of) else {
            return -1;
        };
        if port_num != 1 || index != 0 || gid.is_null() {
            return -1;
        }
        // SAFETY: the caller passes a writable GID.
        unsafe { *gid = gid0(&info) };
        0
    })
}

/// `ibv_query_pkey`: the default P_Key at index 0 (iWARP has no partitions).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard("ibv_query_pkey", -1, || {
        // SAFETY: by the caller's contract.
        if unsafe { context(ctx) }.is_err() || port_num != 1 || index != 0 || pkey.is_null() {
            return -1;
        }
        // SAFETY: the caller passes a writable u16.
        unsafe { *pkey = 0xffff_u16.to_be() };
        0
    })
}

fn gid_entry(info: &DeviceInfo) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: gid0(info),
        gid_index: 0,
        port_num: 1,
        gid_type: IBV_GID_TYPE_IB,
        ndev_ifindex: 0,
    }
}

/// `_ibv_query_gid_ex` (behind the inline `ibv_query_gid_ex`): ENODATA for an empty entry.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    _flags: u32,
    entry_size: usize,
) -> c_int {
    errno_call("_ibv_query_gid_ex", || {
        // SAFETY: by the caller's contract.
        let info = unsafe { context(ctx) }.and_then(info_of)?;
        if port_num != 1 || entry.is_null() || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return Err(libc::EINVAL);
        }
        if gid_index != 0 {
            return Err(libc::ENODATA);
        }
        // SAFETY: the caller passes a writable entry of `entry_size` bytes (checked above).
        unsafe { *entry = gid_entry(&info) };
        Ok(())
    })
}

/// `_ibv_query_gid_table`: the one GID; the number of entries written, or a negative errno.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    _flags: u32,
    entry_size: usize,
) -> isize {
    guard("_ibv_query_gid_table", -(libc::EIO as isize), || {
        // SAFETY: by the caller's contract.
        let Ok(info) = unsafe { context(ctx) }.and_then(info_of) else {
            return -(libc::EINVAL as isize);
        };
        if entries.is_null() || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return -(libc::EINVAL as isize);
        }
        if max_entries == 0 {
            return -(libc::EINVAL as isize);
        }
        // SAFETY: room for at least one entry (checked above).
        unsafe { *entries = gid_entry(&info) };
        1
    })
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34, used by `ibv_devinfo -v`): GID 0 is reported
/// as "IB/RoCE v1", as the real library does for iWARP GIDs.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    gid_type: *mut c_uint,
) -> c_int {
    guard("ibv_query_gid_type", -1, || {
        // SAFETY: by the caller's contract.
        if unsafe { context(ctx) }.is_err() || port_num != 1 || index != 0 || gid_type.is_null() {
            return -1;
        }
        // SAFETY: the caller passes a writable enum slot. 0 = IBV_GID_TYPE_SYSFS_IB_ROCE_V1.
        unsafe { *gid_type = 0 };
        0
    })
}
