//! Protection domains and memory regions. A region is the application's own memory at its
//! own addresses: registering it backs those pages in the RNIC's address space
//! ([`crate::appmem::AppMemory`]) and makes a VA-based STag over them, so the peer names a
//! buffer by its virtual address (`iova`) and DDP places straight into it.

use std::os::raw::{c_int, c_uint, c_void};
use std::sync::Arc;

use iwarp::verbs::{Access, MrSpec, PageList, PdId, STag, TaggedBase, UlpId};

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

/// `ibv_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    ptr_call("ibv_alloc_pd", || {
        // SAFETY: by the caller's contract.
        let c = unsafe { context(ctx) }?;
        let dev = c.dev;
        let id = c
            .core
            .call(move |b| b.rnic(dev)?.alloc_pd(ULP).map_err(errno_of))??;
        Ok(publish(Pd {
            pd: ibv_pd {
                context: ctx,
                handle: id.0,
            },
            dev,
            id,
        }))
    })
}

/// `ibv_dealloc_pd`: EBUSY while QPs, S-RQs or regions use it.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    errno_call("ibv_dealloc_pd", || {
        // SAFETY: by the caller's contract.
        let p = unsafe { pd_obj(pd) }?;
        let (dev, id) = (p.dev, p.id);
        // SAFETY: as above.
        unsafe { pd_core(p) }?.call(move |b| b.rnic(dev)?.dealloc_pd(id).map_err(errno_of))??;
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

/// Backs `[addr, addr + len)` and registers it VA-based at `iova` in `pd`; undone if the
/// registration fails.
fn register(
    b: &mut Bridge,
    dev: usize,
    pd: PdId,
    addr: u64,
    len: u64,
    iova: u64,
    access: Access,
) -> Result<STag, i32> {
    let rnic = b.rnic(dev)?;
    if !rnic.memory_mut().backend_mut().back(addr, len) {
        return Err(libc::EINVAL);
    }
    let spec = MrSpec {
        pbl: PageList::contiguous(addr, len, PAGE),
        base: TaggedBase::Va(iova),
        pd,
        key: 0,
        remote_access: access.any_remote(),
        access,
    };
    rnic.register_mr(&spec).map_err(|e| {
        rnic.memory_mut().backend_mut().unback(addr, len);
        errno_of(e)
    })
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
        let (dev, pd_id, a, len) = (p.dev, p.id, addr as u64, length as u64);
        if a.checked_add(len).is_none() || iova.checked_add(len).is_none() {
            return Err(libc::EINVAL);
        }
        // SAFETY: as above.
        let stag = unsafe { pd_core(p) }?
            .call(move |b| register(b, dev, pd_id, a, len, iova, access))??;
        log::debug!(
            "{name}: {len} bytes at {a:#x} (tagged offset {iova:#x}), {access:?}: STag {stag:?}"
        );
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
        core.call(move |b| {
            let rnic = b.rnic(dev)?;
            rnic.dealloc_stag(stag).map_err(errno_of)?;
            rnic.memory_mut().backend_mut().unback(addr, len);
            Ok::<(), i32>(())
        })??;
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
        let rights = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
            access_of(access as c_uint)?
        } else {
            // SAFETY: a live region's context is a live context of ours.
            let core = Arc::clone(&unsafe { context(m.mr.context) }?.core);
            let (dev, stag) = (m.dev, m.stag);
            core.call(move |b| {
                b.rnic(dev)?
                    .query_mr(stag)
                    .map(|a| a.access)
                    .map_err(errno_of)
            })??
        };
        let (dev, stag, pd_id) = (m.dev, m.stag, new_pd.id);
        // SAFETY: as above.
        let core = Arc::clone(&unsafe { context(m.mr.context) }?.core);
        let new_stag = core.call(move |b| {
            let rnic = b.rnic(dev)?;
            let backend = rnic.memory_mut().backend_mut();
            if !backend.back(new_addr, new_len) {
                return Err(libc::EINVAL);
            }
            let spec = MrSpec {
                pbl: PageList::contiguous(new_addr, new_len, PAGE),
                base: TaggedBase::Va(new_addr),
                pd: pd_id,
                key: stag.key().wrapping_add(1),
                remote_access: rights.any_remote(),
                access: rights,
            };
            match rnic.reregister_mr(stag, &spec) {
                Ok(s) => {
                    rnic.memory_mut().backend_mut().unback(old_addr, old_len);
                    Ok(s)
                }
                Err(e) => {
                    rnic.memory_mut().backend_mut().unback(new_addr, new_len);
                    Err(errno_of(e))
                }
            }
        })??;
        m.stag = new_stag;
        m.mr.lkey = new_stag.0;
        m.mr.rkey = new_stag.0;
        m.mr.handle = new_stag.0;
        m.mr.addr = new_addr as usize as *mut c_void;
        m.mr.length = new_len as usize;
        if flags & IBV_REREG_MR_CHANGE_PD != 0 {
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
