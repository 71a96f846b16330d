//! Memory registrations shared by the lanes of a data plane: a region registered once, on
//! any lane, is usable by the QPs of every lane under one STag.
//!
//! Each lane keeps its own copy of the shared regions in its RNIC's STag table (the
//! per-packet path looks up its own table, as before: no lock, no shared atomic). A
//! registration or deregistration is a message to every other lane: the lane applies it
//! between two poll-loop iterations ([`LaneRegistrations::apply`], one look at an empty
//! channel per iteration) and answers; the verb returns once every lane has answered, so a
//! region is valid on every lane when [`LaneRegistrations::register`] returns, and gone
//! from every lane when [`LaneRegistrations::deregister`] returns. While it waits, the
//! calling lane applies the others' messages, so two lanes registering at once do not wait
//! for each other forever.
//!
//! The lanes' RNICs place into one mapping ([`crate::hugemem::SharedMemory`]); a shared
//! region has an STag index with [`LANE_STAG_BIT`], chosen here, which no RNIC picks for its
//! own registrations ([`Rnic::reserve_lane_stags`]). Shared regions are Shared MRs
//! (VERBS-00 §7.3.2.4): Invalidate (local or remote), Reregister and Fast-Register are
//! refused, so no lane's copy changes alone.

use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iwarp::verbs::{MrSpec, PdId, Rnic, STag, VerbError, LANE_STAG_BIT};
use rustc_hash::FxHashSet;

/// How long a registration waits for every lane to answer (a lane that stopped polling).
pub const SHARE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a shared registration or deregistration failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// The handler shares no registrations (`RdmaHandler::share_registrations`).
    #[error("this lane shares no registrations")]
    NotShared,
    /// The region's PD is not the PD this lane shares regions in.
    #[error("the region's PD is not the lane's shared PD")]
    NotSharedPd,
    /// This lane's RNIC refused.
    #[error("lane {lane}: {error}")]
    Lane {
        /// The lane.
        lane: usize,
        /// What its RNIC said.
        error: VerbError,
    },
    /// A lane did not answer within [`SHARE_TIMEOUT`].
    #[error("a lane did not answer within {0:?}")]
    Timeout(Duration),
    /// A lane is gone (its registrations were dropped).
    #[error("lane {0} is gone")]
    LaneGone(usize),
}

/// A lane's answer to a change: which lane, and what its RNIC said.
type Answer = (usize, Result<(), VerbError>);

/// A change of the shared regions, sent to every other lane.
#[derive(Debug)]
enum Message {
    /// Register `spec` (its PD replaced by the lane's shared PD) at STag index `index`.
    Register {
        index: u32,
        spec: MrSpec,
        done: Sender<Answer>,
    },
    /// Deallocate `stag`.
    Deregister { stag: STag, done: Sender<Answer> },
}

/// What the lanes share: each lane's inbox, and the STag indices in use.
#[derive(Debug)]
struct Hub {
    inboxes: Vec<Sender<Message>>,
    indices: LaneStagIndices,
}

/// The STag indices of regions shared by lanes: fresh sparse indices with
/// [`LANE_STAG_BIT`], each held until it is released. Whoever registers a region on every
/// lane ([`Rnic::register_mr_at`] on each, after [`Rnic::reserve_lane_stags`]) takes its
/// index here.
#[derive(Debug)]
pub struct LaneStagIndices {
    /// The generator's state and the indices in use.
    state: Mutex<(u64, FxHashSet<u32>)>,
}

impl LaneStagIndices {
    /// Indices drawn from a generator seeded with `seed`.
    pub fn new(seed: u64) -> LaneStagIndices {
        LaneStagIndices {
            state: Mutex::new((seed | 1, FxHashSet::default())),
        }
    }

    /// A fresh sparse index with [`LANE_STAG_BIT`] (xorshift64*, as the RNIC's own).
    pub fn fresh(&self) -> u32 {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (rng, used) = &mut *guard;
        loop {
            let mut x = *rng;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            *rng = x;
            let idx = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as u32 & 0x00FF_FFFF;
            let idx = idx | LANE_STAG_BIT;
            if used.insert(idx) {
                return idx;
            }
        }
    }

    /// `index` is free again.
    pub fn release(&self, index: u32) {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        guard.1.remove(&index);
    }
}

/// One lane's end of the shared registrations: what it applies, and the calls that change
/// the regions of every lane.
#[derive(Debug)]
pub struct LaneRegistrations {
    lane: usize,
    hub: Arc<Hub>,
    inbox: Receiver<Message>,
    /// The PD this lane's copies of shared regions belong to.
    pd: Option<PdId>,
    timeout: Duration,
}

/// The ends of `lanes` lanes sharing registrations, lane 0 first; `seed` seeds the STag
/// index generator.
pub fn lane_registrations(lanes: usize, seed: u64) -> Vec<LaneRegistrations> {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..lanes).map(|_| channel()).unzip();
    let hub = Arc::new(Hub {
        inboxes: senders,
        indices: LaneStagIndices::new(seed),
    });
    receivers
        .into_iter()
        .enumerate()
        .map(|(lane, inbox)| LaneRegistrations {
            lane,
            hub: Arc::clone(&hub),
            inbox,
            pd: None,
            timeout: SHARE_TIMEOUT,
        })
        .collect()
}

impl LaneRegistrations {
    /// This lane's index.
    pub fn lane(&self) -> usize {
        self.lane
    }

    /// Makes `pd` the PD of this lane's copies of shared regions (the lane's QPs that use
    /// them are in it) and keeps `rnic`'s own STag indices out of the shared ones: call it
    /// before the lane registers anything.
    pub fn attach(&mut self, rnic: &mut Rnic, pd: PdId) {
        rnic.reserve_lane_stags();
        self.pd = Some(pd);
    }

    /// Registers `spec` (in this lane's shared PD) on every lane under one STag; returns
    /// when every lane holds it. A lane that refuses undoes the registration everywhere.
    pub fn register(&mut self, rnic: &mut Rnic, spec: &MrSpec) -> Result<STag, ShareError> {
        if self.pd != Some(spec.pd) {
            return Err(ShareError::NotSharedPd);
        }
        let index = self.hub.indices.fresh();
        let stag = match rnic.register_mr_at(index, spec) {
            Ok(stag) => stag,
            Err(error) => {
                self.hub.indices.release(index);
                return Err(ShareError::Lane {
                    lane: self.lane,
                    error,
                });
            }
        };
        let sent = self.broadcast(|done| Message::Register {
            index,
            spec: spec.clone(),
            done,
        });
        match sent.and_then(|(n, rx)| self.wait(rnic, n, rx)) {
            Ok(()) => Ok(stag),
            Err(e) => {
                let _ = self.deregister(rnic, stag);
                Err(e)
            }
        }
    }

    /// Deallocates the shared region `stag` on every lane; returns when no lane holds it
    /// any more (a Write that reaches any lane afterwards meets an invalid STag). An STag
    /// that is not a shared region this lane holds is refused at once.
    pub fn deregister(&mut self, rnic: &mut Rnic, stag: STag) -> Result<(), ShareError> {
        if stag.index() & LANE_STAG_BIT == 0 {
            return Err(ShareError::Lane {
                lane: self.lane,
                error: VerbError::InvalidStagIndex,
            });
        }
        // A region this lane does not hold is not a live shared region.
        rnic.dealloc_stag(stag).map_err(|error| ShareError::Lane {
            lane: self.lane,
            error,
        })?;
        let (n, rx) = self.broadcast(|done| Message::Deregister { stag, done })?;
        let others = self.wait(rnic, n, rx);
        self.hub.indices.release(stag.index());
        others
    }

    /// Applies the other lanes' changes that arrived since the last call (the poll loop
    /// calls it every iteration).
    pub fn apply(&mut self, rnic: &mut Rnic) {
        loop {
            match self.inbox.try_recv() {
                Ok(m) => self.apply_one(rnic, m),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            }
        }
    }

    fn apply_one(&self, rnic: &mut Rnic, m: Message) {
        let (done, result) = match m {
            Message::Register {
                index,
                mut spec,
                done,
            } => {
                let result = match self.pd {
                    Some(pd) => {
                        spec.pd = pd;
                        rnic.register_mr_at(index, &spec).map(|_| ())
                    }
                    None => Err(VerbError::InvalidPdId),
                };
                (done, result)
            }
            Message::Deregister { stag, done } => (done, rnic.dealloc_stag(stag)),
        };
        // The caller may have given up waiting (timeout): nothing to tell then.
        let _ = done.send((self.lane, result));
    }

    /// Sends `make(reply)` to every other lane; returns how many and where they answer.
    fn broadcast(
        &self,
        make: impl Fn(Sender<Answer>) -> Message,
    ) -> Result<(usize, Receiver<Answer>), ShareError> {
        let (tx, rx) = channel();
        let mut n = 0;
        for (lane, inbox) in self.hub.inboxes.iter().enumerate() {
            if lane == self.lane {
                continue;
            }
            inbox
                .send(make(tx.clone()))
                .map_err(|_| ShareError::LaneGone(lane))?;
            n += 1;
        }
        Ok((n, rx))
    }

    /// Waits for `n` answers on `rx`, applying this lane's own inbox meanwhile; the first
    /// refusal is the result.
    fn wait(&mut self, rnic: &mut Rnic, n: usize, rx: Receiver<Answer>) -> Result<(), ShareError> {
        let deadline = Instant::now() + self.timeout;
        let mut result = Ok(());
        let mut answered = 0;
        while answered < n {
            self.apply(rnic);
            match rx.recv_timeout(Duration::from_micros(50)) {
                Ok((lane, r)) => {
                    answered += 1;
                    if let (Ok(()), Err(error)) = (&result, r) {
                        result = Err(ShareError::Lane { lane, error });
                    }
                }
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(RecvTimeoutError::Timeout) => return Err(ShareError::Timeout(self.timeout)),
                Err(RecvTimeoutError::Disconnected) => return Err(ShareError::LaneGone(self.lane)),
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp::mem::HeapBackend;
    use iwarp::verbs::{
        Access, AddressingMode, PageList, RnicAttributes, RnicDevice, TaggedBase, UlpId,
    };

    fn rnic(seed: u64) -> (Rnic, PdId) {
        let dev = RnicDevice::new("lane", RnicAttributes::default());
        let mut rnic = dev
            .open(
                AddressingMode::Page,
                Box::new(HeapBackend::new(1 << 16)),
                seed,
            )
            .unwrap();
        let pd = rnic.alloc_pd(UlpId(1)).unwrap();
        (rnic, pd)
    }

    fn spec(pd: PdId) -> MrSpec {
        MrSpec {
            pbl: PageList::contiguous(4096, 4096, 4096),
            base: TaggedBase::Va(0x1000),
            pd,
            key: 7,
            remote_access: true,
            access: Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        }
    }

    #[test]
    fn a_registration_returns_once_every_lane_holds_it_and_so_does_a_deregistration() {
        let mut ends = lane_registrations(3, 9);
        let mut lanes: Vec<(Rnic, PdId)> = (0..3).map(|i| rnic(i + 1)).collect();
        for (end, (rnic, pd)) in ends.iter_mut().zip(&mut lanes) {
            end.attach(rnic, *pd);
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut first = ends.remove(0);
        let (mut r0, pd0) = lanes.remove(0);
        std::thread::scope(|s| {
            let others: Vec<_> = ends
                .into_iter()
                .zip(lanes)
                .map(|(mut end, (mut rnic, _))| {
                    let stop = &stop;
                    s.spawn(move || {
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            end.apply(&mut rnic);
                        }
                        rnic
                    })
                })
                .collect();
            let stag = first.register(&mut r0, &spec(pd0)).unwrap();
            assert_ne!(stag.index() & LANE_STAG_BIT, 0);
            assert_eq!(
                first.register(&mut r0, &spec(PdId(99))),
                Err(ShareError::NotSharedPd)
            );
            let second = first.register(&mut r0, &spec(pd0)).unwrap();
            first.deregister(&mut r0, stag).unwrap();
            assert_eq!(
                first.deregister(&mut r0, stag),
                Err(ShareError::Lane {
                    lane: 0,
                    error: VerbError::InvalidStagIndex
                })
            );
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            for h in others {
                let rnic = h.join().unwrap();
                let stags = rnic.memory().stags();
                assert_eq!(stags.len(), 1, "{stags:?}");
                assert_eq!(stags[0].index, second.index());
                assert!(rnic.query_mr(second).unwrap().shared);
            }
        });
    }

    // Two lanes registering at once each apply the other's registrations while they wait
    // for the answers: neither waits for the other forever, and both end with every region.
    #[test]
    fn lanes_registering_at_once_do_not_wait_for_each_other() {
        let ends = lane_registrations(2, 5);
        let lanes: Vec<_> = ends
            .into_iter()
            .enumerate()
            .map(|(k, mut end)| {
                let (mut r, pd) = rnic(k as u64 + 1);
                end.attach(&mut r, pd);
                (end, r, pd)
            })
            .collect();
        let finished = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<(Rnic, Vec<STag>)> = std::thread::scope(|s| {
            let handles: Vec<_> = lanes
                .into_iter()
                .map(|(mut end, mut r, pd)| {
                    let finished = &finished;
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        for _ in 0..50 {
                            mine.push(end.register(&mut r, &spec(pd)).unwrap());
                        }
                        finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        // Keep answering until the other lane is done too.
                        while finished.load(std::sync::atomic::Ordering::SeqCst) < 2 {
                            end.apply(&mut r);
                        }
                        (r, mine)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let all: Vec<STag> = results.iter().flat_map(|(_, m)| m.clone()).collect();
        assert_eq!(all.len(), 100);
        for (r, _) in &results {
            let held: Vec<u32> = r.memory().stags().iter().map(|i| i.index).collect();
            assert_eq!(held.len(), 100);
            for stag in &all {
                assert!(held.contains(&stag.index()), "{stag:?}");
            }
        }
    }

    #[test]
    fn a_lane_that_does_not_answer_times_out_and_a_refusal_is_undone_everywhere() {
        let mut ends = lane_registrations(2, 3);
        let (mut r0, pd0) = rnic(1);
        ends[0].attach(&mut r0, pd0);
        ends[0].timeout = Duration::from_millis(20);
        assert_eq!(
            ends[0].register(&mut r0, &spec(pd0)),
            Err(ShareError::Timeout(Duration::from_millis(20)))
        );
        assert!(r0.memory().stags().is_empty(), "undone on the calling lane");
        // Lane 1 without a shared PD refuses; the region is gone from lane 0 again.
        let mut ends = lane_registrations(2, 3);
        let (mut r1, _) = rnic(2);
        ends[0].attach(&mut r0, pd0);
        let mut one = ends.pop().unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let h = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    one.apply(&mut r1);
                }
                r1
            }
        });
        assert_eq!(
            ends[0].register(&mut r0, &spec(pd0)),
            Err(ShareError::Lane {
                lane: 1,
                error: VerbError::InvalidPdId
            })
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(r0.memory().stags().is_empty());
        assert!(h.join().unwrap().memory().stags().is_empty());
    }
}
