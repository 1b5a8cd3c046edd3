//! The RSS key (`[rss]`): a symmetric Toeplitz key chosen at start.
//!
//! The ports hash each flow's 4-tuple with a 40-byte Toeplitz key to pick its RX queue, and so
//! its worker; software that must agree with the NIC (F-PMTUD's probe source ports, `rte_flow`
//! RSS rules) hashes with the same key. A key whose bits repeat every 16 is symmetric (Woo and
//! Park, "Scalable TCP session monitoring with symmetric receive-side scaling"): swapping source
//! and destination leaves the hash unchanged, so both directions of a connection meet on one
//! worker. The well-known such key, `0x6d5a` repeated, is public: anyone can compute which
//! worker a flow of theirs lands on, and open flows that all land on one. So by default pxgw
//! draws the 16-bit pattern at random at start ([`SymmetricKey::random`]).
//!
//! **Which patterns.** With a period-16 key the hash of a tuple depends only on the XOR of its
//! 16-bit words (the tuple's *fold*), through a linear map given by the pattern: output bit `j`
//! of input bit `b` is pattern bit `(b + j) mod 16`, and the 32-bit hash is one 16-bit value
//! twice. That map is a circulant matrix over GF(2); it loses no bit (it is invertible) exactly
//! when the pattern has an odd number of one bits, since `x^16 + 1 = (x + 1)^16` there. An even
//! pattern folds flows together (`0x0000` hashes every flow to 0, `0xffff` to one of two
//! values) and is refused. So are odd patterns with fewer than 5 or more than 11 one bits: each
//! hash bit then depends on too few of the fold's bits (with one bit set the hash is a mere
//! rotation of the fold), so flows that differ in a few chosen bits share a queue.
//!
//! **What a random key does not do.** Flows with the same fold hash alike under every
//! symmetric key of this kind: an attacker who controls many source addresses and ports can
//! still make flows that share a queue, without knowing which. The per-worker bounds (the
//! connection, flow and F-PMTUD tables) are what hold then; docs/operations.md ("Flow steering
//! and the RSS key") says what an operator can do.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use pxio::toeplitz::Toeplitz;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// The well-known symmetric pattern (`0x6d5a` repeated: [`pxio::toeplitz::SYMMETRIC_RSS_KEY`]).
pub const WELL_KNOWN_PATTERN: u16 = 0x6d5a;
/// Bytes of a Toeplitz key, as ports take it.
pub const KEY_LEN: usize = 40;
/// Fewest one bits in an accepted pattern.
pub const MIN_WEIGHT: u32 = 5;
/// Most one bits in an accepted pattern.
pub const MAX_WEIGHT: u32 = 11;
/// Random 16-bit candidates tried before giving up on a random source (about half are
/// accepted: a working source fails all of them with probability below 2^-60).
const RANDOM_TRIES: usize = 64;

/// Why a pattern is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// An even number of one bits: the hash loses bits.
    #[error(
        "{0} one bits, an even number: the hash would lose bits (0x0000 hashes every flow alike)"
    )]
    EvenWeight(u32),
    /// Too few or too many one bits.
    #[error(
        "{0} one bits: each hash bit would depend on too few of a flow's bits (allowed: an odd \
         number from {MIN_WEIGHT} to {MAX_WEIGHT})"
    )]
    Weight(u32),
    /// The random source gave no acceptable pattern.
    #[error("the random source gave no usable RSS key pattern in {0} tries")]
    NoRandomKey(usize),
}

/// A symmetric Toeplitz key: an accepted 16-bit pattern, repeated over 40 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymmetricKey(u16);

impl Default for SymmetricKey {
    /// The well-known pattern, `0x6d5a` (deterministic tests and benches).
    fn default() -> Self {
        Self(WELL_KNOWN_PATTERN)
    }
}

impl SymmetricKey {
    /// The key repeating `pattern`, if the pattern is accepted (the module docs say which).
    pub fn new(pattern: u16) -> Result<Self, KeyError> {
        let weight = pattern.count_ones();
        if weight.is_multiple_of(2) {
            return Err(KeyError::EvenWeight(weight));
        }
        if !(MIN_WEIGHT..=MAX_WEIGHT).contains(&weight) {
            return Err(KeyError::Weight(weight));
        }
        Ok(Self(pattern))
    }

    /// A key drawn from `draw`, a source of random 64-bit words: the first accepted 16-bit
    /// pattern among its words' quarters.
    pub fn random(mut draw: impl FnMut() -> u64) -> Result<Self, KeyError> {
        let mut tried = 0;
        while tried < RANDOM_TRIES {
            let word = draw();
            for quarter in 0..4 {
                tried += 1;
                if let Ok(key) = Self::new((word >> (16 * quarter)) as u16) {
                    return Ok(key);
                }
            }
        }
        Err(KeyError::NoRandomKey(tried))
    }

    /// A key drawn from the OS's random source (through std's `RandomState`).
    pub fn from_os() -> Result<Self, KeyError> {
        let state = RandomState::new();
        let mut n = 0u64;
        Self::random(|| {
            n += 1;
            let mut h = state.build_hasher();
            h.write_u64(n);
            h.finish()
        })
    }

    /// The 16-bit pattern.
    pub fn pattern(self) -> u16 {
        self.0
    }

    /// The 40-byte key a port takes.
    pub fn bytes(self) -> [u8; KEY_LEN] {
        let [hi, lo] = self.0.to_be_bytes();
        std::array::from_fn(|i| if i % 2 == 0 { hi } else { lo })
    }

    /// A software hasher with this key.
    pub fn toeplitz(self) -> Toeplitz {
        Toeplitz::new(&self.bytes())
    }
}

/// `[rss]`: how the ports' RSS key is chosen.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RssConfig {
    /// `"random"` (the default): a pattern drawn at start; or a fixed 16-bit pattern
    /// (`0x6d5a`, or the string `"0x6d5a"`) for operators who need the same queue for a flow
    /// across restarts.
    pub key: RssKey,
}

/// The `[rss] key` setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RssKey {
    /// Drawn at start.
    #[default]
    Random,
    /// This pattern, repeated.
    Pattern(u16),
}

impl RssConfig {
    /// Fixes the key for this process: a random setting becomes the pattern drawn now, so every
    /// later [`RssConfig::key`] (the ports, each worker) gives the same key. Call it once at start.
    pub fn resolve(&mut self) -> Result<SymmetricKey, KeyError> {
        self.resolve_with(SymmetricKey::from_os)
    }

    /// [`RssConfig::resolve`] with the random draw given (tests).
    pub fn resolve_with(
        &mut self,
        random: impl FnOnce() -> Result<SymmetricKey, KeyError>,
    ) -> Result<SymmetricKey, KeyError> {
        let key = match self.key {
            RssKey::Random => random()?,
            RssKey::Pattern(p) => SymmetricKey::new(p)?,
        };
        self.key = RssKey::Pattern(key.pattern());
        Ok(key)
    }

    /// The key: the fixed pattern, or, while the setting is still random (nothing resolved
    /// it), a fresh random key on every call: only right for a process with one user of the
    /// key, such as `pxgw replay`.
    pub fn key(&self) -> Result<SymmetricKey, KeyError> {
        match self.key {
            RssKey::Random => SymmetricKey::from_os(),
            RssKey::Pattern(p) => SymmetricKey::new(p),
        }
    }
}

const EXPECTED: &str = "\"random\" or a 16-bit pattern such as 0x6d5a";

impl<'de> Deserialize<'de> for RssKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;

        impl Visitor<'_> for KeyVisitor {
            type Value = RssKey;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(EXPECTED)
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<RssKey, E> {
                if v == "random" {
                    return Ok(RssKey::Random);
                }
                v.strip_prefix("0x")
                    .or_else(|| v.strip_prefix("0X"))
                    .and_then(|hex| u16::from_str_radix(hex, 16).ok())
                    .map(RssKey::Pattern)
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &EXPECTED))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RssKey, E> {
                u16::try_from(v)
                    .map(RssKey::Pattern)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &EXPECTED))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RssKey, E> {
                u16::try_from(v)
                    .map(RssKey::Pattern)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &EXPECTED))
            }
        }

        d.deserialize_any(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// splitmix64: reproducible random words for the tests.
    fn words(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }

    /// The 16-bit hash of a fold under `pattern`, from the module docs' model.
    fn model(pattern: u16, fold: u16) -> u16 {
        (0..16)
            .filter(|b| fold & (0x8000 >> b) != 0)
            .fold(0, |acc, b| acc ^ pattern.rotate_left(b))
    }

    /// The rank over GF(2) of the map fold -> hash under `pattern`.
    fn rank(pattern: u16) -> u32 {
        let mut rows: Vec<u16> = (0..16).map(|b| model(pattern, 0x8000 >> b)).collect();
        let mut rank = 0;
        for bit in (0..16).rev() {
            let Some(i) = (rank as usize..16).find(|&i| rows[i] >> bit & 1 == 1) else {
                continue;
            };
            rows.swap(rank as usize, i);
            let pivot = rows[rank as usize];
            for (j, r) in rows.iter_mut().enumerate() {
                if j != rank as usize && *r >> bit & 1 == 1 {
                    *r ^= pivot;
                }
            }
            rank += 1;
        }
        rank
    }

    fn fold_v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> u16 {
        [src, dst]
            .concat()
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .fold(sport ^ dport, |a, w| a ^ w)
    }

    #[test]
    fn the_model_is_the_real_hash() {
        let mut r = words(1);
        for _ in 0..64 {
            let Ok(key) = SymmetricKey::random(&mut r) else {
                panic!("no key")
            };
            let t = key.toeplitz();
            for _ in 0..64 {
                let w = r();
                let (src, dst) = ((w as u32).to_be_bytes(), ((w >> 32) as u32).to_be_bytes());
                let (sport, dport) = (r() as u16, r() as u16);
                let h = model(key.pattern(), fold_v4(src, dst, sport, dport));
                let want = u32::from(h) << 16 | u32::from(h);
                assert_eq!(t.hash_v4(src, dst, sport, dport), want);
            }
        }
    }

    #[test]
    fn accepted_patterns_are_exactly_the_full_rank_ones_of_weight_5_to_11() {
        let mut accepted = 0;
        for p in 0..=u16::MAX {
            let ok = SymmetricKey::new(p).is_ok();
            let w = p.count_ones();
            assert_eq!(rank(p) == 16, w % 2 == 1, "pattern {p:#06x}");
            assert_eq!(ok, w % 2 == 1 && (5..=11).contains(&w), "pattern {p:#06x}");
            accepted += usize::from(ok);
        }
        // C(16,5) + C(16,7) + C(16,9) + C(16,11).
        assert_eq!(accepted, 4368 + 11440 + 11440 + 4368);
        assert!(SymmetricKey::new(WELL_KNOWN_PATTERN).is_ok());
        assert_eq!(SymmetricKey::new(0), Err(KeyError::EvenWeight(0)));
        assert_eq!(SymmetricKey::new(0xffff), Err(KeyError::EvenWeight(16)));
        assert_eq!(SymmetricKey::new(1), Err(KeyError::Weight(1)));
    }

    #[test]
    fn both_directions_hash_alike_under_random_keys_ipv4_and_ipv6() {
        let mut r = words(2);
        for _ in 0..32 {
            let t = SymmetricKey::random(&mut r).unwrap().toeplitz();
            for _ in 0..256 {
                let (a, b) = (r().to_be_bytes(), r().to_be_bytes());
                let (src4, dst4) = ([a[0], a[1], a[2], a[3]], [a[4], a[5], a[6], a[7]]);
                let (sport, dport) = (r() as u16, r() as u16);
                assert_eq!(
                    t.hash_v4(src4, dst4, sport, dport),
                    t.hash_v4(dst4, src4, dport, sport)
                );
                let mut src6 = [0u8; 16];
                let mut dst6 = [0u8; 16];
                src6[..8].copy_from_slice(&a);
                src6[8..].copy_from_slice(&b);
                dst6[..8].copy_from_slice(&r().to_be_bytes());
                dst6[8..].copy_from_slice(&r().to_be_bytes());
                assert_eq!(
                    t.hash_v6(src6, dst6, sport, dport),
                    t.hash_v6(dst6, src6, dport, sport)
                );
            }
        }
    }

    /// Flows per worker, for `flows` random IPv4 flows, through a 512-entry redirection table
    /// filled round robin over `workers` (a port's default), indexed by the hash's low 9 bits.
    fn spread(
        t: &Toeplitz,
        workers: usize,
        flows: usize,
        r: &mut impl FnMut() -> u64,
    ) -> Vec<usize> {
        let mut per = vec![0; workers];
        for _ in 0..flows {
            let w = r();
            let h = t.hash_v4(
                (w as u32).to_be_bytes(),
                ((w >> 32) as u32).to_be_bytes(),
                r() as u16,
                443,
            );
            per[(h & 0x1ff) as usize % workers] += 1;
        }
        per
    }

    #[test]
    fn random_flows_spread_over_workers_and_weak_patterns_would_not() {
        let mut r = words(3);
        for workers in [2, 3, 4, 8, 16] {
            for _ in 0..8 {
                let t = SymmetricKey::random(&mut r).unwrap().toeplitz();
                let flows = 2000 * workers;
                let per = spread(&t, workers, flows, &mut r);
                // 2000 expected per worker: within 10 % (about 4.5 standard deviations).
                assert!(
                    per.iter().all(|&n| (1800..=2200).contains(&n)),
                    "{workers} workers: {per:?}"
                );
            }
        }
        // What the refused patterns would do: one worker, or a few RETA entries.
        let zero = Toeplitz::new(&[0; KEY_LEN]);
        assert_eq!(spread(&zero, 4, 1000, &mut r), [1000, 0, 0, 0]);
        let ones = Toeplitz::new(&[0xff; KEY_LEN]);
        let per = spread(&ones, 8, 8000, &mut r);
        assert_eq!(per.iter().filter(|&&n| n > 0).count(), 2, "{per:?}");
    }

    #[test]
    fn two_starts_draw_different_keys_and_a_fixed_pattern_is_kept() {
        let parse = |text: &str| -> RssConfig { toml::from_str(text).unwrap() };
        let (mut a, mut b) = (parse(""), parse("key = \"random\""));
        assert_eq!((a.key, b.key), (RssKey::Random, RssKey::Random));
        let ka = a.resolve_with(|| SymmetricKey::random(words(10))).unwrap();
        let kb = b.resolve_with(|| SymmetricKey::random(words(11))).unwrap();
        assert_ne!(ka, kb);
        // Resolved once: the pattern is fixed for every later user in the process.
        assert_eq!(a.key, RssKey::Pattern(ka.pattern()));
        assert_eq!(a.key().unwrap(), ka);
        assert_eq!(a.resolve_with(|| panic!("drawn twice")).unwrap(), ka);

        for text in ["key = 0x1f35", "key = \"0x1f35\"", "key = 7989"] {
            let mut c = parse(text);
            assert_eq!(c.key, RssKey::Pattern(0x1f35), "{text}");
            let k = c
                .resolve_with(|| panic!("a fixed key draws nothing"))
                .unwrap();
            assert_eq!(k.pattern(), 0x1f35);
            assert_eq!(&k.bytes()[..4], &[0x1f, 0x35, 0x1f, 0x35]);
            assert_eq!(k.bytes()[KEY_LEN - 1], 0x35);
        }
        assert_eq!(
            SymmetricKey::default().bytes(),
            pxio::toeplitz::SYMMETRIC_RSS_KEY,
            "the default is the well-known key"
        );
        for bad in [
            "key = \"randm\"",
            "key = 70000",
            "key = -1",
            "key = \"0xg\"",
        ] {
            assert!(toml::from_str::<RssConfig>(bad).is_err(), "{bad}");
        }
        // A weak fixed pattern is refused, not used.
        assert_eq!(
            parse("key = 0").resolve_with(|| panic!()),
            Err(KeyError::EvenWeight(0))
        );
    }

    #[test]
    fn the_os_source_is_random_and_a_broken_source_gives_an_error() {
        let keys: Vec<u16> = (0..4)
            .map(|_| SymmetricKey::from_os().unwrap().pattern())
            .collect();
        // Four equal draws out of about 31,600 patterns: a chance below 10^-13.
        assert!(keys.iter().any(|&k| k != keys[0]), "{keys:?}");
        assert_eq!(
            SymmetricKey::random(|| 0),
            Err(KeyError::NoRandomKey(RANDOM_TRIES))
        );
    }
}
