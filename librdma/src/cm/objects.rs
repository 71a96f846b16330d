//! The connection manager's C objects: event channels and ids, each starting with the
//! librdmacm struct it is, and the per-device context and PD that ids on a device share
//! (`id->verbs` is the same pointer for every id on a device, as applications allocate
//! their PD on it and `rdma_create_qp` requires `pd->context == id->verbs`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use dataplane::rdma::RdmaHandler;
use tcp::ConnId;

use crate::abi::*;
use crate::bridge::cm::CmTable;
use crate::core::Core;
use crate::device::device_objects;
use crate::runtime::runtime;
use crate::shared::cm::{CmChannel, CmIdShared};
use crate::verbs::device::ibv_open_device;
use crate::verbs::memory::ibv_alloc_pd;
use crate::verbs::objects::{context, obj, publish, CObject};

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct EventChannel {
    /// What applications use.
    pub ch: rdma_event_channel,
    /// The events.
    pub shared: Arc<CmChannel>,
    /// Threads blocked in `rdma_get_cm_event` on it: a channel destroyed under them is left
    /// allocated (and they blocked), as with the real library.
    pub waiters: AtomicU32,
}
// SAFETY: repr(C), `rdma_event_channel` first.
unsafe impl CObject<rdma_event_channel> for EventChannel {}

impl EventChannel {
    /// A channel object over a new [`CmChannel`].
    pub fn new() -> Result<EventChannel, i32> {
        let shared = Arc::new(CmChannel::new()?);
        Ok(EventChannel {
            ch: rdma_event_channel { fd: shared.fd.fd() },
            shared,
            waiters: AtomicU32::new(0),
        })
    }
}

/// What the library keeps of an id besides the C struct.
#[derive(Debug, Default)]
pub struct IdState {
    /// Device the id is bound to.
    pub dev: Option<usize>,
    /// Its local address (port 0: none yet).
    pub local: Option<SocketAddr>,
    /// The peer's address.
    pub remote: Option<SocketAddr>,
    /// Listening on these (device, port) pairs.
    pub listening: Vec<(usize, u16)>,
    /// Its connection.
    pub conn: Option<(usize, ConnId)>,
    /// The lane its QP and connection live on (a passive id: the lane its request came in
    /// on; an active one: its QP's).
    pub lane: usize,
    /// The peer's IRD and ORD from its request (a passive id).
    pub peer_ird_ord: Option<(u16, u16)>,
    /// The CQs and channels `rdma_create_qp` made for it.
    pub own_cqs: bool,
    /// The events go to a private channel the library waits on (a NULL channel was given).
    pub sync: bool,
    /// `rdma_create_ep`'s QP attributes for the ids `rdma_get_request` returns (passive).
    pub ep_qp_attr: Option<(usize, ibv_qp_init_attr)>,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct CmId {
    /// What applications use.
    pub id: rdma_cm_id,
    /// Shared with the data plane.
    pub shared: Arc<CmIdShared>,
    /// The library's record.
    pub state: Mutex<IdState>,
    /// The data plane.
    pub core: Arc<Core>,
}
// SAFETY: repr(C), `rdma_cm_id` first.
unsafe impl CObject<rdma_cm_id> for CmId {}

impl CmId {
    /// The library's record of the id.
    pub fn state(&self) -> MutexGuard<'_, IdState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on lane `lane`'s thread with its connection manager and device `dev`'s
    /// handler; its result.
    pub fn with_cm<R: Send + 'static>(
        &self,
        lane: usize,
        dev: usize,
        f: impl FnOnce(&mut CmTable, &mut RdmaHandler) -> Result<R, i32> + Send + 'static,
    ) -> Result<R, i32> {
        self.core.call_on(lane, move |b| {
            let (cm, h) = b.cm_and_handler(dev)?;
            f(cm, h)
        })?
    }
}

/// The id object behind `id`.
///
/// # Safety
/// `id` must be NULL or an id this library returned and the application has not destroyed.
pub unsafe fn id_obj<'a>(id: *mut rdma_cm_id) -> Result<&'a CmId, i32> {
    // SAFETY: by the contract.
    unsafe { obj::<rdma_cm_id, CmId>(id) }.ok_or(libc::EINVAL)
}

/// The id object behind `id`, mutably (the application's struct fields are ours to set
/// while it is inside a librdmacm call on that id).
///
/// # Safety
/// As [`id_obj`], and no other reference to the object may be in use.
pub unsafe fn id_mut<'a>(id: *mut rdma_cm_id) -> Result<&'a mut CmId, i32> {
    // SAFETY: by the contract.
    unsafe { id.cast::<CmId>().as_mut() }.ok_or(libc::EINVAL)
}

/// The channel object behind `ch`.
///
/// # Safety
/// `ch` must be NULL or a channel this library returned (destroyed ones stay allocated
/// while threads wait on them).
pub unsafe fn channel_obj<'a>(ch: *mut rdma_event_channel) -> Result<&'a EventChannel, i32> {
    // SAFETY: by the contract.
    unsafe { obj::<rdma_event_channel, EventChannel>(ch) }.ok_or(libc::EINVAL)
}

/// Creates a channel object for the application (or for a synchronous id).
pub fn new_channel() -> Result<*mut rdma_event_channel, i32> {
    Ok(publish(EventChannel::new()?))
}

/// A device's connection-manager context and default PD.
#[derive(Debug, Clone, Copy)]
pub struct DeviceHandles {
    /// `id->verbs`.
    pub ctx: *mut ibv_context,
    /// `id->pd`.
    pub pd: *mut ibv_pd,
}

// SAFETY: the handles are pointers to objects that live for the rest of the process and are
// used through the thread-safe verbs API only.
unsafe impl Send for DeviceHandles {}

/// The context and default PD of device `dev`, opened on first use.
pub fn device_handles(dev: usize) -> Result<DeviceHandles, i32> {
    static HANDLES: OnceLock<Mutex<Vec<Option<DeviceHandles>>>> = OnceLock::new();
    let rt = runtime()?;
    let list = HANDLES.get_or_init(|| Mutex::new(vec![None; rt.devices.len()]));
    let mut list = list.lock().unwrap_or_else(|p| p.into_inner());
    let slot = list.get_mut(dev).ok_or(libc::ENODEV)?;
    if let Some(h) = slot {
        return Ok(*h);
    }
    let device = device_objects(&rt.devices).get(dev).ok_or(libc::ENODEV)?;
    let dev_ptr = (&device.dev as *const ibv_device).cast_mut();
    // SAFETY: a device pointer of ours.
    let ctx = unsafe { ibv_open_device(dev_ptr) };
    if ctx.is_null() {
        return Err(crate::shared::last_errno());
    }
    // SAFETY: the context just opened.
    let pd = unsafe { ibv_alloc_pd(ctx) };
    if pd.is_null() {
        return Err(crate::shared::last_errno());
    }
    let h = DeviceHandles { ctx, pd };
    *slot = Some(h);
    Ok(h)
}

/// The data plane, started if needed.
pub fn core() -> Result<Arc<Core>, i32> {
    runtime()?.core()
}

/// The data plane of a context of ours.
///
/// # Safety
/// `ctx` must be a live context of ours.
pub unsafe fn core_of_ctx(ctx: *mut ibv_context) -> Result<Arc<Core>, i32> {
    // SAFETY: by the contract.
    Ok(Arc::clone(&unsafe { context(ctx) }?.core))
}

/// Counts an event handed to the application on `id`.
pub fn count_event(id: &CmIdShared) {
    id.unacked.fetch_add(1, Ordering::AcqRel);
}
