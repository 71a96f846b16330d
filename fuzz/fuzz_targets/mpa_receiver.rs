//! The MPA FPDU receiver (RFC 5044 §4–§6) fed TCP segment sequences with sequence numbers.
//!
//! Mode byte (first input byte): bit 0 CRC, bit 1 markers, bit 2 CRC errors delivered
//! instead of failing, bit 7 model mode.
//!
//! * Raw mode: `[mode][start_seq u32][min_ulpdu u8][max_ulpdu u16]` then records
//!   `[kind u8][seq offset u32][len u16][payload]`; `kind % 4` selects `handle_segment`
//!   in order / ahead, `handle_in_order` or `handle_rcv_nxt`. Nothing may panic, consumed
//!   ranges stay inside the payload and every ULPDU handed up respects the limits.
//! * Model mode: `[mode][start_seq u32][emss u16][count u8][ulpdu lengths u16...]` then one
//!   byte per unit (bit 0: cut it at the next `u16`, bit 1: send it twice) and swap pairs
//!   reordering the pieces. The framer builds the units of a valid stream, the pieces go
//!   through a model of the TCP receive path (placement before copy), and every ULPDU must
//!   come out exactly once, byte-exact, with no error. Without CRC and markers the pieces
//!   stay FPDU-aligned (RFC 5044 §6: nothing else can be located).
#![no_main]

use std::collections::BTreeMap;

use iwarp::mpa::{
    mulpdu, Consumed, CrcCheck, CrcErrorPolicy, Delivery, Framer, MarkerSpacing, MpaError,
    Receiver, ReceiverConfig,
};
use iwarp_fuzz::format::receiver::*;
use iwarp_fuzz::Input;
use libfuzzer_sys::fuzz_target;

fn raw(mode: u8, mut input: Input<'_>) {
    let crc = mode & 1 != 0;
    let start = input.u32();
    let min = u16::from(input.u8());
    let max = match input.u16() {
        0 => u16::MAX,
        m => m,
    };
    let mut rx = Receiver::new(ReceiverConfig {
        crc,
        markers: mode & 2 != 0,
        start_seq: start,
        min_ulpdu_len: min,
        max_ulpdu_len: max,
        crc_errors: if mode & 4 != 0 {
            CrcErrorPolicy::Deliver
        } else {
            CrcErrorPolicy::Fail
        },
    });
    while !input.is_empty() {
        let kind = input.u8() % 4;
        let seq = start.wrapping_add(input.u32());
        let payload = input.chunk(4096);
        let expect_in_order = kind != SEGMENT_AHEAD;
        let mut check = |d: Delivery<'_>| {
            let len = d.ulpdu.len();
            assert!(len >= usize::from(min) && len <= usize::from(max), "{len}");
            assert_eq!(d.in_order, expect_in_order);
            match d.crc {
                CrcCheck::Off => assert!(!crc),
                CrcCheck::Good => assert!(crc),
                CrcCheck::Bad { computed, received } => {
                    assert!(crc && mode & 4 != 0 && computed != received)
                }
            }
        };
        match kind {
            SEGMENT_IN_ORDER | SEGMENT_AHEAD => {
                if let Ok(c) = rx.handle_segment(seq, payload, kind == SEGMENT_IN_ORDER, &mut check)
                {
                    assert!(c.start <= c.end || c.is_empty());
                    assert!(c.end <= payload.len(), "consumed past the payload");
                    if kind == SEGMENT_IN_ORDER {
                        assert_eq!((c.start, c.end), (0, payload.len()));
                    }
                }
            }
            IN_ORDER => {
                let _ = rx.handle_in_order(seq, payload, &mut check);
            }
            _ => {
                let _ = rx.handle_rcv_nxt(seq);
            }
        }
        let _ = rx.next_seq();
        let _ = rx.is_at_boundary();
    }
}

/// A DDP-looking ULPDU (tagged, last, DV 1) whose content the fuzzer cannot choose, so no
/// forged FPDU can hide inside it.
fn ulpdu(index: u32, len: usize) -> Vec<u8> {
    let mut v = vec![0xc1, 0x41];
    v.extend_from_slice(&index.to_be_bytes());
    let mut x = u64::from(index).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v.truncate(len);
    v
}

/// TCP's receive path as DESIGN.md describes it: segments are offered to MPA first, only
/// what MPA did not consume is buffered for in-order delivery.
struct TcpModel {
    start: u32,
    rcv_nxt: u64,
    buffered: BTreeMap<u64, Vec<u8>>,
    consumed: BTreeMap<u64, u64>,
    got: Vec<(u32, Vec<u8>, bool)>,
}

impl TcpModel {
    fn seq(&self, pos: u64) -> u32 {
        self.start.wrapping_add(pos as u32)
    }

    fn arrive(&mut self, rx: &mut Receiver, mut pos: u64, mut data: &[u8]) -> Result<(), MpaError> {
        if pos + data.len() as u64 <= self.rcv_nxt {
            return Ok(());
        }
        if pos < self.rcv_nxt {
            data = &data[(self.rcv_nxt - pos) as usize..];
            pos = self.rcv_nxt;
        }
        let seq = self.seq(pos);
        let got = &mut self.got;
        let mut sink = |d: Delivery<'_>| got.push((d.seq, d.ulpdu.to_vec(), d.in_order));
        if pos == self.rcv_nxt {
            let c = rx.handle_segment(seq, data, true, &mut sink)?;
            assert_eq!(c.len(), data.len(), "in-order octets are always consumed");
            self.rcv_nxt += data.len() as u64;
            return self.drain(rx);
        }
        let c: Consumed = rx.handle_segment(seq, data, false, &mut sink)?;
        assert!(c.end <= data.len());
        if c.is_empty() {
            self.buffered.insert(pos, data.to_vec());
            return Ok(());
        }
        if c.start > 0 {
            self.buffered.insert(pos, data[..c.start].to_vec());
        }
        if c.end < data.len() {
            self.buffered
                .insert(pos + c.end as u64, data[c.end..].to_vec());
        }
        self.consumed
            .insert(pos + c.start as u64, pos + c.end as u64);
        Ok(())
    }

    fn drain(&mut self, rx: &mut Receiver) -> Result<(), MpaError> {
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
            let Some((p, d)) = hit else { return Ok(()) };
            let off = (nxt - p) as usize;
            let seq = self.seq(nxt);
            let got = &mut self.got;
            rx.handle_in_order(seq, &d[off..], |d| {
                got.push((d.seq, d.ulpdu.to_vec(), d.in_order))
            })?;
            self.rcv_nxt = p + d.len() as u64;
        }
    }
}

fn model(mode: u8, mut input: Input<'_>) {
    let crc = mode & 1 != 0;
    let markers = mode & 2 != 0;
    let start = input.u32();
    let emss = 128 + usize::from(input.u16()) % 1400;
    let max = mulpdu(emss, markers);
    let count = 1 + usize::from(input.u8() % 64);
    let ulpdus: Vec<Vec<u8>> = (0..count)
        .map(|i| ulpdu(i as u32, 14 + usize::from(input.u16()) % (max - 13)))
        .collect();
    let framer = Framer::new(crc, markers.then(|| MarkerSpacing::new(start)));
    let mut units: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut pos = 0u64;
    let mut i = 0;
    while i < ulpdus.len() {
        let gathers: Vec<[&[u8]; 1]> = ulpdus[i..].iter().take(8).map(|u| [&u[..]]).collect();
        let mut buf = Vec::new();
        let seq = start.wrapping_add(pos as u32);
        let info = framer
            .build_unit(seq, emss, &gathers, &mut buf)
            .expect("every ULPDU fits MULPDU");
        assert!(info.fpdus > 0 && buf.len() <= emss && buf.len() == info.len);
        units.push((pos, buf));
        pos += info.len as u64;
        i += info.fpdus;
    }
    let total = pos;
    let can_split = crc || markers;
    let mut pieces: Vec<(u64, Vec<u8>)> = Vec::new();
    for (p, u) in &units {
        let b = input.u8();
        if can_split && b & 1 != 0 && u.len() > 1 {
            let cut = 1 + usize::from(input.u16()) % (u.len() - 1);
            pieces.push((*p, u[..cut].to_vec()));
            pieces.push((*p + cut as u64, u[cut..].to_vec()));
        } else {
            pieces.push((*p, u.clone()));
        }
        if b & 2 != 0 {
            pieces.push((*p, u.clone()));
        }
    }
    while !input.is_empty() {
        let a = usize::from(input.u8()) % pieces.len();
        let b = usize::from(input.u8()) % pieces.len();
        pieces.swap(a, b);
    }
    let rc = ReceiverConfig {
        crc,
        markers,
        start_seq: start,
        min_ulpdu_len: 14,
        max_ulpdu_len: max as u16,
        crc_errors: CrcErrorPolicy::Fail,
    };
    let mut rx = Receiver::new(rc);
    let mut tcp = TcpModel {
        start,
        rcv_nxt: 0,
        buffered: BTreeMap::new(),
        consumed: BTreeMap::new(),
        got: Vec::new(),
    };
    for (p, d) in &pieces {
        tcp.arrive(&mut rx, *p, d)
            .unwrap_or_else(|e| panic!("valid stream refused: {e:?}"));
    }
    assert_eq!(tcp.rcv_nxt, total, "the whole stream arrived");
    assert_eq!(rx.pending_out_of_order(), 0);
    assert!(rx.is_at_boundary());
    assert_eq!(tcp.got.len(), ulpdus.len(), "every ULPDU exactly once");
    let mut by_pos = tcp.got.clone();
    by_pos.sort_by_key(|g| g.0.wrapping_sub(start));
    for (k, (_, u, _)) in by_pos.iter().enumerate() {
        assert!(*u == ulpdus[k], "ULPDU {k} byte-exact");
    }
    let in_order: Vec<u32> = tcp
        .got
        .iter()
        .filter(|g| g.2)
        .map(|g| g.0.wrapping_sub(start))
        .collect();
    assert!(
        in_order.windows(2).all(|w| w[0] < w[1]),
        "in-order deliveries in order"
    );
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mode = input.u8();
    if mode & MODE_MODEL != 0 {
        model(mode, input);
    } else {
        raw(mode, input);
    }
});
