//! Shared fixtures for the verbs tests.
#![allow(dead_code)]

use iwarp::mem::HeapBackend;
use iwarp::verbs::*;

/// Backend size used by every fixture: 64 pages of 4 KiB.
pub const ARENA: usize = 64 * 4096;
/// Page size used by the fixtures.
pub const PAGE: u64 = 4096;

pub struct Fx {
    pub device: RnicDevice,
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
        device,
        rnic,
        ulp,
        pd,
        cq,
        qp,
    }
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
            sgl,
            solicited: false,
            invalidate: None,
        },
    )
}

pub fn recv(wr_id: u64, sgl: Vec<Sge>) -> RecvWr {
    RecvWr { wr_id, sgl }
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
