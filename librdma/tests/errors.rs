//! The libraries' error paths, end to end in one process over the in-process software link
//! between two devices (`a` and `b`, no DPDK), as `tests/loopback.rs` runs the good paths:
//! bad arguments get the error the real libibverbs and librdmacm give (the rdma-core 44 man
//! pages and Linux's iWARP connection manager are the reference), no call panics or hangs,
//! and what a call accepted before it failed is kept.
//!
//! The test calls the exported C functions as an application would, so it is unsafe code.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

mod common;

use common::*;
use rdma_dataplane::abi::*;
use rdma_dataplane::cm::connect::*;
use rdma_dataplane::cm::endpoint::*;
use rdma_dataplane::cm::events::*;
use rdma_dataplane::cm::id::*;
use rdma_dataplane::cm::qp::*;
use rdma_dataplane::device::{device_attributes, MAX_INLINE, MAX_RD_ATOM};
use rdma_dataplane::verbs::cq::*;
use rdma_dataplane::verbs::device::*;
use rdma_dataplane::verbs::events::*;
use rdma_dataplane::verbs::memory::*;
use rdma_dataplane::verbs::qp::*;
use rdma_dataplane::verbs::srq::*;

const A: [u8; 4] = [10, 78, 0, 1];
const B: [u8; 4] = [10, 78, 0, 2];
const LEN: usize = 4096;
const ACCESS: c_int =
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE) as c_int;

/// Points the libraries at the two-port configuration (once per process: every test of
/// this file shares the data plane; each listens on ports of its own).
fn setup() {
    use_config(
        "librdma-errors",
        &two_soft_ports("librdma-errors", 0x0b, [10, 78, 0]),
    );
}

/// An opened context of device `index` (0: a, 1: b).
fn open(index: usize) -> *mut ibv_context {
    setup();
    let mut n = 0;
    let list = unsafe { ibv_get_device_list(&mut n) };
    assert_eq!(n, 2);
    let ctx = unsafe { ibv_open_device(*list.add(index)) };
    unsafe { ibv_free_device_list(list) };
    assert!(!ctx.is_null(), "ibv_open_device");
    ctx
}

/// A region over `buf` (LEN bytes) in `pd`, with local write and remote read and write.
fn reg(pd: *mut ibv_pd, buf: &mut [u8]) -> *mut ibv_mr {
    let mr = unsafe { ibv_reg_mr(pd, buf.as_mut_ptr().cast(), LEN, ACCESS) };
    assert!(!mr.is_null(), "ibv_reg_mr");
    mr
}

/// Destroys `qp`, `mr`, `cq` and `pd` and closes `ctx`; each call succeeds.
fn destroy_all(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    mr: *mut ibv_mr,
) {
    assert_eq!(unsafe { ibv_destroy_qp(qp) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(mr) }, 0);
    assert_eq!(unsafe { ibv_destroy_cq(cq) }, 0);
    assert_eq!(unsafe { ibv_dealloc_pd(pd) }, 0);
    assert_eq!(unsafe { ibv_close_device(ctx) }, 0);
}

/// One end of a connection: its id, PD (the id's device's), CQ (send and receive), QP and
/// a registered buffer.
struct End {
    id: *mut rdma_cm_id,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    buf: Vec<u8>,
    mr: *mut ibv_mr,
}

impl End {
    fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }

    fn sge(&self, off: usize, len: u32) -> ibv_sge {
        ibv_sge {
            addr: self.addr(off),
            length: len,
            lkey: unsafe { (*self.mr).lkey },
        }
    }

    fn rkey(&self) -> u32 {
        unsafe { (*self.mr).rkey }
    }

    /// A CQ and a registered buffer on the id's device and PD, and (with `cap`) the id's QP.
    fn new(id: *mut rdma_cm_id) -> End {
        let (ctx, pd) = unsafe { ((*id).verbs, (*id).pd) };
        assert!(!ctx.is_null() && !pd.is_null(), "the id is on a device");
        let cq = unsafe { ibv_create_cq(ctx, 64, null_mut(), null_mut(), 0) };
        assert!(!cq.is_null());
        let mut buf = vec![0u8; LEN];
        let mr = reg(pd, &mut buf);
        End {
            id,
            cq,
            qp: null_mut(),
            buf,
            mr,
        }
    }

    fn create_qp(&mut self, cap: ibv_qp_cap) {
        let mut attr = rc_attr(self.cq, cap);
        assert_eq!(unsafe { rdma_create_qp(self.id, null_mut(), &mut attr) }, 0);
        self.qp = unsafe { (*self.id).qp };
    }

    /// Destroys the id and its resources.
    fn destroy(self) {
        if !self.qp.is_null() {
            unsafe { rdma_destroy_qp(self.id) };
        }
        assert_eq!(unsafe { ibv_dereg_mr(self.mr) }, 0);
        assert_eq!(unsafe { ibv_destroy_cq(self.cq) }, 0);
        assert_eq!(unsafe { rdma_destroy_id(self.id) }, 0);
    }
}

/// A listener on `a:port` and a client on `b` with its address and route resolved, all on
/// one non-blocking channel.
struct Setup {
    ch: *mut rdma_event_channel,
    listen: *mut rdma_cm_id,
    client: End,
}

impl Setup {
    fn new(port: u16) -> Setup {
        setup();
        let ch = channel();
        let listen = create_id(ch);
        let mut local = sockaddr(A, port);
        assert_eq!(unsafe { rdma_bind_addr(listen, sa(&mut local)) }, 0);
        assert_eq!(unsafe { rdma_listen(listen, 4) }, 0);
        let id = resolved(ch, A, port);
        let mut client = End::new(id);
        client.create_qp(qp_caps(8, 8));
        Setup { ch, listen, client }
    }

    /// Sends the MPA Request (IRD/ORD as the device's maximum).
    fn connect(&self, pdata: &[u8]) {
        let mut param = rdma_conn_param {
            private_data: pdata.as_ptr().cast(),
            private_data_len: pdata.len() as u8,
            responder_resources: 0xff,
            initiator_depth: 0xff,
            ..Default::default()
        };
        assert_eq!(unsafe { rdma_connect(self.client.id, &mut param) }, 0);
    }

    /// Takes the request on `a` (its id, with resources of its own) and accepts it; both
    /// ends see ESTABLISHED.
    fn accept(&self) -> End {
        let ev = expect_event(self.ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
        let child = unsafe { (*ev).id };
        unsafe { rdma_ack_cm_event(ev) };
        let mut server = End::new(child);
        server.create_qp(qp_caps(8, 8));
        assert_eq!(unsafe { rdma_accept(child, null_mut()) }, 0);
        let mut ids = Vec::new();
        for _ in 0..2 {
            let ev = expect_event(self.ch, RDMA_CM_EVENT_ESTABLISHED, 0);
            ids.push(unsafe { (*ev).id });
            unsafe { rdma_ack_cm_event(ev) };
        }
        ids.sort();
        let mut want = vec![child, self.client.id];
        want.sort();
        assert_eq!(ids, want, "ESTABLISHED on both ids");
        server
    }

    fn destroy(self) {
        self.client.destroy();
        assert_eq!(unsafe { rdma_destroy_id(self.listen) }, 0);
        unsafe { rdma_destroy_event_channel(self.ch) };
    }
}

/// A new id on `ch` with its address (to `ip:port`) and route resolved.
fn resolved(ch: *mut rdma_event_channel, ip: [u8; 4], port: u16) -> *mut rdma_cm_id {
    let id = create_id(ch);
    let mut dst = sockaddr(ip, port);
    assert_eq!(
        unsafe { rdma_resolve_addr(id, null_mut(), sa(&mut dst), 2000) },
        0
    );
    unsafe { rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0)) };
    assert_eq!(unsafe { rdma_resolve_route(id, 2000) }, 0);
    unsafe { rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0)) };
    id
}

/// Device, port and GID queries (ibv_query_port(3), ibv_query_gid(3),
/// ibv_query_gid_ex(3)): a device has port 1 only and GID 0 only.
#[test]
fn queries_of_what_does_not_exist_fail_as_rdma_core_says() {
    let ctx = open(0);
    let mut pattr = ibv_port_attr::default();
    // "returns 0 on success, or the value of errno on failure".
    assert_eq!(unsafe { ibv_query_port(ctx, 0, &mut pattr) }, libc::EINVAL);
    assert_eq!(unsafe { ibv_query_port(ctx, 2, &mut pattr) }, libc::EINVAL);
    assert_eq!(unsafe { ibv_query_port(ctx, 1, null_mut()) }, libc::EINVAL);
    assert_eq!(unsafe { ibv_query_port(ctx, 1, &mut pattr) }, 0);
    assert_eq!(pattr.state, IBV_PORT_ACTIVE);
    // "returns 0 on success, and -1 on error".
    let mut gid = ibv_gid::default();
    assert_eq!(unsafe { ibv_query_gid(ctx, 1, 1, &mut gid) }, -1);
    assert_eq!(unsafe { ibv_query_gid(ctx, 2, 0, &mut gid) }, -1);
    assert_eq!(unsafe { ibv_query_gid(ctx, 1, 0, &mut gid) }, 0);
    let mut pkey = 0u16;
    assert_eq!(unsafe { ibv_query_pkey(ctx, 1, 1, &mut pkey) }, -1);
    // ibv_query_gid_ex(3): "ENODATA: gid_index is within the GID table size of port
    // port_num but there is no data in this index"; an errno value, not -1.
    let mut entry = ibv_gid_entry::default();
    let size = std::mem::size_of::<ibv_gid_entry>();
    assert_eq!(
        unsafe { _ibv_query_gid_ex(ctx, 1, 1, &mut entry, 0, size) },
        libc::ENODATA
    );
    assert_eq!(
        unsafe { _ibv_query_gid_ex(ctx, 2, 0, &mut entry, 0, size) },
        libc::EINVAL
    );
    assert_eq!(
        unsafe { _ibv_query_gid_ex(ctx, 1, 0, &mut entry, 0, size) },
        0
    );
    assert_eq!((entry.gid_index, entry.port_num), (0, 1));
    assert_eq!(unsafe { ibv_query_device(ctx, null_mut()) }, libc::EINVAL);
    // NULL objects are refused with EINVAL (the real library would crash on them).
    assert_eq!(
        unsafe { ibv_query_port(null_mut(), 1, &mut pattr) },
        libc::EINVAL
    );
    null_with(libc::EINVAL, || unsafe { ibv_alloc_pd(null_mut()) });
    assert_eq!(unsafe { ibv_close_device(ctx) }, 0);
}

/// Creating PDs' regions, CQs and QPs with arguments the device cannot honour:
/// ibv_reg_mr(3) ("If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
/// IBV_ACCESS_LOCAL_WRITE must be set too"), ibv_create_cq(3) (1..=max_cqe entries),
/// ibv_create_qp(3) (RC only on iWARP, as siw refuses other types with EOPNOTSUPP; the
/// capabilities within the device's). Each failure returns NULL with errno set, and
/// leaves the objects the call was given usable.
#[test]
fn creating_objects_the_device_cannot_honour_fails_with_errno() {
    let ctx = open(0);
    let pd = unsafe { ibv_alloc_pd(ctx) };
    assert!(!pd.is_null());
    let mut buf = vec![0u8; LEN];
    let remote_write = IBV_ACCESS_REMOTE_WRITE as c_int;
    let remote_atomic = IBV_ACCESS_REMOTE_ATOMIC as c_int;
    for access in [remote_write, remote_atomic, remote_write | remote_atomic] {
        clear_errno();
        let mr = unsafe { ibv_reg_mr(pd, buf.as_mut_ptr().cast(), LEN, access) };
        assert!(mr.is_null(), "access {access:#x} without local write");
        assert_eq!(errno(), libc::EINVAL);
    }
    null_with(libc::EINVAL, || unsafe {
        ibv_reg_mr(null_mut(), buf.as_mut_ptr().cast(), LEN, ACCESS)
    });

    let max_cqe = device_attributes().max_cqes_per_cq as c_int;
    for cqe in [0, -1, max_cqe + 1] {
        clear_errno();
        let cq = unsafe { ibv_create_cq(ctx, cqe, null_mut(), null_mut(), 0) };
        assert!(cq.is_null(), "cqe {cqe}");
        assert_eq!(errno(), libc::EINVAL, "cqe {cqe}");
    }
    null_with(libc::EINVAL, || unsafe {
        ibv_create_cq(null_mut(), 4, null_mut(), null_mut(), 0)
    });
    let cq = unsafe { ibv_create_cq(ctx, max_cqe, null_mut(), null_mut(), 0) };
    assert!(!cq.is_null(), "max_cqe entries is allowed");
    assert_eq!(unsafe { (*cq).cqe }, max_cqe);

    let good = rc_attr(cq, qp_caps(4, 4));
    let a = device_attributes();
    let bad: Vec<(&str, ibv_qp_init_attr, i32)> = vec![
        (
            "UD",
            ibv_qp_init_attr {
                qp_type: IBV_QPT_UD,
                ..good
            },
            libc::EOPNOTSUPP,
        ),
        (
            "UC",
            ibv_qp_init_attr {
                qp_type: IBV_QPT_UC,
                ..good
            },
            libc::EOPNOTSUPP,
        ),
        (
            "send SGEs",
            ibv_qp_init_attr {
                cap: ibv_qp_cap {
                    max_send_sge: a.max_send_recv_sges + 1,
                    ..good.cap
                },
                ..good
            },
            libc::EINVAL,
        ),
        (
            "receive SGEs",
            ibv_qp_init_attr {
                cap: ibv_qp_cap {
                    max_recv_sge: a.max_send_recv_sges + 1,
                    ..good.cap
                },
                ..good
            },
            libc::EINVAL,
        ),
        (
            "inline data",
            ibv_qp_init_attr {
                cap: ibv_qp_cap {
                    max_inline_data: rdma_dataplane::device::MAX_INLINE + 1,
                    ..good.cap
                },
                ..good
            },
            libc::EINVAL,
        ),
        (
            "send WRs",
            ibv_qp_init_attr {
                cap: ibv_qp_cap {
                    max_send_wr: a.max_wrs_per_wq + 1,
                    ..good.cap
                },
                ..good
            },
            libc::EINVAL,
        ),
        (
            "no send CQ",
            ibv_qp_init_attr {
                send_cq: null_mut(),
                ..good
            },
            libc::EINVAL,
        ),
        (
            "no receive CQ",
            ibv_qp_init_attr {
                recv_cq: null_mut(),
                ..good
            },
            libc::EINVAL,
        ),
    ];
    for (what, mut attr, want) in bad {
        clear_errno();
        let qp = unsafe { ibv_create_qp(pd, &mut attr) };
        assert!(qp.is_null(), "{what}");
        assert_eq!(errno(), want, "{what}");
    }
    let mut attr = good;
    null_with(libc::EINVAL, || unsafe {
        ibv_create_qp(null_mut(), &mut attr)
    });
    null_with(libc::EINVAL, || unsafe { ibv_create_qp(pd, null_mut()) });

    // The PD and CQ the failed calls were given still work.
    let qp = unsafe { ibv_create_qp(pd, &mut attr) };
    assert!(!qp.is_null());
    assert_eq!(attr.cap.max_send_wr, 4);
    let mr = reg(pd, &mut buf);
    destroy_all(ctx, pd, cq, qp, mr);
}

/// Destroying what another object still uses is refused with EBUSY and changes nothing:
/// ibv_destroy_cq(3) ("fails if any queue pair is still associated with this CQ"),
/// ibv_dealloc_pd(3) ("may fail if any other resource is still associated with the PD"),
/// ibv_destroy_comp_channel(3) (libibverbs refuses a channel with CQs: EBUSY).
#[test]
fn destroying_what_is_in_use_is_busy() {
    let ctx = open(1);
    let pd = unsafe { ibv_alloc_pd(ctx) };
    let ch = unsafe { ibv_create_comp_channel(ctx) };
    assert!(!pd.is_null() && !ch.is_null());
    let cq = unsafe { ibv_create_cq(ctx, 8, 5 as *mut c_void, ch, 0) };
    assert!(!cq.is_null());
    let mut attr = rc_attr(cq, qp_caps(4, 4));
    let qp = unsafe { ibv_create_qp(pd, &mut attr) };
    assert!(!qp.is_null());
    let mut buf = vec![0u8; LEN];
    let mr = reg(pd, &mut buf);

    assert_eq!(unsafe { ibv_destroy_cq(cq) }, libc::EBUSY);
    assert_eq!(unsafe { ibv_destroy_comp_channel(ch) }, libc::EBUSY);
    assert_eq!(unsafe { ibv_dealloc_pd(pd) }, libc::EBUSY);

    // Still all there: a receive flushed by ERR completes on the CQ, whose armed
    // notification reaches the channel.
    assert_eq!(modify_state(qp, IBV_QPS_INIT), 0);
    let mut sge = ibv_sge {
        addr: buf.as_ptr() as u64,
        length: 64,
        lkey: unsafe { (*mr).lkey },
    };
    let mut rwr = recv_wr(77, &mut sge);
    let mut bad = null_mut();
    assert_eq!(post_recv_list(qp, &mut rwr, &mut bad), 0);
    let ops = unsafe { &(*ctx).ops };
    assert_eq!(unsafe { ops.req_notify_cq.unwrap()(cq, 0) }, 0);
    assert_eq!(modify_state(qp, IBV_QPS_ERR), 0);
    let wc = poll_n(cq, 1)[0];
    assert_eq!((wc.wr_id, wc.status), (77, IBV_WC_WR_FLUSH_ERR));
    let (mut ecq, mut ectx) = (null_mut(), null_mut());
    assert_eq!(unsafe { ibv_get_cq_event(ch, &mut ecq, &mut ectx) }, 0);
    assert_eq!((ecq, ectx), (cq, 5 as *mut c_void));
    unsafe { ibv_ack_cq_events(cq, 1) };

    // In the right order everything goes.
    assert_eq!(unsafe { ibv_destroy_qp(qp) }, 0);
    assert_eq!(
        unsafe { ibv_dealloc_pd(pd) },
        libc::EBUSY,
        "the region remains"
    );
    assert_eq!(unsafe { ibv_dereg_mr(mr) }, 0);
    assert_eq!(unsafe { ibv_dealloc_pd(pd) }, 0);
    assert_eq!(unsafe { ibv_destroy_comp_channel(ch) }, libc::EBUSY);
    assert_eq!(unsafe { ibv_destroy_cq(cq) }, 0);
    assert_eq!(unsafe { ibv_destroy_comp_channel(ch) }, 0);
    assert_eq!(unsafe { ibv_close_device(ctx) }, 0);
}

/// Posting errors (ibv_post_send(3): "returns 0 on success, or the value of errno on
/// failure", and the first WR that failed through `bad_wr`): a QP in RESET takes no WR; a
/// full send queue refuses the WR past its depth with ENOMEM, and the WRs accepted before
/// it stay queued (flushed, every one, when the QP goes to ERR: VERBS-00 §6.2.4).
#[test]
fn posting_to_reset_or_past_the_queue_depth_fails_at_that_wr() {
    let ctx = open(0);
    let pd = unsafe { ibv_alloc_pd(ctx) };
    let cq = unsafe { ibv_create_cq(ctx, 32, null_mut(), null_mut(), 0) };
    assert!(!pd.is_null() && !cq.is_null());
    const DEPTH: u32 = 4;
    let mut attr = rc_attr(cq, qp_caps(DEPTH, DEPTH));
    let qp = unsafe { ibv_create_qp(pd, &mut attr) };
    assert!(!qp.is_null());
    let mut buf = vec![0u8; LEN];
    let mr = reg(pd, &mut buf);
    let mut sge = ibv_sge {
        addr: buf.as_ptr() as u64,
        length: 8,
        lkey: unsafe { (*mr).lkey },
    };

    // RESET: EINVAL, and bad_wr is the first WR of the list.
    assert_eq!(qp_state(qp), IBV_QPS_RESET);
    let mut second = write_wr(2, &mut sge, 0x1000, 1, 0);
    let mut first = write_wr(1, &mut sge, 0x1000, 1, 0);
    first.next = &mut second;
    let mut bad = null_mut();
    assert_eq!(post_send_list(qp, &mut first, &mut bad), libc::EINVAL);
    assert_eq!(bad, &mut first as *mut ibv_send_wr);
    let mut rwr = recv_wr(9, &mut sge);
    let mut rbad = null_mut();
    assert_eq!(post_recv_list(qp, &mut rwr, &mut rbad), libc::EINVAL);
    assert_eq!(rbad, &mut rwr as *mut ibv_recv_wr);

    // With no connection, RTS is the library's record and nothing on the QP runs, so
    // nothing completes: DEPTH + 1 unsignaled WRs, and the last is refused with ENOMEM.
    assert_eq!(modify_state(qp, IBV_QPS_RTS), 0);
    let mut wrs: Vec<ibv_send_wr> = (0..=DEPTH)
        .map(|i| write_wr(100 + u64::from(i), &mut sge, 0x1000, 1, 0))
        .collect();
    for i in 0..DEPTH as usize {
        let next: *mut ibv_send_wr = &mut wrs[i + 1];
        wrs[i].next = next;
    }
    let mut bad = null_mut();
    assert_eq!(post_send_list(qp, &mut wrs[0], &mut bad), libc::ENOMEM);
    assert_eq!(bad, &mut wrs[DEPTH as usize] as *mut ibv_send_wr);
    // The receive queue's window likewise.
    let mut rwrs: Vec<ibv_recv_wr> = (0..=DEPTH)
        .map(|i| recv_wr(200 + u64::from(i), &mut sge))
        .collect();
    for i in 0..DEPTH as usize {
        let next: *mut ibv_recv_wr = &mut rwrs[i + 1];
        rwrs[i].next = next;
    }
    let mut rbad = null_mut();
    assert_eq!(post_recv_list(qp, &mut rwrs[0], &mut rbad), libc::ENOMEM);
    assert_eq!(rbad, &mut rwrs[DEPTH as usize] as *mut ibv_recv_wr);

    // ERR flushes what was accepted, every WR (an unsignaled one too), in order.
    assert_eq!(modify_state(qp, IBV_QPS_ERR), 0);
    let mut wcs = poll_n(cq, 2 * DEPTH as usize);
    assert!(
        poll(cq, 1, Duration::from_millis(50)).is_empty(),
        "the refused WRs left no completion"
    );
    assert!(wcs.iter().all(|w| w.status == IBV_WC_WR_FLUSH_ERR));
    wcs.sort_by_key(|w| w.wr_id);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [100, 101, 102, 103, 200, 201, 202, 203]);

    destroy_all(ctx, pd, cq, qp, mr);
}

/// Inline data up to the device's limit on a QP that asked for none (`max_inline_data` 0,
/// as librdmacm's `rdma_xclient` creates its QP before an inline Send): granted as Linux siw
/// grants it (ibv_create_qp(3): the caps written back are at least those asked for), reported
/// by `ibv_query_qp`, and a Send of more than the limit inline is refused at that WR.
#[test]
fn inline_data_up_to_the_device_limit_whatever_the_qp_asked() {
    let ctx = open(0);
    let pd = unsafe { ibv_alloc_pd(ctx) };
    let cq = unsafe { ibv_create_cq(ctx, 32, null_mut(), null_mut(), 0) };
    assert!(!pd.is_null() && !cq.is_null());
    let mut attr = rc_attr(cq, qp_caps(4, 4));
    assert_eq!(attr.cap.max_inline_data, 0);
    let qp = unsafe { ibv_create_qp(pd, &mut attr) };
    assert!(!qp.is_null());
    assert_eq!(attr.cap.max_inline_data, MAX_INLINE);
    let mut qattr = ibv_qp_attr::default();
    let mut init = ibv_qp_init_attr::default();
    assert_eq!(
        unsafe { ibv_query_qp(qp, &mut qattr, IBV_QP_CAP as c_int, &mut init) },
        0
    );
    assert_eq!(
        (qattr.cap.max_inline_data, init.cap.max_inline_data),
        (MAX_INLINE, MAX_INLINE)
    );

    assert_eq!(modify_state(qp, IBV_QPS_RTS), 0);
    let mut data = vec![7u8; MAX_INLINE as usize + 1];
    // lkey 0: an inline SGE names no region.
    let mut sge = ibv_sge {
        addr: data.as_mut_ptr() as u64,
        length: 16,
        lkey: 0,
    };
    let mut wr = send_wr(1, &mut sge, IBV_WR_SEND);
    wr.send_flags |= IBV_SEND_INLINE;
    let mut bad = null_mut();
    assert_eq!(post_send_list(qp, &mut wr, &mut bad), 0);
    sge.length = MAX_INLINE;
    let mut wr = send_wr(2, &mut sge, IBV_WR_SEND);
    wr.send_flags |= IBV_SEND_INLINE;
    assert_eq!(post_send_list(qp, &mut wr, &mut bad), 0);
    sge.length = MAX_INLINE + 1;
    let mut wr = send_wr(3, &mut sge, IBV_WR_SEND);
    wr.send_flags |= IBV_SEND_INLINE;
    assert_eq!(post_send_list(qp, &mut wr, &mut bad), libc::EINVAL);
    assert_eq!(bad, &mut wr as *mut ibv_send_wr);

    assert_eq!(modify_state(qp, IBV_QPS_ERR), 0);
    let ids: Vec<u64> = poll_n(cq, 2).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2]);
    let mut buf = vec![0u8; 64];
    let mr = reg(pd, &mut buf);
    destroy_all(ctx, pd, cq, qp, mr);
}

/// `rdma_create_ep` makes its QP of the addrinfo's type, as librdmacm does (writing it into
/// the caller's attr): an XRC or UD addrinfo (`rdma_xclient -c x` asks for XRC this way) is
/// refused with EOPNOTSUPP, as ibv_create_qp refuses those types, and no id is left; an RC
/// one gets its QP.
#[test]
fn rdma_create_ep_makes_the_qp_type_the_addrinfo_names() {
    setup();
    let node = std::ffi::CString::new("10.78.0.2").unwrap();
    let service = std::ffi::CString::new("7611").unwrap();
    for (qp_type, ps, want) in [
        (IBV_QPT_XRC_SEND, RDMA_PS_IB, libc::EOPNOTSUPP),
        (IBV_QPT_UD, RDMA_PS_TCP, libc::EOPNOTSUPP),
        (IBV_QPT_RC, RDMA_PS_TCP, 0),
    ] {
        let hints = rdma_addrinfo {
            ai_port_space: ps as c_int,
            ai_qp_type: qp_type as c_int,
            ..Default::default()
        };
        let mut res = null_mut();
        let rc = unsafe { rdma_getaddrinfo(node.as_ptr(), service.as_ptr(), &hints, &mut res) };
        assert_eq!(rc, 0, "rdma_getaddrinfo, QP type {qp_type}");
        assert_eq!(unsafe { (*res).ai_qp_type }, qp_type as c_int);
        let mut attr = ibv_qp_init_attr {
            cap: qp_caps(1, 1),
            ..Default::default()
        };
        let mut id = null_mut();
        clear_errno();
        let rc = unsafe { rdma_create_ep(&mut id, res, null_mut(), &mut attr) };
        unsafe { rdma_freeaddrinfo(res) };
        assert_eq!(attr.qp_type, qp_type, "the attr names the addrinfo's type");
        if want == 0 {
            assert_eq!(rc, 0);
            assert!(!id.is_null() && !unsafe { (*id).qp }.is_null());
            assert_eq!(unsafe { (*(*id).qp).qp_type }, IBV_QPT_RC);
            unsafe { rdma_destroy_ep(id) };
        } else {
            assert_eq!((rc, errno()), (-1, want), "QP type {qp_type}");
        }
    }
}

/// A WR list whose third WR has more SGEs than the QP offers (ibv_post_send(3): the
/// failing WR is returned through `bad_wr`; VERBS-00 §8.2.1: the WRs before it stay
/// posted). Posted on the initiator between rdma_connect and ESTABLISHED, the first two
/// complete once the connection is up and their data lands.
#[test]
fn a_bad_wr_in_a_list_keeps_the_wrs_before_it() {
    let s = Setup::new(7601);
    s.connect(b"");
    let ev = expect_event(s.ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    let child = unsafe { (*ev).id };
    unsafe { rdma_ack_cm_event(ev) };
    let mut server = End::new(child);
    server.create_qp(qp_caps(8, 8));

    let mut c = s.client;
    c.buf[..6].copy_from_slice(b"first!");
    c.buf[8..14].copy_from_slice(b"second");
    let mut sge1 = c.sge(0, 6);
    let mut sge2 = c.sge(8, 6);
    let mut sges3 = [c.sge(0, 1), c.sge(1, 1)];
    let mut third = write_wr(3, &mut sges3[0], server.addr(64), server.rkey(), 0);
    third.num_sge = 2;
    let mut second = write_wr(
        2,
        &mut sge2,
        server.addr(8),
        server.rkey(),
        IBV_SEND_SIGNALED,
    );
    second.next = &mut third;
    let mut first = write_wr(
        1,
        &mut sge1,
        server.addr(0),
        server.rkey(),
        IBV_SEND_SIGNALED,
    );
    first.next = &mut second;
    let mut bad = null_mut();
    assert_eq!(post_send_list(c.qp, &mut first, &mut bad), libc::EINVAL);
    assert_eq!(bad, &mut third as *mut ibv_send_wr);

    assert_eq!(unsafe { rdma_accept(child, null_mut()) }, 0);
    for _ in 0..2 {
        unsafe { rdma_ack_cm_event(expect_event(s.ch, RDMA_CM_EVENT_ESTABLISHED, 0)) };
    }
    let wcs = poll_n(c.cq, 2);
    let got: Vec<(u64, u32)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(1, IBV_WC_SUCCESS), (2, IBV_WC_SUCCESS)]);
    assert!(poll(c.cq, 1, Duration::from_millis(50)).is_empty());
    assert_eq!(&server.buf[..14], b"first!\0\0second");
    assert_eq!(server.buf[64], 0, "the refused WR wrote nothing");

    assert_eq!(unsafe { rdma_disconnect(c.id) }, 0);
    for _ in 0..2 {
        unsafe { rdma_ack_cm_event(expect_event(s.ch, RDMA_CM_EVENT_DISCONNECTED, 0)) };
    }
    server.destroy();
    Setup { client: c, ..s }.destroy();
}

/// Addresses the data plane has no device for: rdma_bind_addr to an address no port has is
/// EADDRNOTAVAIL (Linux's rdma_translate_ip), an IPv6 one EAFNOSUPPORT (the data plane runs
/// iWARP over TCP/IPv4), and rdma_resolve_addr to a subnet no device reaches reports
/// ADDR_ERROR with a negative errno (rdma_resolve_addr(3): "If the address resolution
/// fails, RDMA_CM_EVENT_ADDR_ERROR"). The ids stay usable.
#[test]
fn addresses_no_device_has_or_reaches_are_refused() {
    setup();
    let ch = channel();
    let mut none = null_mut();
    minus_one_with(libc::EINVAL, || unsafe {
        rdma_create_id(ch, null_mut(), null_mut(), RDMA_PS_TCP)
    });
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut none, null_mut(), RDMA_PS_TCP) },
        0
    );
    let id = none;

    let mut foreign = sockaddr([10, 78, 0, 9], 7610);
    minus_one_with(libc::EADDRNOTAVAIL, || unsafe {
        rdma_bind_addr(id, sa(&mut foreign))
    });
    let mut v6 = libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: 7610u16.to_be(),
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr {
            s6_addr: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        },
        sin6_scope_id: 0,
    };
    let v6p = (&mut v6 as *mut libc::sockaddr_in6).cast::<sockaddr>();
    // An IPv6 address no device has (these devices are IPv4-only).
    minus_one_with(libc::EADDRNOTAVAIL, || unsafe { rdma_bind_addr(id, v6p) });
    minus_one_with(libc::EINVAL, || unsafe { rdma_bind_addr(id, null_mut()) });
    assert!(unsafe { (*id).verbs }.is_null(), "bound to no device");

    // No device reaches it: the failure comes as an event, as for IPv4 below.
    assert_eq!(unsafe { rdma_resolve_addr(id, null_mut(), v6p, 2000) }, 0);
    let ev = expect_event(ch, RDMA_CM_EVENT_ADDR_ERROR, -libc::ENETUNREACH);
    assert_eq!(unsafe { (*ev).id }, id);
    assert_eq!(unsafe { rdma_ack_cm_event(ev) }, 0);
    let mut far = sockaddr([10, 99, 0, 1], 7610);
    assert_eq!(
        unsafe { rdma_resolve_addr(id, null_mut(), sa(&mut far), 2000) },
        0
    );
    let ev = expect_event(ch, RDMA_CM_EVENT_ADDR_ERROR, -libc::ENETUNREACH);
    assert_eq!(unsafe { (*ev).id }, id);
    unsafe { rdma_ack_cm_event(ev) };
    // rdma_resolve_route needs a resolved address.
    minus_one_with(libc::EINVAL, || unsafe { rdma_resolve_route(id, 2000) });

    // The same id resolves a reachable address afterwards.
    let mut near = sockaddr(B, 7610);
    assert_eq!(
        unsafe { rdma_resolve_addr(id, null_mut(), sa(&mut near), 2000) },
        0
    );
    unsafe { rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0)) };
    assert!(
        !unsafe { (*id).verbs }.is_null(),
        "on device a, which reaches b"
    );
    assert_eq!(unsafe { rdma_destroy_id(id) }, 0);
    unsafe { rdma_destroy_event_channel(ch) };
}

/// Non-blocking channels with nothing queued: rdma_get_cm_event and ibv_get_cq_event
/// return -1 with errno EAGAIN (rdma_get_cm_event(3), ibv_get_cq_event(3): "returns 0 on
/// success, and -1 on error"; the descriptor is the application's to make non-blocking).
#[test]
fn empty_nonblocking_channels_say_eagain() {
    setup();
    let ch = channel();
    let mut ev = null_mut();
    minus_one_with(libc::EAGAIN, || unsafe { rdma_get_cm_event(ch, &mut ev) });
    assert!(ev.is_null());
    minus_one_with(libc::EINVAL, || unsafe {
        rdma_get_cm_event(ch, null_mut())
    });

    let ctx = open(1);
    let cch = unsafe { ibv_create_comp_channel(ctx) };
    assert!(!cch.is_null());
    nonblocking(unsafe { (*cch).fd });
    let cq = unsafe { ibv_create_cq(ctx, 4, null_mut(), cch, 0) };
    assert!(!cq.is_null());
    let ops = unsafe { &(*ctx).ops };
    assert_eq!(unsafe { ops.req_notify_cq.unwrap()(cq, 0) }, 0);
    let (mut ecq, mut ectx) = (null_mut(), null_mut());
    minus_one_with(libc::EAGAIN, || unsafe {
        ibv_get_cq_event(cch, &mut ecq, &mut ectx)
    });
    assert!(ecq.is_null());
    assert_eq!(unsafe { ibv_destroy_cq(cq) }, 0);
    assert_eq!(unsafe { ibv_destroy_comp_channel(cch) }, 0);
    assert_eq!(unsafe { ibv_close_device(ctx) }, 0);
    unsafe { rdma_destroy_event_channel(ch) };
}

/// A port that something already listens on (rdma_listen: EADDRINUSE, for a second id on
/// the same address and for a wildcard id, whose listens on the other devices are undone),
/// a connect nobody listens for (REJECTED with -ECONNREFUSED: Linux's cma_iw_handler for a
/// refused connection), and rdma_reject(3) of a request (the initiator gets REJECTED,
/// -ECONNREFUSED, with the private data given). The first listener keeps listening through
/// all of it.
#[test]
fn busy_ports_refused_connects_and_rejects() {
    const PORT: u16 = 7620;
    setup();
    let ch = channel();
    let first = create_id(ch);
    let mut on_b = sockaddr(B, PORT);
    assert_eq!(unsafe { rdma_bind_addr(first, sa(&mut on_b)) }, 0);
    assert_eq!(unsafe { rdma_listen(first, 4) }, 0);

    let second = create_id(ch);
    let mut again = sockaddr(B, PORT);
    assert_eq!(unsafe { rdma_bind_addr(second, sa(&mut again)) }, 0);
    minus_one_with(libc::EADDRINUSE, || unsafe { rdma_listen(second, 4) });
    let wildcard = create_id(ch);
    let mut any = sockaddr([0, 0, 0, 0], PORT);
    assert_eq!(unsafe { rdma_bind_addr(wildcard, sa(&mut any)) }, 0);
    minus_one_with(libc::EADDRINUSE, || unsafe { rdma_listen(wildcard, 4) });
    assert_eq!(unsafe { rdma_destroy_id(second) }, 0);
    assert_eq!(unsafe { rdma_destroy_id(wildcard) }, 0);

    // The wildcard's listen on a was undone: a connect there is refused.
    let mut refused = End::new(resolved(ch, A, PORT));
    refused.create_qp(qp_caps(4, 4));
    let mut param = rdma_conn_param::default();
    assert_eq!(unsafe { rdma_connect(refused.id, &mut param) }, 0);
    let ev = expect_event(ch, RDMA_CM_EVENT_REJECTED, -libc::ECONNREFUSED);
    assert_eq!(unsafe { (*ev).id }, refused.id);
    assert!(private_data(ev).is_empty());
    unsafe { rdma_ack_cm_event(ev) };
    refused.destroy();

    // The first listener still takes requests; rejected with private data.
    let mut client = End::new(resolved(ch, B, PORT));
    client.create_qp(qp_caps(4, 4));
    let hello = *b"may I?";
    let mut param = rdma_conn_param {
        private_data: hello.as_ptr().cast(),
        private_data_len: hello.len() as u8,
        ..Default::default()
    };
    assert_eq!(unsafe { rdma_connect(client.id, &mut param) }, 0);
    let ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    let (request, listen_id) = unsafe { ((*ev).id, (*ev).listen_id) };
    assert_eq!(listen_id, first);
    assert_eq!(private_data(ev), hello);
    unsafe { rdma_ack_cm_event(ev) };
    let no = *b"not today";
    assert_eq!(
        unsafe { rdma_reject(request, no.as_ptr().cast(), no.len() as u8) },
        0
    );
    let ev = expect_event(ch, RDMA_CM_EVENT_REJECTED, -libc::ECONNREFUSED);
    assert_eq!(unsafe { (*ev).id }, client.id);
    assert_eq!(private_data(ev), no);
    unsafe { rdma_ack_cm_event(ev) };
    // A request already answered cannot be answered again.
    minus_one_with(libc::EINVAL, || unsafe {
        rdma_reject(request, null_mut(), 0)
    });
    assert_eq!(unsafe { rdma_destroy_id(request) }, 0);
    client.destroy();

    // A port nobody ever listened on.
    let mut lonely = End::new(resolved(ch, A, PORT + 1));
    lonely.create_qp(qp_caps(4, 4));
    let mut param = rdma_conn_param::default();
    assert_eq!(unsafe { rdma_connect(lonely.id, &mut param) }, 0);
    unsafe {
        rdma_ack_cm_event(expect_event(
            ch,
            RDMA_CM_EVENT_REJECTED,
            -libc::ECONNREFUSED,
        ))
    };
    lonely.destroy();

    assert!(
        try_event(ch, Duration::from_millis(50)).is_none(),
        "no other event"
    );
    assert_eq!(unsafe { rdma_destroy_id(first) }, 0);
    unsafe { rdma_destroy_event_channel(ch) };
}

/// A connect that reaches a port just before the application listens there (perftest's
/// `-R` tests race like this: a handshake, then `rdma_listen`) is held, not refused: the
/// listen that follows within the data plane's hold gets the request (the initiator then
/// gets what the listener answers, here a reject with private data).
#[test]
fn a_connect_just_before_the_listen_reaches_the_listener() {
    const PORT: u16 = 7625;
    setup();
    let ch = channel();
    let mut early = End::new(resolved(ch, B, PORT));
    early.create_qp(qp_caps(4, 4));
    let mut param = rdma_conn_param::default();
    assert_eq!(unsafe { rdma_connect(early.id, &mut param) }, 0);
    assert!(
        try_event(ch, Duration::from_millis(150)).is_none(),
        "neither refused nor connected while nobody listens"
    );
    let late = create_id(ch);
    let mut on_b = sockaddr(B, PORT);
    assert_eq!(unsafe { rdma_bind_addr(late, sa(&mut on_b)) }, 0);
    assert_eq!(unsafe { rdma_listen(late, 4) }, 0);
    let ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    let (request, listen_id) = unsafe { ((*ev).id, (*ev).listen_id) };
    assert_eq!(listen_id, late);
    unsafe { rdma_ack_cm_event(ev) };
    let no = *b"later";
    assert_eq!(
        unsafe { rdma_reject(request, no.as_ptr().cast(), no.len() as u8) },
        0
    );
    let ev = expect_event(ch, RDMA_CM_EVENT_REJECTED, -libc::ECONNREFUSED);
    assert_eq!(unsafe { (*ev).id }, early.id);
    assert_eq!(private_data(ev), no);
    unsafe { rdma_ack_cm_event(ev) };
    assert_eq!(unsafe { rdma_destroy_id(request) }, 0);
    early.destroy();
    assert_eq!(unsafe { rdma_destroy_id(late) }, 0);
    unsafe { rdma_destroy_event_channel(ch) };
}

/// rdma_connect's own checks (librdmacm's ucma_valid_param: responder_resources and
/// initiator_depth above the device's maximum, other than RDMA_MAX_RESP_RES /
/// RDMA_MAX_INIT_DEPTH (0xFF), are EINVAL; Linux's iw_cm refuses a connect without a QP
/// with EINVAL). Nothing is sent: the same id then connects.
#[test]
fn rdma_connect_checks_its_parameters_first() {
    let s = Setup::new(7630);
    let noqp = resolved(s.ch, A, 7630);
    let mut param = rdma_conn_param::default();
    minus_one_with(libc::EINVAL, || unsafe { rdma_connect(noqp, &mut param) });
    assert_eq!(unsafe { rdma_destroy_id(noqp) }, 0);

    let over = (MAX_RD_ATOM + 1) as u8;
    for (rr, id) in [(over, 0), (0, over), (0xfe, 0xff)] {
        let mut param = rdma_conn_param {
            responder_resources: rr,
            initiator_depth: id,
            ..Default::default()
        };
        clear_errno();
        assert_eq!(unsafe { rdma_connect(s.client.id, &mut param) }, -1);
        assert_eq!(
            errno(),
            libc::EINVAL,
            "responder_resources {rr} initiator_depth {id}"
        );
    }
    assert!(
        try_event(s.ch, Duration::from_millis(50)).is_none(),
        "no request was sent"
    );
    s.connect(b"");
    let server = s.accept();
    // rdma_get_dst_port(3) / rdma_get_src_port(3): network order; 0 for no id.
    assert_eq!(unsafe { rdma_get_dst_port(s.client.id) }, 7630u16.to_be());
    assert_eq!(unsafe { rdma_get_src_port(server.id) }, 7630u16.to_be());
    assert_eq!(unsafe { rdma_get_dst_port(null_mut()) }, 0);
    assert_eq!(unsafe { rdma_get_src_port(null_mut()) }, 0);
    assert_eq!(unsafe { rdma_disconnect(s.client.id) }, 0);
    for _ in 0..2 {
        unsafe { rdma_ack_cm_event(expect_event(s.ch, RDMA_CM_EVENT_DISCONNECTED, 0)) };
    }
    server.destroy();
    s.destroy();
}

/// An RDMA Write to an rkey the sink does not have (RFC 5040 §7, RFC 5041 §7.2: the Data
/// Sink's DDP finds an invalid STag on a tagged segment, sends a Terminate and stops the
/// stream). An RDMA Write is not acknowledged: the writer's WR completes when its message
/// has been sent, before the sink looked at it, so it completes successfully (as with
/// siw). Then the Terminate path: the sink's QP reports IBV_EVENT_QP_ACCESS_ERR (a
/// protection error, the Terminate's cause) and the writer's IBV_EVENT_QP_FATAL (the
/// Terminate received); the connection closes, so both ids get DISCONNECTED and both QPs
/// are in ERR, where a receive still posted and a WR posted afterwards are flushed.
#[test]
fn a_write_to_a_wrong_rkey_terminates_the_connection() {
    let s = Setup::new(7640);
    s.connect(b"");
    let server = s.accept();
    let c = &s.client;
    let mut rsge = server.sge(1024, 64);
    let mut rwr = recv_wr(300, &mut rsge);
    let mut rbad = null_mut();
    assert_eq!(post_recv_list(server.qp, &mut rwr, &mut rbad), 0);

    let mut sge = c.sge(0, 16);
    let wrong = server.rkey() ^ 0x55;
    let mut wr = write_wr(1, &mut sge, server.addr(0), wrong, IBV_SEND_SIGNALED);
    let mut bad = null_mut();
    assert_eq!(post_send_list(c.qp, &mut wr, &mut bad), 0);
    let wc = poll_n(c.cq, 1)[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE)
    );

    let mut ids = Vec::new();
    for _ in 0..2 {
        let ev = expect_event(s.ch, RDMA_CM_EVENT_DISCONNECTED, 0);
        ids.push(unsafe { (*ev).id });
        unsafe { rdma_ack_cm_event(ev) };
    }
    ids.sort();
    let mut want = vec![c.id, server.id];
    want.sort();
    assert_eq!(ids, want, "DISCONNECTED on both ids");
    wait_state(c.qp, IBV_QPS_ERR);
    wait_state(server.qp, IBV_QPS_ERR);
    let wc = poll_n(server.cq, 1)[0];
    assert_eq!((wc.wr_id, wc.status), (300, IBV_WC_WR_FLUSH_ERR));
    assert!(server.buf.iter().all(|&b| b == 0), "nothing was placed");
    assert_eq!(async_event_of(c.qp), IBV_EVENT_QP_FATAL);
    // ibv_get_async_event(3) with no event to fill: -1/EINVAL, and the queued event is
    // still there for the next call.
    let sctx = unsafe { (*server.qp).context };
    let mut pfd = libc::pollfd {
        fd: unsafe { (*sctx).async_fd },
        events: libc::POLLIN,
        revents: 0,
    };
    assert_eq!(
        unsafe { libc::poll(&mut pfd, 1, 5000) },
        1,
        "an async event"
    );
    minus_one_with(libc::EINVAL, || unsafe {
        ibv_get_async_event(sctx, null_mut())
    });
    assert_eq!(async_event_of(server.qp), IBV_EVENT_QP_ACCESS_ERR);

    let mut sge = c.sge(0, 16);
    let mut wr = write_wr(
        2,
        &mut sge,
        server.addr(0),
        server.rkey(),
        IBV_SEND_SIGNALED,
    );
    assert_eq!(post_send_list(c.qp, &mut wr, &mut bad), 0);
    let wc = poll_n(c.cq, 1)[0];
    assert_eq!((wc.wr_id, wc.status), (2, IBV_WC_WR_FLUSH_ERR));

    server.destroy();
    s.destroy();
}

/// rdma_create_qp_ex and rdma_create_srq_ex (rdma_create_qp(3), rdma_create_srq(3)): what
/// the device cannot honour (a comp_mask bit other than the PD's, create flags, an S-RQ
/// type other than basic) is -1/EOPNOTSUPP and a NULL attr -1/EINVAL; the id is left
/// without a QP or S-RQ and takes one afterwards, on the PD given.
#[test]
fn extended_qp_and_srq_attributes_the_device_lacks_are_refused() {
    setup();
    let ch = channel();
    let id = resolved(ch, A, 7660);
    let (ctx, pd) = unsafe { ((*id).verbs, (*id).pd) };
    let cq = unsafe { ibv_create_cq(ctx, 8, null_mut(), null_mut(), 0) };
    assert!(!cq.is_null());
    let good = ibv_qp_init_attr_ex {
        send_cq: cq,
        recv_cq: cq,
        cap: qp_caps(4, 4),
        qp_type: IBV_QPT_RC,
        comp_mask: IBV_QP_INIT_ATTR_PD,
        pd,
        ..Default::default()
    };
    let bad = [
        ibv_qp_init_attr_ex {
            create_flags: 1,
            ..good
        },
        ibv_qp_init_attr_ex {
            comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
            ..good
        },
    ];
    for mut attr in bad {
        minus_one_with(libc::EOPNOTSUPP, || unsafe {
            rdma_create_qp_ex(id, &mut attr)
        });
    }
    minus_one_with(libc::EINVAL, || unsafe {
        rdma_create_qp_ex(id, null_mut())
    });
    assert!(unsafe { (*id).qp }.is_null());
    let mut attr = good;
    assert_eq!(unsafe { rdma_create_qp_ex(id, &mut attr) }, 0);
    let qp = unsafe { (*id).qp };
    assert!(!qp.is_null());
    assert_eq!(unsafe { ((*qp).pd, (*qp).send_cq) }, (pd, cq));
    assert_eq!(attr.cap.max_send_wr, 4);
    assert_eq!(qp_state(qp), IBV_QPS_INIT, "librdmacm leaves it in INIT");

    let basic = ibv_srq_init_attr_ex {
        attr: ibv_srq_attr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        },
        comp_mask: IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE,
        srq_type: IBV_SRQT_BASIC,
        pd,
        ..Default::default()
    };
    let mut xrc = ibv_srq_init_attr_ex {
        srq_type: IBV_SRQT_XRC,
        ..basic
    };
    minus_one_with(libc::EOPNOTSUPP, || unsafe {
        rdma_create_srq_ex(id, &mut xrc)
    });
    minus_one_with(libc::EINVAL, || unsafe {
        rdma_create_srq_ex(id, null_mut())
    });
    assert!(unsafe { (*id).srq }.is_null());
    let mut attr = basic;
    assert_eq!(unsafe { rdma_create_srq_ex(id, &mut attr) }, 0);
    let srq = unsafe { (*id).srq };
    assert!(!srq.is_null());
    assert_eq!(unsafe { (*srq).pd }, pd);

    unsafe { rdma_destroy_qp(id) };
    unsafe { rdma_destroy_srq(id) };
    assert_eq!(unsafe { ibv_destroy_cq(cq) }, 0);
    assert_eq!(unsafe { rdma_destroy_id(id) }, 0);
    unsafe { rdma_destroy_event_channel(ch) };
}

/// Shared receive queues (ibv_create_srq(3), ibv_post_srq_recv(3), ibv_destroy_srq(3)):
/// an S-RQ larger than the device offers is NULL/EINVAL; a list whose third WR has more
/// SGEs than the S-RQ takes fails there (EINVAL, `bad_wr` = that WR) and keeps the two
/// before it, which the peer's Sends then consume; a QP on an S-RQ takes no receive of its
/// own (EINVAL); the S-RQ cannot be destroyed while a QP uses it (EBUSY).
#[test]
fn srq_errors_keep_what_was_posted() {
    let s = Setup::new(7670);
    s.connect(b"");
    let ev = expect_event(s.ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    let child = unsafe { (*ev).id };
    unsafe { rdma_ack_cm_event(ev) };
    let mut server = End::new(child);
    let pd = unsafe { (*child).pd };
    let srq_attr = |max_wr, max_sge| ibv_srq_init_attr {
        attr: ibv_srq_attr {
            max_wr,
            max_sge,
            srq_limit: 0,
        },
        ..Default::default()
    };
    let a = device_attributes();
    for (max_wr, max_sge) in [(a.max_srq_wrs + 1, 1), (4, a.max_send_recv_sges + 1)] {
        let mut attr = srq_attr(max_wr, max_sge);
        null_with(libc::EINVAL, || unsafe { ibv_create_srq(pd, &mut attr) });
    }
    let mut attr = srq_attr(4, 1);
    let srq = unsafe { ibv_create_srq(pd, &mut attr) };
    assert!(!srq.is_null());

    let mut sge1 = server.sge(0, 64);
    let mut sge2 = server.sge(64, 64);
    let mut sges3 = [server.sge(128, 8), server.sge(136, 8)];
    let mut third = recv_wr(3, &mut sges3[0]);
    third.num_sge = 2;
    let mut second = recv_wr(2, &mut sge2);
    second.next = &mut third;
    let mut first = recv_wr(1, &mut sge1);
    first.next = &mut second;
    let mut bad = null_mut();
    let ops = unsafe { &(*(*srq).context).ops };
    let r = unsafe { ops.post_srq_recv.unwrap()(srq, &mut first, &mut bad) };
    assert_eq!(r, libc::EINVAL);
    assert_eq!(bad, &mut third as *mut ibv_recv_wr);

    let mut qattr = ibv_qp_init_attr {
        srq,
        ..rc_attr(server.cq, qp_caps(8, 0))
    };
    assert_eq!(unsafe { rdma_create_qp(child, null_mut(), &mut qattr) }, 0);
    server.qp = unsafe { (*child).qp };
    let mut own = recv_wr(9, &mut sge1);
    let mut rbad = null_mut();
    assert_eq!(post_recv_list(server.qp, &mut own, &mut rbad), libc::EINVAL);
    assert_eq!(rbad, &mut own as *mut ibv_recv_wr);
    assert_eq!(unsafe { ibv_destroy_srq(srq) }, libc::EBUSY);

    assert_eq!(unsafe { rdma_accept(child, null_mut()) }, 0);
    for _ in 0..2 {
        unsafe { rdma_ack_cm_event(expect_event(s.ch, RDMA_CM_EVENT_ESTABLISHED, 0)) };
    }
    let mut c = s.client;
    c.buf[..3].copy_from_slice(b"one");
    c.buf[8..11].copy_from_slice(b"two");
    let mut ssge2 = c.sge(8, 3);
    let mut send2 = send_wr(12, &mut ssge2, IBV_WR_SEND);
    let mut ssge1 = c.sge(0, 3);
    let mut send1 = ibv_send_wr {
        wr_id: 11,
        sg_list: &mut ssge1,
        next: &mut send2,
        ..send2
    };
    let mut sbad = null_mut();
    assert_eq!(post_send_list(c.qp, &mut send1, &mut sbad), 0);
    let sent: Vec<(u64, u32)> = poll_n(c.cq, 2)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(sent, [(11, IBV_WC_SUCCESS), (12, IBV_WC_SUCCESS)]);
    let got: Vec<(u64, u32, u32, u32)> = poll_n(server.cq, 2)
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
        .collect();
    assert_eq!(
        got,
        [
            (1, IBV_WC_SUCCESS, IBV_WC_RECV, 3),
            (2, IBV_WC_SUCCESS, IBV_WC_RECV, 3)
        ]
    );
    assert_eq!(
        (&server.buf[..3], &server.buf[64..67]),
        (&b"one"[..], &b"two"[..])
    );

    assert_eq!(unsafe { rdma_disconnect(c.id) }, 0);
    for _ in 0..2 {
        unsafe { rdma_ack_cm_event(expect_event(s.ch, RDMA_CM_EVENT_DISCONNECTED, 0)) };
    }
    unsafe { rdma_destroy_qp(child) };
    server.qp = null_mut();
    assert_eq!(unsafe { ibv_destroy_srq(srq) }, 0);
    server.destroy();
    Setup { client: c, ..s }.destroy();
}

/// An RDMA Write of `data` (staged at `from`'s offset 0) to `to_addr`/`rkey`; its
/// completion is a success.
fn write_and_complete(from: &mut End, data: &[u8], to_addr: u64, rkey: u32) {
    from.buf[..data.len()].copy_from_slice(data);
    let mut sge = from.sge(0, data.len() as u32);
    let mut wr = write_wr(9, &mut sge, to_addr, rkey, IBV_SEND_SIGNALED);
    let mut bad = null_mut();
    assert_eq!(post_send_list(from.qp, &mut wr, &mut bad), 0);
    let wc = poll_n(from.cq, 1)[0];
    assert_eq!((wc.wr_id, wc.status), (9, IBV_WC_SUCCESS));
}

/// ibv_rereg_mr(3): a request it cannot honour (no flag, a flag it does not know, remote
/// write without local write) returns IBV_REREG_MR_ERR_INPUT ("Old MR is valid, an input
/// error was detected by libibverbs") and the region stays as it was, still taking the
/// peer's writes under its key; a new translation moves it under a new key, and the old
/// key then names nothing (a write to it is Terminated, RFC 5040 §7).
#[test]
fn rereg_mr_refuses_bad_input_and_keeps_the_region() {
    let s = Setup::new(7650);
    s.connect(b"");
    let server = s.accept();
    let mut c = s.client;
    let mr = server.mr;
    let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
    let mut other = vec![0u8; LEN];
    let remote_write = IBV_ACCESS_REMOTE_WRITE as c_int;
    for (flags, access) in [
        (0, ACCESS),
        (IBV_REREG_MR_FLAGS_SUPPORTED as c_int + 1, ACCESS),
        (IBV_REREG_MR_CHANGE_ACCESS as c_int, remote_write),
    ] {
        let r = unsafe {
            ibv_rereg_mr(
                mr,
                flags,
                null_mut(),
                other.as_mut_ptr().cast(),
                LEN,
                access,
            )
        };
        assert_eq!(
            r, IBV_REREG_MR_ERR_INPUT,
            "flags {flags:#x} access {access:#x}"
        );
    }
    assert_eq!(unsafe { ((*mr).lkey, (*mr).rkey) }, (lkey, rkey));
    assert_eq!(unsafe { (*mr).addr }, server.buf.as_ptr() as *mut c_void);
    write_and_complete(&mut c, b"still here", server.addr(0), rkey);
    wait_bytes(server.buf.as_ptr(), b"still here");

    let trans = IBV_REREG_MR_CHANGE_TRANSLATION as c_int;
    let r = unsafe { ibv_rereg_mr(mr, trans, null_mut(), other.as_mut_ptr().cast(), LEN, 0) };
    assert_eq!(r, 0);
    let new_rkey = unsafe { (*mr).rkey };
    assert_ne!(new_rkey, rkey, "a new key");
    assert_eq!(
        unsafe { ((*mr).addr, (*mr).length) },
        (other.as_mut_ptr().cast(), LEN)
    );
    write_and_complete(&mut c, b"moved", other.as_ptr() as u64 + 8, new_rkey);
    wait_bytes(unsafe { other.as_ptr().add(8) }, b"moved");

    write_and_complete(&mut c, b"stale", server.addr(0), rkey);
    for _ in 0..2 {
        unsafe { rdma_ack_cm_event(expect_event(s.ch, RDMA_CM_EVENT_DISCONNECTED, 0)) };
    }
    assert_eq!(
        &server.buf[..10],
        b"still here",
        "the stale key wrote nothing"
    );
    server.destroy();
    drop(other);
    Setup { client: c, ..s }.destroy();
}

/// The first async event about `qp` on its context (5 s at most; events about other
/// objects, of tests sharing the context, are passed over).
fn async_event_of(qp: *mut ibv_qp) -> ibv_event_type {
    let ctx = unsafe { (*qp).context };
    nonblocking(unsafe { (*ctx).async_fd });
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut ev = ibv_async_event::default();
        if unsafe { ibv_get_async_event(ctx, &mut ev) } == 0 {
            unsafe { ibv_ack_async_event(&mut ev) };
            if unsafe { ev.element.qp } == qp {
                return ev.event_type;
            }
            continue;
        }
        assert_eq!(errno(), libc::EAGAIN, "ibv_get_async_event failed");
        assert!(Instant::now() < deadline, "no async event within 5 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}
