//! Capture: a middleware port that writes every frame it receives or transmits to a classic
//! pcap file (link type Ethernet), readable by tshark/Wireshark/tcpdump.
//!
//! Transmitted frames are recorded only once the inner port accepted them, so a frame that
//! is refused and retried appears once.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::{self, Deserializer};
use serde::Deserialize;

use super::api::{PacketBuf, Port, PortError, PortInfo, PortOffloads, PortStats, VlanOffload};
use crate::frame::{TPID_8021Q, VLAN_TAG_LEN};
use crate::settings::de_ranged;
use crate::telemetry::Dict;

/// pcap magic number for microsecond timestamps.
pub const PCAP_MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// pcap magic number for nanosecond timestamps.
pub const PCAP_MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Length of the pcap file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Length of a pcap record header.
pub const RECORD_HEADER_LEN: usize = 16;

/// Timestamp resolution of a capture file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Resolution {
    /// Microseconds (the most widely read format).
    #[default]
    Micros,
    /// Nanoseconds.
    Nanos,
}

/// A resolution is written `"ns"` or `"us"`.
impl<'de> Deserialize<'de> for Resolution {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Resolution, D::Error> {
        match String::deserialize(d)?.as_str() {
            "ns" => Ok(Resolution::Nanos),
            "us" => Ok(Resolution::Micros),
            other => Err(de::Error::custom(format!(
                "invalid resolution {other:?} (expected \"ns\" or \"us\")"
            ))),
        }
    }
}

/// Settings of every capture file (a configuration file's `[capture]` section; missing
/// keys keep their [`Default`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CaptureOptions {
    /// Timestamp resolution: `"ns"` (default) or `"us"`.
    pub resolution: Resolution,
    /// Longest record, 64..=262144 bytes.
    #[serde(deserialize_with = "de_snaplen")]
    pub snaplen: u32,
}

impl Default for CaptureOptions {
    fn default() -> CaptureOptions {
        CaptureOptions {
            resolution: Resolution::Nanos,
            snaplen: 65535,
        }
    }
}

fn de_snaplen<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    de_ranged(d, 64..=262_144).map(|v| v as u32)
}

/// Writes classic pcap records to any writer.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    resolution: Resolution,
    snaplen: u32,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header and returns the writer. Frames longer than `snaplen` are
    /// recorded cut to `snaplen` bytes (with their original length noted).
    pub fn new(mut out: W, resolution: Resolution, snaplen: u32) -> io::Result<PcapWriter<W>> {
        let magic = match resolution {
            Resolution::Micros => PCAP_MAGIC_MICROS,
            Resolution::Nanos => PCAP_MAGIC_NANOS,
        };
        let mut hdr = [0u8; FILE_HEADER_LEN];
        hdr[0..4].copy_from_slice(&magic.to_le_bytes());
        hdr[4..6].copy_from_slice(&2u16.to_le_bytes());
        hdr[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone (8..12) and sigfigs (12..16) stay zero.
        hdr[16..20].copy_from_slice(&snaplen.to_le_bytes());
        hdr[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&hdr)?;
        Ok(PcapWriter {
            out,
            resolution,
            snaplen,
        })
    }

    /// Appends one record with timestamp `ts`.
    pub fn write_frame(&mut self, ts: SystemTime, frame: &[u8]) -> io::Result<()> {
        let since = ts.duration_since(UNIX_EPOCH).unwrap_or_default();
        let frac = match self.resolution {
            Resolution::Micros => since.subsec_micros(),
            Resolution::Nanos => since.subsec_nanos(),
        };
        let caplen = frame.len().min(self.snaplen as usize);
        let mut rec = [0u8; RECORD_HEADER_LEN];
        rec[0..4].copy_from_slice(&(since.as_secs() as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&frac.to_le_bytes());
        rec[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&rec)?;
        self.out.write_all(&frame[..caplen])
    }

    /// Flushes buffered records to the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Returns the underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// A port wrapper recording the frames of `P` in a pcap file.
pub struct CapturePort<P: Port> {
    inner: P,
    path: PathBuf,
    writer: Option<PcapWriter<BufWriter<File>>>,
    records: u64,
    write_errors: u64,
}

impl<P: Port> CapturePort<P> {
    /// Wraps `inner`, creating (truncating) the capture file at `path`.
    pub fn create(
        inner: P,
        path: &Path,
        resolution: Resolution,
        snaplen: u32,
    ) -> Result<CapturePort<P>, PortError> {
        let io_err = |source| PortError::Io {
            port: inner.info().name.clone(),
            op: "create capture file",
            source,
        };
        let file = File::create(path).map_err(io_err)?;
        let writer = PcapWriter::new(BufWriter::with_capacity(1 << 20, file), resolution, snaplen)
            .map_err(io_err)?;
        Ok(CapturePort {
            inner,
            path: path.to_path_buf(),
            writer: Some(writer),
            records: 0,
            write_errors: 0,
        })
    }

    /// The capture file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Frames recorded so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Records lost to write errors (capture stops at the first).
    pub fn write_errors(&self) -> u64 {
        self.write_errors
    }

    /// The wrapped port.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Writes buffered records to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.writer {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    fn record_buf(&mut self, ts: SystemTime, buf: &P::Buf) {
        let frame = on_the_wire(buf);
        self.record(ts, &frame);
    }

    fn record(&mut self, ts: SystemTime, frame: &[u8]) {
        let Some(w) = &mut self.writer else { return };
        match w.write_frame(ts, frame) {
            Ok(()) => self.records += 1,
            Err(e) => {
                log::error!(
                    "port {}: capture to {} stopped: {e}",
                    self.inner.info().name,
                    self.path.display()
                );
                self.write_errors += 1;
                self.writer = None;
            }
        }
    }
}

impl<P: Port> Port for CapturePort<P> {
    type Buf = P::Buf;

    fn info(&self) -> &PortInfo {
        self.inner.info()
    }

    fn rx_burst(&mut self, out: &mut Vec<P::Buf>, max: usize) -> usize {
        let start = out.len();
        let n = self.inner.rx_burst(out, max);
        if n > 0 && self.writer.is_some() {
            let ts = SystemTime::now();
            for buf in &out[start..] {
                self.record_buf(ts, buf);
            }
        }
        n
    }

    fn alloc_tx(&mut self, len: usize) -> Option<P::Buf> {
        self.inner.alloc_tx(len)
    }

    fn tx_burst(&mut self, bufs: &mut Vec<P::Buf>) -> usize {
        if self.writer.is_none() {
            return self.inner.tx_burst(bufs);
        }
        // Frames leave from the front; stage copies of all, then record the accepted ones.
        let staged: Vec<Vec<u8>> = bufs.iter().map(|b| on_the_wire(b).into_owned()).collect();
        let before = bufs.len();
        let n = self.inner.tx_burst(bufs);
        let consumed = before - bufs.len();
        let ts = SystemTime::now();
        for frame in staged.iter().take(consumed) {
            self.record(ts, frame);
        }
        n
    }

    fn stats(&self) -> PortStats {
        self.inner.stats()
    }

    /// The inner port's facts and the frames captured.
    fn describe(&self, out: &mut Dict) {
        self.inner.describe(out);
        out.put("captured", self.records());
    }

    fn vlan_offload(&self) -> VlanOffload {
        self.inner.vlan_offload()
    }

    fn offloads(&self) -> PortOffloads {
        self.inner.offloads()
    }
}

/// The frame as it is on the wire: with the 802.1Q tag the device stripped (or is to
/// insert) put back after the MAC addresses.
fn on_the_wire<B: PacketBuf>(buf: &B) -> Cow<'_, [u8]> {
    let frame = buf.as_ref();
    match buf.offloaded_vlan() {
        Some(tci) if frame.len() >= 12 => {
            let mut v = Vec::with_capacity(frame.len() + VLAN_TAG_LEN);
            v.extend_from_slice(&frame[..12]);
            v.extend_from_slice(&TPID_8021Q.to_be_bytes());
            v.extend_from_slice(&tci.to_be_bytes());
            v.extend_from_slice(&frame[12..]);
            Cow::Owned(v)
        }
        _ => Cow::Borrowed(frame),
    }
}

impl<P: Port> Drop for CapturePort<P> {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            log::error!("capture {}: final flush: {e}", self.path.display());
        }
    }
}

impl<P: Port> std::fmt::Debug for CapturePort<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturePort")
            .field("port", &self.inner.info().name)
            .field("path", &self.path)
            .field("records", &self.records)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::api::PacketBuf;
    use crate::port::soft_pair::test_pair;

    /// One record read back: (seconds, fraction, original length, bytes).
    type Record = (u32, u32, u32, Vec<u8>);

    /// Minimal reader of little-endian classic pcap, for checking what was written.
    fn read_pcap(bytes: &[u8]) -> (u32, u32, Vec<Record>) {
        let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
        let snaplen = u32::from_le_bytes(bytes[16..20].try_into().unwrap());
        assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 2);
        assert_eq!(u16::from_le_bytes([bytes[6], bytes[7]]), 4);
        assert_eq!(
            u32::from_le_bytes(bytes[20..24].try_into().unwrap()),
            LINKTYPE_ETHERNET
        );
        let mut recs = Vec::new();
        let mut off = FILE_HEADER_LEN;
        while off < bytes.len() {
            let h = &bytes[off..off + RECORD_HEADER_LEN];
            let word = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap());
            let caplen = word(8) as usize;
            let data = bytes[off + RECORD_HEADER_LEN..off + RECORD_HEADER_LEN + caplen].to_vec();
            recs.push((word(0), word(4), word(12), data));
            off += RECORD_HEADER_LEN + caplen;
        }
        (magic, snaplen, recs)
    }

    #[test]
    fn writer_round_trips_with_both_resolutions() {
        let ts = UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 123_456_789);
        for (res, magic, frac) in [
            (Resolution::Micros, PCAP_MAGIC_MICROS, 123_456),
            (Resolution::Nanos, PCAP_MAGIC_NANOS, 123_456_789),
        ] {
            let mut w = PcapWriter::new(Vec::new(), res, 65535).unwrap();
            w.write_frame(ts, &[1, 2, 3, 4]).unwrap();
            w.write_frame(ts, &[5; 100]).unwrap();
            let bytes = w.into_inner();
            let (m, snap, recs) = read_pcap(&bytes);
            assert_eq!((m, snap), (magic, 65535));
            assert_eq!(recs.len(), 2);
            assert_eq!(recs[0], (1_700_000_000, frac, 4, vec![1, 2, 3, 4]));
            assert_eq!(recs[1].3, vec![5; 100]);
        }
    }

    #[test]
    fn snaplen_cuts_records_but_keeps_original_length() {
        let mut w = PcapWriter::new(Vec::new(), Resolution::Micros, 10).unwrap();
        w.write_frame(SystemTime::now(), &[7; 50]).unwrap();
        let (_, _, recs) = read_pcap(&w.into_inner());
        assert_eq!(recs[0].2, 50);
        assert_eq!(recs[0].3, vec![7; 10]);
    }

    #[test]
    fn capture_port_records_both_directions_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.pcap");
        let (a, mut b) = test_pair(2);
        let mut cap = CapturePort::create(a, &path, Resolution::Nanos, 65535).unwrap();

        // Three frames out, ring holds two: the third is refused and must not be recorded.
        let mut out: Vec<_> = (1..=3u8)
            .map(|i| {
                let mut f = cap.alloc_tx(60).unwrap();
                f.as_mut().fill(i);
                f
            })
            .collect();
        assert_eq!(cap.tx_burst(&mut out), 2);
        assert_eq!(out.len(), 1);
        let mut got = Vec::new();
        b.rx_burst(&mut got, 8);
        assert_eq!(cap.tx_burst(&mut out), 1, "retry succeeds");

        let mut back = vec![b.alloc_tx(70).unwrap()];
        back[0].as_mut().fill(0xee);
        b.tx_burst(&mut back);
        let mut rx = Vec::new();
        assert_eq!(cap.rx_burst(&mut rx, 8), 1);
        assert_eq!(rx[0].len(), 70);
        assert_eq!(cap.records(), 4);
        drop(cap);

        let bytes = std::fs::read(&path).unwrap();
        let (magic, _, recs) = read_pcap(&bytes);
        assert_eq!(magic, PCAP_MAGIC_NANOS);
        let frames: Vec<Vec<u8>> = recs.into_iter().map(|r| r.3).collect();
        assert_eq!(
            frames,
            vec![vec![1; 60], vec![2; 60], vec![3; 60], vec![0xee; 70]]
        );
    }
}
