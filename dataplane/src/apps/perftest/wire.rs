//! The control records perftest (4.5, `-R`) exchanges as Sends on its rdma_cm control
//! connection, as wire views with typed parse errors.
//!
//! Each exchange is one Send each way of the same record type: the client sends first,
//! the server answers. Multi-octet integers are big-endian on the wire, except the
//! `ib_send_bw` credit count the server RDMA-Writes into the client's credit buffer (host
//! order of the writer, little-endian on x86).

/// The version string perftest 4.5 sends (`VERSION` of the bandwidth and latency tools).
pub const VERSION: &str = "6.06";
/// Length of the version record (`char version[16]`).
pub const VERSION_LEN: usize = 16;
/// Length of a `pingpong_dest` record.
pub const DEST_LEN: usize = 56;
/// Length of the MTU record (`"%d"` of the IB MTU enum, NUL padded to 2 octets).
pub const MTU_LEN: usize = 2;
/// Length of the cycle-buffer and cache-line records.
pub const U32_LEN: usize = 4;
/// Length of each bandwidth report field.
pub const REPORT_FIELD_LEN: usize = 8;
/// The oldest peer version whose exchange has the shape this module speaks (cycle buffer
/// and cache line exchanged from 5.32, 8-octet iteration counts from 5.33).
pub const MIN_PEER_VERSION: f64 = 5.33;

/// A control record that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The Send carried the wrong number of octets for the record expected now.
    #[error("{record}: {got} octets, expected {want}")]
    Length {
        /// The record expected.
        record: &'static str,
        /// Octets received.
        got: usize,
        /// Octets the record has.
        want: usize,
    },
    /// The version record is not a NUL-terminated decimal version.
    #[error("version record is not a version string")]
    BadVersion,
    /// The peer's version predates the exchange spoken here.
    #[error("peer perftest version {0} is older than 5.33")]
    OldVersion(String),
    /// The MTU record is not a decimal IB MTU enum (1..=5).
    #[error("MTU record {0:02x?} is not an IB MTU (1..5)")]
    BadMtu([u8; 2]),
}

fn exact<'a>(b: &'a [u8], record: &'static str, want: usize) -> Result<&'a [u8], RecordError> {
    if b.len() == want {
        Ok(b)
    } else {
        Err(RecordError::Length {
            record,
            got: b.len(),
            want,
        })
    }
}

/// The version record: a NUL-padded decimal string such as `"6.06"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version(pub String);

impl Version {
    /// Ours.
    pub fn ours() -> Version {
        Version(VERSION.into())
    }

    /// Wire form (16 octets).
    pub fn to_bytes(&self) -> [u8; VERSION_LEN] {
        let mut b = [0; VERSION_LEN];
        let s = self.0.as_bytes();
        let n = s.len().min(VERSION_LEN - 1);
        b[..n].copy_from_slice(&s[..n]);
        b
    }

    /// Parses a version record and checks the peer speaks this exchange.
    pub fn parse(b: &[u8]) -> Result<Version, RecordError> {
        let b = exact(b, "version", VERSION_LEN)?;
        let end = b
            .iter()
            .position(|&c| c == 0)
            .ok_or(RecordError::BadVersion)?;
        let s = std::str::from_utf8(&b[..end]).map_err(|_| RecordError::BadVersion)?;
        let v: f64 = s.parse().map_err(|_| RecordError::BadVersion)?;
        if !s.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
            return Err(RecordError::BadVersion);
        }
        if v < MIN_PEER_VERSION {
            return Err(RecordError::OldVersion(s.into()));
        }
        Ok(Version(s.into()))
    }
}

/// A 4-octet big-endian value (the cycle buffer and the cache line size; each side takes
/// the larger of the two).
pub fn u32_to_bytes(v: u32) -> [u8; U32_LEN] {
    v.to_be_bytes()
}

/// Parses a 4-octet big-endian value record.
pub fn parse_u32(b: &[u8], record: &'static str) -> Result<u32, RecordError> {
    let b = exact(b, record, U32_LEN)?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The IB MTU enum perftest exchanges (1 = 256 … 5 = 4096 octets; each side takes the
/// smaller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbMtu(pub u8);

impl IbMtu {
    /// The largest IB MTU that fits an Ethernet `mtu` (1500 → 3, i.e. 1024 octets).
    pub fn for_ethernet(mtu: usize) -> IbMtu {
        let mut e = 1;
        while e < 5 && (256usize << e) <= mtu {
            e += 1;
        }
        IbMtu(e)
    }

    /// Octets.
    pub fn octets(self) -> usize {
        128 << self.0
    }

    /// Wire form: the ASCII digit and a NUL.
    pub fn to_bytes(self) -> [u8; MTU_LEN] {
        [b'0' + self.0, 0]
    }

    /// Parses the MTU record.
    pub fn parse(b: &[u8]) -> Result<IbMtu, RecordError> {
        let b = exact(b, "MTU", MTU_LEN)?;
        match (b[0], b[1]) {
            (d @ b'1'..=b'5', 0) => Ok(IbMtu(d - b'0')),
            _ => Err(RecordError::BadMtu([b[0], b[1]])),
        }
    }
}

/// `struct pingpong_dest`: a QP's address and the buffer its peer targets.
///
/// Layout (56 octets, big-endian): lid 0..4, out_reads 4..8, qpn 8..12, psn 12..16,
/// rkey 16..20, padding 20..24 (not sent deliberately: ignored), vaddr 24..32, gid 32..48,
/// srqn 48..52, gid_index 52..56. An all-zero record is perftest's plain synchronisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// IB LID (0 on iWARP).
    pub lid: u32,
    /// RDMA Reads the QP keeps outstanding.
    pub out_reads: u32,
    /// QP number.
    pub qpn: u32,
    /// Initial packet sequence number (meaningless on iWARP).
    pub psn: u32,
    /// STag of the buffer.
    pub rkey: u32,
    /// Tagged offset of the buffer.
    pub vaddr: u64,
    /// GID: on iWARP the port's MAC followed by zeros.
    pub gid: [u8; 16],
    /// SRQ number (0: none).
    pub srqn: u32,
    /// GID index.
    pub gid_index: u32,
}

impl Dest {
    /// The all-zero synchronisation record.
    pub const SYNC: Dest = Dest {
        lid: 0,
        out_reads: 0,
        qpn: 0,
        psn: 0,
        rkey: 0,
        vaddr: 0,
        gid: [0; 16],
        srqn: 0,
        gid_index: 0,
    };

    /// The GID of an iWARP port: its MAC, then zeros.
    pub fn gid_from_mac(mac: [u8; 6]) -> [u8; 16] {
        let mut g = [0; 16];
        g[..6].copy_from_slice(&mac);
        g
    }

    /// Wire form.
    pub fn to_bytes(&self) -> [u8; DEST_LEN] {
        let mut b = [0; DEST_LEN];
        b[0..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid);
        b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        b[52..56].copy_from_slice(&self.gid_index.to_be_bytes());
        b
    }

    /// Parses a record (the padding octets 20..24 are ignored: perftest leaves them
    /// uninitialised).
    pub fn parse(b: &[u8]) -> Result<Dest, RecordError> {
        let b = exact(b, "pingpong_dest", DEST_LEN)?;
        let u = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut vaddr = [0; 8];
        vaddr.copy_from_slice(&b[24..32]);
        let mut gid = [0; 16];
        gid.copy_from_slice(&b[32..48]);
        Ok(Dest {
            lid: u(0),
            out_reads: u(4),
            qpn: u(8),
            psn: u(12),
            rkey: u(16),
            vaddr: u64::from_be_bytes(vaddr),
            gid,
            srqn: u(48),
            gid_index: u(52),
        })
    }
}

/// The bandwidth report the client sends after the run (`xchg_bw_reports`), five 8-octet
/// big-endian fields, one Send each: size, iterations, peak MB/s, average MB/s, Mpps.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth, MB/s.
    pub bw_peak: f64,
    /// Average bandwidth, MB/s.
    pub bw_avg: f64,
    /// Message rate, Mpps.
    pub msg_rate: f64,
}

/// Fields of a [`BwReport`], in exchange order.
pub const REPORT_FIELDS: usize = 5;

impl BwReport {
    /// Wire form of field `i` (0..5).
    pub fn field_bytes(&self, i: usize) -> [u8; REPORT_FIELD_LEN] {
        match i {
            0 => self.size.to_be_bytes(),
            1 => self.iters.to_be_bytes(),
            2 => self.bw_peak.to_be_bytes(),
            3 => self.bw_avg.to_be_bytes(),
            _ => self.msg_rate.to_be_bytes(),
        }
    }

    /// Stores field `i` from its wire form.
    pub fn set_field(&mut self, i: usize, b: &[u8]) -> Result<(), RecordError> {
        let b = exact(b, "bandwidth report field", REPORT_FIELD_LEN)?;
        let mut a = [0; 8];
        a.copy_from_slice(b);
        match i {
            0 => self.size = u64::from_be_bytes(a),
            1 => self.iters = u64::from_be_bytes(a),
            2 => self.bw_peak = f64::from_be_bytes(a),
            3 => self.bw_avg = f64::from_be_bytes(a),
            _ => self.msg_rate = f64::from_be_bytes(a),
        }
        Ok(())
    }
}

/// The `ib_send_bw` credit count (receives completed so far) as the server writes it.
pub fn credit_to_bytes(received: u32) -> [u8; 4] {
    received.to_le_bytes()
}

/// Reads a credit count from the client's credit buffer.
pub fn parse_credit(b: [u8; 4]) -> u32 {
    u32::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // The records of a siw-to-siw `ib_write_bw -R` capture (10.77.0.12 client, 10.77.0.11
    // server), payloads of the control connection's Sends.
    #[test]
    fn version_record_matches_capture() {
        let wire = hex("362e3036000000000000000000000000");
        assert_eq!(Version::ours().to_bytes().to_vec(), wire);
        assert_eq!(Version::parse(&wire), Ok(Version("6.06".into())));
        assert_eq!(
            Version::parse(&hex("352e3230000000000000000000000000")),
            Err(RecordError::OldVersion("5.20".into()))
        );
        assert_eq!(Version::parse(&[b'x'; 16]), Err(RecordError::BadVersion));
        assert!(matches!(
            Version::parse(&wire[..8]),
            Err(RecordError::Length {
                want: 16,
                got: 8,
                ..
            })
        ));
    }

    #[test]
    fn sys_and_mtu_records_match_capture() {
        assert_eq!(u32_to_bytes(4096).to_vec(), hex("00001000"));
        assert_eq!(parse_u32(&hex("00000040"), "cache line"), Ok(64));
        assert!(parse_u32(&hex("0040"), "cache line").is_err());
        assert_eq!(IbMtu::for_ethernet(1500), IbMtu(3));
        assert_eq!(IbMtu::for_ethernet(9000), IbMtu(5));
        assert_eq!(IbMtu(3).octets(), 1024);
        assert_eq!(IbMtu(3).to_bytes().to_vec(), hex("3300"));
        assert_eq!(IbMtu::parse(&hex("3300")), Ok(IbMtu(3)));
        assert_eq!(
            IbMtu::parse(&hex("3900")),
            Err(RecordError::BadMtu([0x39, 0]))
        );
        assert!(IbMtu::parse(&hex("330000")).is_err());
    }

    #[test]
    fn dest_record_matches_capture() {
        // The client's record; octets 20..24 carried stack garbage (4856) in the final one.
        let wire = hex(concat!(
            "00000000000000010000000200",
            "93eac5531a9c000000000000007f1fed8db00052540077000c",
            "000000000000000000000000000000000000"
        ));
        let d = Dest::parse(&wire).unwrap();
        assert_eq!(d.out_reads, 1);
        assert_eq!(d.qpn, 2);
        assert_eq!(d.psn, 0x93eac5);
        assert_eq!(d.rkey, 0x531a9c00);
        assert_eq!(d.vaddr, 0x7f1fed8db000);
        assert_eq!(d.gid, Dest::gid_from_mac([0x52, 0x54, 0, 0x77, 0, 0x0c]));
        assert_eq!((d.srqn, d.gid_index, d.lid), (0, 0, 0));
        assert_eq!(d.to_bytes().to_vec(), wire);
        let mut garbage = wire.clone();
        garbage[20] = 0x48;
        garbage[21] = 0x56;
        assert_eq!(Dest::parse(&garbage), Ok(d));
        assert_eq!(Dest::parse(&[0; 56]), Ok(Dest::SYNC));
        assert!(matches!(
            Dest::parse(&wire[..55]),
            Err(RecordError::Length { want: 56, .. })
        ));
    }

    #[test]
    fn bw_report_fields_match_capture() {
        // The client's report: 65536 B, 100 iterations, 7.79 / 6.40 MB/s, 0.000102 Mpps.
        let fields = [
            "0000000000010000",
            "0000000000000064",
            "401f2ac5ed39c87f",
            "40199af551645b3a",
            "3f1ad95f368f67ef",
        ];
        let mut r = BwReport::default();
        for (i, f) in fields.iter().enumerate() {
            r.set_field(i, &hex(f)).unwrap();
        }
        assert_eq!((r.size, r.iters), (65536, 100));
        assert!((r.bw_peak - 7.79).abs() < 0.005);
        assert!((r.bw_avg - 6.40).abs() < 0.005);
        assert!((r.msg_rate - 0.000102).abs() < 0.0000005);
        for (i, f) in fields.iter().enumerate() {
            assert_eq!(r.field_bytes(i).to_vec(), hex(f));
        }
        assert!(r.set_field(0, &hex("0000")).is_err());
    }

    #[test]
    fn credit_count_is_little_endian() {
        assert_eq!(credit_to_bytes(33), [33, 0, 0, 0]);
        assert_eq!(parse_credit([0x64, 0, 0, 0]), 100);
    }
}
