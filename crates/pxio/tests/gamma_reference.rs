//! The unit Gamma quantile table behind the ETM window (SIGCOMM'26 Appendix A, Equation 1)
//! checked against published reference values, not against statrs, which built it.
//!
//! The literals below are SciPy 1.10.1 (`scipy.stats.gamma.ppf`, which calls Boost.Math's
//! `gamma_p_inv`), produced with Debian's `python3-scipy` 1.10.1-2 by:
//!
//! ```text
//! /usr/bin/python3 -c '
//! import scipy.stats as st
//! for p in [0.5, 0.9, 0.95, 0.99]:
//!     print(p, ", ".join(repr(float(st.gamma.ppf(p, a=k)))
//!                        for k in [1,2,3,4,5,6,7,8,12,16,24,32,48,52,63,64]))'
//! ```
//!
//! Shapes: every k up to 8 (a 9000 B iMTU over 1500 B packets needs k ≤ 6), then a spread up
//! to [`MAX_K`] = 64 (52 is the largest k a 65535 B iMTU over a 1280 B path MTU needs).
//! Quantiles: 0.95 (the paper's and the default `DelayConfig::quantile`), and 0.5, 0.9, 0.99
//! as other values an operator may configure.

use pxio::merge::{UnitGammaQuantiles, MAX_K};

const SHAPES: [usize; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 52, 63, 64];

/// (p, Γ⁻¹(p; k, 1) for each k of [`SHAPES`]).
// Γ⁻¹(0.9; 1, 1) = ln 10 and Γ⁻¹(0.5; 1, 1) = ln 2: kept as SciPy printed them, like the rest.
#[allow(clippy::approx_constant)]
const REFERENCE: [(f64, [f64; 16]); 4] = [
    (
        0.5,
        [
            0.6931471805599455,
            1.6783469900166612,
            2.674060313723559,
            3.672060748850897,
            4.670908882795985,
            5.67016118871207,
            6.66963707454977,
            7.669249442500804,
            11.668363153044767,
            15.667929544317243,
            23.667502275226315,
            31.667291011765982,
            47.66708132493373,
            51.66704920513837,
            62.66698202719427,
            63.66697707166383,
        ],
    ),
    (
        0.9,
        [
            2.302585092994046,
            3.889720169867429,
            5.322320337834211,
            6.680783068255865,
            7.993589586052632,
            9.274673893351626,
            10.532072106498532,
            11.770914461548053,
            16.59812214431409,
            21.292372541490423,
            30.453303513724187,
            39.4298212495558,
            57.06535369103138,
            61.42899084126234,
            73.36202585361774,
            74.44262773749558,
        ],
    ),
    (
        0.95,
        [
            2.9957322735539895,
            4.743864518390577,
            6.295793621871988,
            7.753656527932725,
            9.153519026637573,
            10.513034908741535,
            11.842395652420288,
            13.148113802432116,
            18.207514250903657,
            23.097129760139236,
            32.58538445178491,
            41.83763037136048,
            59.93546964928357,
            64.40195396360883,
            76.5989513719781,
            77.70236042574102,
        ],
    ),
    (
        0.99,
        [
            4.60517018598809,
            6.638352067993811,
            8.405946914885464,
            10.045117514831617,
            11.604625579477178,
            13.108483652767926,
            14.570618870336398,
            15.999963454407588,
            21.489910069675826,
            26.742885918117675,
            36.84131926005286,
            46.60842983011921,
            65.570608333526,
            70.22950660461532,
            82.92050042541021,
            84.06660153333246,
        ],
    ),
];

/// Relative tolerance. The table comes from statrs's `Gamma::inverse_cdf`: bisection, then
/// Newton steps that stop once two iterates agree to a relative 1e-10 (`statrs::consts::ACC`);
/// Newton converges quadratically, so the value returned is at least that close. 1e-9 leaves a
/// factor of ten for the CDF's own rounding, and is far below what matters: an ETM window is at
/// most `max_window_ns` (500 µs by default), and 1e-9 of it is under the 1 ns clock resolution.
const REL_TOL: f64 = 1e-9;

#[test]
fn unit_quantiles_match_scipy_reference_values() {
    assert_eq!(
        *SHAPES.last().unwrap(),
        MAX_K,
        "the reference covers the table's last entry"
    );
    for (p, values) in REFERENCE {
        let table = UnitGammaQuantiles::new(p);
        assert_eq!(table.p(), p);
        for (k, expected) in SHAPES.into_iter().zip(values) {
            let got = table.unit(k);
            let rel = (got - expected).abs() / expected;
            assert!(
                rel <= REL_TOL,
                "Γ⁻¹({p}; k={k}, 1): table {got}, SciPy {expected}, relative error {rel:e}"
            );
        }
    }
}

#[test]
fn shapes_beyond_the_table_use_its_last_entry() {
    // k is clamped to 1..=MAX_K: an item missing more than MAX_K packets waits like one missing
    // MAX_K (the window cap bounds it anyway), and k = 0 (a full item) like k = 1.
    let table = UnitGammaQuantiles::new(0.95);
    let (_, at_95) = REFERENCE[2];
    let last = at_95[SHAPES.len() - 1];
    assert!((table.unit(MAX_K + 40) - last).abs() / last <= REL_TOL);
    assert!((table.unit(0) - at_95[0]).abs() / at_95[0] <= REL_TOL);
}

#[test]
fn etm_scales_the_reference_quantile_by_theta() {
    // Equation 1 with k = ⌈(9000 − 3000) / 1500⌉ = 4 and θ = PMTU / R = 1500 B / 0.25 B/ns:
    // ETM = 6000 ns · Γ⁻¹(0.95; 4, 1).
    let table = UnitGammaQuantiles::new(0.95);
    let expected = 6000.0 * REFERENCE[2].1[3];
    let etm = table.etm_ns(9000, 3000, 1500, 0.25);
    assert!(
        (etm - expected).abs() / expected <= REL_TOL,
        "{etm} vs {expected}"
    );
    // k = ⌈(9000 − 100) / 1280⌉ = 7 at 10 Gb/s (1.25 B/ns): θ = 1024 ns.
    let expected = 1024.0 * REFERENCE[2].1[6];
    let etm = table.etm_ns(9000, 100, 1280, 1.25);
    assert!(
        (etm - expected).abs() / expected <= REL_TOL,
        "{etm} vs {expected}"
    );
}
