//! The synchronous endpoint calls (`rdma_create_ep`, `rdma_get_request`, `rdma_destroy_ep`)
//! and name resolution (`rdma_getaddrinfo`, through libc's resolver, IPv4 and IPv6).

use std::os::raw::{c_char, c_int};

use crate::abi::*;
use crate::cm::events::rdma_migrate_id;
use crate::cm::id::{
    complete, rdma_bind_addr, rdma_create_id, rdma_destroy_id, rdma_resolve_addr,
    rdma_resolve_route,
};
use crate::cm::objects::id_obj;
use crate::cm::qp::{rdma_create_qp, rdma_destroy_qp, rdma_destroy_srq};
use crate::entry::{guard, status_call};
use crate::shared::last_errno;

crate::symver::symver! {
    "RDMACM_1.0": rdma_getaddrinfo, rdma_freeaddrinfo, rdma_create_ep, rdma_get_request, rdma_destroy_ep;
}

/// The time `rdma_create_ep` gives address and route resolution, as librdmacm does.
const RESOLVE_MS: c_int = 2000;

/// A heap copy (malloc) of the `len`-byte socket address at `a`.
///
/// # Safety
/// `a` must be readable for `len` bytes.
unsafe fn copy_sockaddr(
    a: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Result<*mut sockaddr, i32> {
    // SAFETY: malloc of `len` bytes; NULL is checked.
    let p = unsafe { libc::malloc(len as usize) }.cast::<u8>();
    if p.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: `a` readable for `len` bytes by the contract; `p` writable for `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(a.cast::<u8>(), p, len as usize) };
    Ok(p.cast())
}

/// `rdma_getaddrinfo`: resolves `node`/`service` to an address of the hints' family (with
/// none given, an IPv4 address when the name has one, else an IPv6 one): the source
/// address with `RAI_PASSIVE`, else the destination; RC over the TCP port space unless the
/// hints say otherwise. Returns 0 or a resolver (`EAI_*`) code.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard("rdma_getaddrinfo", libc::EAI_SYSTEM, || {
        if res.is_null() || (node.is_null() && service.is_null()) {
            return libc::EAI_NONAME;
        }
        // SAFETY: NULL or the caller's readable hints.
        let h = unsafe { hints.as_ref() };
        let flags = h.map_or(0, |h| h.ai_flags);
        let family = h.map_or(libc::AF_UNSPEC, |h| h.ai_family);
        if ![libc::AF_UNSPEC, libc::AF_INET, libc::AF_INET6].contains(&family) {
            return libc::EAI_FAMILY;
        }
        let passive = flags as u32 & RAI_PASSIVE != 0;
        // SAFETY: all-zero is a valid addrinfo hint block.
        let mut lh: libc::addrinfo = unsafe { std::mem::zeroed() };
        lh.ai_family = family;
        lh.ai_socktype = libc::SOCK_STREAM;
        if passive {
            lh.ai_flags |= libc::AI_PASSIVE;
        }
        if flags as u32 & RAI_NUMERICHOST != 0 {
            lh.ai_flags |= libc::AI_NUMERICHOST;
        }
        let mut found: *mut libc::addrinfo = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings (or NULL) from the caller, our hints, our slot.
        let rc = unsafe { libc::getaddrinfo(node, service, &lh, &mut found) };
        if rc != 0 {
            return rc;
        }
        let r = build_addrinfo(found, h, passive);
        // SAFETY: the list getaddrinfo returned.
        unsafe { libc::freeaddrinfo(found) };
        match r {
            Ok(p) => {
                // SAFETY: the caller's writable slot (NULL refused above).
                unsafe { *res = p };
                0
            }
            Err(_) => libc::EAI_MEMORY,
        }
    })
}

fn build_addrinfo(
    found: *mut libc::addrinfo,
    h: Option<&rdma_addrinfo>,
    passive: bool,
) -> Result<*mut rdma_addrinfo, i32> {
    // SAFETY: the first entry of getaddrinfo's non-empty result.
    let mut first = unsafe { found.as_ref() }.ok_or(libc::ENOENT)?;
    // The first IPv4 entry if any (as before IPv6 was known), else the first one.
    let mut cur = Some(first);
    while let Some(e) = cur {
        if e.ai_family == libc::AF_INET {
            first = e;
            break;
        }
        // SAFETY: the next entry of getaddrinfo's list, or NULL.
        cur = unsafe { e.ai_next.as_ref() };
    }
    // SAFETY: calloc of one rdma_addrinfo (all-zero is valid); NULL checked.
    let ai =
        unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
    // SAFETY: just allocated (NULL refused).
    let a = unsafe { ai.as_mut() }.ok_or(libc::ENOMEM)?;
    a.ai_flags = h.map_or(0, |h| h.ai_flags);
    a.ai_family = first.ai_family;
    a.ai_qp_type = h.map_or(0, |h| h.ai_qp_type);
    if a.ai_qp_type == 0 {
        a.ai_qp_type = IBV_QPT_RC as c_int;
    }
    a.ai_port_space = h.map_or(0, |h| h.ai_port_space);
    if a.ai_port_space == 0 {
        a.ai_port_space = RDMA_PS_TCP as c_int;
    }
    // SAFETY: getaddrinfo's address of `ai_addrlen` bytes.
    let addr = unsafe { copy_sockaddr(first.ai_addr, first.ai_addrlen) }?;
    if passive {
        a.ai_src_addr = addr;
        a.ai_src_len = first.ai_addrlen;
    } else {
        a.ai_dst_addr = addr;
        a.ai_dst_len = first.ai_addrlen;
        if let Some(h) = h.filter(|h| !h.ai_src_addr.is_null()) {
            // SAFETY: the hints' source address of `ai_src_len` bytes.
            a.ai_src_addr = unsafe { copy_sockaddr(h.ai_src_addr.cast(), h.ai_src_len) }?;
            a.ai_src_len = h.ai_src_len;
        }
    }
    Ok(ai)
}

/// `rdma_freeaddrinfo`: frees a list from `rdma_getaddrinfo`.
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut cur = res;
    // SAFETY: a list this library allocated with malloc/calloc.
    while let Some(a) = unsafe { cur.as_mut() } {
        let next = a.ai_next;
        // SAFETY: each field is NULL or a malloc'd block of ours.
        unsafe {
            libc::free(a.ai_src_addr.cast());
            libc::free(a.ai_dst_addr.cast());
            libc::free(a.ai_src_canonname.cast());
            libc::free(a.ai_dst_canonname.cast());
            libc::free(a.ai_route);
            libc::free(a.ai_connect);
            libc::free(cur.cast());
        }
        cur = next;
    }
}

/// `rdma_create_ep`: a synchronous id for `res`: passive ones are bound (and remember the
/// QP attributes for `rdma_get_request`), active ones have their address and route resolved
/// and, with `qp_init_attr`, a QP.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    status_call("rdma_create_ep", || {
        // SAFETY: the caller's readable addrinfo (NULL refused).
        let r = unsafe { res.as_ref() }.ok_or(libc::EINVAL)?;
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let ps = if r.ai_port_space == 0 {
            RDMA_PS_TCP
        } else {
            r.ai_port_space as rdma_port_space
        };
        let mut new = std::ptr::null_mut();
        // SAFETY: a writable local slot; NULL channel = synchronous.
        if unsafe { rdma_create_id(std::ptr::null_mut(), &mut new, std::ptr::null_mut(), ps) } != 0
        {
            return Err(last_errno());
        }
        // The QP is of the addrinfo's type, as librdmacm makes it (the application's attr
        // is updated): `rdma_xclient -c x` asks for XRC this way, which ibv_create_qp then
        // refuses (EOPNOTSUPP) instead of an RC QP standing in for it.
        // SAFETY: NULL or the caller's writable init attr.
        if let Some(a) = unsafe { qp_init_attr.as_mut() } {
            if r.ai_qp_type != 0 {
                a.qp_type = r.ai_qp_type as ibv_qp_type;
            }
        }
        let setup = || -> Result<(), i32> {
            // SAFETY: the id just made, the caller's addresses and attrs.
            unsafe {
                if r.ai_flags as u32 & RAI_PASSIVE != 0 {
                    if rdma_bind_addr(new, r.ai_src_addr) != 0 {
                        return Err(last_errno());
                    }
                    if let Some(a) = qp_init_attr.as_ref() {
                        id_obj(new)?.state().ep_qp_attr = Some((pd as usize, *a));
                    }
                } else {
                    if rdma_resolve_addr(new, r.ai_src_addr, r.ai_dst_addr, RESOLVE_MS) != 0
                        || rdma_resolve_route(new, RESOLVE_MS) != 0
                    {
                        return Err(last_errno());
                    }
                    if !qp_init_attr.is_null() && rdma_create_qp(new, pd, qp_init_attr) != 0 {
                        return Err(last_errno());
                    }
                }
            }
            Ok(())
        };
        if let Err(e) = setup() {
            // SAFETY: the id just made.
            unsafe { rdma_destroy_id(new) };
            return Err(e);
        }
        // SAFETY: the caller's writable slot (NULL refused above).
        unsafe { *id = new };
        Ok(())
    })
}

/// `rdma_get_request`: waits for the next connection request on a synchronous listener;
/// the new id is synchronous too and gets a QP when `rdma_create_ep` was given attributes.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    status_call("rdma_get_request", || {
        // SAFETY: by the caller's contract.
        let l = unsafe { id_obj(listen) }?;
        if !l.state().sync || id.is_null() {
            return Err(libc::EINVAL);
        }
        let ep = l.state().ep_qp_attr;
        let child = loop {
            // SAFETY: `listen` is live.
            let ev = unsafe { complete(listen) }?;
            // SAFETY: the event `complete` just took.
            let (kind, child) = unsafe { ((*ev).event, (*ev).id) };
            if kind == RDMA_CM_EVENT_CONNECT_REQUEST {
                break child;
            }
        };
        // SAFETY: the new id, live.
        if unsafe { rdma_migrate_id(child, std::ptr::null_mut()) } != 0 {
            return Err(last_errno());
        }
        if let Some((pd, mut attr)) = ep {
            // SAFETY: the new id, the PD given to rdma_create_ep (or NULL), a local attr.
            if unsafe { rdma_create_qp(child, pd as *mut ibv_pd, &mut attr) } != 0 {
                let e = last_errno();
                // SAFETY: the new id.
                unsafe { rdma_destroy_id(child) };
                return Err(e);
            }
        }
        // SAFETY: the caller's writable slot (NULL refused above).
        unsafe { *id = child };
        Ok(())
    })
}

/// `rdma_destroy_ep`: the id's QP, S-RQ and the id.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    // SAFETY: by the caller's contract, a live id of ours.
    unsafe {
        rdma_destroy_qp(id);
        rdma_destroy_srq(id);
        rdma_destroy_id(id);
    }
}
