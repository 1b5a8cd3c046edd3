//! `pmtu-cache`: the F-PMTUD PMTU cache's counting Bloom filter (SIGCOMM'26 §5.2 "Fast PMTU
//! lookup"). Run it through `cargo xtask bench pmtu-cache [--json FILE]`.
//!
//! For each `--entries` value it fills an [`fpmtud::PmtuCache`] with that many non-default PMTUs,
//! then measures, through the cache's public API only:
//! * the filter's false-positive rate over `--lookups` absent keys (counted by the cache's own
//!   [`fpmtud::cache::CacheStats::false_positives`] during the timed miss loop), next to the
//!   textbook rate (1 - e^(-kn/m))^k;
//! * the mean wall-clock ns per [`fpmtud::PmtuCache::lookup`] of an absent key (a miss) and of a
//!   present key (a hit);
//! * the mean ns per miss in a plain `std` `HashMap` holding the same entries, for comparison.
//!
//! Every answer is checked (1500 for a miss, 1400 for a hit): a wrong one ends the run with an
//! error. The times depend on the machine; nothing here passes or fails on them.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use fpmtud::cache::KeyHashBuilder;
use fpmtud::{CacheConfig, PmtuCache};
use serde::Serialize;

/// The PMTU every entry gets (non-default, so it is stored).
const ENTRY_PMTU: u16 = 1400;

#[derive(Debug, Parser)]
#[command(
    name = "pmtu-cache",
    about = "The PMTU cache: Bloom filter false-positive rate and lookup ns for hits and misses"
)]
struct Args {
    /// Non-default PMTU entries, one row per value.
    #[arg(long, value_delimiter = ',', default_value = "800,1000,4000,16000")]
    entries: Vec<u32>,
    /// Lookups per measurement.
    #[arg(long, default_value_t = 1_000_000)]
    lookups: u32,
    /// Bloom filter counters.
    #[arg(long, default_value_t = 1 << 16)]
    counters: usize,
    /// Bloom filter hash functions.
    #[arg(long, default_value_t = 3)]
    hashes: u32,
    /// Also write the results as JSON to FILE.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One row of the table and of the JSON report's `rows`.
#[derive(Debug, Clone, Serialize)]
struct Row {
    /// Non-default entries in the cache.
    entries: u32,
    /// Filter counters.
    counters: usize,
    /// Filter hash functions.
    hashes: u32,
    /// Lookups of absent keys.
    absent_lookups: u64,
    /// Of those, how many hit the filter and read the table.
    false_positives: u64,
    /// `false_positives / absent_lookups`.
    fp_rate: f64,
    /// The textbook rate (1 - e^(-kn/m))^k.
    expected_fp_rate: f64,
    /// Mean ns per lookup of a present key.
    hit_ns: f64,
    /// Mean ns per lookup of an absent key.
    miss_ns: f64,
    /// Mean ns per lookup of an absent key in a plain `HashMap` with the same entries.
    hashmap_miss_ns: f64,
}

/// Destination number `i` (distinct for distinct `i`), from the benchmark range 198.18.0.0/15
/// and on into other space: keys only, never sent to.
fn key(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0xc612_0000u32.wrapping_add(i)))
}

fn measure(entries: u32, lookups: u32, counters: usize, hashes: u32) -> Result<Row> {
    let cfg = CacheConfig {
        counters,
        hashes,
        max_entries: entries.max(1) as usize,
        ..CacheConfig::default()
    };
    let default_pmtu = cfg.default_pmtu;
    ensure!(
        default_pmtu != ENTRY_PMTU,
        "the default PMTU must differ from the entries' {ENTRY_PMTU}"
    );
    // A fixed seed: the same keys land in the same counters on every run.
    let mut cache: PmtuCache<IpAddr> =
        PmtuCache::with_hasher(cfg, KeyHashBuilder::with_seed(1)).context("cache config")?;
    let mut plain = HashMap::new();
    for i in 0..entries {
        cache
            .insert(key(i), ENTRY_PMTU, 0)
            .context("fill the cache")?;
        plain.insert(key(i), ENTRY_PMTU);
    }
    // Absent keys: numbered after the present ones.
    let absent = |i: u32| key(entries.wrapping_add(1).wrapping_add(i));
    let n = u64::from(lookups);

    let before = cache.stats();
    let t = Instant::now();
    let mut sum = 0u64;
    for i in 0..lookups {
        sum += u64::from(cache.lookup(black_box(&absent(i)), 1));
    }
    let miss_ns = t.elapsed().as_nanos() as f64 / n as f64;
    ensure!(
        sum == n * u64::from(default_pmtu),
        "an absent key got a PMTU other than the default"
    );
    let after = cache.stats();
    ensure!(
        after.lookups - before.lookups == n,
        "the cache counted {} lookups, not {n}",
        after.lookups - before.lookups
    );
    let false_positives = after.false_positives - before.false_positives;

    let present = entries.max(1);
    let t = Instant::now();
    let mut sum = 0u64;
    for i in 0..lookups {
        sum += u64::from(cache.lookup(black_box(&key(i % present)), 1));
    }
    let hit_ns = t.elapsed().as_nanos() as f64 / n as f64;
    let want = if entries == 0 {
        default_pmtu
    } else {
        ENTRY_PMTU
    };
    ensure!(
        sum == n * u64::from(want),
        "a present key got the wrong PMTU"
    );

    let t = Instant::now();
    let mut sum = 0u64;
    for i in 0..lookups {
        sum += u64::from(
            plain
                .get(black_box(&absent(i)))
                .copied()
                .unwrap_or(default_pmtu),
        );
    }
    let hashmap_miss_ns = t.elapsed().as_nanos() as f64 / n as f64;
    black_box(sum);

    Ok(Row {
        entries,
        counters,
        hashes,
        absent_lookups: n,
        false_positives,
        fp_rate: false_positives as f64 / n as f64,
        expected_fp_rate: cache.filter().expected_fp_rate(cache.len()),
        hit_ns,
        miss_ns,
        hashmap_miss_ns,
    })
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.entries.is_empty() {
        bail!("--entries needs at least one value");
    }
    if args.lookups == 0 {
        bail!("--lookups must be at least 1");
    }
    println!(
        "PMTU cache: counting Bloom filter of {} counters, {} hashes; {} lookups per row",
        args.counters, args.hashes, args.lookups
    );
    println!(
        "{:>8} {:>12} {:>12} {:>10} {:>10} {:>16}",
        "entries", "fp rate %", "theory %", "hit ns", "miss ns", "HashMap miss ns"
    );
    let mut rows = Vec::with_capacity(args.entries.len());
    for &entries in &args.entries {
        let m = measure(entries, args.lookups, args.counters, args.hashes)?;
        println!(
            "{:>8} {:>12.5} {:>12.5} {:>10.1} {:>10.1} {:>16.1}",
            m.entries,
            m.fp_rate * 100.0,
            m.expected_fp_rate * 100.0,
            m.hit_ns,
            m.miss_ns,
            m.hashmap_miss_ns
        );
        rows.push(m);
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({ "rows": rows }))
            .context("encode the JSON report")?;
        std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
