//! MPA CRC: CRC32c (Castagnoli, RFC 3720 §B.4) over ULPDU_Length, ULPDU, pad and every
//! marker of the FPDU, the one in front of its ULPDU_Length field included (RFC 5044 §4.1,
//! §5; Wireshark's dissector checks it the same way). On the wire the 32-bit value is sent in iSCSI order,
//! least significant octet first: 32 zero octets give 0x8A9136AA, sent as `aa 36 91 8a`.

/// CRC32c of `data` (carry-less-multiply folding where the CPU has it).
pub fn crc32c(data: &[u8]) -> u32 {
    super::crcsum::crc32c_after(0, data)
}

/// Incremental CRC32c over several pieces (each `update` continues from the CRC so far).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Crc32c {
    value: u32,
}

impl Crc32c {
    /// A fresh CRC (nothing hashed yet).
    pub fn new() -> Self {
        Crc32c { value: 0 }
    }

    /// Adds `data`.
    pub fn update(&mut self, data: &[u8]) {
        self.value = super::crcsum::crc32c_after(self.value, data);
    }

    /// The CRC of everything added so far.
    pub fn value(&self) -> u32 {
        self.value
    }
}

/// The four wire octets of a CRC value.
pub fn to_wire(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// The CRC value carried by four wire octets.
pub fn from_wire(bytes: [u8; 4]) -> u32 {
    u32::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 3720 §B.4 test vectors: value and the octets on the wire.
    #[test]
    fn rfc3720_vectors() {
        let asc: Vec<u8> = (0u8..32).collect();
        let desc: Vec<u8> = (0u8..32).rev().collect();
        let cases: [(&[u8], u32, [u8; 4]); 4] = [
            (&[0u8; 32], 0x8A91_36AA, [0xaa, 0x36, 0x91, 0x8a]),
            (&[0xffu8; 32], 0x62A8_AB43, [0x43, 0xab, 0xa8, 0x62]),
            (&asc, 0x46DD_794E, [0x4e, 0x79, 0xdd, 0x46]),
            (&desc, 0x113F_DB5C, [0x5c, 0xdb, 0x3f, 0x11]),
        ];
        for (data, value, wire) in cases {
            assert_eq!(crc32c(data), value);
            assert_eq!(to_wire(crc32c(data)), wire);
            assert_eq!(from_wire(wire), value);
        }
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    // Pieces short and long (the folding kernels continue from a register other than the
    // fresh one), against crc-fast's one-shot CRC as an independent reference.
    #[test]
    fn incremental_equals_one_shot() {
        let data: Vec<u8> = (0..3000u32).map(|i| ((i * 7) ^ (i >> 5)) as u8).collect();
        let want = crc_fast::crc32_iscsi(&data);
        assert_eq!(crc32c(&data), want);
        for split in [0, 1, 3, 31, 32, 64, 500, 999, 1000, 2999, 3000] {
            for second in [split, (split + 33).min(3000), (split + 1448).min(3000)] {
                let mut c = Crc32c::new();
                c.update(&data[..split]);
                c.update(&data[split..second]);
                c.update(&data[second..]);
                assert_eq!(c.value(), want, "split {split} then {second}");
            }
        }
    }
}
