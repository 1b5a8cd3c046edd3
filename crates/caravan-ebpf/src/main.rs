//! The PX-caravan decapsulator: a TC classifier for clsact ingress (SIGCOMM'26 §6, §3.5).
//!
//! The paper patches the kernel's UDP stack so that endpoints inside the b-network receive
//! caravans. This program does the same job without a kernel rebuild. It recognises a caravan
//! (`docs/caravan.md`): unfragmented UDP over IPv4 without options or over IPv6 without
//! extension headers, DSCP = the mark, untagged or behind one 802.1Q tag, whose payload starts
//! with the caravan header (magic `PXCV`, version 1). A marked packet without that header is an
//! ordinary datagram, and one with another version is not understood: both pass untouched,
//! counted. A caravan whose outer IPv4 header checksum or outer UDP checksum fails is not
//! trusted: it passes untouched, counted (see "Checksums"). It validates the whole caravan
//! first, and a malformed one is dropped and counted, so nothing of it is delivered. Then it
//! hands every inner datagram to the stack as an ordinary UDP packet.
//!
//! # VLAN tags
//! At clsact ingress the kernel has already moved a frame's first VLAN tag out of the data into
//! the socket buffer's metadata (`skb_vlan_untag` runs before TC), so a single-tagged caravan
//! looks untagged here; the clones below inherit the tag and reach the VLAN device above. A tag
//! still in the data (a frame handed to the program raw, as `BPF_PROG_TEST_RUN` does) is checked
//! the same way at offset 18, then moved into the metadata (`bpf_skb_vlan_pop` and
//! `bpf_skb_vlan_push`) before decapsulation. A tag in the data behind one in the metadata is a
//! second tag: double-tagged frames pass untouched (the gateway never packs them).
//!
//! # How the datagrams are cut out (in one pass, in order)
//! 1. `bpf_skb_adjust_room(-16, NET)` removes the outer UDP header and the caravan header.
//!    Datagram 0's UDP header now follows the IP header.
//! 2. For datagram *i*, the IP header is rewritten: DSCP 0 (ECN kept) and its own length (IPv4:
//!    total length 20 + its UDP length, identification = the caravan's + *i*, a recomputed
//!    header checksum; IPv6: payload length = its UDP length). Then
//!    `bpf_clone_redirect(skb, ifindex, BPF_F_INGRESS)` hands a clone to this device's ingress.
//!    The bytes behind the datagram (the rest of the caravan) are still in the clone. `ip_rcv`
//!    and `ipv6_rcv` trim them, as they trim Ethernet padding, because the IP length says where
//!    the datagram ends.
//! 3. `bpf_skb_adjust_room(-len_i, NET)` removes datagram *i*, in three steps of about a third
//!    (the helper moves at most 4095 B at once), so datagram *i + 1* now follows the IP header.
//!    Go to 2.
//! 4. The last datagram is not cloned: the original, rewritten into it, follows the clones with
//!    `bpf_redirect(ifindex, BPF_F_INGRESS)` and `TC_ACT_REDIRECT`. When a helper fails part way
//!    the original is dropped instead (`TC_ACT_SHOT`; under a TCX link `TC_ACT_STOLEN` would
//!    mean "next", and the original would go on as a duplicate).
//!
//! All datagrams of one caravan are queued back to back on this CPU's backlog, from one program
//! run, so they reach the socket in caravan order. A datagram is never delivered ahead of an
//! earlier caravan's. Recirculating one datagram per pass would not keep that order: a later
//! caravan queued meanwhile would overtake the rest of an earlier one. The datagrams come back
//! through this program with DSCP 0, so they pass it as plain UDP.
//!
//! # What it costs (docs/caravan.md, "What decapsulation costs")
//! `bpf_clone_redirect` unclones the original right after cloning it (the kernel keeps every
//! buffer a TC program may write private): `pskb_expand_head` copies everything from the
//! buffer's head to its tail into a new allocation. The tail is where the caravan's last
//! datagram ends, whatever was cut from the front, so each clone copies about the whole caravan:
//! with *n* datagrams, *n* − 1 copies of it. That copy, not the program, is most of the cost.
//!
//! # Checksums
//! At TC ingress the kernel has verified neither outer checksum: `ip_rcv` checks the IPv4
//! header later, `udp_rcv` the UDP checksum (unless the device already did). A caravan is
//! rewritten and cut only once both verify here, so a damaged or forged one is never "repaired":
//! * The outer IPv4 header checksum is verified (20 bytes, in registers).
//! * The outer UDP checksum must not be zero (the packer always sends one; IPv6 requires it).
//!   It is trusted when the socket buffer is `CHECKSUM_UNNECESSARY` (`bpf_csum_level` query: the
//!   NIC, or GRO, verified the outermost L4 checksum); otherwise it is computed over the whole
//!   outer UDP packet with its pseudo-header ([`outer_udp_verified`]).
//!
//! A marked packet whose caravan header is there but whose outer checksums fail passes untouched
//! (counted as `bad_checksum`): the kernel then drops it, or delivers it whole, as it would any
//! datagram. Then, for the datagrams handed on:
//! * The IPv4 header checksum of every datagram is recomputed here (IPv6 has none).
//! * The inner UDP checksum is the sender's, untouched. It covers the original pseudo-header:
//!   the same addresses, protocol and UDP length as the restored datagram. So it stays valid, and
//!   the UDP stack verifies it as for any datagram: `bpf_skb_adjust_room` resets a
//!   `CHECKSUM_UNNECESSARY` verdict, which was about the outer checksum only.
//!
//! # Not handled (passed untouched)
//! IPv4 headers with options, IPv6 packets with extension headers, double-tagged frames and
//! 802.1ad tags in the data. The packer never builds them.
//!
//! # Pass-through (beyond the paper)
//! A caravan to a UDP port registered in `CARAVAN_PASSTHROUGH` is validated the same way, then
//! delivered whole, still marked. The application splits it with `caravan::Reader`.

#![no_std]
#![no_main]

use aya_ebpf::bindings::{
    bpf_adj_room_mode::BPF_ADJ_ROOM_NET, BPF_CSUM_LEVEL_QUERY, BPF_F_INGRESS, TC_ACT_OK,
    TC_ACT_REDIRECT, TC_ACT_SHOT,
};
use aya_ebpf::helpers::{
    bpf_csum_diff, bpf_csum_level, bpf_redirect, bpf_skb_load_bytes, bpf_skb_vlan_pop,
    bpf_skb_vlan_push,
};
use aya_ebpf::macros::{classifier, map};
use aya_ebpf::maps::{Array, HashMap, PerCpuArray};
use aya_ebpf::programs::TcContext;
use caravan_common::format::{
    self, Refused, Walk, DEFAULT_DSCP, HEADER_LEN, MAX_DATAGRAMS, UDP_HEADER_LEN,
};
use caravan_common::{
    Counter, CONFIG_DSCP, CONFIG_LEN, CONFIG_MAX_DATAGRAMS, PASSTHROUGH_MAX_PORTS,
};

/// Ethernet header bytes (no VLAN tag).
const ETH_HLEN: usize = 14;
/// One VLAN tag (TPID and TCI).
const VLAN_HLEN: usize = 4;
/// Offset of the EtherType, or of the TPID of a tag still in the data.
const ETHERTYPE: usize = 12;
/// IPv4 header bytes without options.
const IP_HLEN: usize = 20;
/// IPv6 fixed header bytes.
const IP6_HLEN: usize = 40;
/// UDP header bytes (the caravan format's, outer and inner).
const UDP_HLEN: usize = UDP_HEADER_LEN;
/// Caravan header bytes, behind the outer UDP header.
const CARAVAN_HLEN: usize = HEADER_LEN;
/// Offset of the IP header while datagrams are cut out (any tag is in the metadata by then).
const L3: usize = ETH_HLEN;
/// EtherType of IPv4.
const ETH_P_IP: u16 = 0x0800;
/// EtherType of IPv6.
const ETH_P_IPV6: u16 = 0x86dd;
/// TPID of an 802.1Q tag.
const ETH_P_8021Q: u16 = 0x8100;
/// [`Caravan::tag`]'s flag: a tag is in the data.
const TAGGED: u32 = 1 << 16;
/// IP protocol number of UDP.
const IPPROTO_UDP: u8 = 17;
/// Bytes summed per `bpf_csum_diff` call while verifying the outer UDP checksum: a multiple of
/// 4 (the helper's unit), at most 512 (its limit on older kernels).
const CSUM_CHUNK: usize = 512;
/// Most whole chunks of one UDP packet (at most 65535 bytes): the summing loop's bound.
const CSUM_CHUNKS: usize = 65536 / CSUM_CHUNK;

/// Byte offsets inside the IPv4 header.
mod ip {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const TOT_LEN: usize = 2;
    pub const ID: usize = 4;
    pub const FRAG: usize = 6;
    pub const PROTO: usize = 9;
    pub const CSUM: usize = 10;
    pub const SRC: usize = 12;
}

/// Byte offsets inside the IPv6 header; the traffic class straddles bytes 0 and 1.
mod ip6 {
    /// Version (high nibble) and the traffic class's high nibble.
    pub const VER_TC: usize = 0;
    /// The traffic class's low nibble (high nibble of the byte) and the flow label's start.
    pub const TC_FLOW: usize = 1;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const SRC: usize = 8;
}

/// Byte offsets inside a UDP header: the caravan format's.
use format::udp;

/// Per-CPU counters, one slot per [`Counter`].
#[map(name = "CARAVAN_STATS")]
static CARAVAN_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// Settings written by the loader (`caravan_common::CONFIG_*`); 0 means the default.
#[map(name = "CARAVAN_CONFIG")]
static CARAVAN_CONFIG: Array<u32> = Array::with_max_entries(CONFIG_LEN, 0);

/// Where the outer UDP packet is copied, a chunk at a time, for `bpf_csum_diff` to sum: the
/// stack (512 B for the whole program) has no room for a chunk.
#[map(name = "CARAVAN_SCRATCH")]
static CARAVAN_SCRATCH: PerCpuArray<[u8; CSUM_CHUNK]> = PerCpuArray::with_max_entries(1, 0);

/// UDP destination ports (host byte order) whose caravans are delivered whole.
#[map(name = "CARAVAN_PASSTHROUGH")]
static CARAVAN_PASSTHROUGH: HashMap<u16, u8> = HashMap::with_max_entries(PASSTHROUGH_MAX_PORTS, 0);

/// The classifier: non-caravans pass, valid caravans are unpacked (or passed whole), malformed
/// ones are dropped, and ones whose outer checksums fail pass untouched.
#[classifier]
pub fn caravan_decap(ctx: TcContext) -> i32 {
    match classify(&ctx) {
        Verdict::Pass => TC_ACT_OK as i32,
        Verdict::MarkedPlain => {
            count(Counter::MarkedPlain, 1);
            TC_ACT_OK as i32
        }
        Verdict::UnknownVersion => {
            count(Counter::UnknownVersion, 1);
            TC_ACT_OK as i32
        }
        Verdict::BadChecksum => {
            count(Counter::BadChecksum, 1);
            TC_ACT_OK as i32
        }
        Verdict::Malformed => {
            count(Counter::Malformed, 1);
            TC_ACT_SHOT as i32
        }
        Verdict::Caravan(caravan) => {
            count(Counter::Caravans, 1);
            // SAFETY: a lookup in a map the program owns; the value is only tested for presence.
            if unsafe { CARAVAN_PASSTHROUGH.get(&caravan.dport) }.is_some() {
                count(Counter::PassedThrough, 1);
                return TC_ACT_OK as i32;
            }
            let delivered = if untag(&ctx, caravan.tag) {
                if caravan.v6 {
                    decapsulate_v6(&ctx, &caravan)
                } else {
                    decapsulate_v4(&ctx, &caravan)
                }
            } else {
                Delivered::default()
            };
            count(Counter::Datagrams, u64::from(delivered.sent));
            if delivered.sent != caravan.count {
                count(Counter::HelperErrors, 1);
            }
            if delivered.redirected {
                // The original, cut down to the last datagram, follows the clones into this
                // CPU's backlog (`bpf_redirect` was called last).
                return TC_ACT_REDIRECT as i32;
            }
            // A helper failed part way: the clones carry what was delivered; the original
            // must not go on. TC_ACT_SHOT, not TC_ACT_STOLEN: under a TCX link the kernel reads
            // any code but PASS, DROP and REDIRECT as "next", so STOLEN would let the original
            // through and deliver a datagram twice.
            TC_ACT_SHOT as i32
        }
    }
}

/// A validated caravan.
struct Caravan {
    /// Whether it is IPv6.
    v6: bool,
    /// The outer IP header as received: all 20 bytes of IPv4, the first 20 of IPv6.
    ip: [u8; IP_HLEN],
    /// Number of inner datagrams (1..=[`MAX_DATAGRAMS`]).
    count: u32,
    /// UDP destination port, host byte order.
    dport: u16,
    /// An 802.1Q tag still in the data, to move into the metadata first: its TCI with bit 16
    /// set, or 0 for none. (Not an `Option<u16>`: the verifier refuses the undefined payload
    /// LLVM leaves in a `None`.)
    tag: u32,
}

/// What [`decapsulate_v4`] and [`decapsulate_v6`] handed on.
#[derive(Default)]
struct Delivered {
    /// Datagrams handed on, clones and the original.
    sent: u32,
    /// Whether the original itself carries the last one (`bpf_redirect` was called, so the
    /// program must return `TC_ACT_REDIRECT`).
    redirected: bool,
}

/// What to do with a packet.
enum Verdict {
    /// Not a caravan: hand it on untouched.
    Pass,
    /// Marked, but without a caravan header: an ordinary datagram, handed on untouched.
    MarkedPlain,
    /// A caravan header of a version this program does not understand: handed on untouched.
    UnknownVersion,
    /// Marked, but the outer IPv4 header checksum or the outer UDP checksum does not verify (or
    /// the UDP checksum is zero): damaged or forged, handed on untouched for the kernel to judge.
    BadChecksum,
    /// A caravan that breaks a rule of `docs/caravan.md`: drop it whole.
    Malformed,
    /// A well-formed caravan.
    Caravan(Caravan),
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn config(slot: u32, default: u32) -> u32 {
    match CARAVAN_CONFIG.get(slot) {
        Some(&v) if v != 0 => v,
        _ => default,
    }
}

fn count(counter: Counter, n: u64) {
    if let Some(slot) = CARAVAN_STATS.get_ptr_mut(counter as u32) {
        // SAFETY: the pointer comes from a successful per-CPU array lookup, so it is valid and
        // only this CPU writes it (the program is not preempted by itself on one CPU).
        unsafe { *slot += n };
    }
}

/// The caravan mark configured by the loader.
fn mark() -> u8 {
    // Slot values are validated by the loader (1..=63); the cast keeps the low byte.
    config(CONFIG_DSCP, u32::from(DEFAULT_DSCP)) as u8
}

/// Tells caravans from other traffic and checks every rule of `docs/caravan.md` before anything
/// is delivered.
fn classify(ctx: &TcContext) -> Verdict {
    let Ok(ethertype) = ctx.load::<[u8; 2]>(ETHERTYPE) else {
        return Verdict::Pass;
    };
    let (l3, ethertype, tag) = if u16::from_be_bytes(ethertype) == ETH_P_8021Q {
        // SAFETY: reading a field of the context the kernel passed, as the verifier allows.
        if unsafe { (*ctx.skb.skb).vlan_present } != 0 {
            return Verdict::Pass; // a second tag: double-tagged
        }
        // The TCI, then the EtherType of what the tag carries.
        let Ok(tag) = ctx.load::<[u8; VLAN_HLEN]>(ETH_HLEN) else {
            return Verdict::Pass;
        };
        (
            ETH_HLEN + VLAN_HLEN,
            be16(&tag, 2),
            TAGGED | u32::from(be16(&tag, 0)),
        )
    } else {
        (ETH_HLEN, u16::from_be_bytes(ethertype), 0)
    };
    match ethertype {
        ETH_P_IP => classify_v4(ctx, l3, tag),
        ETH_P_IPV6 => classify_v6(ctx, l3, tag),
        _ => Verdict::Pass,
    }
}

/// [`classify`] for IPv4 at `l3`.
fn classify_v4(ctx: &TcContext, l3: usize, tag: u32) -> Verdict {
    let Ok(ip) = ctx.load::<[u8; IP_HLEN]>(l3) else {
        return Verdict::Pass;
    };
    if ip[ip::VER_IHL] != 0x45
        || !format::is_marked(ip[ip::TOS], mark())
        || ip[ip::PROTO] != IPPROTO_UDP
        || be16(&ip, ip::FRAG) & 0x3fff != 0
    {
        return Verdict::Pass;
    }
    // Nothing of a damaged header is trusted, not even its length: `ip_rcv` will drop it.
    if ones_sum(&ip, 0) != 0xffff {
        return Verdict::BadChecksum;
    }
    let tot_len = be16(&ip, ip::TOT_LEN) as usize;
    let header = match recognise(ctx, l3 + IP_HLEN, tot_len.saturating_sub(IP_HLEN)) {
        Ok(header) => header,
        Err(verdict) => return verdict,
    };
    // From here on it is a caravan: every failure is "malformed", unless its checksum fails.
    if l3 + tot_len > ctx.len() as usize {
        return Verdict::Malformed; // truncated
    }
    let udp_len = tot_len - IP_HLEN;
    // The pseudo-header (RFC 768): addresses, protocol, UDP length.
    let pseudo = ones_sum(&ip[ip::SRC..], u32::from(IPPROTO_UDP) + udp_len as u32);
    let outer = match outer_udp(ctx, l3 + IP_HLEN, udp_len, pseudo) {
        Ok(outer) => outer,
        Err(verdict) => return verdict,
    };
    match walk(ctx, &outer, &header) {
        Some((count, dport)) => Verdict::Caravan(Caravan {
            v6: false,
            ip,
            count,
            dport,
            tag,
        }),
        None => Verdict::Malformed,
    }
}

/// [`classify`] for IPv6 at `l3`: only UDP right behind the fixed header (a fragment or any
/// other extension header is not a caravan).
fn classify_v6(ctx: &TcContext, l3: usize, tag: u32) -> Verdict {
    let Ok(hdr) = ctx.load::<[u8; IP6_HLEN]>(l3) else {
        return Verdict::Pass;
    };
    let traffic_class = (hdr[ip6::VER_TC] << 4) | (hdr[ip6::TC_FLOW] >> 4);
    if hdr[ip6::VER_TC] >> 4 != 6
        || !format::is_marked(traffic_class, mark())
        || hdr[ip6::NEXT_HEADER] != IPPROTO_UDP
    {
        return Verdict::Pass;
    }
    let payload_len = be16(&hdr, ip6::PAYLOAD_LEN) as usize;
    // A jumbogram's zero length holds no caravan header: not a caravan.
    let header = match recognise(ctx, l3 + IP6_HLEN, payload_len) {
        Ok(header) => header,
        Err(verdict) => return verdict,
    };
    // From here on it is a caravan: every failure is "malformed", unless its checksum fails.
    if l3 + IP6_HLEN + payload_len > ctx.len() as usize {
        return Verdict::Malformed; // truncated
    }
    // The pseudo-header (RFC 8200 §8.1): addresses, upper-layer length, next header.
    let pseudo = ones_sum(
        &hdr[ip6::SRC..],
        u32::from(IPPROTO_UDP) + payload_len as u32,
    );
    let outer = match outer_udp(ctx, l3 + IP6_HLEN, payload_len, pseudo) {
        Ok(outer) => outer,
        Err(verdict) => return verdict,
    };
    let mut ip = [0u8; IP_HLEN];
    ip.copy_from_slice(&hdr[..IP_HLEN]);
    match walk(ctx, &outer, &header) {
        Some((count, dport)) => Verdict::Caravan(Caravan {
            v6: true,
            ip,
            count,
            dport,
            tag,
        }),
        None => Verdict::Malformed,
    }
}

/// Reads the caravan header behind the UDP header at `l4` of a marked packet whose IP layer
/// gives `udp_len` UDP bytes. Without one (the IP length leaves no room for it, or the magic is
/// not there) the packet is an ordinary datagram; with another version it is not understood.
fn recognise(ctx: &TcContext, l4: usize, udp_len: usize) -> Result<format::CaravanHeader, Verdict> {
    if udp_len < UDP_HLEN + CARAVAN_HLEN {
        return Err(Verdict::MarkedPlain);
    }
    let Ok(bytes) = ctx.load::<[u8; CARAVAN_HLEN]>(l4 + UDP_HLEN) else {
        return Err(Verdict::MarkedPlain);
    };
    format::recognise(&bytes).map_err(|e| match e {
        Refused::UnknownVersion(_) => Verdict::UnknownVersion,
        Refused::NotCaravan | Refused::Malformed(_) => Verdict::MarkedPlain,
    })
}

/// A caravan's outer UDP header, its length and checksum verified.
struct OuterUdp {
    /// Offset of the header in the frame.
    at: usize,
    /// UDP length: header and payload.
    len: usize,
    /// Source port.
    sport: u16,
    /// Destination port.
    dport: u16,
}

/// Checks the outer UDP header at `l4` of a caravan whose IP layer gives `udp_len` bytes, all in
/// the frame: its length must be the IP layer's (otherwise the caravan is malformed), and its
/// checksum, with the pseudo-header sum `pseudo`, must verify (otherwise it is not trusted).
fn outer_udp(ctx: &TcContext, l4: usize, udp_len: usize, pseudo: u32) -> Result<OuterUdp, Verdict> {
    let Ok(outer) = ctx.load::<[u8; UDP_HLEN]>(l4) else {
        return Err(Verdict::Malformed);
    };
    if be16(&outer, udp::LENGTH) as usize != udp_len {
        return Err(Verdict::Malformed); // IP and UDP lengths disagree
    }
    // Zero is "no checksum" (IPv4) or forbidden (IPv6); the packer never sends it.
    if be16(&outer, udp::CHECKSUM) == 0 || !outer_udp_verified(ctx, l4, udp_len, pseudo) {
        return Err(Verdict::BadChecksum);
    }
    Ok(OuterUdp {
        at: l4,
        len: udp_len,
        sport: be16(&outer, udp::SRC_PORT),
        dport: be16(&outer, udp::DST_PORT),
    })
}

/// Whether the outer UDP checksum of the `udp_len` bytes at `l4` verifies with the pseudo-header
/// sum `pseudo`. The kernel's verdict is taken when it has one: `CHECKSUM_UNNECESSARY` means
/// the NIC (or GRO, which verifies in software before TC) checked the outermost L4 checksum,
/// which is this one. `CHECKSUM_NONE` and `CHECKSUM_COMPLETE` are summed here: every byte,
/// `CSUM_CHUNK` at a time.
fn outer_udp_verified(ctx: &TcContext, l4: usize, udp_len: usize, pseudo: u32) -> bool {
    // SAFETY: `skb` is the context pointer the kernel passed; the query only reads its
    // checksum state (a level when it is CHECKSUM_UNNECESSARY, an error otherwise).
    if unsafe { bpf_csum_level(ctx.skb.skb, u64::from(BPF_CSUM_LEVEL_QUERY)) } >= 0 {
        return true;
    }
    match sum_packet(ctx, l4, udp_len) {
        // `bpf_csum_diff` sums 16-bit words in memory order: byte-swapped on this little-endian
        // target, which RFC 1071's sum allows, once folded (§2 B).
        Some(sum) => fold(u32::from(u16::from_be(fold(sum))) + pseudo) == 0xffff,
        None => false,
    }
}

/// The ones'-complement sum of the `len` bytes at `off` as `bpf_csum_diff` returns it (16-bit
/// words in memory order, not folded), or `None` when a helper fails. Bytes are copied to a
/// per-CPU buffer a chunk at a time; an odd tail is padded with zeros, as RFC 768 pads the sum.
fn sum_packet(ctx: &TcContext, off: usize, len: usize) -> Option<u32> {
    let buf = CARAVAN_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: the pointer comes from a successful per-CPU array lookup, so it is valid for a
    // whole value; only this run uses it, from here to the end of the sum (the program runs
    // with migration disabled and is not preempted by itself on one CPU).
    let buf = unsafe { &mut *buf };
    let mut sum = 0u32;
    let mut done = 0usize;
    for _ in 0..CSUM_CHUNKS {
        if len - done < CSUM_CHUNK {
            break;
        }
        sum = sum_chunk(ctx, off + done, buf, CSUM_CHUNK, sum)?;
        done += CSUM_CHUNK;
    }
    let left = len - done;
    if left >= CSUM_CHUNK {
        return None; // more than 65535 bytes: no UDP packet
    }
    let words = left & !3;
    if words > 0 {
        sum = sum_chunk(ctx, off + done, buf, words, sum)?;
    }
    let rest = left & 3;
    if rest > 0 {
        let mut last = [0u8; 4];
        sum = sum_chunk(ctx, off + done + words, &mut last, rest, sum)?;
    }
    Some(sum)
}

/// Loads `len` bytes (1..=`buf.len()`) at `off` into `buf` and adds them to `sum`: the whole of
/// `buf` is summed when `len` is not a multiple of 4, whose bytes past `len` are zero.
#[inline(always)]
fn sum_chunk(ctx: &TcContext, off: usize, buf: &mut [u8], len: usize, sum: u32) -> Option<u32> {
    let size = (len + 3) & !3;
    if len == 0 || size > buf.len() {
        return None;
    }
    // SAFETY: `buf` holds at least `size` >= `len` bytes, which the helper writes; `skb` is the
    // context pointer the kernel passed. The helper fails (and writes nothing) when the packet
    // ends before `off + len`.
    if unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb.cast(),
            off as u32,
            buf.as_mut_ptr().cast(),
            len as u32,
        )
    } != 0
    {
        return None;
    }
    // SAFETY: `buf` holds `size` readable bytes; a null `from` of size 0 adds `to` to the seed.
    let sum = unsafe {
        bpf_csum_diff(
            core::ptr::null_mut(),
            0,
            buf.as_mut_ptr().cast(),
            size as u32,
            sum,
        )
    };
    u32::try_from(sum).ok()
}

/// Folds a 32-bit ones'-complement sum to 16 bits.
#[inline(always)]
fn fold(sum: u32) -> u16 {
    let sum = (sum & 0xffff) + (sum >> 16);
    ((sum & 0xffff) + (sum >> 16)) as u16
}

/// The ones'-complement sum of `bytes` (an even number of them, read as big-endian words) and
/// `add`, folded: 0xffff over a header whose checksum verifies.
#[inline(always)]
fn ones_sum(bytes: &[u8], add: u32) -> u32 {
    let mut sum = add;
    let mut i = 0;
    while i + 1 < bytes.len() {
        sum += u32::from(be16(bytes, i));
        i += 2;
    }
    u32::from(fold(sum))
}

/// Checks every inner header behind the caravan header `header` of the `outer` UDP packet;
/// returns the datagram count and the destination port, or `None` when the caravan is
/// malformed.
fn walk(ctx: &TcContext, outer: &OuterUdp, header: &format::CaravanHeader) -> Option<(u32, u16)> {
    let (l4, udp_len, sport, dport) = (outer.at, outer.len, outer.sport, outer.dport);
    let max = config(CONFIG_MAX_DATAGRAMS, MAX_DATAGRAMS).min(MAX_DATAGRAMS);
    let payload_at = l4 + UDP_HLEN;
    // The rules of docs/caravan.md, one inner header per step, in their one copy
    // (`caravan_common::format::Walk`, also behind pxio and caravan::Reader). The walk reads no
    // memory: each header is loaded here with `bpf_skb_load_bytes`. Its offsets are into the
    // outer UDP payload, caravan header included. The loop bound is one more than the most
    // datagrams, so the walk itself always reaches its verdict (None or TooMany).
    let mut walk = Walk::new(header, udp_len - UDP_HLEN, sport, dport, max);
    for _ in 0..=MAX_DATAGRAMS {
        let off = match walk.next_header() {
            Ok(Some(off)) => off,
            Ok(None) => break,
            Err(_) => return None,
        };
        let inner = ctx.load::<[u8; UDP_HLEN]>(payload_at + off).ok()?;
        walk.accept(&inner).ok()?;
    }
    walk.finish().ok().map(|n| (n, dport))
}

/// Moves an 802.1Q tag still in the data (`tag`, see [`Caravan::tag`]) into the metadata, where
/// the kernel keeps the tag of every single-tagged frame it received, so the IP header is at
/// [`L3`] and the clones carry the tag. Nothing to do without one.
fn untag(ctx: &TcContext, tag: u32) -> bool {
    if tag & TAGGED == 0 {
        return true;
    }
    let tci = tag as u16;
    // SAFETY: `skb` is the context pointer the kernel passed; both helpers take it as is. Pop
    // removes the tag from the data (no tag is in the metadata: `classify` checked); push puts
    // it into the metadata, since none is there.
    unsafe {
        bpf_skb_vlan_pop(ctx.skb.skb) == 0
            && bpf_skb_vlan_push(ctx.skb.skb, ETH_P_8021Q.to_be(), tci) == 0
    }
}

/// The IPv4 header checksum of `hdr` (whose checksum field is zero).
fn ip_checksum(hdr: &[u8; IP_HLEN]) -> u16 {
    !(ones_sum(hdr, 0) as u16)
}

/// Removes `len` (8..=12285) bytes right behind the IP header.
///
/// Always in three calls of about `len / 3` bytes, each below the helper's 4095 B limit: a fixed
/// sequence with no size-dependent branch, so the verifier sees one path per datagram (with
/// branches, the paths multiply across the 64 unrolled datagrams and exceed its budget).
fn cut(ctx: &TcContext, len: u32) -> bool {
    let third = len / 3;
    let last = len - 2 * third;
    ctx.adjust_room(-(third as i32), BPF_ADJ_ROOM_NET, 0)
        .is_ok()
        && ctx
            .adjust_room(-(third as i32), BPF_ADJ_ROOM_NET, 0)
            .is_ok()
        && ctx.adjust_room(-(last as i32), BPF_ADJ_ROOM_NET, 0).is_ok()
}

/// The interface the caravan arrived on, where the clones are redirected.
fn ifindex(ctx: &TcContext) -> u32 {
    // SAFETY: `skb` is the context pointer the kernel passed to this program; reading a field of
    // it is what the verifier allows for `__sk_buff`.
    unsafe { (*ctx.skb.skb).ifindex }
}

/// Hands the original itself, by now the caravan's last datagram, to this device's ingress
/// behind the clones (step 4): no clone, so no copy of it. True when the redirect is set up;
/// the program must then return `TC_ACT_REDIRECT`.
fn hand_on_last(ifindex: u32) -> bool {
    // SAFETY: the helper only records the target in per-CPU redirect state; the kernel acts on
    // it when the program returns TC_ACT_REDIRECT.
    unsafe { bpf_redirect(ifindex, u64::from(BPF_F_INGRESS)) == i64::from(TC_ACT_REDIRECT) }
}

/// Removes the outer UDP header and the caravan header (step 1).
fn drop_outer_udp(ctx: &TcContext) -> bool {
    ctx.adjust_room(-((UDP_HLEN + CARAVAN_HLEN) as i32), BPF_ADJ_ROOM_NET, 0)
        .is_ok()
}

/// Delivers every datagram of an IPv4 `caravan` as its own packet, in order; returns how many
/// went out.
fn decapsulate_v4(ctx: &TcContext, caravan: &Caravan) -> Delivered {
    let ifindex = ifindex(ctx);
    let mut out = Delivered::default();
    if !drop_outer_udp(ctx) {
        return out;
    }
    let id = be16(&caravan.ip, ip::ID);
    let mut hdr = caravan.ip;
    hdr[ip::TOS] &= 0x03; // DSCP 0, ECN kept
    for i in 0..MAX_DATAGRAMS {
        if i >= caravan.count {
            break;
        }
        let Ok(inner) = ctx.load::<[u8; UDP_HLEN]>(L3 + IP_HLEN) else {
            break;
        };
        let len = be16(&inner, udp::LENGTH);
        let tot = (IP_HLEN as u16).wrapping_add(len).to_be_bytes();
        let ident = id.wrapping_add(i as u16).to_be_bytes();
        hdr[ip::TOT_LEN] = tot[0];
        hdr[ip::TOT_LEN + 1] = tot[1];
        hdr[ip::ID] = ident[0];
        hdr[ip::ID + 1] = ident[1];
        hdr[ip::CSUM] = 0;
        hdr[ip::CSUM + 1] = 0;
        let csum = ip_checksum(&hdr).to_be_bytes();
        hdr[ip::CSUM] = csum[0];
        hdr[ip::CSUM + 1] = csum[1];
        if ctx.store(L3, &hdr, 0).is_err() {
            break;
        }
        if i + 1 == caravan.count {
            out.redirected = hand_on_last(ifindex);
            out.sent += u32::from(out.redirected);
            break;
        }
        if ctx
            .clone_redirect(ifindex, u64::from(BPF_F_INGRESS))
            .is_err()
        {
            break;
        }
        out.sent += 1;
        if !cut(ctx, u32::from(len)) {
            break;
        }
    }
    out
}

/// Delivers every datagram of an IPv6 `caravan` as its own packet, in order; returns how many
/// went out. Only the first 8 bytes of the header change (traffic class, payload length).
fn decapsulate_v6(ctx: &TcContext, caravan: &Caravan) -> Delivered {
    let ifindex = ifindex(ctx);
    let mut out = Delivered::default();
    if !drop_outer_udp(ctx) {
        return out;
    }
    let mut hdr = [0u8; 8];
    hdr.copy_from_slice(&caravan.ip[..8]);
    // DSCP 0, ECN kept: the traffic class's high nibble is byte 0's low nibble, its low nibble
    // (ECN in its low two bits) byte 1's high nibble.
    hdr[ip6::VER_TC] &= 0xf0;
    hdr[ip6::TC_FLOW] &= 0x3f;
    for i in 0..MAX_DATAGRAMS {
        if i >= caravan.count {
            break;
        }
        let Ok(inner) = ctx.load::<[u8; UDP_HLEN]>(L3 + IP6_HLEN) else {
            break;
        };
        let len = be16(&inner, udp::LENGTH);
        let plen = len.to_be_bytes();
        hdr[ip6::PAYLOAD_LEN] = plen[0];
        hdr[ip6::PAYLOAD_LEN + 1] = plen[1];
        if ctx.store(L3, &hdr, 0).is_err() {
            break;
        }
        if i + 1 == caravan.count {
            out.redirected = hand_on_last(ifindex);
            out.sent += u32::from(out.redirected);
            break;
        }
        if ctx
            .clone_redirect(ifindex, u64::from(BPF_F_INGRESS))
            .is_err()
        {
            break;
        }
        out.sent += 1;
        if !cut(ctx, u32::from(len)) {
            break;
        }
    }
    out
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";
