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
//!     print(p, ", ".join("%.17g" % st.gamma.ppf(p, a=k)
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
const REFERENCE: [(f64, [f64; 16]); 4] = [
    (
        0.5,
        [
            0.69314718055994551,
            1.6783469900166612,
            2.674060313723559,
            3.6720607488508969,
            4.6709088827959846,
            5.6701611887120702,
            6.6696370745497697,
            7.6692494425008038,
            11.668363153044767,
            15.667929544317243,
            23.667502275226315,
            31.667291011765982,
            47.667081324933733,
            51.667049205138369,
            62.666982027194273,
            63.66697707166383,
        ],
    ),
    (
        0.9,
        [
            2.3025850929940459,
            3.8897201698674291,
            5.3223203378342108,
            6.6807830682558649,
            7.9935895860526323,
            9.2746738933516255,
            10.532072106498532,
            11.770914461548053,
            16.59812214431409,
            21.292372541490423,
            30.453303513724187,
            39.4298212495558,
            57.065353691031383,
            61.42899084126234,
            73.362025853617737,
            74.442627737495584,
        ],
    ),
    (
        0.95,
        [
            2.9957322735539895,
            4.743864518390577,
            6.2957936218719883,
            7.7536565279327254,
            9.1535190266375732,
            10.513034908741535,
            11.842395652420288,
            13.148113802432116,
            18.207514250903657,
            23.097129760139236,
            32.585384451784911,
            41.837630371360483,
            59.935469649283569,
            64.401953963608833,
            76.598951371978103,
            77.70236042574102,
        ],
    ),
    (
        0.99,
        [
            4.60517018598809,
            6.6383520679938108,
            8.4059469148854635,
            10.045117514831617,
            11.604625579477178,
            13.108483652767926,
            14.570618870336398,
            15.999963454407588,
            21.489910069675826,
            26.742885918117675,
            36.841319260052863,
            46.608429830119213,
            65.570608333525996,
            70.229506604615324,
            82.920500425410211,
            84.066601533332459,
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
