//! What the librdma tests share: the libraries' configuration, socket addresses, errno,
//! CM events, completions and posting, called through the exported C functions as an
//! application calls them (so unsafe code). Each test binary uses a part of it.
#![allow(dead_code, unsafe_code, clippy::undocumented_unsafe_blocks)]

use std::os::raw::c_int;
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::Once;
use std::time::{Duration, Instant};

use rdma_dataplane::abi::*;
use rdma_dataplane::cm::events::*;
use rdma_dataplane::cm::id::*;
use rdma_dataplane::verbs::events::{ibv_ack_async_event, ibv_get_async_event};
use rdma_dataplane::verbs::memory::ibv_reg_mr;
use rdma_dataplane::verbs::qp::*;

/// A configuration of two soft ports joined in this process (`device`): `a` at
/// `subnet`.1/24 with MAC 02:00:00:00:`mac`:01 and `b` at `subnet`.2 with MAC ..:02.
pub fn two_soft_ports(device: &str, mac: u8, subnet: [u8; 3]) -> String {
    let [x, y, z] = subnet;
    let port = |name: &str, n: u8| {
        format!(
            "[[ports]]\nname = \"{name}\"\nbackend = \"soft\"\ndevice = \"{device}\"\n\
             mac = \"02:00:00:00:{mac:02x}:0{n}\"\nipv4 = \"{x}.{y}.{z}.{n}/24\"\nrx_desc = 4096\n"
        )
    };
    format!("[poll]\nburst = 32\n\n{}\n{}", port("a", 1), port("b", 2))
}

/// Points the libraries at `config`, written to `NAME.toml` in Cargo's scratch directory for
/// tests (under `target/`: nothing is left in the system's temporary directory, even when a
/// test fails); the first call in a process decides. Every process of a test binary writes
/// the same text, each through a file of its own renamed over the name, so none reads a
/// half-written one.
pub fn use_config(name: &str, config: &str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let cfg = dir.join(format!("{name}.toml"));
        let part = dir.join(format!("{name}.toml.{}", std::process::id()));
        std::fs::write(&part, config).unwrap();
        std::fs::rename(&part, &cfg).unwrap();
        std::env::set_var("DATAPLANE_CONFIG", &cfg);
    });
}

/// `call` (a verbs call that returns an object) returns NULL with errno `want`.
#[track_caller]
pub fn null_with<T>(want: i32, call: impl FnOnce() -> *mut T) {
    clear_errno();
    assert!(call().is_null(), "NULL expected");
    assert_eq!(errno(), want);
}

/// `call` (a call that returns 0 or -1) returns -1 with errno `want`.
#[track_caller]
pub fn minus_one_with(want: i32, call: impl FnOnce() -> c_int) {
    clear_errno();
    assert_eq!(call(), -1);
    assert_eq!(errno(), want);
}

/// The calling thread's errno.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Clears errno, so that a check of it after a failing call sees what that call set.
pub fn clear_errno() {
    unsafe { *libc::__errno_location() = 0 };
}

pub fn sockaddr(ip: [u8; 4], port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

pub fn sa(a: &mut libc::sockaddr_in) -> *mut sockaddr {
    (a as *mut libc::sockaddr_in).cast()
}

pub fn nonblocking(fd: c_int) {
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
}

/// A non-blocking event channel.
pub fn channel() -> *mut rdma_event_channel {
    let ch = unsafe { rdma_create_event_channel() };
    assert!(!ch.is_null());
    nonblocking(unsafe { (*ch).fd });
    ch
}

pub fn create_id(ch: *mut rdma_event_channel) -> *mut rdma_cm_id {
    let mut id = null_mut();
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut id, null_mut(), RDMA_PS_TCP) },
        0
    );
    id
}

/// The next CM event within 5 s, if any.
pub fn try_event(ch: *mut rdma_event_channel, within: Duration) -> Option<*mut rdma_cm_event> {
    let deadline = Instant::now() + within;
    loop {
        let mut ev = null_mut();
        if unsafe { rdma_get_cm_event(ch, &mut ev) } == 0 {
            return Some(ev);
        }
        assert_eq!(errno(), libc::EAGAIN, "rdma_get_cm_event failed");
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The next CM event (5 s at most): its type and status must be these; the caller acks it.
pub fn expect_event(
    ch: *mut rdma_event_channel,
    kind: rdma_cm_event_type,
    status: c_int,
) -> *mut rdma_cm_event {
    let ev = try_event(ch, Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no CM event within 5 s (wanted {kind})"));
    let (k, s) = unsafe { ((*ev).event, (*ev).status) };
    assert_eq!(
        (k, s),
        (kind, status),
        "event {k} status {s}, wanted {kind}"
    );
    ev
}

/// The private data of a CM event.
pub fn private_data(ev: *mut rdma_cm_event) -> Vec<u8> {
    let c = unsafe { (*ev).param.conn };
    if c.private_data.is_null() {
        return Vec::new();
    }
    unsafe {
        std::slice::from_raw_parts(c.private_data.cast::<u8>(), usize::from(c.private_data_len))
    }
    .to_vec()
}

/// Up to `n` completions of `cq` within `within`.
pub fn poll(cq: *mut ibv_cq, n: usize, within: Duration) -> Vec<ibv_wc> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < n {
        let mut wc = ibv_wc::default();
        let ops = unsafe { &(*(*cq).context).ops };
        let got = unsafe { ops.poll_cq.unwrap()(cq, 1, &mut wc) };
        assert!(got >= 0, "poll_cq failed");
        if got == 1 {
            out.push(wc);
        } else if Instant::now() >= deadline {
            break;
        } else {
            std::thread::yield_now();
        }
    }
    out
}

/// Exactly `n` completions of `cq` (5 s at most).
pub fn poll_n(cq: *mut ibv_cq, n: usize) -> Vec<ibv_wc> {
    let wcs = poll(cq, n, Duration::from_secs(5));
    let got: Vec<(u64, u32)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        wcs.len(),
        n,
        "completions (wr_id, status) within 5 s: {got:?}"
    );
    wcs
}

/// A receive WR of the one SGE `sge`.
pub fn recv_wr(wr_id: u64, sge: &mut ibv_sge) -> ibv_recv_wr {
    ibv_recv_wr {
        wr_id,
        sg_list: sge,
        num_sge: 1,
        ..Default::default()
    }
}

/// The attributes of an RC QP whose send and receive queues complete on `cq`.
pub fn rc_attr(cq: *mut ibv_cq, cap: ibv_qp_cap) -> ibv_qp_init_attr {
    ibv_qp_init_attr {
        send_cq: cq,
        recv_cq: cq,
        cap,
        qp_type: IBV_QPT_RC,
        ..Default::default()
    }
}

pub fn post_send_list(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: &mut *mut ibv_send_wr) -> c_int {
    let ops = unsafe { &(*(*qp).context).ops };
    unsafe { ops.post_send.unwrap()(qp, wr, bad) }
}

pub fn post_recv_list(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad: &mut *mut ibv_recv_wr) -> c_int {
    let ops = unsafe { &(*(*qp).context).ops };
    unsafe { ops.post_recv.unwrap()(qp, wr, bad) }
}

/// A signaled send-queue WR of `opcode` with the one SGE `sge`.
pub fn send_wr(wr_id: u64, sge: &mut ibv_sge, opcode: ibv_wr_opcode) -> ibv_send_wr {
    ibv_send_wr {
        wr_id,
        sg_list: sge,
        num_sge: 1,
        opcode,
        send_flags: IBV_SEND_SIGNALED,
        ..Default::default()
    }
}

/// An RDMA `opcode` (Write or Read) WR of `sge` with the remote buffer (`remote_addr`,
/// `rkey`), signaled.
pub fn rdma_wr(
    wr_id: u64,
    sge: &mut ibv_sge,
    opcode: ibv_wr_opcode,
    remote_addr: u64,
    rkey: u32,
) -> ibv_send_wr {
    let mut wr = send_wr(wr_id, sge, opcode);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    wr
}

/// An RDMA Write WR of `sge` to (`remote_addr`, `rkey`) with `flags`.
pub fn write_wr(
    wr_id: u64,
    sge: &mut ibv_sge,
    remote_addr: u64,
    rkey: u32,
    flags: u32,
) -> ibv_send_wr {
    ibv_send_wr {
        send_flags: flags,
        ..rdma_wr(wr_id, sge, IBV_WR_RDMA_WRITE, remote_addr, rkey)
    }
}

pub fn qp_state(qp: *mut ibv_qp) -> ibv_qp_state {
    let mut attr = ibv_qp_attr::default();
    let mut init = ibv_qp_init_attr::default();
    assert_eq!(
        unsafe { ibv_query_qp(qp, &mut attr, IBV_QP_STATE as c_int, &mut init) },
        0
    );
    attr.qp_state
}

/// Waits (5 s at most) until the application sees `qp` in `state` (the data plane
/// publishes QP states it changed at most a millisecond later).
pub fn wait_state(qp: *mut ibv_qp, state: ibv_qp_state) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while qp_state(qp) != state {
        assert!(
            Instant::now() < deadline,
            "QP in state {}, not {state}, after 5 s",
            qp_state(qp)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn modify_state(qp: *mut ibv_qp, state: ibv_qp_state) -> c_int {
    let mut attr = ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    unsafe { ibv_modify_qp(qp, &mut attr, IBV_QP_STATE as c_int) }
}

pub fn qp_caps(send_wr: u32, recv_wr: u32) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: send_wr,
        max_recv_wr: recv_wr,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// Waits (5 s at most) until the `want.len()` bytes at `at` are `want` (the data plane
/// places a peer's RDMA Write into this process's memory).
pub fn wait_bytes(at: *const u8, want: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got: Vec<u8> = (0..want.len())
            .map(|i| unsafe { at.add(i).read_volatile() })
            .collect();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{got:?}, not {want:?}, after 5 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The next CM event (5 s at most), which must be `kind` with status 0; the caller acks it.
pub fn expect_ok(ch: *mut rdma_event_channel, kind: rdma_cm_event_type) -> *mut rdma_cm_event {
    expect_event(ch, kind, 0)
}

/// The next completion on `cq` (5 s at most).
pub fn poll_one(cq: *mut ibv_cq) -> ibv_wc {
    poll_n(cq, 1)[0]
}

/// Posts one send-queue WR, which must be accepted.
pub fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) {
    let mut bad = null_mut();
    assert_eq!(post_send_list(qp, wr, &mut bad), 0, "post_send");
}

/// Posts one receive of `sge`, which must be accepted.
pub fn post_recv(qp: *mut ibv_qp, sge: &mut ibv_sge, wr_id: u64) {
    let mut wr = recv_wr(wr_id, sge);
    let mut bad = null_mut();
    assert_eq!(post_recv_list(qp, &mut wr, &mut bad), 0, "post_recv");
}

/// The `sockaddr_in6` of `ip` (text) and `port`.
pub fn sockaddr6(ip: &str, port: u16) -> libc::sockaddr_in6 {
    let ip: std::net::Ipv6Addr = ip.parse().unwrap();
    libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: port.to_be(),
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr {
            s6_addr: ip.octets(),
        },
        sin6_scope_id: 0,
    }
}

/// A new id on `ch` with `context`, in the TCP port space.
pub fn new_id(ch: *mut rdma_event_channel, context: *mut std::os::raw::c_void) -> *mut rdma_cm_id {
    let mut id = null_mut();
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut id, context, RDMA_PS_TCP) },
        0
    );
    id
}

/// `buf` registered on `pd` for local writes and remote reads and writes.
pub fn reg(pd: *mut ibv_pd, buf: &mut [u8]) -> *mut ibv_mr {
    let access =
        (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE) as c_int;
    let mr = unsafe { ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), access) };
    assert!(!mr.is_null(), "ibv_reg_mr");
    mr
}

/// The SGE of `len` bytes at `offset` in `buf`, registered as `mr`.
pub fn sge(buf: &[u8], offset: usize, len: u32, mr: *mut ibv_mr) -> ibv_sge {
    ibv_sge {
        addr: buf.as_ptr() as u64 + offset as u64,
        length: len,
        lkey: unsafe { (*mr).lkey },
    }
}

/// The next async event of `ctx` within 5 s (its `async_fd` made non-blocking).
pub fn next_async_event(ctx: *mut ibv_context) -> ibv_async_event {
    try_async_event(ctx, Duration::from_secs(5)).expect("no async event within 5 s")
}

/// The next async event of `ctx` within `within`, if any (its `async_fd` made
/// non-blocking).
pub fn try_async_event(ctx: *mut ibv_context, within: Duration) -> Option<ibv_async_event> {
    nonblocking(unsafe { (*ctx).async_fd });
    let deadline = Instant::now() + within;
    let mut ev = ibv_async_event::default();
    while unsafe { ibv_get_async_event(ctx, &mut ev) } != 0 {
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    unsafe { ibv_ack_async_event(&mut ev) };
    Some(ev)
}
