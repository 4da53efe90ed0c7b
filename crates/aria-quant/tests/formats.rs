//! Packed formats: reference errors, edge shapes, layouts, tags and input checks.

mod common;

use aria_core::{bf16, f16, Tensor};
use aria_quant::format::{BlockQ4K, BlockQ6K, BlockQ8_0};
use aria_quant::{Format, PackedMatrix, QuantError};
use common::{rel_rms, Rng};

/// Relative RMS reconstruction error on Gaussian weights (σ = 0.02, 64 × 4096), per format,
/// with the bound each must stay under. Printed as a table (`--nocapture`).
#[test]
fn reference_error_table() {
    let (rows, cols) = (64, 4096);
    let w = Rng::new(1).normals(rows * cols, 0.02);
    // Outliers: one weight in 512 at 8σ (real checkpoints have heavy tails).
    let mut heavy = w.clone();
    for (i, v) in heavy.iter_mut().enumerate() {
        if i % 512 == 7 {
            *v = 0.16 * v.signum();
        }
    }
    let bounds = [
        (Format::Q8_0, 0.006),
        (Format::Q6K, 0.02),
        (Format::Q4K, 0.08),
    ];
    println!("| format | bits/weight | rel RMS (Gaussian) | rel RMS (with 8σ outliers) |");
    println!("|---|---|---|---|");
    for (format, bound) in bounds {
        let mut errs = Vec::new();
        for data in [&w, &heavy] {
            let p = PackedMatrix::from_f32("w", rows, cols, data, format).expect("quantize");
            let d = p.dequantize_f32().expect("dequantize");
            errs.push(rel_rms(&d, data));
        }
        println!(
            "| {} | {:.4} | {:.4} % | {:.4} % |",
            format.tag(),
            format.bits_per_weight(),
            errs[0] * 100.0,
            errs[1] * 100.0
        );
        assert!(errs[0] < bound, "{format}: rel RMS {} ≥ {bound}", errs[0]);
        assert!(
            errs[1] < 1.5 * bound,
            "{format}: outliers rel RMS {}",
            errs[1]
        );
    }
}

/// The formats rank as their bit budgets say.
#[test]
fn more_bits_less_error() {
    let w = Rng::new(2).normals(16 * 1024, 1.0);
    let err = |f| {
        let p = PackedMatrix::from_f32("w", 16, 1024, &w, f).expect("quantize");
        rel_rms(&p.dequantize_f32().expect("dequantize"), &w)
    };
    let (e8, e6, e4) = (err(Format::Q8_0), err(Format::Q6K), err(Format::Q4K));
    assert!(e8 < e6 && e6 < e4, "q8 {e8} q6 {e6} q4 {e4}");
}

/// Every shape, including 0, 1, 63 and widths that are not block multiples: the packed row
/// has ⌈in / block⌉ blocks, dequantization returns exactly `[out, in]`, and the error stays
/// within the format's bound (padding never leaks into values).
#[test]
fn edge_shapes() {
    let mut rng = Rng::new(3);
    for format in Format::ALL {
        for rows in [0, 1, 3] {
            for cols in [0, 1, 2, 31, 32, 33, 63, 255, 256, 257, 300] {
                let w = rng.normals(rows * cols, 1.0);
                let p = PackedMatrix::from_f32("w", rows, cols, &w, format).expect("quantize");
                assert_eq!(p.rows(), rows);
                assert_eq!(p.cols(), cols);
                let nb = cols.div_ceil(format.block_elems());
                assert_eq!(p.row_bytes(), nb * format.block_bytes());
                assert_eq!(p.nbytes(), rows * nb * format.block_bytes());
                let d = p.dequantize_f32().expect("dequantize");
                assert_eq!(d.len(), rows * cols);
                if rows * cols > 0 {
                    // Few values per block at 4 bits: allow more than the Gaussian table.
                    let bound = match format {
                        Format::Q8_0 => 0.01,
                        Format::Q6K => 0.04,
                        Format::Q4K => 0.2,
                    };
                    let e = rel_rms(&d, &w);
                    assert!(e < bound, "{format} [{rows}, {cols}]: {e}");
                }
            }
        }
    }
}

/// Zeros come back as exact zeros; a constant row comes back close.
#[test]
fn zeros_and_constants() {
    for format in Format::ALL {
        let p = PackedMatrix::from_f32("w", 2, 300, &[0.0; 600], format).expect("quantize");
        assert!(
            p.dequantize_f32().expect("dq").iter().all(|&v| v == 0.0),
            "{format}"
        );
        for c in [0.25f32, -3.0] {
            let p = PackedMatrix::from_f32("w", 1, 256, &[c; 256], format).expect("quantize");
            let d = p.dequantize_f32().expect("dq");
            let e = rel_rms(&d, &[c; 256]);
            assert!(e < 0.01, "{format} constant {c}: {e}");
        }
    }
}

/// f16 and bf16 weights quantize exactly as their f32 values do.
#[test]
fn half_inputs() {
    let w = Rng::new(4).normals(5 * 300, 0.1);
    for format in Format::ALL {
        let h: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        let hf: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
        let b: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        let bf: Vec<f32> = b.iter().map(|v| v.to_f32()).collect();
        let th = Tensor::from_vec(h, &[5, 300]).expect("tensor");
        let tb = Tensor::from_vec(b, &[5, 300]).expect("tensor");
        let ph = PackedMatrix::quantize("w", &th, format).expect("f16");
        let pb = PackedMatrix::quantize("w", &tb, format).expect("bf16");
        let rh = PackedMatrix::from_f32("w", 5, 300, &hf, format).expect("f32");
        let rb = PackedMatrix::from_f32("w", 5, 300, &bf, format).expect("f32");
        assert_eq!(
            ph.bytes().expect("b"),
            rh.bytes().expect("b"),
            "{format} f16"
        );
        assert_eq!(
            pb.bytes().expect("b"),
            rb.bytes().expect("b"),
            "{format} bf16"
        );
    }
}

/// A strided (transposed) weight quantizes as its contiguous copy.
#[test]
fn strided_input() {
    let w = Rng::new(5).normals(64 * 40, 1.0);
    let t = Tensor::from_vec(w, &[64, 40])
        .expect("tensor")
        .transpose(0, 1)
        .expect("t");
    let c = t.contiguous().expect("contiguous");
    let a = PackedMatrix::quantize("w", &t, Format::Q8_0).expect("strided");
    let b = PackedMatrix::quantize("w", &c, Format::Q8_0).expect("contiguous");
    assert_eq!(a.bytes().expect("b"), b.bytes().expect("b"));
}

/// Bad inputs give errors that name the weight, the element and the reason.
#[test]
fn bad_inputs() {
    let mut w = vec![0.5f32; 2 * 40];
    w[40 + 7] = f32::NAN;
    let e = PackedMatrix::from_f32("blk.ff", 2, 40, &w, Format::Q8_0).expect_err("NaN");
    assert!(matches!(e, QuantError::Value { row: 1, col: 7, .. }), "{e}");
    assert!(e.to_string().contains("blk.ff"), "{e}");
    w[47] = f32::INFINITY;
    assert!(PackedMatrix::from_f32("w", 2, 40, &w, Format::Q4K).is_err());
    w[47] = 1e30;
    let e = PackedMatrix::from_f32("w", 2, 40, &w, Format::Q6K).expect_err("huge");
    assert!(e.to_string().contains("f16"), "{e}");
    let t = Tensor::from_vec(vec![1.0f32; 8], &[2, 2, 2]).expect("tensor");
    let e = PackedMatrix::quantize("w3", &t, Format::Q8_0).expect_err("rank 3");
    assert!(e.to_string().contains("[out, in]"), "{e}");
    let t = Tensor::from_vec(vec![1u8; 4], &[2, 2]).expect("tensor");
    assert!(matches!(
        PackedMatrix::quantize("wu8", &t, Format::Q8_0),
        Err(QuantError::DType { .. })
    ));
    assert!(PackedMatrix::from_f32("w", 2, 3, &[0.0; 5], Format::Q8_0).is_err());
    let t = Tensor::from_vec(vec![0u8; 10], &[1, 10]).expect("tensor");
    let e = PackedMatrix::from_tensor(Format::Q8_0, 1, 32, t).expect_err("size");
    assert!(e.to_string().contains("[1, 34]"), "{e}");
}

/// Tags carry the layout version; other versions and names are refused with the known list.
#[test]
fn tags() {
    for f in Format::ALL {
        assert_eq!(Format::from_tag(&f.tag()).expect("tag"), f);
        assert_eq!(Format::from_name(f.name()).expect("name"), f);
        assert_eq!(f.version(), 1);
    }
    assert_eq!(Format::Q8_0.tag(), "q8_0/v1");
    let e = Format::from_tag("q8_0/v2").expect_err("other version");
    assert!(e.to_string().contains("q8_0/v1"), "{e}");
    assert!(Format::from_tag("q5_k/v1").is_err());
    assert_eq!(Format::Q8_0.block_bytes(), std::mem::size_of::<BlockQ8_0>());
    assert_eq!(Format::Q4K.block_bytes(), std::mem::size_of::<BlockQ4K>());
    assert_eq!(Format::Q6K.block_bytes(), std::mem::size_of::<BlockQ6K>());
    assert_eq!(Format::Q8_0.bits_per_weight(), 8.5);
    assert_eq!(Format::Q4K.bits_per_weight(), 4.5);
    assert_eq!(Format::Q6K.bits_per_weight(), 6.5625);
}

/// `q8_0` bytes as documented: f16 scale then 32 int8, `w = d · q`, `|q| ≤ 127`.
#[test]
fn q8_0_layout() {
    let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
    let p = PackedMatrix::from_f32("w", 1, 32, &x, Format::Q8_0).expect("q");
    let blk: &[BlockQ8_0] = bytemuck::cast_slice(p.bytes().expect("b"));
    let d = f16::from_le_bytes(blk[0].d).to_f32();
    assert!(d * 127.0 >= 16.0 && d < 16.0 / 126.0, "{d}");
    assert_eq!(blk[0].qs[0], -127);
    let d2 = p.dequantize_f32().expect("dq");
    for (i, q) in blk[0].qs.iter().enumerate() {
        assert_eq!(d2[i], d * *q as f32);
        assert!(*q >= -127);
    }
}

fn f16b(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

/// `q4_k` bytes as documented: nibble placement and the 6-bit scale/min packing.
#[test]
fn q4k_layout() {
    // Every (sc, m) pair of 6 bits survives the packing, in every sub-block.
    let mut b = BlockQ4K {
        d: f16b(1.0),
        dmin: f16b(1.0),
        scales: [0; 12],
        qs: [0; 128],
    };
    for j in 0..8 {
        for (sc, m) in [(0u8, 63u8), (63, 0), (17, 42), (1, 1), (32, 31)] {
            let mut s = [0u8; 8];
            let mut mm = [0u8; 8];
            for i in 0..8 {
                (s[i], mm[i]) = ((i as u8 * 7 + 3) & 63, (i as u8 * 11 + 5) & 63);
            }
            (s[j], mm[j]) = (sc, m);
            // Pack as documented.
            for i in 0..4 {
                b.scales[i] = s[i] | ((s[i + 4] >> 4) << 6);
                b.scales[i + 4] = mm[i] | ((mm[i + 4] >> 4) << 6);
                b.scales[i + 8] = (s[i + 4] & 0xF) | ((mm[i + 4] & 0xF) << 4);
            }
            for i in 0..8 {
                assert_eq!(b.scale_min(i), (s[i], mm[i]), "sub-block {i}");
            }
        }
    }
    // d = 1, dmin = 0.5, every sc = 1, m = 2: w = q − 1.
    for i in 0..4 {
        b.scales[i] = 1;
        b.scales[i + 4] = 2;
        b.scales[i + 8] = 1 | (2 << 4);
    }
    b.dmin = f16b(0.5);
    for c in 0..4 {
        for l in 0..32 {
            b.qs[32 * c + l] = (l % 16) as u8 | (((15 - l % 16) as u8) << 4);
        }
    }
    let p = PackedMatrix::from_bytes(Format::Q4K, 1, 256, bytemuck::bytes_of(&b).to_vec())
        .expect("bytes");
    let d = p.dequantize_f32().expect("dq");
    for c in 0..4 {
        for l in 0..32 {
            assert_eq!(d[64 * c + l], (l % 16) as f32 - 1.0);
            assert_eq!(d[64 * c + 32 + l], (15 - l % 16) as f32 - 1.0);
        }
    }
}

/// `q6_k` bytes as documented: low nibbles, high bit pairs and the signed sub-block scales.
#[test]
fn q6k_layout() {
    let q: Vec<u8> = (0..256).map(|i| ((i * 37 + 11) % 64) as u8).collect();
    let mut b = BlockQ6K {
        ql: [0; 128],
        qh: [0; 64],
        scales: [0; 16],
        d: f16b(0.5),
    };
    for h in 0..2 {
        for l in 0..32 {
            let [a, bb, c, e] = [0, 32, 64, 96].map(|o| q[128 * h + o + l]);
            b.ql[64 * h + l] = (a & 0xF) | ((c & 0xF) << 4);
            b.ql[64 * h + 32 + l] = (bb & 0xF) | ((e & 0xF) << 4);
            b.qh[32 * h + l] = (a >> 4) | ((bb >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
        }
    }
    for (j, s) in b.scales.iter_mut().enumerate() {
        *s = j as i8 - 8;
    }
    for (i, qi) in q.iter().enumerate() {
        assert_eq!(b.quant(i), *qi, "quant {i}");
    }
    let p = PackedMatrix::from_bytes(Format::Q6K, 1, 256, bytemuck::bytes_of(&b).to_vec())
        .expect("bytes");
    let d = p.dequantize_f32().expect("dq");
    for i in 0..256 {
        let want = 0.5 * ((i / 16) as f32 - 8.0) * (q[i] as f32 - 32.0);
        assert_eq!(d[i], want, "weight {i}");
    }
}
