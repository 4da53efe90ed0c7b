use half::{bf16, f16};

use super::source::{transpose_rows, transpose_rows_on, TB};
use super::Float;
use super::*;
use crate::Isa;

/// Unaligned f32/f16/bf16 weight bytes (as in a memory-mapped file) give the same product as
/// the aligned typed slices.
#[test]
fn unaligned_weights() {
    let (m, n, k) = (7, 19, 300);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let w: Vec<f32> = (0..n * k)
        .map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0)
        .collect();
    for isa in Isa::available() {
        let mut want = vec![0f32; m * n];
        gemm(isa, m, n, k, &a, k, &BSrc::Nk(WData::F32(&w), k), &mut want);
        let mut bytes = vec![0u8; 1];
        bytes.extend(w.iter().flat_map(|v| v.to_le_bytes()));
        let mut got = vec![0f32; m * n];
        gemm(
            isa,
            m,
            n,
            k,
            &a,
            k,
            &BSrc::Nk(WData::Raw(Float::F32, &bytes[1..]), k),
            &mut got,
        );
        assert_eq!(got, want, "{isa:?} f32 unaligned");
        for d in [Float::F16, Float::Bf16] {
            let h: Vec<u16> = w
                .iter()
                .map(|&v| {
                    if d == Float::F16 {
                        f16::from_f32(v).to_bits()
                    } else {
                        bf16::from_f32(v).to_bits()
                    }
                })
                .collect();
            let mut bytes = vec![0u8; 1];
            bytes.extend(h.iter().flat_map(|v| v.to_le_bytes()));
            let typed: Vec<f32> = h
                .iter()
                .map(|&b| {
                    if d == Float::F16 {
                        f16::from_bits(b).to_f32()
                    } else {
                        bf16::from_bits(b).to_f32()
                    }
                })
                .collect();
            let mut want = vec![0f32; m * n];
            gemm(
                isa,
                m,
                n,
                k,
                &a,
                k,
                &BSrc::Nk(WData::F32(&typed), k),
                &mut want,
            );
            let mut got = vec![0f32; m * n];
            gemm(
                isa,
                m,
                n,
                k,
                &a,
                k,
                &BSrc::Nk(WData::Raw(d, &bytes[1..]), k),
                &mut got,
            );
            assert_eq!(got, want, "{isa:?} {d:?} unaligned");
        }
    }
}

/// A product with panels packed in advance and a fused bias is bit-identical to the plain
/// product with the bias added afterwards, on every path, for one and several row blocks,
/// partial column blocks and K slabs; panels that do not fit the product are ignored.
#[test]
fn prepacked_panels_and_bias_bit_identical() {
    for (m, n, k) in [(1, 19, 5), (7, 300, 300), (250, 140, 257), (1000, 33, 70)] {
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0)
            .collect();
        let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.37 - 3.0).collect();
        let src = BSrc::Nk(WData::F32(&w), k);
        for isa in Isa::available() {
            let mut want = vec![0f32; m * n];
            gemm(isa, m, n, k, &a, k, &src, &mut want);
            let mut want_b = want.clone();
            for row in want_b.chunks_exact_mut(n) {
                for (o, b) in row.iter_mut().zip(&bias) {
                    *o += b;
                }
            }
            let p = PackedB::new(isa, &src, n, k);
            assert!(p.fits(isa, n, k) && !p.fits(isa, n + 1, k));
            let none = BSrc::Kn(&[], 0);
            let mut got = vec![f32::NAN; m * n];
            gemm_with(isa, m, n, k, &a, k, &none, Some(&p), None, &mut got);
            assert_eq!(got, want, "{isa:?} {m}x{n}x{k} prepacked");
            let mut got = vec![f32::NAN; m * n];
            gemm_with(isa, m, n, k, &a, k, &none, Some(&p), Some(&bias), &mut got);
            assert_eq!(got, want_b, "{isa:?} {m}x{n}x{k} prepacked + bias");
            let mut got = vec![f32::NAN; m * n];
            gemm_with(isa, m, n, k, &a, k, &src, None, Some(&bias), &mut got);
            assert_eq!(got, want_b, "{isa:?} {m}x{n}x{k} bias");
            // Panels of another shape are not used.
            let other = PackedB::new(isa, &BSrc::Nk(WData::F32(&w), k - 1), n, k - 1);
            let mut got = vec![f32::NAN; m * n];
            gemm_with(isa, m, n, k, &a, k, &src, Some(&other), None, &mut got);
            assert_eq!(got, want, "{isa:?} {m}x{n}x{k} misfit panels");
        }
    }
}

/// On AVX2, the driver with A packed into micro-panels (the default there) gives the bits of
/// the one reading A in place, with and without bias and prepacked panels, for one and
/// several row blocks, partial tiles, panels and K slabs, on 1–3 threads.
#[test]
fn packed_a_bit_identical_to_in_place() {
    let isas: Vec<Isa> = Isa::available()
        .into_iter()
        .filter(|i| matches!(i, Isa::Avx2 | Isa::Avx512))
        .collect();
    if isas.is_empty() {
        aria_testing::skip_for_hardware("this CPU has no AVX2");
        return;
    }
    if !isas.contains(&Isa::Avx512) {
        aria_testing::skip_for_hardware("AVX-512 part: this CPU has no AVX-512F");
    }
    for isa in isas {
        for (m, n, k) in [
            (1, 19, 5),
            (7, 300, 300),
            (238, 200, 520),
            (250, 140, 257),
            (500, 270, 1030),
            (1000, 33, 70),
        ] {
            let a: Vec<f32> = (0..m * (k + 3))
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            let w: Vec<f32> = (0..n * k)
                .map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0)
                .collect();
            let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.37 - 3.0).collect();
            let src = BSrc::Nk(WData::F32(&w), k);
            let p = PackedB::new(isa, &src, n, k);
            for threads in 1..=3 {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("thread pool");
                for (panels, bias) in [(None, None), (Some(&p), Some(&bias[..]))] {
                    let run = |packs_a| {
                        let mut c = vec![f32::NAN; m * n];
                        pool.install(|| {
                            gemm_impl(isa, m, n, k, &a, k + 3, &src, panels, bias, &mut c, packs_a)
                        });
                        c
                    };
                    let (want, got) = (run(false), run(true));
                    assert!(
                        want.iter()
                            .zip(&got)
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{isa:?} {m}x{n}x{k}, {threads} threads, prepacked/bias {}",
                        panels.is_some()
                    );
                }
            }
        }
    }
}

/// The blocked transpose puts every element where the element-by-element one does, for
/// row and column counts around the block size, and leaves the padding columns alone.
#[test]
fn transpose_rows_matches_elementwise() {
    for (nc, kc, nr, ld) in [
        (TB, TB, 16, TB),
        (TB - 3, 37, 16, 40),
        (TB + 5, TB + 3, 32, TB + 9),
        (7, 5, 32, 9),
        (2 * TB, 256, 32, 300),
        (8, 8, 16, 8),
        (9, 15, 16, 17),
        (16, 17, 16, 21),
        (27, 40, 32, 45),
    ] {
        let src: Vec<f32> = (0..nc * ld).map(|i| i as f32).collect();
        let mut want = vec![-1f32; kc * nr];
        for jj in 0..nc {
            for kk in 0..kc {
                want[kk * nr + jj] = src[jj * ld + kk];
            }
        }
        let mut got = vec![-1f32; kc * nr];
        transpose_rows(&src, ld, kc, nc, nr, &mut got);
        assert_eq!(got, want, "nc {nc} kc {kc} nr {nr} ld {ld}");
        for isa in Isa::available() {
            let mut got = vec![-1f32; kc * nr];
            transpose_rows_on(isa, &src, ld, kc, nc, nr, &mut got);
            assert_eq!(got, want, "{isa:?}: nc {nc} kc {kc} nr {nr} ld {ld}");
        }
    }
}

/// The lane masks of the first n of 32 values, against a bit-by-bit statement.
#[test]
fn lane_masks32_cover_the_first_n() {
    for n in 0..40usize {
        let want = |lane: usize| lane < n.min(32);
        let [a, b] = crate::lane_masks32(n);
        for l in 0..16 {
            assert_eq!(a >> l & 1 == 1, want(l), "n {n} lane {l}");
            assert_eq!(b >> l & 1 == 1, want(16 + l), "n {n} lane {}", 16 + l);
        }
    }
}

/// Rows of int8 with a scale and offset per 16 columns, read as f32 or (optionally) as int8.
struct I8Src {
    q: Vec<i8>,
    sc: Vec<f32>,
    off: Option<Vec<f32>>,
    k: usize,
    int8: bool,
}

impl I8Src {
    fn value(&self, row: usize, col: usize) -> f32 {
        let g = row * self.k.div_ceil(I8_GROUP) + col / I8_GROUP;
        let v = self.sc[g] * self.q[row * self.k + col] as f32;
        self.off.as_ref().map_or(v, |o| v - o[g])
    }
}

impl RowSource for I8Src {
    fn read_row(&self, row: usize, k0: usize, out: &mut [f32]) {
        for (c, o) in out.iter_mut().enumerate() {
            *o = self.value(row, k0 + c);
        }
    }

    fn read_row_i8(
        &self,
        row: usize,
        k0: usize,
        q: &mut [i8],
        scale: &mut [f32],
        offset: &mut [f32],
    ) -> Option<I8Rows> {
        if !self.int8 {
            return None;
        }
        let ng = self.k.div_ceil(I8_GROUP);
        q.copy_from_slice(&self.q[row * self.k + k0..row * self.k + k0 + q.len()]);
        let g0 = row * ng + k0 / I8_GROUP;
        scale.copy_from_slice(&self.sc[g0..g0 + scale.len()]);
        match &self.off {
            Some(o) => {
                offset.copy_from_slice(&o[g0..g0 + offset.len()]);
                Some(I8Rows::ScaledOffset)
            }
            None => Some(I8Rows::Scaled),
        }
    }
}

/// A product reading int8 rows (dequantized in the transpose) gives the bits of the product of
/// the f32 weight they stand for, on every path, with and without offsets, for widths and
/// depths that leave partial panels, groups and slabs.
#[test]
fn int8_rows_are_the_product_of_their_f32_weight() {
    for (m, n, k) in [(5usize, 37usize, 300usize), (13, 16, 256), (40, 70, 530)] {
        let ng = k.div_ceil(I8_GROUP);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let q: Vec<i8> = (0..n * k)
            .map(|i| ((i * 53 % 255) as i32 - 127) as i8)
            .collect();
        let sc: Vec<f32> = (0..n * ng)
            .map(|g| {
                if g % 7 == 3 {
                    0.0
                } else {
                    0.01 + g as f32 * 1e-3
                }
            })
            .collect();
        let off: Vec<f32> = (0..n * ng).map(|g| (g % 5) as f32 * 0.03).collect();
        for off in [None, Some(off)] {
            let mut src = I8Src {
                q: q.clone(),
                sc: sc.clone(),
                off,
                k,
                int8: true,
            };
            let w: Vec<f32> = (0..n * k).map(|i| src.value(i / k, i % k)).collect();
            for isa in Isa::available() {
                let mut want = vec![0f32; m * n];
                gemm(isa, m, n, k, &a, k, &BSrc::Nk(WData::F32(&w), k), &mut want);
                for int8 in [true, false] {
                    src.int8 = int8;
                    let mut got = vec![0f32; m * n];
                    gemm(isa, m, n, k, &a, k, &BSrc::Rows(&src), &mut got);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{isa:?} {m}x{n}x{k} int8 {int8}");
                }
            }
        }
    }
}
