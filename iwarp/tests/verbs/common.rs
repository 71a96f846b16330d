//! Shared fixtures for the verbs tests.

use iwarp::mem::HeapBackend;
use iwarp::verbs::*;

/// Backend size used by every fixture: 64 pages of 4 KiB.
pub const ARENA: usize = 64 * 4096;
/// Page size used by the fixtures.
pub const PAGE: u64 = 4096;

pub struct Fx {
    pub rnic: Rnic,
    pub ulp: UlpId,
    pub pd: PdId,
    pub cq: CqHandle,
    pub qp: QpId,
}

pub fn device() -> RnicDevice {
    RnicDevice::new("rnic0", RnicAttributes::default())
}

pub fn open(device: &RnicDevice) -> Rnic {
    device
        .open(
            AddressingMode::Page,
            Box::new(HeapBackend::new(ARENA)),
            0x1234_5678_9abc_def1,
        )
        .expect("open RNIC")
}

/// RNIC, PD, one 64-entry CQ and one Idle QP using it for both queues.
pub fn fixture() -> Fx {
    fixture_with(|_| {})
}

pub fn fixture_with(f: impl FnOnce(&mut QpInit)) -> Fx {
    let device = device();
    let mut rnic = open(&device);
    let ulp = UlpId(1);
    let pd = rnic.alloc_pd(ulp).unwrap();
    let (cq, _) = rnic.create_cq(ulp, 64).unwrap();
    let mut init = QpInit::new(pd, cq, cq);
    f(&mut init);
    let (qp, _) = rnic.create_qp(init).unwrap();
    Fx {
        rnic,
        ulp,
        pd,
        cq,
        qp,
    }
}

/// `fixture_with` a privileged QP (Fast-Register and STag 0 allowed), moved to RTS.
pub fn privileged_rts() -> Fx {
    let mut fx = fixture_with(|i| i.privileged = true);
    to_rts(&mut fx.rnic, fx.qp);
    fx
}

pub fn llp(id: u64) -> LlpAttach {
    LlpAttach {
        stream: LlpStreamHandle(id),
        established: true,
        stream_message: None,
    }
}

pub fn to_rts(rnic: &mut Rnic, qp: QpId) {
    rnic.modify_qp(qp, ModifyQp::to_rts(llp(u64::from(qp.0))))
        .expect("Idle -> RTS");
}

/// A VA-based MR over backend pages `[offset, offset + len)` with base TO `va`
/// (`va % PAGE == offset % PAGE`).
pub fn mr_spec(pd: PdId, offset: u64, len: u64, va: u64, access: Access) -> MrSpec {
    MrSpec {
        pbl: PageList::contiguous(offset, len, PAGE),
        base: TaggedBase::Va(va),
        pd,
        key: 0x5A,
        remote_access: access.any_remote(),
        access,
    }
}

pub fn all_rights() -> Access {
    Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE
}

pub fn drain(rnic: &mut Rnic, cq: CqHandle) -> Vec<WorkCompletion> {
    let mut v = Vec::new();
    while let Ok(wc) = rnic.poll_cq(cq) {
        v.push(wc);
    }
    v
}

pub fn events(rnic: &mut Rnic) -> Vec<AsyncEvent> {
    let mut v = Vec::new();
    while let Some(e) = rnic.poll_async_event() {
        v.push(e);
    }
    v
}

pub fn actions(rnic: &mut Rnic) -> Vec<QpAction> {
    let mut v = Vec::new();
    while let Some(a) = rnic.poll_action() {
        v.push(a);
    }
    v
}

pub fn send(wr_id: u64, sgl: Vec<Sge>) -> SendWr {
    SendWr::message(
        wr_id,
        SendOp::Send {
            sgl: sgl.into(),
            solicited: false,
            invalidate: None,
        },
    )
}

pub fn recv(wr_id: u64, sgl: Vec<Sge>) -> RecvWr {
    RecvWr { wr_id, sgl }
}

impl Fx {
    /// Registers `mr_spec(self.pd, offset, len, va, access)`.
    pub fn reg_mr(&mut self, offset: u64, len: u64, va: u64, access: Access) -> STag {
        self.rnic
            .register_mr(&mr_spec(self.pd, offset, len, va, access))
            .unwrap()
    }

    /// Registers backend page 0 as a VA-based MR at `va` with every right.
    pub fn page_mr(&mut self, va: u64) -> STag {
        self.reg_mr(0, PAGE, va, all_rights())
    }

    /// A QP on the fixture's PD and CQ that takes its receives from `srq`.
    pub fn srq_qp_init(&self, srq: SrqHandle) -> QpInit {
        let mut init = QpInit::new(self.pd, self.cq, self.cq);
        init.srq = Some(srq);
        init
    }

    /// Posts `wrs` to the fixture's SQ; all must be accepted.
    pub fn post_sq(&mut self, wrs: Vec<SendWr>) {
        self.rnic.post_sq(self.qp, wrs).unwrap();
    }

    /// Posts `wrs` to the fixture's RQ; all must be accepted.
    pub fn post_rq(&mut self, wrs: Vec<RecvWr>) {
        self.rnic.post_rq(self.qp, wrs).unwrap();
    }

    /// The RDMAP engine reports work `work` of `queue` on the fixture's QP as done.
    pub fn complete(
        &mut self,
        work: u64,
        queue: iwarp::rdmap::WorkQueue,
        status: iwarp::rdmap::CompletionStatus,
        byte_len: u32,
    ) {
        self.rnic
            .handle_completion(self.qp, engine_done(work, queue, status, byte_len))
            .unwrap();
    }
}

/// A completion the RDMAP engine reports for the work number `work`.
pub fn engine_done(
    work: u64,
    queue: iwarp::rdmap::WorkQueue,
    status: iwarp::rdmap::CompletionStatus,
    byte_len: u32,
) -> iwarp::rdmap::Completion {
    iwarp::rdmap::Completion {
        wr_id: work,
        queue,
        opcode: match queue {
            iwarp::rdmap::WorkQueue::Send => iwarp::rdmap::CompletionOpcode::Send,
            iwarp::rdmap::WorkQueue::Recv => iwarp::rdmap::CompletionOpcode::Recv,
        },
        status,
        byte_len,
        immediate: None,
        invalidated: None,
        solicited: false,
        atomic_original: None,
    }
}

use iwarp::mem::MemoryTable;
use iwarp::wire::terminate::TerminateCause;

/// A peer's RDMA Write (or Read Response) arriving on `qp`, placed by DDP tagged placement
/// through the verbs memory model (RFC 5041 §7.1, §8.1).
pub fn peer_write(
    rnic: &mut Rnic,
    pd: PdId,
    qp: QpId,
    stag: STag,
    to: u64,
    data: &[u8],
) -> Result<(), TerminateCause> {
    let hdr = iwarp::wire::ddp::TaggedRepr {
        last: true,
        rsvd_ulp: 0x40,
        stag: stag.0,
        to,
    };
    iwarp::ddp::tagged::place(
        rnic.memory_mut(),
        pd,
        qp.stream(),
        &hdr,
        data,
        Access::REMOTE_WRITE,
    )
    .map_err(|e| e.cause())
}

/// A peer's RDMA Read Request on `qp` served from `stag` (RFC 5040 §7.2 item 4).
pub fn peer_read(
    rnic: &Rnic,
    pd: PdId,
    qp: QpId,
    stag: STag,
    to: u64,
    len: usize,
) -> Result<Vec<u8>, TerminateCause> {
    let mem = rnic.memory();
    let r = mem
        .resolve(stag, pd, qp.stream(), to, len as u64, Access::REMOTE_READ)
        .map_err(|e| e.rdmap_cause())?;
    let mut out = vec![0; len];
    mem.read(&r, 0, &mut out).map_err(|e| e.rdmap_cause())?;
    Ok(out)
}

/// A peer's Send with Invalidate naming `stag`, arriving on `qp` (RFC 5040 §5.3).
pub fn peer_send_inv(
    rnic: &mut Rnic,
    pd: PdId,
    qp: QpId,
    stag: STag,
) -> Result<(), TerminateCause> {
    rnic.memory_mut()
        .invalidate(stag, pd, qp.stream())
        .map_err(|e| e.invalidate_cause())
}

/// Fills the whole backend with `b`.
pub fn fill(rnic: &mut Rnic, b: u8) {
    rnic.memory_mut().bytes_mut().fill(b);
}

/// Number of octets of the backend that differ from `b`.
pub fn touched(rnic: &Rnic, b: u8) -> usize {
    rnic.memory().bytes().iter().filter(|&&x| x != b).count()
}

/// Posts one SQ WR and runs the SQ (memory operations execute, message WRs are returned).
pub fn run_sq(rnic: &mut Rnic, qp: QpId, wr: SendWr) -> Vec<iwarp::rdmap::SendWr> {
    rnic.post_sq(qp, vec![wr]).unwrap();
    let mut out = Vec::new();
    while let Some(w) = rnic.next_send_wr(qp) {
        out.push(w);
    }
    out
}
