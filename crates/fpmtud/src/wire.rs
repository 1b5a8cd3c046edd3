//! The F-PMTUD message format: probes and reports (SIGCOMM'26 §5.2, HotNets'25 §4.2).
//!
//! Both messages are UDP payloads to or from the well-known port [`DEFAULT_PORT`]. They share a
//! 24-byte header; a probe pads it to the probe size, a report follows it with a bounded list of
//! fragment sizes. `docs/fpmtud.md` describes every field.
//!
//! ```text
//!  0      4   5   6       8           12                      20      22      24
//!  +------+---+---+-------+-----------+-----------------------+-------+-------+------------
//!  | FPMT |ver|typ| flags | probe id  | nonce                 | A     | B     | probe: padding
//!  +------+---+---+-------+-----------+-----------------------+-------+-------+ report: B x u16
//!  probe:  A = IP size sent,        B = 0
//!  report: A = fragments seen,      B = sizes listed
//! ```
//!
//! [`Packet`] is a zero-copy view that checks the length once; [`Probe`] and [`Report`] parse
//! and emit. Parsing never panics: every malformed input gives a [`WireError`].

/// The well-known UDP port of F-PMTUD probes and reports. pxgw's configuration already keeps it
/// out of caravans (`exclude_ports`), so probes cross gateways as plain UDP (HotNets'25 §4.2).
pub const DEFAULT_PORT: u16 = 4689;

/// The first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"FPMT";

/// The format version this crate speaks.
pub const VERSION: u8 = 1;

/// The smallest probe, as an IP packet: every IPv4 host must accept 576-byte datagrams
/// (RFC 791), and a probe this size always has room for a full-length report.
pub const MIN_PROBE_SIZE: u16 = 576;

/// The most fragment sizes a report lists. A 9000 B probe over a 68 B path (the IPv4 minimum)
/// makes about 190 fragments; a responder that saw more than this lists the largest ones.
pub const MAX_LISTED: usize = 128;

/// Byte offsets of the message fields.
pub mod field {
    /// A byte range of a field.
    pub type Field = core::ops::Range<usize>;

    /// `"FPMT"`.
    pub const MAGIC: Field = 0..4;
    /// Format version, [`super::VERSION`].
    pub const VERSION: usize = 4;
    /// Message type: 1 probe, 2 report.
    pub const KIND: usize = 5;
    /// Flags: sent as zero, ignored on receipt (room for later versions).
    pub const FLAGS: Field = 6..8;
    /// The prober's id for this probe; a report echoes it.
    pub const PROBE_ID: Field = 8..12;
    /// The prober's random nonce for this probe; a report echoes it.
    pub const NONCE: Field = 12..20;
    /// Probe: the IP packet size the prober sent (headers included).
    pub const PROBE_SIZE: Field = 20..22;
    /// Probe: reserved, sent as zero.
    pub const PROBE_RESERVED: Field = 22..24;
    /// Report: how many fragments the responder saw for the probe.
    pub const REPORT_SEEN: Field = 20..22;
    /// Report: how many fragment sizes follow the header.
    pub const REPORT_LISTED: Field = 22..24;
    /// Length of the common header. It fits a first IPv4 fragment even at the 68 B minimum
    /// MTU (68 - 20 IP - 8 UDP = 40 bytes), so a gateway reads it from the first fragment.
    pub const HEADER_LEN: usize = 24;
    /// Length of one listed fragment size (big-endian `u16`, the fragment's IP total length).
    pub const SIZE_LEN: usize = 2;
}

/// The message type in [`field::KIND`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Prober to responder.
    Probe,
    /// Responder to prober.
    Report,
}

impl Kind {
    /// The byte on the wire.
    pub const fn to_byte(self) -> u8 {
        match self {
            Kind::Probe => 1,
            Kind::Report => 2,
        }
    }

    /// The type for a wire byte, if it is one.
    pub const fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Kind::Probe),
            2 => Some(Kind::Report),
            _ => None,
        }
    }
}

/// Why bytes are not a valid F-PMTUD message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the header, or than the report's list needs.
    #[error("message truncated: {needed} bytes needed, {got} present")]
    Truncated {
        /// Bytes the message needs.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// The first four bytes are not `"FPMT"`.
    #[error("bad magic {0:02x?}: not an F-PMTUD message")]
    BadMagic([u8; 4]),
    /// A version this crate does not speak.
    #[error("unsupported F-PMTUD version {0} (this is version {VERSION})")]
    UnsupportedVersion(u8),
    /// A message type other than probe (1) or report (2).
    #[error("unknown message type {0}")]
    UnknownKind(u8),
    /// A probe where a report was expected, or the reverse.
    #[error("expected a {expected:?}, got a {got:?}")]
    WrongKind {
        /// What the caller asked for.
        expected: Kind,
        /// What the bytes hold.
        got: Kind,
    },
    /// A report with bytes after its list.
    #[error("report lists {listed} sizes ({expected} bytes) but is {got} bytes long")]
    LengthMismatch {
        /// The list length field.
        listed: u16,
        /// The length it implies.
        expected: usize,
        /// The actual length.
        got: usize,
    },
    /// A report listing no fragment size.
    #[error("report lists no fragment size")]
    EmptyReport,
    /// A report listing more sizes than [`MAX_LISTED`].
    #[error("report lists {0} sizes, more than the {MAX_LISTED} allowed")]
    TooManyListed(u16),
    /// A report listing more sizes than it says it saw fragments.
    #[error("report lists {listed} sizes but saw only {seen} fragments")]
    ListedExceedsSeen {
        /// Sizes listed.
        listed: u16,
        /// Fragments seen.
        seen: u16,
    },
    /// A report listing a zero fragment size.
    #[error("report lists a zero fragment size")]
    ZeroSize,
    /// A probe size below [`MIN_PROBE_SIZE`].
    #[error("probe size {0} below the minimum {MIN_PROBE_SIZE}")]
    ProbeTooSmall(u16),
    /// The output buffer cannot hold the message.
    #[error("buffer of {got} bytes cannot hold a {needed}-byte message")]
    BufferTooSmall {
        /// Bytes the message needs.
        needed: usize,
        /// Bytes the buffer has.
        got: usize,
    },
}

fn read_u16(bytes: &[u8], field: field::Field) -> u16 {
    let mut b = [0; 2];
    b.copy_from_slice(&bytes[field]);
    u16::from_be_bytes(b)
}

fn read_u32(bytes: &[u8], field: field::Field) -> u32 {
    let mut b = [0; 4];
    b.copy_from_slice(&bytes[field]);
    u32::from_be_bytes(b)
}

fn read_u64(bytes: &[u8], field: field::Field) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&bytes[field]);
    u64::from_be_bytes(b)
}

/// A read (or, over `&mut [u8]`, write) view of an F-PMTUD message.
///
/// [`Packet::new_checked`] validates the header and, for reports, the list length, so the
/// accessors never run off the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checks; accessors panic if it is shorter than the header.
    /// Use it only on a buffer you sized yourself, to write into.
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking the magic, version and type, that it holds the header,
    /// and for a report, that it holds exactly its listed sizes.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = Packet { buffer };
        packet.check()?;
        Ok(packet)
    }

    fn check(&self) -> Result<(), WireError> {
        let bytes = self.buffer.as_ref();
        if bytes.len() < field::HEADER_LEN {
            return Err(WireError::Truncated {
                needed: field::HEADER_LEN,
                got: bytes.len(),
            });
        }
        let mut magic = [0; 4];
        magic.copy_from_slice(&bytes[field::MAGIC]);
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        if bytes[field::VERSION] != VERSION {
            return Err(WireError::UnsupportedVersion(bytes[field::VERSION]));
        }
        match self.kind()? {
            Kind::Probe => Ok(()),
            Kind::Report => {
                let listed = self.listed();
                let expected = field::HEADER_LEN + usize::from(listed) * field::SIZE_LEN;
                if bytes.len() < expected {
                    return Err(WireError::Truncated {
                        needed: expected,
                        got: bytes.len(),
                    });
                }
                if bytes.len() != expected {
                    return Err(WireError::LengthMismatch {
                        listed,
                        expected,
                        got: bytes.len(),
                    });
                }
                Ok(())
            }
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The message type.
    pub fn kind(&self) -> Result<Kind, WireError> {
        let byte = self.buffer.as_ref()[field::KIND];
        Kind::from_byte(byte).ok_or(WireError::UnknownKind(byte))
    }

    /// The format version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The flags (zero in version 1).
    pub fn flags(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::FLAGS)
    }

    /// The probe id.
    pub fn probe_id(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::PROBE_ID)
    }

    /// The nonce.
    pub fn nonce(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::NONCE)
    }

    /// Probe: the IP size sent.
    pub fn probe_size(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PROBE_SIZE)
    }

    /// Report: the number of fragments the responder saw.
    pub fn fragments_seen(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::REPORT_SEEN)
    }

    /// Report: the number of sizes listed.
    pub fn listed(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::REPORT_LISTED)
    }

    /// Report: the listed fragment sizes (empty for a probe).
    pub fn sizes(&self) -> impl Iterator<Item = u16> + '_ {
        let bytes = self.buffer.as_ref();
        let list = match self.kind() {
            Ok(Kind::Report) => bytes.get(field::HEADER_LEN..).unwrap_or(&[]),
            _ => &[],
        };
        list.chunks_exact(field::SIZE_LEN)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Writes magic, version, type and zero flags.
    pub fn set_header(&mut self, kind: Kind) {
        let b = self.bytes_mut();
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = VERSION;
        b[field::KIND] = kind.to_byte();
        b[field::FLAGS].copy_from_slice(&0u16.to_be_bytes());
    }

    /// Sets the probe id.
    pub fn set_probe_id(&mut self, id: u32) {
        self.bytes_mut()[field::PROBE_ID].copy_from_slice(&id.to_be_bytes());
    }

    /// Sets the nonce.
    pub fn set_nonce(&mut self, nonce: u64) {
        self.bytes_mut()[field::NONCE].copy_from_slice(&nonce.to_be_bytes());
    }

    /// Sets the probe's IP size and zeroes the reserved field.
    pub fn set_probe_size(&mut self, size: u16) {
        let b = self.bytes_mut();
        b[field::PROBE_SIZE].copy_from_slice(&size.to_be_bytes());
        b[field::PROBE_RESERVED].copy_from_slice(&0u16.to_be_bytes());
    }

    /// Sets the report's fragment counts.
    pub fn set_report_counts(&mut self, seen: u16, listed: u16) {
        let b = self.bytes_mut();
        b[field::REPORT_SEEN].copy_from_slice(&seen.to_be_bytes());
        b[field::REPORT_LISTED].copy_from_slice(&listed.to_be_bytes());
    }
}

/// A probe (SIGCOMM'26 §5.2): a UDP payload of the probe size minus the IP and UDP headers,
/// sent with DF clear so that routers fragment it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Probe {
    /// The prober's id for this probe.
    pub probe_id: u32,
    /// Random per probe; the report must echo it (challenge-response against off-path
    /// spoofing, SIGCOMM'26 §5.2 "Correctness and security").
    pub nonce: u64,
    /// The IP packet size the prober sent, headers included.
    pub size: u16,
}

impl Probe {
    /// Parses a probe from a UDP payload, or from its first bytes: a gateway sees only the
    /// first fragment's share, and the header is all it needs.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let packet = Packet::new_checked(bytes)?;
        match packet.kind()? {
            Kind::Probe => Ok(Probe {
                probe_id: packet.probe_id(),
                nonce: packet.nonce(),
                size: packet.probe_size(),
            }),
            got => Err(WireError::WrongKind {
                expected: Kind::Probe,
                got,
            }),
        }
    }

    /// Writes the probe into `payload`, header first and zero padding after; `payload` is the
    /// whole UDP payload, so its length sets the probe size on the wire.
    pub fn emit(&self, payload: &mut [u8]) -> Result<(), WireError> {
        if payload.len() < field::HEADER_LEN {
            return Err(WireError::BufferTooSmall {
                needed: field::HEADER_LEN,
                got: payload.len(),
            });
        }
        payload.fill(0);
        let mut packet = Packet::new_unchecked(payload);
        packet.set_header(Kind::Probe);
        packet.set_probe_id(self.probe_id);
        packet.set_nonce(self.nonce);
        packet.set_probe_size(self.size);
        Ok(())
    }
}

/// A report (SIGCOMM'26 §5.2): the fragment sizes a responder saw for one probe.
///
/// A responder never sends a report longer than the probe's UDP payload (no amplification):
/// [`Report::truncate_to`] trims the list, keeping the largest sizes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Report {
    /// The id of the probe answered.
    pub probe_id: u32,
    /// That probe's nonce, echoed.
    pub nonce: u64,
    /// How many fragments the responder saw (1: the probe arrived whole).
    pub fragments_seen: u16,
    /// IP total lengths of the fragments, in offset order, at most [`MAX_LISTED`]; when the
    /// responder saw more, the largest ones.
    pub sizes: Vec<u16>,
}

impl Report {
    /// Parses a report. Checks the list against its length field, [`MAX_LISTED`] and the
    /// fragments-seen count, and rejects empty lists and zero sizes.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let packet = Packet::new_checked(bytes)?;
        let kind = packet.kind()?;
        if kind != Kind::Report {
            return Err(WireError::WrongKind {
                expected: Kind::Report,
                got: kind,
            });
        }
        let listed = packet.listed();
        if listed == 0 {
            return Err(WireError::EmptyReport);
        }
        if usize::from(listed) > MAX_LISTED {
            return Err(WireError::TooManyListed(listed));
        }
        let seen = packet.fragments_seen();
        if listed > seen {
            return Err(WireError::ListedExceedsSeen { listed, seen });
        }
        let sizes: Vec<u16> = packet.sizes().collect();
        if sizes.contains(&0) {
            return Err(WireError::ZeroSize);
        }
        Ok(Report {
            probe_id: packet.probe_id(),
            nonce: packet.nonce(),
            fragments_seen: seen,
            sizes,
        })
    }

    /// The report's length on the wire.
    pub fn wire_len(&self) -> usize {
        field::HEADER_LEN + self.sizes.len() * field::SIZE_LEN
    }

    /// The largest listed fragment size.
    pub fn largest(&self) -> Option<u16> {
        self.sizes.iter().copied().max()
    }

    /// Keeps at most `max` sizes: the largest ones, still in offset order. The largest size,
    /// which carries the PMTU, always survives when `max > 0`.
    pub fn truncate_to(&mut self, max: usize) {
        if self.sizes.len() <= max {
            return;
        }
        // Rank by size (largest first, earlier offset first among equals), keep the top `max`.
        let mut ranked: Vec<usize> = (0..self.sizes.len()).collect();
        ranked.sort_by(|&a, &b| self.sizes[b].cmp(&self.sizes[a]).then(a.cmp(&b)));
        let mut keep = vec![false; self.sizes.len()];
        for &i in ranked.iter().take(max) {
            keep[i] = true;
        }
        let mut i = 0;
        self.sizes.retain(|_| {
            let k = keep[i];
            i += 1;
            k
        });
    }

    /// Writes the report into `buf`, which must be exactly [`Report::wire_len`] bytes or
    /// longer (only that many are written); returns the length written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.wire_len();
        if self.sizes.is_empty() {
            return Err(WireError::EmptyReport);
        }
        let listed = u16::try_from(self.sizes.len())
            .ok()
            .filter(|&n| usize::from(n) <= MAX_LISTED)
            .ok_or(WireError::TooManyListed(u16::MAX))?;
        if listed > self.fragments_seen {
            return Err(WireError::ListedExceedsSeen {
                listed,
                seen: self.fragments_seen,
            });
        }
        let Some(out) = buf.get_mut(..len) else {
            return Err(WireError::BufferTooSmall {
                needed: len,
                got: buf.len(),
            });
        };
        let mut packet = Packet::new_unchecked(&mut *out);
        packet.set_header(Kind::Report);
        packet.set_probe_id(self.probe_id);
        packet.set_nonce(self.nonce);
        packet.set_report_counts(self.fragments_seen, listed);
        for (chunk, size) in out[field::HEADER_LEN..]
            .chunks_exact_mut(field::SIZE_LEN)
            .zip(&self.sizes)
        {
            chunk.copy_from_slice(&size.to_be_bytes());
        }
        Ok(len)
    }

    /// The report as a new buffer.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WireError> {
        let mut buf = vec![0; self.wire_len()];
        self.emit(&mut buf)?;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn report(sizes: Vec<u16>) -> Report {
        Report {
            probe_id: 7,
            nonce: 0x0102_0304_0506_0708,
            fragments_seen: u16::try_from(sizes.len()).unwrap(),
            sizes,
        }
    }

    #[test]
    fn probe_round_trip_and_padding() {
        let probe = Probe {
            probe_id: 0xdead_beef,
            nonce: 42,
            size: 9000,
        };
        let mut payload = vec![0xaa; 8972];
        probe.emit(&mut payload).unwrap();
        assert_eq!(&payload[..4], b"FPMT");
        assert_eq!(payload[field::VERSION], VERSION);
        assert_eq!(payload[field::KIND], 1);
        assert!(payload[field::HEADER_LEN..].iter().all(|&b| b == 0));
        assert_eq!(Probe::parse(&payload).unwrap(), probe);
        // A gateway parses the header from a first fragment's share alone.
        assert_eq!(Probe::parse(&payload[..field::HEADER_LEN]).unwrap(), probe);
    }

    #[test]
    fn report_round_trip_exact_bytes() {
        let r = report(vec![1396, 1396, 744]);
        let bytes = r.to_bytes().unwrap();
        assert_eq!(bytes.len(), 24 + 6);
        assert_eq!(&bytes[20..24], &[0, 3, 0, 3]);
        assert_eq!(&bytes[24..], &[0x05, 0x74, 0x05, 0x74, 0x02, 0xe8]);
        assert_eq!(Report::parse(&bytes).unwrap(), r);
    }

    #[test]
    fn clear_errors() {
        let probe = Probe {
            probe_id: 1,
            nonce: 2,
            size: 1500,
        };
        let mut p = vec![0; 100];
        probe.emit(&mut p).unwrap();
        assert_eq!(
            Report::parse(&p),
            Err(WireError::WrongKind {
                expected: Kind::Report,
                got: Kind::Probe
            })
        );
        assert_eq!(
            Probe::parse(&p[..10]),
            Err(WireError::Truncated {
                needed: 24,
                got: 10
            })
        );
        let mut bad = p.clone();
        bad[0] = b'X';
        assert!(matches!(Probe::parse(&bad), Err(WireError::BadMagic(_))));
        let mut v2 = p.clone();
        v2[field::VERSION] = 2;
        assert_eq!(Probe::parse(&v2), Err(WireError::UnsupportedVersion(2)));
        let mut k = p.clone();
        k[field::KIND] = 9;
        assert_eq!(Probe::parse(&k), Err(WireError::UnknownKind(9)));

        let r = report(vec![1400]).to_bytes().unwrap();
        let mut long = r.clone();
        long.push(0);
        assert!(matches!(
            Report::parse(&long),
            Err(WireError::LengthMismatch { .. })
        ));
        assert!(matches!(
            Report::parse(&r[..25]),
            Err(WireError::Truncated { .. })
        ));
        let mut zero = r.clone();
        zero[24..26].copy_from_slice(&[0, 0]);
        assert_eq!(Report::parse(&zero), Err(WireError::ZeroSize));
        let mut none = r[..24].to_vec();
        none[22..24].copy_from_slice(&[0, 0]);
        assert_eq!(Report::parse(&none), Err(WireError::EmptyReport));
        let mut over = r.clone();
        over[20..22].copy_from_slice(&[0, 0]);
        assert_eq!(
            Report::parse(&over),
            Err(WireError::ListedExceedsSeen { listed: 1, seen: 0 })
        );
        let e = Report::parse(&zero).unwrap_err().to_string();
        assert!(e.contains("zero"), "{e}");
    }

    #[test]
    fn truncation_keeps_the_largest_in_order() {
        let mut r = report(vec![500, 1396, 1396, 1000, 1396, 300]);
        r.truncate_to(3);
        assert_eq!(r.sizes, vec![1396, 1396, 1396]);
        let mut r = report(vec![500, 1000, 1400, 200]);
        r.truncate_to(2);
        assert_eq!(r.sizes, vec![1000, 1400]);
        assert_eq!(r.largest(), Some(1400));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Probe::parse(&bytes);
            let _ = Report::parse(&bytes);
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = p.sizes().count();
            }
        }

        #[test]
        fn parsers_never_panic_on_near_valid(
            sizes in proptest::collection::vec(1u16.., 1..MAX_LISTED),
            flip in any::<usize>(),
            value in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let mut bytes = report(sizes).to_bytes().unwrap();
            let i = flip % bytes.len();
            bytes[i] = value;
            bytes.truncate(cut % (bytes.len() + 1));
            match Report::parse(&bytes) {
                Ok(r) => prop_assert_eq!(r.wire_len(), bytes.len()),
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn report_round_trips(sizes in proptest::collection::vec(1u16.., 1..=MAX_LISTED),
                              extra in 0u16..100, id in any::<u32>(), nonce in any::<u64>()) {
            let r = Report {
                probe_id: id,
                nonce,
                fragments_seen: u16::try_from(sizes.len()).unwrap() + extra,
                sizes,
            };
            prop_assert_eq!(Report::parse(&r.to_bytes().unwrap()).unwrap(), r);
        }

        #[test]
        fn truncation_bounds_and_keeps_max(sizes in proptest::collection::vec(1u16.., 1..300),
                                           max in 1usize..=MAX_LISTED) {
            let mut r = report(sizes.clone());
            r.fragments_seen = 300;
            let largest = r.largest();
            r.truncate_to(max);
            prop_assert!(r.sizes.len() <= max);
            prop_assert_eq!(r.largest(), largest);
            prop_assert_eq!(r.sizes.len(), sizes.len().min(max));
        }
    }
}
