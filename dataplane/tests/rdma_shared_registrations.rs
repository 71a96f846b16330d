//! Memory registrations shared by a data plane's lanes: a server of 2 lanes (2 software
//! links, one per lane, both lanes' RNICs over one shared mapping) registers a region on
//! lane 0; a client's RDMA Write over a connection that lives on lane 1 places into it.
//! Once lane 0 has deregistered it (every lane has dropped it when the call returns), a
//! Write over lane 1 meets an invalid STag: lane 1 Terminates (RFC 5041 §7.2, DDP tagged
//! buffer error 1/1/00 "invalid STag", RFC 5040 §7) and the memory is untouched.

mod rdma_common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dataplane::apps::{all_rights, Resources};
use dataplane::clock;
use dataplane::config::Ipv4Cidr;
use dataplane::hugemem::SharedMemory;
use dataplane::lcore::{PollLoop, PortAddr};
use dataplane::port::soft_pair::{soft_pair, SoftPort};
use dataplane::port::PortInfo;
use dataplane::rdma::{
    lane_registrations, open_shared_rnic, CmEvent, RdmaHandler, RdmaStack, Region, ShareError,
    StackConfig, REGION_VA_BASE,
};
use dataplane::steer::Lane;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{
    Access, AsyncEventKind, CompletionStatus, EventResource, MemoryBackend, MrSpec, PageList, QpId,
    RemoteBuf, SendOp, SendWr, TaggedBase,
};
use rdma_common::{rdma_config, CLIENT_IP, SERVER_IP};

type Loop = PollLoop<SoftPort, RdmaHandler>;

/// The shared region: 64 KiB at 256 KiB into the shared mapping.
const OFF: usize = 256 << 10;
const LEN: usize = 64 << 10;

fn stack_cfg(secret: u8, seed: u64) -> StackConfig {
    StackConfig {
        rdma: rdma_config(MpaConfig::default(), secret),
        memory: 1 << 20,
        stag_seed: seed,
        ..StackConfig::new(MpaConfig::default(), tcp::Config::default())
    }
}

fn addr(ip: Ipv4Addr) -> PortAddr {
    PortAddr::on_subnet(Ipv4Cidr {
        addr: ip,
        prefix: 24,
    })
}

/// Runs `f` while another thread polls `other` (the lane that must answer).
fn meanwhile<R>(other: &mut Loop, f: impl FnOnce() -> R) -> R {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                other.poll_once(clock::now());
            }
        });
        let r = f();
        stop.store(true, Ordering::Relaxed);
        r
    })
}

struct Bed {
    /// The server's lanes.
    s: [Loop; 2],
    sres: [Resources; 2],
    /// The client's lane 1 (its lane 0 is not needed) and its QP and buffer.
    c: Loop,
    cres: Resources,
    cbuf: Region,
    cqp: QpId,
    /// The server's QP of the connection (on lane 1).
    sqp: QpId,
    /// Each server lane's view of the shared memory (the owner's CPU access).
    views: Vec<SharedMemory>,
}

impl Bed {
    fn spin(&mut self) {
        let now = clock::now();
        for l in &mut self.s {
            l.poll_once(now);
        }
        self.c.poll_once(now);
    }

    fn write(&mut self, wr_id: u64, remote: RemoteBuf, data: &[u8]) -> CompletionStatus {
        self.cbuf.bytes_mut(self.c.handler_mut().rnic_mut())[..data.len()].copy_from_slice(data);
        let wr = SendWr::message(
            wr_id,
            SendOp::Write {
                sgl: iwarp::mem::Sgl::one(self.cbuf.sge(0, data.len())),
                remote,
            },
        );
        self.c
            .handler_mut()
            .rnic_mut()
            .post_sq(self.cqp, vec![wr])
            .unwrap();
        let end = clock::now() + Duration::from_secs(10);
        loop {
            assert!(clock::now() < end, "no completion of write {wr_id}");
            self.spin();
            if let Some(wc) = self.cres.poll_cq(self.c.handler_mut()) {
                assert_eq!(wc.wr_id, wr_id);
                return wc.status;
            }
        }
    }

    /// The shared region's octets, read through lane `lane`'s view of the memory.
    fn region(&self, lane: usize) -> Vec<u8> {
        let mut out = vec![0u8; LEN];
        assert!(self.views[lane].read(OFF as u64, &mut out));
        out
    }
}

fn bed() -> Bed {
    let info = |n: &str, last| PortInfo {
        name: n.into(),
        mac: [2, 0, 0, 0, 9, last],
        mtu: 1500,
    };
    let memory = SharedMemory::new(1 << 20, false).unwrap();
    let mut regs = lane_registrations(2, 77);
    let mut s = Vec::new();
    let mut sres = Vec::new();
    let mut client = None;
    for lane in 0..2u16 {
        let (sp, cp) = soft_pair(info("s", 1), info("c", 2), 4096);
        let (rnic, kind) = open_shared_rnic(&memory, 11 + u64::from(lane)).unwrap();
        let mut l = RdmaStack::with_rnic(sp, addr(SERVER_IP), stack_cfg(1, 0), rnic, kind)
            .unwrap()
            .poll;
        let h = l.handler_mut();
        h.set_lane(Lane { lane, lanes: 2 });
        let res = Resources::new(h, 64, 16, 16, 4).unwrap();
        h.share_registrations(regs.remove(0), res.pd);
        h.listen(SocketAddrV4::new(SERVER_IP, 4791), res.init)
            .unwrap();
        s.push(l);
        sres.push(res);
        if lane == 1 {
            let mut c = RdmaStack::new(cp, addr(CLIENT_IP), stack_cfg(2, 22))
                .unwrap()
                .poll;
            c.handler_mut().set_lane(Lane { lane, lanes: 2 });
            client = Some(c);
        }
    }
    let mut c = client.unwrap();
    let mut cres = Resources::new(c.handler_mut(), 64, 16, 16, 4).unwrap();
    let cbuf = cres.buffer(c.handler_mut(), LEN, all_rights()).unwrap();
    let (_, cqp) = c
        .handler_mut()
        .connect(
            CLIENT_IP,
            SocketAddrV4::new(SERVER_IP, 4791),
            cres.init,
            b"",
        )
        .unwrap();
    let mut bed = Bed {
        s: s.try_into().unwrap_or_else(|_| unreachable!()),
        sres: sres.try_into().unwrap_or_else(|_| unreachable!()),
        c,
        cres,
        cbuf,
        cqp,
        sqp: QpId(0),
        views: vec![memory.view(), memory.view()],
    };
    let (mut sqp, mut up) = (None, (false, false));
    let end = clock::now() + Duration::from_secs(10);
    while !(up.0 && up.1) {
        assert!(clock::now() < end, "no connection");
        bed.spin();
        assert!(bed.s[0].handler_mut().poll_cm_event().is_none(), "lane 0");
        while let Some(e) = bed.s[1].handler_mut().poll_cm_event() {
            match e {
                CmEvent::ConnectRequest { id, qp, .. } => {
                    sqp = Some(qp);
                    bed.s[1].handler_mut().accept(id, b"").unwrap();
                }
                CmEvent::Established { .. } => up.0 = true,
                other => panic!("server: {other:?}"),
            }
        }
        while let Some(e) = bed.c.handler_mut().poll_cm_event() {
            match e {
                CmEvent::Established { .. } => up.1 = true,
                other => panic!("client: {other:?}"),
            }
        }
    }
    assert_eq!(bed.s[1].handler().foreign_connections(), 0);
    bed.sqp = sqp.unwrap();
    bed
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn a_region_registered_on_lane_0_takes_a_write_on_lane_1_until_deregistered() {
    let mut b = bed();
    let spec = MrSpec {
        pbl: PageList::contiguous(OFF as u64, LEN as u64, 4096),
        base: TaggedBase::Va(REGION_VA_BASE + OFF as u64),
        pd: b.sres[0].pd,
        key: 5,
        remote_access: true,
        access: Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    };
    let [s0, s1] = &mut b.s;
    let stag = meanwhile(s1, || s0.handler_mut().register_shared_mr(&spec)).unwrap();
    // Lane 1 holds the region under the same STag, in its own PD, already.
    let on_lane_1 = b.s[1].handler().rnic().query_mr(stag).unwrap();
    assert!(on_lane_1.shared);
    let remote = RemoteBuf {
        stag,
        to: REGION_VA_BASE + OFF as u64,
    };
    let first = pattern(1);
    assert_eq!(b.write(1, remote, &first), CompletionStatus::Success);
    let end = clock::now() + Duration::from_secs(10);
    while b.region(0) != first {
        assert!(clock::now() < end, "the write never reached lane 0's view");
        b.spin();
    }
    assert_eq!(b.region(1), first, "one mapping behind both lanes");
    assert_eq!(b.s[1].handler().counters().terminates_sent, 0);

    let [s0, s1] = &mut b.s;
    meanwhile(s1, || s0.handler_mut().deregister_shared_mr(stag)).unwrap();
    assert!(
        b.s[1].handler().rnic().query_mr(stag).is_err(),
        "gone on lane 1 at once"
    );
    assert!(matches!(
        b.s[0].handler_mut().deregister_shared_mr(stag),
        Err(ShareError::Lane { lane: 0, .. })
    ));
    // A Write TCP took whole before the Terminate came back completes locally (RFC 5040
    // §5.1): one segment's worth, as a connection reads a Write's payload only as TCP sends
    // it (the rest of a longer one is flushed by the Terminate). Lane 1 finds the STag
    // invalid and Terminates; nothing is placed.
    assert_eq!(
        b.write(2, remote, &pattern(2)[..1024]),
        CompletionStatus::Success
    );
    let end = clock::now() + Duration::from_secs(5);
    while b.c.handler().counters().terminates_received == 0 {
        assert!(clock::now() < end, "no Terminate");
        b.spin();
    }
    assert_eq!(b.s[1].handler().counters().terminates_sent, 1);
    assert_eq!(
        b.region(0),
        &first[..],
        "nothing placed after deregistration"
    );
    let sqp = b.sqp;
    let invalid = b.s[1]
        .handler()
        .recent_events()
        .filter(|e| e.kind == AsyncEventKind::InvalidStag && e.resource == EventResource::Qp(sqp))
        .count();
    assert_eq!(
        invalid,
        1,
        "{:?}",
        b.s[1].handler().recent_events().collect::<Vec<_>>()
    );
}
