//! Framer → receiver over a simulated TCP receive path: every size, CRC on/off, markers
//! on/off, reordering, duplication, arbitrary splits (RFC 5044 §4–§6).

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use iwarp::mpa::{
    mulpdu, Consumed, CrcErrorPolicy, Framer, MarkerSpacing, MpaError, Receiver, ReceiverConfig,
};
use iwarp::wire::terminate::TerminateCause;

/// A DDP-looking segment: tagged header (control 0xC1, RDMAP 0x40, STag, TO) + payload.
fn ddp_segment(id: u32, payload_len: usize) -> Vec<u8> {
    let mut v = vec![0xc1, 0x40];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&(id as u64 * 7919).to_be_bytes());
    v.extend((0..payload_len).map(|i| (i as u32 ^ id.wrapping_mul(31)) as u8));
    v
}

/// Messages of every payload size 0..=max, each cut into DDP segments of at most `mulpdu`.
fn segments_for_sizes(max: usize, step: usize, mulpdu: usize) -> Vec<Vec<u8>> {
    let mut segs = Vec::new();
    let mut id = 0u32;
    for size in (0..=max).step_by(step) {
        let mut left = size;
        loop {
            let chunk = left.min(mulpdu - 14);
            segs.push(ddp_segment(id, chunk));
            id += 1;
            left -= chunk;
            if left == 0 {
                break;
            }
        }
    }
    segs
}

/// FPDU-aligned units of at most `emss` octets: (stream position, bytes).
fn units(framer: &Framer, start: u32, emss: usize, segs: &[Vec<u8>]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pos = 0u64;
    let mut i = 0;
    while i < segs.len() {
        let gathers: Vec<Vec<&[u8]>> = segs[i..]
            .iter()
            .take(8)
            .map(|s| vec![&s[..2], &s[2..]])
            .collect();
        let mut buf = Vec::new();
        let seq = start.wrapping_add(pos as u32);
        let info = framer.build_unit(seq, emss, &gathers, &mut buf).unwrap();
        assert!(info.fpdus > 0 && buf.len() <= emss);
        assert_eq!(info.end_seq, seq.wrapping_add(buf.len() as u32));
        out.push((pos, buf));
        pos += info.len as u64;
        i += info.fpdus;
    }
    out
}

#[derive(Default)]
struct Sink {
    got: Vec<(u32, Vec<u8>, bool)>,
}

/// A TCP receive path that offers every segment to MPA first and buffers only what MPA
/// did not consume (DESIGN.md "placement before copy").
struct TcpSim {
    start: u32,
    rcv_nxt: u64,
    buffered: BTreeMap<u64, Vec<u8>>,
    consumed: BTreeMap<u64, u64>,
}

impl TcpSim {
    fn new(start: u32) -> Self {
        TcpSim {
            start,
            rcv_nxt: 0,
            buffered: BTreeMap::new(),
            consumed: BTreeMap::new(),
        }
    }

    fn seq(&self, pos: u64) -> u32 {
        self.start.wrapping_add(pos as u32)
    }

    fn arrive(
        &mut self,
        rx: &mut Receiver,
        sink: &mut Sink,
        mut pos: u64,
        mut data: &[u8],
    ) -> Result<Consumed, MpaError> {
        if pos + data.len() as u64 <= self.rcv_nxt {
            return Ok(Consumed::NONE);
        }
        if pos < self.rcv_nxt {
            data = &data[(self.rcv_nxt - pos) as usize..];
            pos = self.rcv_nxt;
        }
        let mut deliver =
            |d: iwarp::mpa::Delivery<'_>| sink.got.push((d.seq, d.ulpdu.to_vec(), d.in_order));
        if pos == self.rcv_nxt {
            let c = rx.handle_segment(self.seq(pos), data, true, &mut deliver)?;
            assert_eq!(c.len(), data.len(), "in-order bytes are always consumed");
            self.rcv_nxt += data.len() as u64;
            self.drain(rx, sink)?;
            return Ok(c);
        }
        let c = rx.handle_segment(self.seq(pos), data, false, &mut deliver)?;
        if c.start > 0 {
            self.buffered.insert(pos, data[..c.start].to_vec());
        }
        if c.end < data.len() {
            self.buffered
                .insert(pos + c.end as u64, data[c.end..].to_vec());
        }
        if !c.is_empty() {
            self.consumed
                .insert(pos + c.start as u64, pos + c.end as u64);
        }
        Ok(c)
    }

    fn drain(&mut self, rx: &mut Receiver, sink: &mut Sink) -> Result<(), MpaError> {
        loop {
            let nxt = self.rcv_nxt;
            if let Some((_, &end)) = self.consumed.range(..=nxt).rev().find(|(_, &e)| e > nxt) {
                self.rcv_nxt = end;
                rx.handle_rcv_nxt(self.seq(end))?;
                continue;
            }
            let hit = self
                .buffered
                .range(..=nxt)
                .rev()
                .find(|(&p, d)| p + d.len() as u64 > nxt)
                .map(|(&p, d)| (p, d.clone()));
            match hit {
                Some((p, d)) => {
                    let off = (nxt - p) as usize;
                    rx.handle_in_order(self.seq(nxt), &d[off..], |d| {
                        sink.got.push((d.seq, d.ulpdu.to_vec(), d.in_order))
                    })?;
                    self.rcv_nxt = p + d.len() as u64;
                }
                None => return Ok(()),
            }
        }
    }
}

/// Every ULPDU delivered exactly once, byte-exact, in stream order (`base` = start seq).
fn check_exact(segs: &[Vec<u8>], sink: &Sink, base: u32) {
    assert_eq!(sink.got.len(), segs.len(), "every ULPDU exactly once");
    let mut seqs: Vec<u32> = sink.got.iter().map(|g| g.0).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), segs.len(), "no FPDU delivered twice");
    // In-order deliveries come in stream order; out-of-order ones carry their position.
    let mut by_order = sink.got.clone();
    by_order.sort_by_key(|g| g.0.wrapping_sub(base));
    for (i, (_, u, _)) in by_order.iter().enumerate() {
        assert_eq!(u, &segs[i], "ULPDU {i} byte-exact");
    }
    let in_order: Vec<u32> = sink
        .got
        .iter()
        .filter(|g| g.2)
        .map(|g| g.0.wrapping_sub(base))
        .collect();
    assert!(
        in_order.windows(2).all(|w| w[0] < w[1]),
        "in-order deliveries in order"
    );
}

fn config(crc: bool, markers: bool, start: u32, max: usize) -> (Framer, ReceiverConfig) {
    let framer = Framer::new(crc, markers.then(|| MarkerSpacing::new(start)));
    let rc = ReceiverConfig {
        crc,
        markers,
        start_seq: start,
        min_ulpdu_len: 14,
        max_ulpdu_len: max as u16,
        crc_errors: CrcErrorPolicy::Fail,
    };
    (framer, rc)
}

const EMSS: usize = 600;
const STARTS: [u32; 2] = [1000, u32::MAX - 3000];

/// One run: the DDP segments of every message size up to three MULPDUs (in steps of
/// `step`), framed from `start` into units of at most EMSS octets, and a fresh receiver,
/// TCP receive path and sink for them.
struct Run {
    segs: Vec<Vec<u8>>,
    units: Vec<(u64, Vec<u8>)>,
    rx: Receiver,
    sim: TcpSim,
    sink: Sink,
}

impl Run {
    fn new(crc: bool, markers: bool, start: u32, step: usize) -> Run {
        let m = mulpdu(EMSS, markers);
        let segs = segments_for_sizes(3 * m, step, m);
        let (framer, rc) = config(crc, markers, start, m);
        Run {
            units: units(&framer, start, EMSS, &segs),
            segs,
            rx: Receiver::new(rc),
            sim: TcpSim::new(start),
            sink: Sink::default(),
        }
    }
}

#[test]
fn every_size_in_order_units() {
    // RFC 5044 §4.1, §6: each unit holds whole FPDUs; the receiver recovers every ULPDU.
    for crc in [false, true] {
        for markers in [false, true] {
            for start in STARTS {
                let mut r = Run::new(crc, markers, start, 1);
                for (pos, u) in &r.units {
                    r.sim.arrive(&mut r.rx, &mut r.sink, *pos, u).unwrap();
                }
                check_exact(&r.segs, &r.sink, start);
                assert!(r.sink.got.iter().all(|g| g.2));
            }
        }
    }
}

#[test]
fn arbitrary_splits_in_order() {
    // TCP is a byte stream: FPDUs and markers may be cut anywhere.
    let mut rng = StdRng::seed_from_u64(7);
    for crc in [false, true] {
        for markers in [false, true] {
            let start = STARTS[1];
            let mut r = Run::new(crc, markers, start, 7);
            let stream: Vec<u8> = r.units.iter().flat_map(|(_, u)| u.clone()).collect();
            let mut pos = 0usize;
            while pos < stream.len() {
                let n = rng.gen_range(1..=700).min(stream.len() - pos);
                let piece = &stream[pos..pos + n];
                r.sim
                    .arrive(&mut r.rx, &mut r.sink, pos as u64, piece)
                    .unwrap();
                pos += n;
            }
            check_exact(&r.segs, &r.sink, start);
        }
    }
}

#[test]
fn random_order_duplicates_and_splits() {
    // Out-of-order placement: FPDUs found ahead of RCV.NXT are handed up at once; the
    // in-order pass never delivers them again (RFC 5044 §5, §6; RFC 5041 §5.3).
    let mut rng = StdRng::seed_from_u64(42);
    for round in 0..6 {
        for crc in [false, true] {
            for markers in [false, true] {
                let start = STARTS[round % 2];
                let mut r = Run::new(crc, markers, start, 13);
                // Some units are re-split at random points (a non-aligned sender or a
                // retransmission with other boundaries), some duplicated.
                let mut pieces: Vec<(u64, Vec<u8>)> = Vec::new();
                for (pos, u) in &r.units {
                    if rng.gen_bool(0.3) && u.len() > 1 {
                        let cut = rng.gen_range(1..u.len());
                        pieces.push((*pos, u[..cut].to_vec()));
                        pieces.push((*pos + cut as u64, u[cut..].to_vec()));
                    } else {
                        pieces.push((*pos, u.clone()));
                    }
                    if rng.gen_bool(0.2) {
                        pieces.push((*pos, u.clone()));
                    }
                }
                pieces.shuffle(&mut rng);
                for (pos, p) in &pieces {
                    r.sim.arrive(&mut r.rx, &mut r.sink, *pos, p).unwrap();
                }
                // Everything arrived: the stream is complete.
                let total: u64 = r.units.iter().map(|(_, u)| u.len() as u64).sum();
                assert_eq!(r.sim.rcv_nxt, total);
                check_exact(&r.segs, &r.sink, start);
                if crc || markers {
                    assert!(
                        r.sink.got.iter().any(|g| !g.2),
                        "some FPDUs placed out of order (crc {crc}, markers {markers})"
                    );
                }
                assert_eq!(r.rx.pending_out_of_order(), 0);
            }
        }
    }
}

fn ahead_before_gap(crc: bool, markers: bool) -> (Vec<Vec<u8>>, Sink, Consumed) {
    let mut r = Run::new(crc, markers, 5000, 97);
    let (pos, u) = &r.units[3];
    let c = r.sim.arrive(&mut r.rx, &mut r.sink, *pos, u).unwrap();
    (r.segs, r.sink, c)
}

#[test]
fn segment_ahead_is_handed_up_before_the_gap_fills() {
    // RFC 5044 §5 (markers) and §6 (aligned segments + CRC): a unit that arrives before
    // its predecessors is placed at once.
    for (crc, markers) in [(false, true), (true, true), (true, false), (false, false)] {
        let (_, sink, c) = ahead_before_gap(crc, markers);
        assert!(!sink.got.is_empty(), "crc {crc} markers {markers}");
        assert!(sink.got.iter().all(|g| !g.2));
        assert!(!c.is_empty());
    }
}

#[test]
fn markers_locate_fpdus_in_a_segment_starting_mid_fpdu() {
    // RFC 5044 §5: a marker inside an out-of-order segment points back to the start of
    // an FPDU, even when the segment itself starts inside another FPDU.
    let start = 77;
    let segs: Vec<Vec<u8>> = (0..200)
        .map(|i| ddp_segment(i, 10 + i as usize % 7))
        .collect();
    let (framer, rc) = config(false, true, start, 600);
    let stream: Vec<u8> = units(&framer, start, EMSS, &segs)
        .into_iter()
        .flat_map(|(_, u)| u)
        .collect();
    // Where each FPDU's ULPDU_Length sits, by parsing the stream in order.
    let mut in_order = Vec::new();
    Receiver::new(rc)
        .handle_segment(start, &stream, true, |d| {
            in_order.push((d.seq, d.ulpdu.to_vec()))
        })
        .unwrap();
    assert_eq!(in_order.len(), segs.len());
    let (from, to) = (201usize, 1203usize);
    let mut rx = Receiver::new(rc);
    let mut got = Vec::new();
    let c = rx
        .handle_segment(start + from as u32, &stream[from..to], false, |d| {
            got.push((d.seq, d.ulpdu.to_vec()))
        })
        .unwrap();
    // Found through the first marker in the segment (stream offset 512): the FPDU that
    // holds it starts at most one FPDU (< 40 octets) before it.
    let marker_off = 512 - from;
    assert!(
        c.start > 0 && c.start <= marker_off && marker_off - c.start < 40,
        "octets before the located FPDU left to TCP: {c:?}"
    );
    assert!(c.end <= to - from);
    assert!(got.len() > 15, "{}", got.len());
    assert!(c.end + 40 > to - from, "placed up to the last whole FPDU");
    for g in &got {
        assert!(
            in_order.contains(g),
            "placed FPDU matches the in-order parse"
        );
    }
    // Without markers and CRC the same segment is never placed.
    let (_, rc) = config(false, false, start, 600);
    let mut rx = Receiver::new(rc);
    let mut n = 0;
    let plain: Vec<u8> = units(&Framer::new(false, None), start, EMSS, &segs)
        .into_iter()
        .flat_map(|(_, u)| u)
        .collect();
    let c = rx
        .handle_segment(start + from as u32, &plain[from..to], false, |_| n += 1)
        .unwrap();
    assert_eq!((n, c), (0, Consumed::NONE));
}

fn one_stream(crc: bool, markers: bool) -> (Vec<Vec<u8>>, Vec<u8>, ReceiverConfig) {
    let start = 0;
    let m = mulpdu(EMSS, markers);
    let segs = segments_for_sizes(2 * m, 101, m);
    let (framer, rc) = config(crc, markers, start, m);
    let stream = units(&framer, start, EMSS, &segs)
        .into_iter()
        .flat_map(|(_, u)| u)
        .collect();
    (segs, stream, rc)
}

#[test]
fn crc_mismatch_is_2_0_02() {
    // RFC 5044 §8: MPA CRC error.
    let (_, mut stream, rc) = one_stream(true, false);
    stream[40] ^= 0x01;
    let mut rx = Receiver::new(rc);
    let mut n = 0;
    let e = rx.handle_segment(0, &stream, true, |_| n += 1).unwrap_err();
    assert!(matches!(e, MpaError::CrcMismatch { .. }), "{e:?}");
    assert_eq!(e.terminate_cause(), TerminateCause::MPA_CRC_ERROR);
    assert_eq!(e.terminate_cause(), TerminateCause::new(2, 0, 0x02));
    assert_eq!(
        rx.handle_in_order(rx.next_seq(), &[0], |_| ()),
        Err(MpaError::Stopped)
    );
}

#[test]
fn corrupted_segment_ahead_is_not_placed_and_fails_in_order() {
    let (_, mut stream, rc) = one_stream(true, false);
    let first_len = (u16::from_be_bytes([stream[0], stream[1]]) as usize + 2).div_ceil(4) * 4 + 4;
    stream[first_len + 20] ^= 0x80;
    let mut rx = Receiver::new(rc);
    let mut got = 0;
    let c = rx
        .handle_segment(first_len as u32, &stream[first_len..], false, |_| got += 1)
        .unwrap();
    assert_eq!(got, 0);
    assert!(c.is_empty());
    let e = rx.handle_segment(0, &stream, true, |_| ()).unwrap_err();
    assert_eq!(e.terminate_cause(), TerminateCause::MPA_CRC_ERROR);
}

#[test]
fn crc_off_ignores_crc_field() {
    let (segs, mut stream, rc) = one_stream(false, false);
    let first_len = (u16::from_be_bytes([stream[0], stream[1]]) as usize + 2).div_ceil(4) * 4 + 4;
    stream[first_len - 1] = 0x55;
    let mut rx = Receiver::new(rc);
    let mut got = Vec::new();
    rx.handle_segment(0, &stream, true, |d| got.push(d.ulpdu.to_vec()))
        .unwrap();
    assert_eq!(got, segs);
}

#[test]
fn marker_disagreeing_with_length_is_2_0_03() {
    // RFC 5044 §8: marker and ULPDU_Length disagree.
    let (_, mut stream, rc) = one_stream(false, true);
    // The marker at 512 lies inside the first FPDU (EMSS 600 > 512).
    stream[515] ^= 0x04;
    let mut rx = Receiver::new(rc);
    let e = rx.handle_segment(0, &stream, true, |_| ()).unwrap_err();
    assert!(
        matches!(e, MpaError::MarkerMismatch { seq: 512, .. }),
        "{e:?}"
    );
    assert_eq!(e.terminate_cause(), TerminateCause::new(2, 0, 0x03));
    // A leading marker must point at its own position.
    let (_, mut stream, rc) = one_stream(false, true);
    stream[3] = 1;
    let mut rx = Receiver::new(rc);
    let e = rx.handle_segment(0, &stream, true, |_| ()).unwrap_err();
    assert!(
        matches!(
            e,
            MpaError::MarkerMismatch {
                seq: 0,
                fpduptr: 1,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn nonsense_ulpdu_length_is_2_0_03() {
    // ULPDU_Length shorter than a DDP header (RFC 5041 §4.2: 14) or above the limit.
    for len in [0u16, 13, 601] {
        let mut fpdu = len.to_be_bytes().to_vec();
        fpdu.extend_from_slice(&[0xc1, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let mut rx = Receiver::new(ReceiverConfig {
            crc: false,
            markers: false,
            start_seq: 0,
            min_ulpdu_len: 14,
            max_ulpdu_len: 600,
            crc_errors: CrcErrorPolicy::Fail,
        });
        let e = rx.handle_segment(0, &fpdu, true, |_| ()).unwrap_err();
        assert!(
            matches!(e, MpaError::BadUlpduLength { len: l, .. } if l == len),
            "{e:?}"
        );
        assert_eq!(e.terminate_cause(), TerminateCause::MPA_MARKER_MISMATCH);
    }
}

#[test]
fn gap_without_consumed_fpdus_is_an_error() {
    let (_, stream, rc) = one_stream(false, false);
    let mut rx = Receiver::new(rc);
    let e = rx.handle_in_order(100, &stream[100..], |_| ()).unwrap_err();
    assert_eq!(
        e,
        MpaError::StreamGap {
            seq: 100,
            expected: 0
        }
    );
    assert_eq!(e.terminate_cause(), TerminateCause::MPA_LOCAL_CATASTROPHIC);
}

#[test]
fn zero_copy_when_fpdu_is_contiguous() {
    let (_, stream, rc) = one_stream(true, false);
    let mut rx = Receiver::new(rc);
    let base = stream.as_ptr() as usize;
    let mut inside = true;
    rx.handle_segment(0, &stream, true, |d| {
        let p = d.ulpdu.as_ptr() as usize;
        inside &= p >= base && p < base + stream.len();
    })
    .unwrap();
    assert!(inside, "ULPDUs borrowed from the segment");
}

#[test]
fn crc_errors_can_be_delivered_for_analysis() {
    // Capture analysis keeps going after a bad CRC and reports it per FPDU.
    let (segs, mut stream, mut rc) = one_stream(true, false);
    stream[40] ^= 0x01;
    rc.crc_errors = CrcErrorPolicy::Deliver;
    let mut rx = Receiver::new(rc);
    let mut verdicts = Vec::new();
    rx.handle_segment(0, &stream, true, |d| verdicts.push(d.crc))
        .unwrap();
    assert_eq!(verdicts.len(), segs.len());
    let bad = verdicts
        .iter()
        .filter(|v| matches!(v, iwarp::mpa::CrcCheck::Bad { .. }))
        .count();
    let good = verdicts
        .iter()
        .filter(|v| **v == iwarp::mpa::CrcCheck::Good)
        .count();
    assert_eq!((bad, good), (1, segs.len() - 1));
}
