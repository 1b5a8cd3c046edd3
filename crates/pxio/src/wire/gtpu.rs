//! GTP-U (3GPP TS 29.281), the user-plane tunnel between a 5G UPF and the gNB (N3) or another
//! UPF (N9): the header a UPF built on pxio pushes on downlink packets and pulls off uplink
//! ones (SIGCOMM'26 §7.3, the UPF port; the dUPF design of APNet'23).
//!
//! Layout (TS 29.281 §5.1): one flags octet (version 1, protocol type 1, then E, S and PN), the
//! message type (255: G-PDU, a user packet), a length counting every byte after the first 8,
//! and the TEID. When any of E, S or PN is set, four more octets follow: sequence number,
//! N-PDU number and the type of the next extension header. [`GtpuRepr`] emits and parses the
//! G-PDU with at most one extension header, the PDU Session Container (TS 38.415 §5.5.2) that
//! carries the QoS flow identifier on N3.

use super::WireError;

/// The UDP port of GTP-U (TS 29.281 §4.4.2).
pub const UDP_PORT: u16 = 2152;
/// Message type of a G-PDU: the tunnel carries a user packet.
pub const MSG_G_PDU: u8 = 255;
/// The mandatory header.
pub const HEADER_LEN: usize = 8;
/// Sequence number, N-PDU number and next-extension type, present when E, S or PN is set.
pub const OPTIONAL_LEN: usize = 4;
/// The PDU Session Container extension header, as this module emits it: one 4-octet unit.
pub const PDU_SESSION_LEN: usize = 4;
/// Next-extension-header type of the PDU Session Container (TS 29.281 §5.2.1).
pub const EXT_PDU_SESSION: u8 = 0x85;

/// Flags octet bits.
mod flag {
    /// Version 1, in the top three bits.
    pub const VERSION_1: u8 = 1 << 5;
    /// Protocol type: GTP (not GTP').
    pub const PT: u8 = 1 << 4;
    /// An extension header follows.
    pub const E: u8 = 1 << 2;
    /// The sequence number is meaningful.
    pub const S: u8 = 1 << 1;
    /// The N-PDU number is meaningful.
    pub const PN: u8 = 1;
}

/// Direction of a PDU Session Container: the PDU type field (TS 38.415 §5.5.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PduDirection {
    /// DL PDU SESSION INFORMATION (type 0): UPF to gNB.
    Downlink,
    /// UL PDU SESSION INFORMATION (type 1): gNB to UPF.
    Uplink,
}

/// A G-PDU header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GtpuRepr {
    /// Tunnel endpoint identifier of the receiving end.
    pub teid: u32,
    /// The PDU Session Container with its QoS flow identifier (0..=63), if present.
    pub qfi: Option<(PduDirection, u8)>,
}

impl GtpuRepr {
    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        if self.qfi.is_some() {
            HEADER_LEN + OPTIONAL_LEN + PDU_SESSION_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header for a user packet of `payload_len` bytes at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<(), WireError> {
        let len = self.buffer_len();
        let hdr = buf.get_mut(..len).ok_or(WireError::Truncated)?;
        let after_mandatory =
            u16::try_from(len - HEADER_LEN + payload_len).map_err(|_| WireError::BadLength)?;
        let mut flags = flag::VERSION_1 | flag::PT;
        if self.qfi.is_some() {
            flags |= flag::E;
        }
        hdr[0] = flags;
        hdr[1] = MSG_G_PDU;
        hdr[2..4].copy_from_slice(&after_mandatory.to_be_bytes());
        hdr[4..8].copy_from_slice(&self.teid.to_be_bytes());
        if let Some((dir, qfi)) = self.qfi {
            if qfi > 63 {
                return Err(WireError::BadLength);
            }
            // Sequence number and N-PDU number unused (S and PN clear); next: the container.
            hdr[8..12].copy_from_slice(&[0, 0, 0, EXT_PDU_SESSION]);
            let pdu_type = match dir {
                PduDirection::Downlink => 0,
                PduDirection::Uplink => 1,
            };
            // Length in 4-octet units, PDU type, QFI, then "no further extension".
            hdr[12..16].copy_from_slice(&[1, pdu_type << 4, qfi, 0]);
        }
        Ok(())
    }

    /// Parses a G-PDU header at the start of `buf`, whose UDP payload is `udp_payload_len` bytes
    /// long; returns it and its length (where the user packet starts). Extension headers other
    /// than the PDU Session Container are skipped by their length field.
    pub fn parse(buf: &[u8], udp_payload_len: usize) -> Result<(Self, usize), WireError> {
        let hdr = buf.get(..HEADER_LEN).ok_or(WireError::Truncated)?;
        if hdr[0] >> 5 != 1 || hdr[0] & flag::PT == 0 {
            return Err(WireError::BadVersion);
        }
        if hdr[1] != MSG_G_PDU {
            return Err(WireError::BadHeaderLength);
        }
        let length = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
        if HEADER_LEN + length != udp_payload_len {
            return Err(WireError::BadLength);
        }
        let teid = u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
        let mut off = HEADER_LEN;
        let mut qfi = None;
        if hdr[0] & (flag::E | flag::S | flag::PN) != 0 {
            let opt = buf
                .get(off..off + OPTIONAL_LEN)
                .ok_or(WireError::Truncated)?;
            let mut next = if hdr[0] & flag::E != 0 { opt[3] } else { 0 };
            off += OPTIONAL_LEN;
            while next != 0 {
                let units = usize::from(*buf.get(off).ok_or(WireError::Truncated)?);
                if units == 0 {
                    return Err(WireError::BadHeaderLength);
                }
                let ext = buf.get(off..off + units * 4).ok_or(WireError::Truncated)?;
                if next == EXT_PDU_SESSION && units >= 1 {
                    let dir = if ext[1] >> 4 == 1 {
                        PduDirection::Uplink
                    } else {
                        PduDirection::Downlink
                    };
                    qfi = Some((dir, ext[2] & 0x3f));
                }
                next = ext[units * 4 - 1];
                off += units * 4;
            }
        }
        if off > udp_payload_len {
            return Err(WireError::BadLength);
        }
        Ok((Self { teid, qfi }, off))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_and_without_the_pdu_session_container() {
        for repr in [
            GtpuRepr {
                teid: 0x1234_5678,
                qfi: None,
            },
            GtpuRepr {
                teid: 7,
                qfi: Some((PduDirection::Downlink, 9)),
            },
            GtpuRepr {
                teid: u32::MAX,
                qfi: Some((PduDirection::Uplink, 63)),
            },
        ] {
            let mut buf = vec![0u8; repr.buffer_len() + 100];
            repr.emit(&mut buf, 100).unwrap();
            // TS 29.281 §5.1: version 1, PT 1, G-PDU, length after the first 8 octets.
            assert_eq!(buf[0] >> 5, 1);
            assert_eq!(buf[1], 255);
            let length = u16::from_be_bytes([buf[2], buf[3]]) as usize;
            assert_eq!(length, repr.buffer_len() - 8 + 100);
            assert_eq!(
                GtpuRepr::parse(&buf, buf.len()),
                Ok((repr, repr.buffer_len()))
            );
        }
    }

    #[test]
    fn refuses_what_is_not_a_g_pdu_or_is_cut_short() {
        let repr = GtpuRepr {
            teid: 1,
            qfi: Some((PduDirection::Downlink, 1)),
        };
        let mut buf = vec![0u8; 16 + 10];
        repr.emit(&mut buf, 10).unwrap();
        assert_eq!(GtpuRepr::parse(&buf[..6], 26), Err(WireError::Truncated));
        assert_eq!(GtpuRepr::parse(&buf, 27), Err(WireError::BadLength));
        let mut v0 = buf.clone();
        v0[0] &= 0x1f;
        assert_eq!(GtpuRepr::parse(&v0, 26), Err(WireError::BadVersion));
        let mut echo = buf.clone();
        echo[1] = 1;
        assert!(GtpuRepr::parse(&echo, 26).is_err());
        let mut zero_ext = buf.clone();
        zero_ext[12] = 0;
        assert_eq!(
            GtpuRepr::parse(&zero_ext, 26),
            Err(WireError::BadHeaderLength)
        );
        assert!(repr.emit(&mut [0u8; 10], 0).is_err());
        let bad_qfi = GtpuRepr {
            teid: 1,
            qfi: Some((PduDirection::Downlink, 64)),
        };
        assert!(bad_qfi.emit(&mut buf, 10).is_err());
    }
}
