//! Protection domains and memory regions. A region is the application's own memory at its
//! own addresses: registering it backs those pages in the RNIC's address space
//! ([`crate::appmem::AppMemory`]) and makes a VA-based STag over them, so the peer names a
//! buffer by its virtual address (`iova`) and DDP places straight into it.

use std::os::raw::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use iwarp::verbs::{Access, MrSpec, PageList, PdId, Rnic, STag, TaggedBase, UlpId, VerbError};

use crate::abi::*;
use crate::appmem::PAGE;
use crate::bridge::Bridge;
use crate::convert::errno_of;
use crate::core::Core;
use crate::entry::{errno_call, ptr_call};
use crate::verbs::objects::{context, obj, publish, reclaim, Mr, Pd};

crate::symver::symver! {
    "IBVERBS_1.1": ibv_alloc_pd, ibv_dealloc_pd, ibv_reg_mr, ibv_dereg_mr, ibv_rereg_mr;
    "IBVERBS_1.7": ibv_reg_mr_iova;
    "IBVERBS_1.8": ibv_reg_mr_iova2;
}

/// The ULP every context's resources belong to (one application per data plane).
pub const ULP: UlpId = UlpId(1);

/// The PD object behind `pd`.
///
/// # Safety
/// `pd` must be NULL or a PD this library returned and the application has not freed.
pub unsafe fn pd_obj<'a>(pd: *mut ibv_pd) -> Result<&'a Pd, i32> {
    // SAFETY: by the contract.
    unsafe { obj::<ibv_pd, Pd>(pd) }.ok_or(libc::EINVAL)
}

/// The data plane a PD's context runs on.
///
/// # Safety
/// As for [`pd_obj`].
pub unsafe fn pd_core(pd: &Pd) -> Result<Arc<Core>, i32> {
    // SAFETY: a live PD's context is a live context of ours.
    Ok(Arc::clone(&unsafe { context(pd.pd.context) }?.core))
}

/// `ibv_alloc_pd`: a PD on every lane.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    ptr_call("ibv_alloc_pd", || {
        // SAFETY: by the caller's contract.
        let c = unsafe { context(ctx) }?;
        let dev = c.dev;
        let made = c
            .core
            .call_each(move |b| b.rnic(dev)?.alloc_pd(ULP).map_err(errno_of))?;
        let ids = all_or_undo(&c.core, made, move |b, id| {
            let _ = b.rnic(dev).map(|r| r.dealloc_pd(id));
        })?;
        Ok(publish(Pd {
            pd: ibv_pd {
                context: ctx,
                handle: ids[0].0,
            },
            dev,
            ids,
            users: AtomicUsize::new(0),
        }))
    })
}

/// Each lane's result of a creation made on every lane, or the first failure after `undo`
/// has removed what the other lanes made.
pub fn all_or_undo<T: Copy + Send + 'static>(
    core: &Core,
    made: Vec<Result<T, i32>>,
    undo: impl Fn(&mut Bridge, T) + Send + Sync + Clone + 'static,
) -> Result<Vec<T>, i32> {
    let Some(e) = made.iter().find_map(|r| r.as_ref().err().copied()) else {
        return Ok(made.into_iter().flatten().collect());
    };
    for (lane, r) in made.into_iter().enumerate() {
        if let Ok(v) = r {
            let undo = undo.clone();
            let _ = core.call_on(lane, move |b| undo(b, v));
        }
    }
    Err(e)
}

/// `ibv_dealloc_pd`: EBUSY while QPs, S-RQs or regions use it.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    errno_call("ibv_dealloc_pd", || {
        // SAFETY: by the caller's contract.
        let p = unsafe { pd_obj(pd) }?;
        let dev = p.dev;
        // SAFETY: as above.
        let core = unsafe { pd_core(p) }?;
        if core.lanes() > 1 && p.users.load(Ordering::Acquire) > 0 {
            return Err(libc::EBUSY);
        }
        for (lane, &id) in p.ids.iter().enumerate() {
            core.call_on(lane, move |b| b.rnic(dev)?.dealloc_pd(id).map_err(errno_of))??;
        }
        // SAFETY: published by `ibv_alloc_pd`; the application gives it up here.
        drop(unsafe { reclaim::<ibv_pd, Pd>(pd) });
        Ok(())
    })
}

/// `IBV_ACCESS_OPTIONAL_RANGE` (a macro bindgen cannot evaluate): ten optional bits from
/// `IBV_ACCESS_OPTIONAL_FIRST`.
const OPTIONAL_RANGE: c_uint =
    ((IBV_ACCESS_OPTIONAL_FIRST << 10) - 1) & !(IBV_ACCESS_OPTIONAL_FIRST - 1);

/// The RNIC's rights for rdma-core access flags; EINVAL for remote write or atomic
/// access without local write (the verbs rule). The optional bits (relaxed ordering and
/// the rest of `IBV_ACCESS_OPTIONAL_RANGE`) are hints this RNIC has no use for.
pub fn access_of(flags: c_uint) -> Result<Access, i32> {
    let flags = flags & !OPTIONAL_RANGE;
    let has = |f: u32| flags & f != 0;
    if (has(IBV_ACCESS_REMOTE_WRITE) || has(IBV_ACCESS_REMOTE_ATOMIC))
        && !has(IBV_ACCESS_LOCAL_WRITE)
    {
        return Err(libc::EINVAL);
    }
    let mut a = Access::LOCAL_READ;
    for (f, r) in [
        (IBV_ACCESS_LOCAL_WRITE, Access::LOCAL_WRITE),
        (IBV_ACCESS_REMOTE_READ, Access::REMOTE_READ),
        (IBV_ACCESS_REMOTE_WRITE, Access::REMOTE_WRITE),
        (IBV_ACCESS_REMOTE_ATOMIC, Access::REMOTE_ATOMIC),
        (IBV_ACCESS_MW_BIND, Access::BIND),
    ] {
        if has(f) {
            a |= r;
        }
    }
    Ok(a)
}

/// A VA-based region over `[addr, addr + len)` at tagged offset `iova` in `pd`.
fn va_spec(addr: u64, len: u64, iova: u64, pd: PdId, key: u8, access: Access) -> MrSpec {
    MrSpec {
        pbl: PageList::contiguous(addr, len, PAGE),
        base: TaggedBase::Va(iova),
        pd,
        key,
        remote_access: access.any_remote(),
        access,
    }
}

/// Backs `[addr, addr + len)` (the pages of `spec`) and registers `spec` with `reg`; the
/// pages are released again if the registration fails.
fn back_and_register(
    rnic: &mut Rnic,
    addr: u64,
    len: u64,
    spec: &MrSpec,
    reg: impl FnOnce(&mut Rnic, &MrSpec) -> Result<STag, VerbError>,
) -> Result<STag, i32> {
    if !rnic.memory_mut().backend_mut().back(addr, len) {
        return Err(libc::EINVAL);
    }
    reg(rnic, spec).map_err(|e| {
        rnic.memory_mut().backend_mut().unback(addr, len);
        errno_of(e)
    })
}

/// Backs `[addr, addr + len)` and registers it VA-based at `iova` in `pd` on the lane
/// `b` serves, under STag index `index` when the region is on every lane (several lanes);
/// undone if the registration fails.
#[allow(clippy::too_many_arguments)]
fn register(
    b: &mut Bridge,
    dev: usize,
    pd: PdId,
    index: Option<u32>,
    addr: u64,
    len: u64,
    iova: u64,
    access: Access,
) -> Result<STag, i32> {
    let spec = va_spec(addr, len, iova, pd, 0, access);
    back_and_register(b.rnic(dev)?, addr, len, &spec, |r, s| match index {
        Some(i) => r.register_mr_at(i, s),
        None => r.register_mr(s),
    })
}

/// Deallocates `stag` on the lane `b` serves and releases the pages it backed.
fn deregister(b: &mut Bridge, dev: usize, stag: STag, addr: u64, len: u64) -> Result<(), i32> {
    let rnic = b.rnic(dev)?;
    rnic.dealloc_stag(stag).map_err(errno_of)?;
    rnic.memory_mut().backend_mut().unback(addr, len);
    Ok(())
}

/// What `ibv_reg_mr`, `ibv_reg_mr_iova` and `ibv_reg_mr_iova2` do.
///
/// # Safety
/// `pd` must be NULL or a live PD of ours.
unsafe fn reg_mr(
    name: &str,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    ptr_call(name, || {
        // SAFETY: by the caller's contract.
        let p = unsafe { pd_obj(pd) }?;
        let access = access_of(access)?;
        let (dev, pd_id, a, len) = (p.dev, p.id(0), addr as u64, length as u64);
        if a.checked_add(len).is_none() || iova.checked_add(len).is_none() {
            return Err(libc::EINVAL);
        }
        // SAFETY: as above.
        let core = unsafe { pd_core(p) }?;
        let stag = if core.lanes() == 1 {
            core.call(move |b| register(b, dev, pd_id, None, a, len, iova, access))??
        } else {
            // The region is on every lane under one STag: a QP of any lane uses it, and
            // when `ibv_dereg_mr` returns no lane places into it.
            let index = core.lane_stags().fresh();
            let ids = p.ids.clone();
            let made = core.call_each(move |b| {
                let pd = ids[b.lane()];
                register(b, dev, pd, Some(index), a, len, iova, access)
            })?;
            let stags = all_or_undo(&core, made, move |b, stag| {
                let _ = deregister(b, dev, stag, a, len);
            })
            .inspect_err(|_| core.lane_stags().release(index))?;
            stags[0]
        };
        log::debug!(
            "{name}: {len} bytes at {a:#x} (tagged offset {iova:#x}), {access:?}: STag {stag:?}"
        );
        p.users.fetch_add(1, Ordering::AcqRel);
        Ok(publish(Mr {
            mr: ibv_mr {
                context: p.pd.context,
                pd,
                addr,
                length,
                handle: stag.0,
                lkey: stag.0,
                rkey: stag.0,
            },
            dev,
            stag,
        }))
    })
}

/// `ibv_reg_mr`: the buffer's address is its tagged offset.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the caller's contract is `reg_mr`'s.
    unsafe {
        reg_mr(
            "ibv_reg_mr",
            pd,
            addr,
            length,
            addr as u64,
            access as c_uint,
        )
    }
}

/// `ibv_reg_mr_iova`: the buffer's first byte has tagged offset `iova`.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the caller's contract is `reg_mr`'s.
    unsafe { reg_mr("ibv_reg_mr_iova", pd, addr, length, iova, access as c_uint) }
}

/// `ibv_reg_mr_iova2` (what the `ibv_reg_mr` macro calls for non-constant access flags).
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: the caller's contract is `reg_mr`'s.
    unsafe { reg_mr("ibv_reg_mr_iova2", pd, addr, length, iova, access) }
}

/// `ibv_dereg_mr`: the STag is invalidated and the pages released.
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    errno_call("ibv_dereg_mr", || {
        // SAFETY: by the caller's contract, a live region of ours.
        let m = unsafe { obj::<ibv_mr, Mr>(mr) }.ok_or(libc::EINVAL)?;
        let (dev, stag, addr, len) = (m.dev, m.stag, m.mr.addr as u64, m.mr.length as u64);
        // SAFETY: a live region's context is a live context of ours.
        let core = Arc::clone(&unsafe { context(m.mr.context) }?.core);
        // Every lane's copy is gone when this returns.
        for r in core.call_each(move |b| deregister(b, dev, stag, addr, len))? {
            r?;
        }
        if core.lanes() > 1 {
            core.lane_stags().release(stag.index());
        }
        // SAFETY: the region's PD is live while the region is.
        if let Ok(p) = unsafe { pd_obj(m.mr.pd) } {
            p.users.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: published by `reg_mr`; the application gives it up here.
        drop(unsafe { reclaim::<ibv_mr, Mr>(mr) });
        Ok(())
    })
}

/// `ibv_rereg_mr`: new translation (address and length), access rights and/or PD for a
/// registered region; the STag's key changes as the verbs require. Returns 0 or an
/// `IBV_REREG_MR_ERR_*` code.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let r = errno_call("ibv_rereg_mr", || {
        // SAFETY: by the caller's contract, a live region of ours; only this call changes it.
        let m = unsafe { mr.cast::<Mr>().as_mut() }.ok_or(libc::EINVAL)?;
        let flags = flags as u32;
        if flags == 0 || flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0 {
            return Err(libc::EINVAL);
        }
        let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            // SAFETY: by the caller's contract.
            unsafe { pd_obj(pd) }?
        } else {
            // SAFETY: the region's PD is live while the region is.
            unsafe { pd_obj(m.mr.pd) }?
        };
        let (old_addr, old_len) = (m.mr.addr as u64, m.mr.length as u64);
        let (new_addr, new_len) = if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
            (addr as u64, length as u64)
        } else {
            (old_addr, old_len)
        };
        if new_addr.checked_add(new_len).is_none() {
            return Err(libc::EINVAL);
        }
        // SAFETY: a live region's context is a live context of ours.
        let core = Arc::clone(&unsafe { context(m.mr.context) }?.core);
        if core.lanes() > 1 {
            // A region on every lane is a Shared MR there (VERBS-00 §7.3.2.4): no lane's
            // copy may change alone.
            return Err(libc::EOPNOTSUPP);
        }
        let (dev, stag) = (m.dev, m.stag);
        let rights = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
            access_of(access as c_uint)?
        } else {
            core.call(move |b| {
                b.rnic(dev)?
                    .query_mr(stag)
                    .map(|a| a.access)
                    .map_err(errno_of)
            })??
        };
        let spec = va_spec(
            new_addr,
            new_len,
            new_addr,
            new_pd.id(0),
            stag.key().wrapping_add(1),
            rights,
        );
        let new_stag = core.call(move |b| {
            let rnic = b.rnic(dev)?;
            let s = back_and_register(rnic, new_addr, new_len, &spec, |r, spec| {
                r.reregister_mr(stag, spec)
            })?;
            rnic.memory_mut().backend_mut().unback(old_addr, old_len);
            Ok::<STag, i32>(s)
        })??;
        m.stag = new_stag;
        m.mr.lkey = new_stag.0;
        m.mr.rkey = new_stag.0;
        m.mr.handle = new_stag.0;
        m.mr.addr = new_addr as usize as *mut c_void;
        m.mr.length = new_len as usize;
        if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            // SAFETY: the region's old PD is live while the region is.
            if let Ok(old) = unsafe { pd_obj(m.mr.pd) } {
                old.users.fetch_sub(1, Ordering::AcqRel);
            }
            new_pd.users.fetch_add(1, Ordering::AcqRel);
            m.mr.pd = pd;
        }
        Ok(())
    });
    if r == 0 {
        0
    } else {
        IBV_REREG_MR_ERR_INPUT as c_int
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_map_and_remote_write_needs_local_write() {
        let a = access_of(
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_RELAXED_ORDERING,
        )
        .unwrap();
        assert!(a.contains(Access::LOCAL_WRITE) && a.contains(Access::REMOTE_READ));
        assert!(!a.contains(Access::REMOTE_WRITE));
        assert_eq!(access_of(IBV_ACCESS_REMOTE_WRITE), Err(libc::EINVAL));
        // rping registers its send buffer with access 0: local read only.
        assert_eq!(access_of(0).unwrap(), Access::LOCAL_READ);
        assert_eq!(OPTIONAL_RANGE, 0x3ff0_0000);
    }
}
