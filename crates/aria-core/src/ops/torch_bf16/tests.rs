//! The bf16 replay ops on CPU tensors: masking, strides and shapes around the `aria_cpu` kernels.

use super::*;
use crate::cpu;
use crate::ops::KeyMaskMode;
use crate::rng::Xoshiro256pp;

/// Three `shape` tensors of bf16 values uniform in [−1, 1), drawn from `seed`.
fn bf16_qkv(seed: u64, shape: [usize; 4]) -> [Tensor; 3] {
    let mut rng = Xoshiro256pp::new(seed);
    let n: usize = shape.iter().product();
    std::array::from_fn(|_| {
        let v: Vec<f32> = (0..n)
            .map(|_| round((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0))
            .collect();
        Tensor::from_vec(v, &shape).unwrap()
    })
}

/// Close to a plain softmax attention; masked keys excluded; a row with no key is zero;
/// more keys than one block and bad shapes are errors.
#[test]
fn flash_attention_basics() {
    let (b, h, n, d) = (2, 2, 13, 8);
    let [q, k, v] = bf16_qkv(3, [b, h, n, d]);
    let allowed = |bi: usize, i: usize, j: usize| bi == 0 || (j < 5 && i != 7);
    for isa in cpu::Isa::available() {
        let o = cpu::with_isa(isa, || flash_attention(&q, &k, &v, 0.5, allowed))
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let (qv, kv, vv) = (
            q.to_vec_f32().unwrap(),
            k.to_vec_f32().unwrap(),
            v.to_vec_f32().unwrap(),
        );
        for bh in 0..b * h {
            for i in 0..n {
                let row = &o[(bh * n + i) * d..(bh * n + i + 1) * d];
                if !(0..n).any(|j| allowed(bh / h, i, j)) {
                    assert!(row.iter().all(|&x| x == 0.0));
                    continue;
                }
                let s: Vec<f64> = (0..n)
                    .map(|j| {
                        if !allowed(bh / h, i, j) {
                            return f64::NEG_INFINITY;
                        }
                        (0..d)
                            .map(|c| {
                                qv[(bh * n + i) * d + c] as f64 * kv[(bh * n + j) * d + c] as f64
                            })
                            .sum::<f64>()
                            * 0.5
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..d {
                    let want: f64 = (0..n)
                        .map(|j| e[j] / z * vv[(bh * n + j) * d + c] as f64)
                        .sum();
                    assert!(
                        (row[c] as f64 - want).abs() < 2e-2,
                        "{isa:?} {bh} {i} {c}: {} vs {want}",
                        row[c]
                    );
                }
            }
        }
    }
    let big = Tensor::from_vec(vec![0f32; 513 * 2], &[1, 1, 513, 2]).unwrap();
    assert!(flash_attention(&big, &big, &big, 1.0, |_, _, _| true).is_err());
    let bad = Tensor::from_vec(vec![0f32; 6], &[1, 6]).unwrap();
    assert!(flash_attention(&bad, &bad, &bad, 1.0, |_, _, _| true).is_err());
}

/// The op's key mask and band are the kernel's `allowed` rule, bit for bit; a soft-cap or
/// zero-value masking is refused.
#[test]
fn attention_op_masks_like_the_kernel() {
    let (b, h, n, d) = (2, 2, 11, 8);
    let [q, k, v] = bf16_qkv(5, [b, h, n, d]);
    let m: Vec<u8> = (0..b * n).map(|i| u8::from(i % 7 != 3)).collect();
    let mask = Tensor::from_vec(m.clone(), &[b, n]).unwrap();
    let mut opts = AttnOpts::new(0.3);
    opts.key_mask = Some(&mask);
    opts.mask_mode = KeyMaskMode::Exclude;
    opts.window = Some((2, 3));
    let got = attention(&q, &k, &v, &opts)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let want = flash_attention(&q, &k, &v, 0.3, |bi, i, j| {
        m[bi * n + j] != 0 && j + 2 >= i && j <= i + 3
    })
    .unwrap()
    .to_vec::<f32>()
    .unwrap();
    assert!(got
        .iter()
        .zip(&want)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    opts.mask_mode = KeyMaskMode::ZeroValues;
    assert!(attention(&q, &k, &v, &opts).is_err());
    opts.mask_mode = KeyMaskMode::Exclude;
    opts.softcap = Some(50.0);
    assert!(attention(&q, &k, &v, &opts).is_err());
}

/// RMSNorm rounds once per element; rope rounds after each product and the sum, on a
/// strided input, with a table longer than the sequence.
#[test]
fn rms_norm_and_rope_reference_formulas() {
    let d = 24;
    let x: Vec<f32> = (0..3 * d)
        .map(|i| round(((i * 37 % 11) as f32 - 5.0) * 0.37))
        .collect();
    let w: Vec<f32> = (0..d).map(|i| round(i as f32 * 0.01 - 0.1)).collect();
    let xt = Tensor::from_vec(x.clone(), &[3, d]).unwrap();
    let wt = Tensor::from_vec(w.clone(), &[d]).unwrap();
    let got = rms_norm(&xt, &wt, 1e-6).unwrap().to_vec_f32().unwrap();
    for (r, row) in x.chunks(d).enumerate() {
        let sq: Vec<f32> = row.iter().map(|e| e * e).collect();
        let inv = 1.0 / (sum(&sq) / d as f32 + 1e-6).sqrt();
        for i in 0..d {
            let want = round(row[i] * inv * (1.0 + w[i]));
            assert_eq!(got[r * d + i].to_bits(), want.to_bits());
        }
    }
    // rope over [B=1, N=3, D] stored transposed ([D, N] memory), tables of 5 rows.
    let (n, half) = (3, d / 2);
    let cos: Vec<f32> = (0..5 * d).map(|i| round((i as f32 * 0.1).cos())).collect();
    let sin: Vec<f32> = (0..5 * d).map(|i| round((i as f32 * 0.1).sin())).collect();
    let (ct, st) = (
        Tensor::from_vec(cos.clone(), &[5, d]).unwrap(),
        Tensor::from_vec(sin.clone(), &[5, d]).unwrap(),
    );
    let xs = Tensor::from_vec(x.clone(), &[d, n])
        .unwrap()
        .transpose(0, 1)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let got = rope(&xs, &ct, &st).unwrap().to_vec_f32().unwrap();
    for p in 0..n {
        let e: Vec<f32> = (0..d).map(|i| x[i * n + p]).collect();
        for i in 0..half {
            let (a, b) = (e[i], e[i + half]);
            let c = &cos[p * d..];
            let s = &sin[p * d..];
            let lo = round(round(a * c[i]) + round(-b * s[i]));
            let hi = round(round(b * c[i + half]) + round(a * s[i + half]));
            assert_eq!(got[p * d + i].to_bits(), lo.to_bits());
            assert_eq!(got[p * d + i + half].to_bits(), hi.to_bits());
        }
    }
    let short = Tensor::from_vec(vec![0f32; 2 * d], &[2, d]).unwrap();
    assert!(rope(&xs, &short, &short).is_err());
}
