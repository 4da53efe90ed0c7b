//! The shared comparison helpers fail on a non-finite value on either side and on a length
//! mismatch (a running `f32::max` drops NaN, which would let an all-NaN output score 0).

use std::panic::{catch_unwind, AssertUnwindSafe};

use aria_core::Tensor;
use aria_testing::fixtures::{assert_close, max_abs_diff, rel_err};

const REF: [f32; 3] = [1.0, -2.0, 0.5];

/// Every way an output can be broken, against [`REF`]: (what, actual, reference).
fn broken() -> Vec<(&'static str, Vec<f32>, Vec<f32>)> {
    vec![
        ("all NaN actual", vec![f32::NAN; 3], REF.to_vec()),
        ("one NaN actual", vec![1.0, f32::NAN, 0.5], REF.to_vec()),
        ("NaN reference", REF.to_vec(), vec![1.0, f32::NAN, 0.5]),
        (
            "infinite actual",
            vec![1.0, -2.0, f32::INFINITY],
            REF.to_vec(),
        ),
        (
            "infinite reference",
            REF.to_vec(),
            vec![f32::NEG_INFINITY, -2.0, 0.5],
        ),
        ("shorter actual", REF[..2].to_vec(), REF.to_vec()),
        ("longer actual", [&REF[..], &[0.0]].concat(), REF.to_vec()),
        ("empty actual", Vec::new(), REF.to_vec()),
    ]
}

/// How the tests use an error: `e <= tol` (false for NaN).
fn passes(e: f32) -> bool {
    e <= 1.0
}

#[test]
fn rel_err_is_infinite_on_nan_infinity_or_a_length_mismatch() {
    assert_eq!(rel_err(&REF, &REF), 0.0);
    assert!((rel_err(&[1.0, -2.0, 0.6], &REF) - 0.05).abs() < 1e-6);
    for (what, a, r) in broken() {
        let e = rel_err(&a, &r);
        assert!(!passes(e), "{what}: rel_err {e} passes a tolerance");
        // A running maximum over several comparisons keeps the failure.
        assert!(!passes(0.0f32.max(e)), "{what}: lost in a running maximum");
    }
}

#[test]
fn max_abs_diff_is_infinite_on_nan_infinity_or_a_length_mismatch() {
    assert_eq!(max_abs_diff(&REF, &REF), 0.0);
    assert!((max_abs_diff(&[1.0, -2.0, 0.6], &REF) - 0.1).abs() < 1e-6);
    for (what, a, r) in broken() {
        let e = max_abs_diff(&a, &r);
        assert!(!passes(e), "{what}: max_abs_diff {e} passes a tolerance");
        assert!(!passes(0.0f32.max(e)), "{what}: lost in a running maximum");
    }
}

#[test]
fn assert_close_fails_on_nan_infinity_or_a_length_mismatch() {
    let t = |v: &[f32]| Tensor::from_vec(v.to_vec(), &[v.len()]).expect("tensor");
    assert_close("equal", &t(&REF), &t(&REF), 0.0);
    for (what, a, r) in broken() {
        let (a, r) = (t(&a), t(&r));
        let failed = catch_unwind(AssertUnwindSafe(|| assert_close(what, &a, &r, 1.0))).is_err();
        assert!(failed, "{what}: assert_close passed");
    }
}
