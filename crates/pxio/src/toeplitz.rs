//! Software Toeplitz RSS hash (Microsoft RSS specification), for ports whose PMD delivers no
//! hash (virtual devices such as `net_tap` and `net_af_packet` never do).
//!
//! SIGCOMM'26 §4.1 identifies flows by the same Toeplitz hash the NIC would have computed, so a
//! flow keeps its hash, and therefore its worker and flow-table bucket, whether or not the
//! hardware supplied it.
//!
//! The gateway programs its ports with [`SYMMETRIC_RSS_KEY`] and hashes in software with the same
//! key ([`Toeplitz::default`]): with a key whose bits repeat every 16, swapping source and
//! destination (addresses are 32 or 128 bits, ports 16) leaves every key window unchanged, so both
//! directions of a connection hash alike and land on the same worker.

use std::fmt;

/// Microsoft's default 40-byte RSS key, also the default of most NICs and of DPDK's testpmd.
pub const RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// A symmetric RSS key: `0x6d5a` repeated (Woo and Park, "Scalable TCP session monitoring with
/// symmetric receive-side scaling", 2012). `hash(a -> b) == hash(b -> a)` for IPv4 and IPv6
/// 4-tuples; NICs and DPDK ports take it as their `rss_key`.
pub const SYMMETRIC_RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
];

/// Longest input the tables cover: IPv6 source and destination plus two ports.
pub const MAX_INPUT_LEN: usize = 2 * IPV6_ADDR_LEN + 2 * PORT_LEN;

const IPV4_ADDR_LEN: usize = 4;
const IPV6_ADDR_LEN: usize = 16;
const PORT_LEN: usize = 2;
const V4_INPUT_LEN: usize = 2 * IPV4_ADDR_LEN + 2 * PORT_LEN;
const BITS_PER_BYTE: usize = 8;
const BYTE_VALUES: usize = 256;
/// The most significant bit of a byte, the first bit the hash consumes.
const BYTE_MSB: usize = 0x80;
/// Bytes of key needed to extract a 32-bit window starting anywhere within one key byte.
const WINDOW_BYTES: usize = 5;

/// A Toeplitz hasher with precomputed tables for one key (SIGCOMM'26 §4.1).
///
/// `table[i][b]` is the hash contribution of byte value `b` at input position `i`, so hashing
/// is one lookup and one XOR per input byte.
#[derive(Clone)]
pub struct Toeplitz {
    table: Box<[[u32; BYTE_VALUES]]>,
}

impl Toeplitz {
    /// Precomputes the tables for `key` (about 36 KiB, allocated once).
    pub fn new(key: &[u8; 40]) -> Self {
        let mut table = vec![[0u32; BYTE_VALUES]; MAX_INPUT_LEN].into_boxed_slice();
        for (pos, row) in table.iter_mut().enumerate() {
            // The contribution of each single bit at this position, MSB first.
            let mut bit_values = [0u32; BITS_PER_BYTE];
            for (bit, value) in bit_values.iter_mut().enumerate() {
                *value = key_window(key, pos * BITS_PER_BYTE + bit);
            }
            for (byte, entry) in row.iter_mut().enumerate() {
                *entry = bit_values
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| byte & (BYTE_MSB >> bit) != 0)
                    .fold(0, |acc, (_, value)| acc ^ value);
            }
        }
        Toeplitz { table }
    }

    /// A hasher for [`SYMMETRIC_RSS_KEY`], the key the gateway programs into its ports.
    pub fn symmetric() -> Self {
        Toeplitz::new(&SYMMETRIC_RSS_KEY)
    }

    /// The Toeplitz hash of `input`, which must be at most [`MAX_INPUT_LEN`] (36) bytes long;
    /// bytes beyond that are ignored.
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(self.table.iter())
            .fold(0, |acc, (&byte, row)| acc ^ row[usize::from(byte)])
    }

    /// The hash of an IPv4 4-tuple: input `src ++ dst ++ sport ++ dport`, ports big-endian.
    /// The Microsoft RSS verification suite calls the sender of the packet the *source*.
    pub fn hash_v4(&self, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> u32 {
        let mut input = [0u8; V4_INPUT_LEN];
        let (addrs, ports) = input.split_at_mut(2 * IPV4_ADDR_LEN);
        addrs[..IPV4_ADDR_LEN].copy_from_slice(&src);
        addrs[IPV4_ADDR_LEN..].copy_from_slice(&dst);
        ports[..PORT_LEN].copy_from_slice(&sport.to_be_bytes());
        ports[PORT_LEN..].copy_from_slice(&dport.to_be_bytes());
        self.hash(&input)
    }

    /// The hash of an IPv6 4-tuple: input `src ++ dst ++ sport ++ dport`, ports big-endian.
    pub fn hash_v6(&self, src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16) -> u32 {
        let mut input = [0u8; MAX_INPUT_LEN];
        let (addrs, ports) = input.split_at_mut(2 * IPV6_ADDR_LEN);
        addrs[..IPV6_ADDR_LEN].copy_from_slice(&src);
        addrs[IPV6_ADDR_LEN..].copy_from_slice(&dst);
        ports[..PORT_LEN].copy_from_slice(&sport.to_be_bytes());
        ports[PORT_LEN..].copy_from_slice(&dport.to_be_bytes());
        self.hash(&input)
    }
}

impl Default for Toeplitz {
    /// A hasher for [`SYMMETRIC_RSS_KEY`] (see [`Toeplitz::symmetric`]): the gateway's ports use
    /// that key, and software must agree with them.
    fn default() -> Self {
        Toeplitz::symmetric()
    }
}

impl fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The tables are 9216 numbers; printing them helps no one.
        f.debug_struct("Toeplitz").finish_non_exhaustive()
    }
}

/// The 32 key bits starting at bit `start` (bit 0 is the MSB of `key[0]`).
fn key_window(key: &[u8; 40], start: usize) -> u32 {
    let first = start / BITS_PER_BYTE;
    let shift = start % BITS_PER_BYTE;
    let wide = key[first..first + WINDOW_BYTES]
        .iter()
        .fold(0u64, |acc, &b| (acc << BITS_PER_BYTE) | u64::from(b));
    // `wide` holds 40 bits; drop the `8 - shift` low bits past the window.
    (wide >> (BITS_PER_BYTE - shift)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The specification's algorithm, bit by bit: for every set input bit, XOR in the leftmost
    /// 32 bits of the key, then shift the key left by one.
    fn reference(key: &[u8; 40], input: &[u8]) -> u32 {
        let mut result = 0u32;
        let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
        let mut next_key_bit = 32;
        for &byte in input {
            for bit in (0..8).rev() {
                if byte & (1 << bit) != 0 {
                    result ^= window;
                }
                let k = key[next_key_bit / 8] >> (7 - next_key_bit % 8) & 1;
                window = (window << 1) | u32::from(k);
                next_key_bit += 1;
            }
        }
        result
    }

    fn v6(s: &str) -> [u8; 16] {
        s.parse::<std::net::Ipv6Addr>().unwrap().octets()
    }

    /// One row of Microsoft's table: destination, destination port, source, source port,
    /// hash of the addresses only, hash with the TCP ports.
    type V4Vector = ([u8; 4], u16, [u8; 4], u16, u32, u32);

    /// Microsoft's "Verifying the RSS Hash Calculation" vectors, IPv4.
    const V4_VECTORS: [V4Vector; 5] = [
        (
            [161, 142, 100, 80],
            1766,
            [66, 9, 149, 187],
            2794,
            0x323e8fc2,
            0x51ccc178,
        ),
        (
            [65, 69, 140, 83],
            4739,
            [199, 92, 111, 2],
            14230,
            0xd718262a,
            0xc626b0ea,
        ),
        (
            [12, 22, 207, 184],
            38024,
            [24, 19, 198, 95],
            12898,
            0xd2d0a5de,
            0x5c2b394a,
        ),
        (
            [209, 142, 163, 6],
            2217,
            [38, 27, 205, 30],
            48228,
            0x82989176,
            0xafc7327f,
        ),
        (
            [202, 188, 127, 2],
            1303,
            [153, 39, 163, 191],
            44251,
            0x5d1809c5,
            0x10e828a2,
        ),
    ];

    #[test]
    fn microsoft_ipv4_vectors() {
        let t = Toeplitz::new(&RSS_KEY);
        for (dst, dport, src, sport, ip_only, with_tcp) in V4_VECTORS {
            let addrs = [src, dst].concat();
            assert_eq!(t.hash(&addrs), ip_only, "{src:?} -> {dst:?}");
            assert_eq!(reference(&RSS_KEY, &addrs), ip_only);
            assert_eq!(
                t.hash_v4(src, dst, sport, dport),
                with_tcp,
                "{src:?} -> {dst:?}"
            );
        }
    }

    #[test]
    fn microsoft_ipv6_vectors() {
        let vectors = [
            (
                "3ffe:2501:200:3::1",
                1766,
                "3ffe:2501:200:1fff::7",
                2794,
                0x2cc18cd5,
                0x40207d3d,
            ),
            (
                "ff02::1",
                4739,
                "3ffe:501:8::260:97ff:fe40:efab",
                14230,
                0x0f0c461c,
                0xdde51bbf,
            ),
            (
                "fe80::200:f8ff:fe21:67cf",
                38024,
                "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
                44251,
                0x4b61e985,
                0x02d1feef,
            ),
        ];
        let t = Toeplitz::new(&RSS_KEY);
        for (dst, dport, src, sport, ip_only, with_tcp) in vectors {
            let (dst, src) = (v6(dst), v6(src));
            let addrs = [src, dst].concat();
            assert_eq!(t.hash(&addrs), ip_only);
            assert_eq!(t.hash_v6(src, dst, sport, dport), with_tcp);
            assert_eq!(
                reference(
                    &RSS_KEY,
                    &[addrs.as_slice(), &sport.to_be_bytes(), &dport.to_be_bytes()].concat()
                ),
                with_tcp
            );
        }
    }

    #[test]
    fn microsofts_key_is_not_symmetric() {
        // Why the gateway does not use the default key: the reverse direction lands elsewhere.
        let t = Toeplitz::new(&RSS_KEY);
        let (a, b) = ([198, 51, 100, 1], [198, 51, 100, 2]);
        assert_ne!(t.hash_v4(a, b, 40000, 443), t.hash_v4(b, a, 443, 40000));
    }

    #[test]
    fn empty_input_hashes_to_zero() {
        assert_eq!(Toeplitz::default().hash(&[]), 0);
    }

    #[test]
    fn bytes_past_the_tables_are_ignored() {
        let t = Toeplitz::default();
        let input = [0xa5u8; MAX_INPUT_LEN + 4];
        assert_eq!(t.hash(&input), t.hash(&input[..MAX_INPUT_LEN]));
    }

    proptest! {
        #[test]
        fn tables_match_reference(key in proptest::array::uniform32(any::<u8>()),
                                  tail in proptest::array::uniform8(any::<u8>()),
                                  input in proptest::collection::vec(any::<u8>(), 0..=MAX_INPUT_LEN)) {
            let mut full = [0u8; 40];
            full[..32].copy_from_slice(&key);
            full[32..].copy_from_slice(&tail);
            prop_assert_eq!(Toeplitz::new(&full).hash(&input), reference(&full, &input));
        }

        #[test]
        fn default_key_matches_reference(input in proptest::collection::vec(any::<u8>(), 0..=MAX_INPUT_LEN)) {
            prop_assert_eq!(Toeplitz::default().hash(&input), reference(&SYMMETRIC_RSS_KEY, &input));
            prop_assert_eq!(Toeplitz::new(&RSS_KEY).hash(&input), reference(&RSS_KEY, &input));
        }

        #[test]
        fn symmetric_key_hashes_both_directions_alike_v4(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
                                                         sport in any::<u16>(), dport in any::<u16>()) {
            let t = Toeplitz::symmetric();
            prop_assert_eq!(t.hash_v4(src, dst, sport, dport), t.hash_v4(dst, src, dport, sport));
        }

        #[test]
        fn symmetric_key_hashes_both_directions_alike_v6(src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(),
                                                         sport in any::<u16>(), dport in any::<u16>()) {
            let t = Toeplitz::symmetric();
            prop_assert_eq!(t.hash_v6(src, dst, sport, dport), t.hash_v6(dst, src, dport, sport));
        }

        #[test]
        fn hash_is_linear(a in proptest::array::uniform12(any::<u8>()),
                          b in proptest::array::uniform12(any::<u8>())) {
            // Toeplitz is linear over GF(2): h(a ^ b) = h(a) ^ h(b).
            let t = Toeplitz::default();
            let x: Vec<u8> = a.iter().zip(&b).map(|(p, q)| p ^ q).collect();
            prop_assert_eq!(t.hash(&x), t.hash(&a) ^ t.hash(&b));
        }
    }
}
