//! Ids: creation (a NULL channel gives the synchronous mode, whose calls wait for their own
//! event), binding to an address (and so to a device), address and route resolution,
//! listening, options and queries, destruction.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::abi::*;
use crate::cm::addr;
use crate::cm::events::{rdma_ack_cm_event, rdma_destroy_event_channel, rdma_get_cm_event};
use crate::cm::objects::{
    channel_obj, core, device_handles, id_mut, id_obj, new_channel, CmId, IdState,
};
use crate::entry::{guard, ptr_call, status_call};
use crate::runtime::runtime;
use crate::shared::cm::{CmIdShared, CmRaw};
use crate::shared::last_errno;
use crate::verbs::objects::{publish, reclaim};

crate::symver::symver! {
    "RDMACM_1.0": rdma_create_id, rdma_destroy_id, rdma_bind_addr, rdma_listen, rdma_resolve_addr, rdma_resolve_route, rdma_get_src_port, rdma_get_dst_port, rdma_set_option, rdma_get_devices, rdma_free_devices;
}

/// In the synchronous mode: waits for the id's next event, keeps it in the `event` field of
/// the id it names (acknowledging the previous one) and turns a failure into an errno.
///
/// # Safety
/// `id` must be a live id of ours.
pub unsafe fn complete(id: *mut rdma_cm_id) -> Result<*mut rdma_cm_event, i32> {
    // SAFETY: by the contract.
    let i = unsafe { id_mut(id) }?;
    if !i.id.event.is_null() {
        // SAFETY: an event this library handed out for this id.
        unsafe { rdma_ack_cm_event(i.id.event) };
        i.id.event = std::ptr::null_mut();
    }
    let mut ev = std::ptr::null_mut();
    // SAFETY: the id's channel is a channel of ours; `ev` is a writable slot.
    if unsafe { rdma_get_cm_event(i.id.channel, &mut ev) } != 0 {
        return Err(last_errno());
    }
    // SAFETY: `ev` was just produced by `rdma_get_cm_event`.
    let (kind, status, target) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
    // The event belongs to the id it names (for a request: the new id).
    // SAFETY: the event names a live id of ours.
    let owner = unsafe { id_mut(target) }?;
    owner.id.event = ev;
    match (kind, status) {
        (_, 0) => Ok(ev),
        (RDMA_CM_EVENT_REJECTED, _) => Err(libc::ECONNREFUSED),
        (_, s) => Err(s.abs()),
    }
}

/// Queues `kind` for the id and, in the synchronous mode, waits for it.
///
/// # Safety
/// `id` must be the live id `i` is.
pub unsafe fn report(id: *mut rdma_cm_id, i: &CmId, kind: CmRaw) -> Result<(), i32> {
    i.shared.post(kind);
    // SAFETY: by the contract.
    unsafe { complete_if_sync(id, i) }
}

/// In the synchronous mode, waits for the id's next event ([`complete`]).
///
/// # Safety
/// `id` must be the live id `i` is.
pub unsafe fn complete_if_sync(id: *mut rdma_cm_id, i: &CmId) -> Result<(), i32> {
    if i.state().sync {
        // SAFETY: by the contract.
        unsafe { complete(id) }?;
    }
    Ok(())
}

/// `rdma_create_id`: a new id (RC QPs for the TCP and IB port spaces; UD ones are not
/// offered by an iWARP device). The data plane starts here if it has not yet.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    status_call("rdma_create_id", || {
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        if ps != RDMA_PS_TCP && ps != RDMA_PS_IB {
            return Err(libc::EPROTONOSUPPORT);
        }
        let core = core()?;
        let (ch, sync) = if channel.is_null() {
            (new_channel()?, true)
        } else {
            (channel, false)
        };
        // SAFETY: a channel of ours (given by the application, or just made).
        let c = unsafe { channel_obj(ch) }?;
        let shared = CmIdShared::new(Arc::clone(&c.shared));
        let p = publish(CmId {
            id: rdma_cm_id {
                channel: ch,
                context,
                ps,
                qp_type: IBV_QPT_RC,
                ..Default::default()
            },
            shared: Arc::clone(&shared),
            state: Mutex::new(IdState {
                sync,
                ..IdState::default()
            }),
            core,
        });
        shared.c_id.store(p as usize, Ordering::Release);
        // SAFETY: the caller passes a writable slot (NULL refused above).
        unsafe { *id = p };
        Ok(())
    })
}

/// `rdma_destroy_id`: stops listening, releases a live connection (its QP flushed, what
/// it sent still delivered, then a graceful TCP close, as Linux's iw_cm and siw do; a
/// request not accepted is rejected), drops events still queued for the id, and waits until the events already
/// handed out for it are acknowledged.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    status_call("rdma_destroy_id", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_mut(id) }?;
        let (listening, conn, lane, sync) = {
            let mut st = i.state();
            (
                std::mem::take(&mut st.listening),
                st.conn.take(),
                st.lane,
                st.sync,
            )
        };
        let shared = Arc::clone(&i.shared);
        if !listening.is_empty() {
            // A listener listens on every lane.
            i.core.call_each(move |b| {
                for &(dev, port) in &listening {
                    if let Ok((cm, h)) = b.cm_and_handler(dev) {
                        cm.unlisten(dev, h, port, &shared);
                    }
                }
            })?;
        }
        if let Some((dev, c)) = conn {
            i.core.call_on(lane, move |b| {
                if let Ok((cm, h)) = b.cm_and_handler(dev) {
                    cm.forget(dev, h, c);
                }
            })?;
        }
        i.shared.destroyed.store(true, Ordering::Release);
        if !i.id.event.is_null() {
            // SAFETY: the synchronous mode's kept event, handed out by this library.
            unsafe { rdma_ack_cm_event(i.id.event) };
            i.id.event = std::ptr::null_mut();
        }
        let started = Instant::now();
        let mut warned = false;
        while i.shared.unacked.load(Ordering::Acquire) > 0 {
            if !warned && started.elapsed() > Duration::from_secs(5) {
                log::warn!("rdma_destroy_id waits for events of the id to be acknowledged");
                warned = true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if sync {
            // SAFETY: the id's private channel, made by this library.
            unsafe { rdma_destroy_event_channel(i.id.channel) };
        }
        // SAFETY: published by `rdma_create_id` (or as a request's id); given up here.
        drop(unsafe { reclaim::<rdma_cm_id, CmId>(id) });
        Ok(())
    })
}

/// The device whose port has address `ip` (of either family).
fn device_with_ip(ip: IpAddr) -> Result<usize, i32> {
    runtime()?
        .devices
        .iter()
        .position(|d| d.has(ip))
        .ok_or(libc::EADDRNOTAVAIL)
}

/// Attaches the id to device `dev` (`verbs`, `pd`, `port_num`).
fn attach(i: &mut CmId, dev: usize) -> Result<(), i32> {
    let h = device_handles(dev)?;
    i.id.verbs = h.ctx;
    i.id.pd = h.pd;
    i.id.port_num = 1;
    i.state().dev = Some(dev);
    Ok(())
}

/// `rdma_bind_addr`: a specific address (IPv4 or IPv6) binds the id to its device at once;
/// a wildcard address (`0.0.0.0` or `::`, either taking both families like Linux's
/// dual-stack sockets) binds it to every device when it listens. Port 0 takes a free port.
#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, a: *mut sockaddr) -> c_int {
    status_call("rdma_bind_addr", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_mut(id) }?;
        // SAFETY: by the caller's contract, a readable socket address.
        let a = unsafe { addr::read(a.cast()) }?;
        let port = if a.port() == 0 {
            i.core.call(|b| b.cm.ephemeral_port())?
        } else {
            a.port()
        };
        if !a.ip().is_unspecified() {
            attach(i, device_with_ip(a.ip())?)?;
        }
        let local = SocketAddr::new(a.ip(), port);
        i.state().local = Some(local);
        // SAFETY: the route's source slot is a sockaddr_storage-sized field of the id.
        unsafe { addr::write(&mut i.id.route.addr.__bindgen_anon_1, local) };
        Ok(())
    })
}

/// The backlog a listener gets when the program asks for none (0 or less): Linux's rdma_ucm
/// default (its `max_backlog` sysctl), so that a program that opens a thousand connections at
/// once to a listener with backlog 0, as librdmacm's `cmtime` does, loses no SYN.
const DEFAULT_LISTEN_BACKLOG: usize = 1024;

/// The half-open connections a listener holds for the `backlog` a program passed to
/// `rdma_listen` before it drops SYNs: [`DEFAULT_LISTEN_BACKLOG`] for 0 or less, else the
/// request. Linux also lowers a request above its `max_backlog` sysctl to it; with no such
/// setting here, a larger request is honoured.
fn listen_backlog(backlog: c_int) -> usize {
    usize::try_from(backlog)
        .ok()
        .filter(|&b| b > 0)
        .unwrap_or(DEFAULT_LISTEN_BACKLOG)
}

/// `rdma_listen`: connection requests to the bound address (to any address of every
/// device for a wildcard address) arrive as CONNECT_REQUEST events with a new id.
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    status_call("rdma_listen", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_mut(id) }?;
        let local = match i.state().local {
            Some(l) => l,
            None => {
                let mut s = addr::sockaddr_in(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
                // SAFETY: `id` is live; `s` is a live sockaddr_in.
                if unsafe { rdma_bind_addr(id, (&mut s as *mut libc::sockaddr_in).cast()) } != 0 {
                    return Err(last_errno());
                }
                i.state().local.ok_or(libc::EINVAL)?
            }
        };
        let devs: Vec<usize> = match i.state().dev {
            Some(d) => vec![d],
            None => (0..runtime()?.devices.len()).collect(),
        };
        let backlog = listen_backlog(backlog);
        let shared = Arc::clone(&i.shared);
        let port = local.port();
        // Every lane listens: a request comes in on the lane its SYN reached.
        let s = Arc::clone(&shared);
        let each = i.core.call_each(move |b| {
            let mut done = Vec::new();
            for &d in &devs {
                let (cm, h) = b.cm_and_handler(d)?;
                if let Err(e) = cm.listen(d, h, local, backlog, &s) {
                    for &(d, p) in &done {
                        if let Ok((cm, h)) = b.cm_and_handler(d) {
                            cm.unlisten(d, h, p, &s);
                        }
                    }
                    return Err(e);
                }
                done.push((d, port));
            }
            Ok(done)
        })?;
        let listening = match each.iter().find_map(|r| r.as_ref().err().copied()) {
            None => each
                .into_iter()
                .next()
                .and_then(Result::ok)
                .unwrap_or_default(),
            Some(e) => {
                let done: Vec<Vec<(usize, u16)>> =
                    each.into_iter().map(Result::unwrap_or_default).collect();
                for (lane, d) in done.into_iter().enumerate() {
                    let s = Arc::clone(&shared);
                    let _ = i.core.call_on(lane, move |b| {
                        for (dev, p) in d {
                            if let Ok((cm, h)) = b.cm_and_handler(dev) {
                                cm.unlisten(dev, h, p, &s);
                            }
                        }
                    });
                }
                return Err(e);
            }
        };
        log::info!(
            "rdma_listen: listening on port {port} of {} device(s)",
            listening.len()
        );
        i.state().listening = listening;
        Ok(())
    })
}

/// The device that reaches `dst`: one on its subnet or prefix (not `dst` itself: a port
/// does not talk to its own address), else one with a gateway of `dst`'s family.
fn route_to(dst: IpAddr) -> Result<Option<usize>, i32> {
    let devices = &runtime()?.devices;
    Ok(devices
        .iter()
        .position(|d| d.on_link(dst) && !d.has(dst))
        .or_else(|| devices.iter().position(|d| d.routes(dst))))
}

/// `rdma_resolve_addr`: picks the device (the source address's, the bound one's, or the
/// one that reaches `dst`) and the source address (the given or bound one, else the
/// device's address of `dst`'s family); ADDR_RESOLVED follows, or ADDR_ERROR
/// (-ENETUNREACH) when no device reaches `dst` or the device has no address of its family.
/// A source of the other family than `dst` is EINVAL.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut sockaddr,
    dst: *mut sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    status_call("rdma_resolve_addr", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_mut(id) }?;
        // SAFETY: by the caller's contract, a readable socket address.
        let dst = unsafe { addr::read(dst.cast()) }?;
        let src = if src.is_null() {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { addr::read(src.cast()) }?).filter(|s| !s.ip().is_unspecified())
        };
        if src.is_some_and(|s| s.is_ipv4() != dst.is_ipv4()) {
            return Err(libc::EINVAL);
        }
        let (bound, bound_local) = {
            let st = i.state();
            (st.dev, st.local)
        };
        let dev = match (src, bound) {
            (Some(s), _) => Some(device_with_ip(s.ip())?),
            (None, Some(d)) => Some(d),
            (None, None) => route_to(dst.ip())?,
        };
        let source = bound_local
            .map(|l| l.ip())
            .filter(|l| !l.is_unspecified() && l.is_ipv4() == dst.is_ipv4());
        let ip = match dev {
            Some(d) => src
                .map(|s| s.ip())
                .or(source)
                .or(runtime()?.devices[d].address(dst.ip())),
            None => None,
        };
        let (Some(dev), Some(ip)) = (dev, ip) else {
            // SAFETY: `i` is the live id `id`.
            return unsafe { report(id, i, CmRaw::AddrError(-libc::ENETUNREACH)) };
        };
        attach(i, dev)?;
        let port = bound_local.map_or(0, |l| l.port());
        let local = SocketAddr::new(ip, port);
        {
            let mut st = i.state();
            st.local = Some(local);
            st.remote = Some(dst);
        }
        // SAFETY: the route's address slots are sockaddr_storage-sized fields of the id.
        unsafe {
            addr::write(&mut i.id.route.addr.__bindgen_anon_1, local);
            addr::write(&mut i.id.route.addr.__bindgen_anon_2, dst);
        }
        // SAFETY: `i` is the live id `id`.
        unsafe { report(id, i, CmRaw::AddrResolved) }
    })
}

/// `rdma_resolve_route`: iWARP needs no path records; ROUTE_RESOLVED follows.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    status_call("rdma_resolve_route", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_obj(id) }?;
        if i.state().remote.is_none() {
            return Err(libc::EINVAL);
        }
        // SAFETY: `i` is the live id `id`.
        unsafe { report(id, i, CmRaw::RouteResolved) }
    })
}

/// The port of the address `pick` takes from an id's record, in network order (0 for an
/// id that is not ours or has no such address).
///
/// # Safety
/// `id` must be NULL or a live id of ours.
unsafe fn port_of(
    name: &str,
    id: *mut rdma_cm_id,
    pick: fn(&IdState) -> Option<SocketAddr>,
) -> u16 {
    guard(name, 0, || {
        // SAFETY: by the contract.
        let Ok(i) = (unsafe { id_obj(id) }) else {
            return 0;
        };
        pick(&i.state()).map_or(0, |a| a.port().to_be())
    })
}

/// `rdma_get_src_port`: the local port, in network order.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: the caller's contract is `port_of`'s.
    unsafe { port_of("rdma_get_src_port", id, |s| s.local) }
}

/// `rdma_get_dst_port`: the peer's port, in network order.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: the caller's contract is `port_of`'s.
    unsafe { port_of("rdma_get_dst_port", id, |s| s.remote) }
}

/// `rdma_set_option`: the id options rdma_cm defines are accepted (type of service, address
/// reuse, IPv6-only and the ACK timeout have no effect on this data plane: its TCP engine
/// sets no DSCP, listeners are re-bindable at once, and a wildcard listener always takes
/// both families); InfiniBand path records are ENOSYS.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    status_call("rdma_set_option", || {
        // SAFETY: by the caller's contract.
        unsafe { id_obj(id) }?;
        if optval.is_null() {
            return Err(libc::EINVAL);
        }
        let want = match (level as u32, optname as u32) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) | (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
                1
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR)
            | (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => std::mem::size_of::<c_int>(),
            _ => return Err(libc::ENOSYS),
        };
        if optlen != want {
            return Err(libc::EINVAL);
        }
        Ok(())
    })
}

/// `rdma_get_devices`: the contexts the connection manager's ids use, NULL-terminated.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    ptr_call("rdma_get_devices", || {
        let n = runtime()?.devices.len();
        // SAFETY: calloc of n + 1 pointers; NULL is checked.
        let list =
            unsafe { libc::calloc(n + 1, std::mem::size_of::<usize>()) }.cast::<*mut ibv_context>();
        if list.is_null() {
            return Err(libc::ENOMEM);
        }
        for d in 0..n {
            let h = device_handles(d)?;
            // SAFETY: `d` < n + 1 slots.
            unsafe { *list.add(d) = h.ctx };
        }
        if !num_devices.is_null() {
            // SAFETY: the caller passes a writable int.
            unsafe { *num_devices = n as c_int };
        }
        Ok(list)
    })
}

/// `rdma_free_devices`.
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: `list` came from `rdma_get_devices` (calloc).
    unsafe { libc::free(list.cast()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_backlog_of_zero_or_less_is_linux_default() {
        assert_eq!(listen_backlog(0), 1024);
        assert_eq!(listen_backlog(-5), 1024);
        assert_eq!(listen_backlog(1), 1);
        assert_eq!(listen_backlog(4096), 4096);
    }
}
