//! The RNIC handle: Open/Query/Close RNIC (VERBS-00 §5.1, §9.2.1), the resource tables
//! every other verb works on, and the event and action queues the poll core drains.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::event::{AsyncEvent, AsyncEventKind};
use super::event_queue::{BoundedQueue, EventQueueStats};
use super::handle::{CompletionHandlerId, CqHandle, QpId, SrqHandle, UlpId};
use super::memory::{MemoryBackend, MemoryModel};
use super::queues::{Cq, LlpStreamHandle, Qp, Srq};
use super::status::VerbError;
use crate::mem::{BufferPool, HasMemoryTable, PdId};
use crate::wire::terminate::TerminateCause;

/// Physical buffer addressing mode chosen at Open RNIC (VERBS-00 §7.6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressingMode {
    /// Page Lists (mandatory).
    Page,
    /// Block Lists (optional, not supported here).
    Block,
}

/// Capabilities reported by Query RNIC (VERBS-00 §9.2.1.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RnicAttributes {
    /// Vendor / implementation name.
    pub vendor: String,
    /// Maximum number of QPs.
    pub max_qps: u32,
    /// Maximum number of WRs per SQ or RQ.
    pub max_wrs_per_wq: u32,
    /// Maximum number of WRs per S-RQ.
    pub max_srq_wrs: u32,
    /// Maximum SGEs per Send or Receive WR.
    pub max_send_recv_sges: u32,
    /// Maximum SGEs per RDMA Write WR.
    pub max_write_sges: u32,
    /// Maximum number of CQs.
    pub max_cqs: u32,
    /// Maximum number of CQEs per CQ.
    pub max_cqes_per_cq: u32,
    /// Maximum number of Completion Event Handlers.
    pub max_cq_handlers: u32,
    /// Maximum number of MR STags.
    pub max_mrs: u32,
    /// Maximum number of PBL entries per MR.
    pub max_pbl_entries: u32,
    /// Maximum number of PDs.
    pub max_pds: u32,
    /// Maximum number of MWs.
    pub max_mws: u32,
    /// Maximum number of S-RQs (0: S-RQ not supported).
    pub max_srqs: u32,
    /// Maximum IRD per QP.
    pub max_ird_per_qp: u32,
    /// Maximum ORD per QP.
    pub max_ord_per_qp: u32,
    /// Total IRD of the RNIC (0: not pooled).
    pub ird_pool: u32,
    /// Total ORD of the RNIC (0: not pooled).
    pub ord_pool: u32,
    /// IRD may be modified after creation.
    pub ird_modifiable: bool,
    /// ORD may be increased after creation.
    pub ord_increasable: bool,
    /// WQ depths may be changed by Modify QP.
    pub wq_resizable: bool,
    /// Supported page sizes (each a power of two).
    pub page_sizes: Vec<u64>,
    /// Maximum MR size in octets.
    pub max_mr_size: u64,
    /// Maximum inline data octets in a Send or Write WR.
    pub max_inline: u32,
    /// CQ overflow is detected and reported.
    pub cq_overflow_detection: bool,
    /// RDMAP extensions (atomics, immediate data, RFC 7306) are supported.
    pub extensions: bool,
    /// Asynchronous events kept until polled; more are lost and counted
    /// ([`Rnic::event_queue_stats`]).
    pub max_async_events: u32,
    /// CQ notifications kept until polled (a CQ waits there once however often it fires);
    /// more are lost and counted.
    pub max_cq_events: u32,
}

impl Default for RnicAttributes {
    fn default() -> Self {
        RnicAttributes {
            vendor: "iwarp-dataplane soft RNIC".into(),
            max_qps: 1024,
            max_wrs_per_wq: 4096,
            max_srq_wrs: 16384,
            max_send_recv_sges: 8,
            max_write_sges: 8,
            max_cqs: 1024,
            max_cqes_per_cq: 65536,
            max_cq_handlers: 64,
            max_mrs: 65536,
            max_pbl_entries: 1 << 20,
            max_pds: 1024,
            max_mws: 65536,
            max_srqs: 256,
            max_ird_per_qp: 64,
            max_ord_per_qp: 64,
            ird_pool: 0,
            ord_pool: 0,
            ird_modifiable: true,
            ord_increasable: true,
            wq_resizable: true,
            page_sizes: vec![4096, 2 << 20, 1 << 30],
            max_mr_size: 1 << 40,
            max_inline: 256,
            cq_overflow_detection: true,
            extensions: true,
            max_async_events: 4096,
            max_cq_events: 4096,
        }
    }
}

/// Per-ULP limits enforced by the privileged resource manager (RFC 5040 §8.1.2 items 2, 5
/// and 6; digest §4 items 14, 17, 18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// QPs the ULP may hold.
    pub max_qps: u32,
    /// CQ entries (summed over its CQs) the ULP may hold.
    pub max_cqes: u64,
    /// MR and MW STags the ULP may hold.
    pub max_stags: u32,
    /// IRD (summed over its QPs) the ULP may hold.
    pub max_ird: u32,
}

impl Quota {
    /// No limit beyond the RNIC's own.
    pub const UNLIMITED: Quota = Quota {
        max_qps: u32::MAX,
        max_cqes: u64::MAX,
        max_stags: u32::MAX,
        max_ird: u32::MAX,
    };
}

/// An RNIC that can be opened once at a time (VERBS-00 §5.1.2: a second Open while open
/// returns "RNIC in use").
#[derive(Debug, Clone)]
pub struct RnicDevice {
    name: String,
    attrs: RnicAttributes,
    in_use: Arc<AtomicBool>,
}

impl RnicDevice {
    /// Describes a device with the given name and capabilities.
    pub fn new(name: impl Into<String>, attrs: RnicAttributes) -> Self {
        RnicDevice {
            name: name.into(),
            attrs,
            in_use: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Open RNIC (VERBS-00 §9.2.1.1). `backend` holds the bytes every registration refers
    /// to; `stag_seed` seeds the sparse STag index allocator (RFC 5040 §8.1.1 item 8).
    pub fn open(
        &self,
        mode: AddressingMode,
        backend: Box<dyn MemoryBackend + Send>,
        stag_seed: u64,
    ) -> Result<Rnic, VerbError> {
        if mode == AddressingMode::Block {
            return Err(VerbError::BlockModeUnsupported);
        }
        if self
            .in_use
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(VerbError::RnicInUse);
        }
        log::debug!("RNIC {} opened", self.name);
        let mut memory = MemoryModel::new(backend, stag_seed);
        memory.page_sizes = self.attrs.page_sizes.clone();
        memory.max_pbl_entries = self.attrs.max_pbl_entries;
        memory.max_mr_size = self.attrs.max_mr_size;
        Ok(Rnic {
            name: self.name.clone(),
            attrs: self.attrs.clone(),
            in_use: self.in_use.clone(),
            next_handle: 1,
            pds: FxHashMap::default(),
            cqs: FxHashMap::default(),
            srqs: FxHashMap::default(),
            qps: FxHashMap::default(),
            memory,
            quotas: FxHashMap::default(),
            handlers: FxHashSet::default(),
            events: BoundedQueue::new(self.attrs.max_async_events as usize),
            cq_events: BoundedQueue::new(self.attrs.max_cq_events as usize),
            event_counts: FxHashMap::default(),
            actions: VecDeque::new(),
            touched: Vec::new(),
            ulp_qps: FxHashMap::default(),
            tx_pool: BufferPool::default(),
            pending_wrs: 0,
        })
    }
}

/// Something the poll core must do on a QP's LLP stream or engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QpAction {
    /// Idle→RTS: reset DDP/RDMAP/MPA state, send `stream_message` in streaming mode (if
    /// any), then run the iWARP engine on `stream` (VERBS-00 §6.2.1.2).
    Attach {
        /// The QP.
        qp: QpId,
        /// The LLP stream.
        stream: LlpStreamHandle,
        /// Last streaming-mode message (active side).
        stream_message: Option<Vec<u8>>,
    },
    /// Send a Terminate with `cause` and no optional fields, then close the LLP gracefully
    /// (VERBS-00 §6.4, Fig. 12).
    SendTerminate {
        /// The QP.
        qp: QpId,
        /// Terminate Control.
        cause: TerminateCause,
    },
    /// Close the LLP stream gracefully (TCP FIN).
    CloseLlp {
        /// The QP.
        qp: QpId,
    },
    /// Reset the LLP stream (TCP RST) and detach it.
    ResetLlp {
        /// The QP.
        qp: QpId,
    },
    /// The QP was destroyed with its stream up: stop the stream without a Terminate, send
    /// what was already built and close the LLP gracefully (a TCP FIN after it), as Linux
    /// does with the socket of a destroyed QP. Completed sends may still be on their way.
    ReleaseLlp {
        /// The QP.
        qp: QpId,
    },
    /// The QP was destroyed: drop its engine.
    Destroyed {
        /// The QP.
        qp: QpId,
    },
}

/// An open RNIC and every resource created on it. It is owned by one thread (the poll core,
/// or an application through [`super::channel`]); closing it (or dropping it) frees
/// everything (VERBS-00 §5.1.4).
pub struct Rnic {
    pub(super) name: String,
    pub(super) attrs: RnicAttributes,
    in_use: Arc<AtomicBool>,
    next_handle: u32,
    // Tables keyed by ids this RNIC hands out: a fast unkeyed hash (no network-chosen keys).
    pub(super) pds: FxHashMap<PdId, UlpId>,
    pub(super) cqs: FxHashMap<CqHandle, Cq>,
    pub(super) srqs: FxHashMap<SrqHandle, Srq>,
    pub(super) qps: FxHashMap<QpId, Qp>,
    pub(super) memory: MemoryModel,
    pub(super) quotas: FxHashMap<UlpId, Quota>,
    pub(super) handlers: FxHashSet<CompletionHandlerId>,
    events: BoundedQueue<AsyncEvent>,
    pub(super) cq_events: BoundedQueue<CqHandle>,
    /// Events raised, per identifier (queued or lost).
    event_counts: FxHashMap<AsyncEventKind, u64>,
    pub(super) actions: VecDeque<QpAction>,
    /// QPs given new work since the last [`Rnic::take_touched_qps`], each once.
    pub(super) touched: Vec<QpId>,
    /// Each ULP's QPs and the sum of their IRDs (its quota's use), kept as QPs come, go
    /// and change IRD, so creating a QP costs the same with 10,000 QPs as with one.
    pub(super) ulp_qps: FxHashMap<UlpId, (u32, u32)>,
    /// Send buffers shared by the RNIC's connections ([`HasMemoryTable::table_and_pool`]).
    tx_pool: BufferPool,
    /// WRs waiting in the QPs' `sq_pending` and `rq_pending`, over all QPs: while none
    /// wait, [`Rnic::has_pending_wrs`] answers without looking the QP up.
    pub(super) pending_wrs: usize,
}

impl std::fmt::Debug for Rnic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rnic")
            .field("name", &self.name)
            .field("pds", &self.pds.len())
            .field("cqs", &self.cqs.len())
            .field("srqs", &self.srqs.len())
            .field("qps", &self.qps.len())
            .finish()
    }
}

impl Rnic {
    /// Query RNIC (VERBS-00 §9.2.1.2).
    pub fn query(&self) -> &RnicAttributes {
        &self.attrs
    }

    /// Whether a QP was touched since the last [`Rnic::take_touched_qps`] (a poll loop's
    /// idle pass asks this first).
    #[inline]
    pub fn has_touched_qps(&self) -> bool {
        !self.touched.is_empty()
    }

    /// Whether QP actions wait for [`Rnic::poll_action`].
    #[inline]
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// Moves the QPs given new work (posted WRs, their own or their S-RQ's, or a Modify
    /// QP) since the last call into `out`, each once: the poll core moves work for those
    /// instead of visiting every QP. Destroyed QPs may be among them.
    pub fn take_touched_qps(&mut self, out: &mut Vec<QpId>) {
        for qp in self.touched.drain(..) {
            if let Some(q) = self.qps.get_mut(&qp) {
                q.touched = false;
            }
            out.push(qp);
        }
    }

    /// Lists `qp` for [`Rnic::take_touched_qps`].
    pub(super) fn touch(&mut self, qp: QpId) {
        if let Some(q) = self.qps.get_mut(&qp) {
            list_touched(&mut self.touched, qp, q);
        }
        self.bound_touched();
    }

    /// Keeps the touched list within twice the QP table: nobody may be taking it, and
    /// destroyed QPs' entries leave it in batches.
    #[inline]
    pub(super) fn bound_touched(&mut self) {
        if self.touched.len() > 2 * self.qps.len() + 64 {
            let qps = &self.qps;
            self.touched.retain(|qp| qps.contains_key(qp));
        }
    }

    /// Close RNIC (VERBS-00 §9.2.1.3): frees every resource; the device may be opened again.
    pub fn close(self) {}

    /// A fresh handle value; handles are never reused, so stale handles are detected.
    pub(super) fn new_handle(&mut self) -> u32 {
        let h = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        h
    }

    /// Sets the resource quota of one ULP (privileged resource manager).
    pub fn set_quota(&mut self, ulp: UlpId, quota: Quota) {
        self.quotas.insert(ulp, quota);
    }

    pub(super) fn quota(&self, ulp: UlpId) -> Quota {
        self.quotas.get(&ulp).copied().unwrap_or(Quota::UNLIMITED)
    }

    /// Set Completion Event Handler, adding one (VERBS-00 §9.4.1): returns a new identifier
    /// to give to Create CQ.
    pub fn add_completion_handler(&mut self) -> Result<CompletionHandlerId, VerbError> {
        if self.handlers.len() >= self.attrs.max_cq_handlers as usize {
            return Err(VerbError::InsufficientResources);
        }
        let id = CompletionHandlerId(self.new_handle());
        self.handlers.insert(id);
        Ok(id)
    }

    /// Set Completion Event Handler, clearing one (VERBS-00 §9.4.1).
    pub fn remove_completion_handler(&mut self, id: CompletionHandlerId) -> Result<(), VerbError> {
        if !self.handlers.remove(&id) {
            return Err(VerbError::InvalidCompletionHandlerId);
        }
        for cq in self.cqs.values_mut() {
            if cq.handler == Some(id) {
                cq.handler = None;
            }
        }
        Ok(())
    }

    /// Whether [`Rnic::poll_async_event`] or [`Rnic::poll_completion_event`] has something
    /// (a poll loop asks this before draining both).
    #[inline]
    pub fn has_queued_events(&self) -> bool {
        !self.events.is_empty() || !self.cq_events.is_empty()
    }

    /// The next asynchronous event, if any (VERBS-00 §8.3.3). At most
    /// [`RnicAttributes::max_async_events`] wait; later ones are lost until the consumer
    /// polls (counted in [`Rnic::event_queue_stats`]).
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop()
    }

    /// The next CQ whose armed completion notification fired (VERBS-00 §8.2.5); the
    /// consumer then polls that CQ; Query CQ tells its handler. A CQ waits here once even
    /// if it fired again in between.
    pub fn poll_completion_event(&mut self) -> Option<CqHandle> {
        self.cq_events.pop()
    }

    /// Depth, capacity, high-water mark and losses of the two event queues.
    pub fn event_queue_stats(&self) -> EventQueueStats {
        EventQueueStats {
            async_events: self.events.stats(),
            cq_events: self.cq_events.stats(),
        }
    }

    /// How many events of each identifier were raised since Open RNIC, whether the
    /// consumer got them or they were lost (in no particular order).
    pub fn async_event_counts(&self) -> impl Iterator<Item = (AsyncEventKind, u64)> + '_ {
        self.event_counts.iter().map(|(k, n)| (*k, *n))
    }

    /// The next action the poll core must carry out on an LLP stream or engine.
    pub fn poll_action(&mut self) -> Option<QpAction> {
        self.actions.pop_front()
    }

    /// The memory model (STag table and backend) the protocol engines place data through.
    pub fn memory(&self) -> &MemoryModel {
        &self.memory
    }

    /// The send buffers the RNIC's connections share.
    pub fn tx_pool(&self) -> &BufferPool {
        &self.tx_pool
    }

    /// The send buffers the RNIC's connections share, e.g. for a closed connection's.
    pub fn tx_pool_mut(&mut self) -> &mut BufferPool {
        &mut self.tx_pool
    }

    /// Mutable access to the memory model, for the protocol engines.
    pub fn memory_mut(&mut self) -> &mut MemoryModel {
        &mut self.memory
    }

    pub(super) fn raise(&mut self, event: AsyncEvent) {
        log::debug!("async event {event:?}");
        *self.event_counts.entry(event.kind).or_default() += 1;
        if !self.events.push(event) && self.events.stats().overflows == 1 {
            log::warn!(
                "RNIC {}: asynchronous event queue full ({} events): events are lost until \
                 the consumer polls them (later losses are counted only)",
                self.name,
                self.attrs.max_async_events
            );
        }
    }
}

/// The connections of an RNIC place into its memory model.
impl HasMemoryTable for Rnic {
    type Table = MemoryModel;
    fn table(&self) -> &MemoryModel {
        &self.memory
    }
    fn table_mut(&mut self) -> &mut MemoryModel {
        &mut self.memory
    }
    fn table_and_pool(&mut self) -> (&MemoryModel, Option<&mut BufferPool>) {
        (&self.memory, Some(&mut self.tx_pool))
    }
}

impl Drop for Rnic {
    fn drop(&mut self) {
        self.in_use.store(false, Ordering::Release);
        log::debug!("RNIC {} closed", self.name);
    }
}

/// Lists `qp` (its entry `q`) in `touched` for [`Rnic::take_touched_qps`], once (callers
/// holding the QP's entry list it through that entry; [`Rnic::bound_touched`] follows).
#[inline]
pub(super) fn list_touched(touched: &mut Vec<QpId>, qp: QpId, q: &mut Qp) {
    if !q.touched {
        q.touched = true;
        touched.push(qp);
    }
}
