//! The send side's CRC and checksum taken as a payload is read out of registered memory
//! (`Engine::poll_segment_crc_into`, `Framer::frame_in_place_after`: the payload's CRC
//! joined with the header's): every FPDU is the one
//! the plain read and `Framer::frame_in_place` give, octet for octet, with the same TCP sum,
//! for Writes, Sends gathered from several SGEs and Read Responses, whatever the pad, the
//! MULPDU and whether the memory hands its octets to the copy or copies them itself.

use crate::common::*;
use iwarp::mem::{
    Access, AccessError, MemoryTable, PdId, Resolved, STag, Sge, SimpleMemory, StreamId,
};
use iwarp::mpa::Framer;
use iwarp::rdmap::{Engine, RemoteBuf, SendOp, SendWr};
use iwarp::wire::crc::crc32c;
use iwarp::wire::crcsum::CrcShifts;
use iwarp::wire::mpa::Fpdu;
use tcp::checksum::payload_sum;

/// A [`SimpleMemory`] that copies a read's octets itself and shows them to the copy after
/// (a backend with no slice to hand out: `MemoryTable::read_with`'s default).
struct CopiesItself(SimpleMemory);

impl MemoryTable for CopiesItself {
    fn resolve(
        &self,
        stag: STag,
        pd: PdId,
        stream: StreamId,
        to: u64,
        len: u64,
        need: Access,
    ) -> Result<Resolved, AccessError> {
        self.0.resolve(stag, pd, stream, to, len, need)
    }

    fn write(&mut self, r: &Resolved, off: u64, data: &[u8]) -> Result<(), AccessError> {
        self.0.write(r, off, data)
    }

    fn read(&self, r: &Resolved, off: u64, out: &mut [u8]) -> Result<(), AccessError> {
        self.0.read(r, off, out)
    }

    fn atomic(&mut self, r: &Resolved, f: &mut dyn FnMut(u64) -> u64) -> Result<u64, AccessError> {
        self.0.atomic(r, f)
    }

    fn invalidate(&mut self, stag: STag, pd: PdId, stream: StreamId) -> Result<(), AccessError> {
        self.0.invalidate(stag, pd, stream)
    }
}

/// How the sender reads and frames.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// The plain read, the CRC and sum over the whole FPDU in the framer.
    Plain,
    /// The copying read into [`SimpleMemory`] (its octets handed to the copy).
    Copying,
    /// The copying read from [`CopiesItself`].
    AfterCopy,
}

/// A sender with Writes of lengths giving every pad, a Send gathered from three SGEs of odd
/// lengths and a Read Response waiting (the Read Request handed over from a peer).
fn sender(mulpdu: usize) -> Side {
    let mut b = Side::new(cfg(2));
    let sink = b.region(0, 65536, all(), 0);
    let mut a = Side::new(cfg(1));
    let src = a.region(0, 65536, all(), 0);
    a.write_bytes(0, &pattern(65536, 7));
    let mut id = 0;
    for len in [
        1u32, 2, 3, 4, 5, 31, 32, 33, 63, 64, 65, 1447, 1448, 4099, 20_001,
    ] {
        id += 1;
        let wr = SendWr::new(
            id,
            SendOp::Write {
                sgl: vec![Sge {
                    stag: src,
                    to: u64::from(len % 4096) * 3,
                    len,
                }]
                .into(),
                remote: RemoteBuf { stag: sink, to: 0 },
            },
        );
        a.engine.post_send(wr).expect("post Write");
    }
    let pieces = [(5, 1001), (3000, 7), (9000, 2603)];
    let sgl = pieces
        .iter()
        .map(|&(to, len)| Sge { stag: src, to, len })
        .collect::<Vec<_>>()
        .into();
    let send = SendOp::Send {
        sgl,
        solicited: false,
        invalidate: None,
    };
    a.engine
        .post_send(SendWr::new(99, send))
        .expect("post Send");
    b.engine
        .post_send(read_wr(1, sink, 0, src, 777, 6001))
        .expect("post Read");
    for seg in b.drain_tx(mulpdu) {
        a.receive(&seg);
    }
    a
}

/// Every FPDU the sender frames in place, with its TCP sum, read and framed `way`.
fn framed(mulpdu: usize, way: Way) -> Vec<(Vec<u8>, u16)> {
    let Side {
        mut engine, mem, ..
    } = sender(mulpdu);
    match way {
        Way::Plain => drain(&mut engine, &mem, mulpdu, false),
        Way::Copying => drain(&mut engine, &mem, mulpdu, true),
        Way::AfterCopy => drain(&mut engine, &CopiesItself(mem), mulpdu, true),
    }
}

/// Every FPDU `engine` gives, read from `mem` with the CRC and sum taken in the read when
/// `crc`, framed in place.
fn drain<M: MemoryTable>(
    engine: &mut Engine,
    mem: &M,
    mulpdu: usize,
    crc: bool,
) -> Vec<(Vec<u8>, u16)> {
    let framer = Framer::new(true, None);
    let mut shifts = CrcShifts::default();
    let mut out = Vec::new();
    loop {
        let mut buf = Vec::new();
        let polled = if crc {
            engine.poll_segment_crc_into(now(), mulpdu, mem, &mut buf, 0)
        } else {
            engine.poll_segment_into(now(), mulpdu, mem, &mut buf)
        };
        let Some(s) = polled else {
            return out;
        };
        assert_eq!(
            s.payload_crc_sum().is_some(),
            crc && !s.payload().is_empty(),
            "CRC and sum taken exactly for a payload read"
        );
        let payload = s.payload_crc_sum();
        let mut bytes = s.into_ulpdu_buffer();
        let (_, sum) = match payload {
            Some(p) => framer.frame_in_place_after(&mut bytes, p, &mut shifts),
            None => framer.frame_in_place(&mut bytes),
        }
        .expect("framed");
        out.push((bytes, sum.expect("a sum with CRCs").folded()));
    }
}

// RFC 5044 §4.1 (ULPDU_Length, ULPDU, pad, CRC32c over the three), RFC 793 §3.1 (the sum
// over the segment's data): the copying read frames the same FPDUs as the plain one.
#[test]
fn fpdus_framed_after_a_copying_read_equal_the_plain_ones() {
    for mulpdu in [1448usize, 517, 4000] {
        let plain = framed(mulpdu, Way::Plain);
        assert!(plain.len() > 20, "{} FPDUs, mulpdu {mulpdu}", plain.len());
        let mut pads = [0usize; 4];
        for (bytes, sum) in &plain {
            let f = Fpdu::new_checked(&bytes[..]).expect("an FPDU");
            assert_eq!(f.total_len(), bytes.len());
            assert_eq!(f.crc(), crc32c(f.crc_covered()), "mulpdu {mulpdu}");
            assert_eq!(*sum, payload_sum(bytes).folded(), "mulpdu {mulpdu}");
            pads[(4 - f.ulpdu().len() % 4) % 4] += 1;
        }
        assert!(pads.iter().all(|&n| n > 0), "every pad length: {pads:?}");
        for way in [Way::Copying, Way::AfterCopy] {
            let got = framed(mulpdu, way);
            assert_eq!(got.len(), plain.len(), "{way:?}, mulpdu {mulpdu}");
            for (i, (g, p)) in got.iter().zip(&plain).enumerate() {
                assert_eq!(g, p, "{way:?}, mulpdu {mulpdu}, FPDU {i}");
            }
        }
    }
}
