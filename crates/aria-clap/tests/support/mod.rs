//! Reading the CLAP parity fixtures (any stored dtype) and comparing against them.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

/// A fixture folder, or `None` (skip recorded; a failure under `CI=true`).
pub fn folder(name: &str) -> Option<PathBuf> {
    aria_testing::fixtures::fixture(name)
}

/// Every tensor of a safetensors file, widened to f64, with its shape.
pub struct Tensors {
    pub map: HashMap<String, (Vec<usize>, Vec<f64>)>,
}

impl Tensors {
    pub fn open(path: &Path) -> Tensors {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let st = SafeTensors::deserialize(&bytes).expect("a safetensors file");
        let mut map = HashMap::new();
        for (name, view) in st.tensors() {
            let d = view.data();
            let v: Vec<f64> = match view.dtype() {
                Dtype::F64 => d
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
                Dtype::F32 => d
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")) as f64)
                    .collect(),
                Dtype::I64 => d
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f64)
                    .collect(),
                Dtype::I32 => d
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")) as f64)
                    .collect(),
                Dtype::F16 => d
                    .chunks_exact(2)
                    .map(|c| f16_to_f64(u16::from_le_bytes([c[0], c[1]])))
                    .collect(),
                Dtype::BOOL | Dtype::U8 => d.iter().map(|&b| b as f64).collect(),
                other => panic!("{name}: dtype {other:?} not handled"),
            };
            map.insert(name.to_string(), (view.shape().to_vec(), v));
        }
        Tensors { map }
    }

    pub fn get(&self, name: &str) -> &(Vec<usize>, Vec<f64>) {
        self.map
            .get(name)
            .unwrap_or_else(|| panic!("fixture tensor `{name}` missing"))
    }

    pub fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// The float64 reference of `name` (its `.f64` twin when recorded, else itself).
    pub fn reference(&self, name: &str) -> &(Vec<usize>, Vec<f64>) {
        let twin = format!("{name}.f64");
        if self.has(&twin) {
            self.get(&twin)
        } else {
            self.get(name)
        }
    }
}

/// `max|a − r| / max|r|`; infinite on a length mismatch or any non-finite value.
pub fn rel_err(actual: &[f32], reference: &[f64]) -> f64 {
    if actual.len() != reference.len() {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0f64, 0f64);
    for (&a, &r) in actual.iter().zip(reference) {
        if !a.is_finite() || !r.is_finite() {
            return f64::INFINITY;
        }
        num = num.max((a as f64 - r).abs());
        den = den.max(r.abs());
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Assert shape equality and `rel_err <= tol`; returns the error for reporting.
pub fn check(
    what: &str,
    shape: &[usize],
    actual: &[f32],
    reference: &(Vec<usize>, Vec<f64>),
    tol: f64,
) -> f64 {
    assert_eq!(shape, reference.0.as_slice(), "{what}: shape");
    let e = rel_err(actual, &reference.1);
    eprintln!("{what:<32} rel err {e:.3e} (tol {tol:.0e})");
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.1e}");
    e
}

/// IEEE half to f64 (exact).
pub fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let man = (h & 0x3ff) as f64;
    sign * match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + man / 1024.0) * 2f64.powi(e - 15),
    }
}
