//! The data-movement ops on the wgpu backend (`contiguous`, `to_dtype`, `cat`, `pad`,
//! `unfold`) against the CPU, bit for bit, and every op that runs on tensors past one storage
//! binding. Skips (with a message) when no adapter is available, except under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod wgpu_common;

use aria_core::ops::{self, RmsStyle};
use aria_core::{CoreError, DType, Tensor};
use aria_wgpu::WgpuBackend;
use wgpu_common::{backend, broadcast_view, check, check_bits, rand_t, scaled, values};

/// How many buffers hold a device tensor.
fn buffers(t: &Tensor) -> usize {
    match &**t.storage() {
        aria_core::storage::Storage::Device(d) => d
            .as_any()
            .downcast_ref::<aria_wgpu::WgpuStorage>()
            .map_or(0, |s| s.buffers()),
        _ => 0,
    }
}

/// Values that exercise conversions: ties, subnormals, infinities, NaN, overflow.
fn special() -> Tensor {
    let mut v = vec![
        0.0f32,
        -0.0,
        1.0,
        -1.5,
        65504.0,
        65520.0,
        1e6,
        -1e6,
        6.1e-5,
        5.96e-8,
        2.98e-8,
        1e-9,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        1.0 + 1.0 / 256.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        1e-40,
        3.3895314e38,
    ];
    v.extend(values(43, 140).iter().map(|x| x * 300.0));
    Tensor::from_vec(v, &[8, 8]).unwrap()
}

#[test]
fn layout_ops() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    let x = special();
    let xg = gpu.put(&x).unwrap();
    // Conversions, bit for bit with the CPU (round to nearest even), plain and strided.
    for dt in [DType::F16, DType::BF16, DType::F32] {
        check_bits(
            "to_dtype",
            &xg.to_dtype(dt).unwrap(),
            &x.to_dtype(dt).unwrap(),
        );
        let v = xg.transpose(0, 1).unwrap().narrow(0, 1, 5).unwrap();
        let vc = x.transpose(0, 1).unwrap().narrow(0, 1, 5).unwrap();
        check_bits(
            "to_dtype",
            &v.to_dtype(dt).unwrap(),
            &vc.to_dtype(dt).unwrap(),
        );
    }
    for src in [DType::F16, DType::BF16, DType::I8, DType::U8, DType::I64] {
        let t = ops::mul_scalar(&rand_t(&[5, 7], 141), 100.0)
            .unwrap()
            .to_dtype(src)
            .unwrap();
        let tg = gpu.put(&t).unwrap();
        for dst in [DType::F32, DType::F16, DType::BF16] {
            if dst != src {
                check_bits(
                    "to_dtype",
                    &tg.to_dtype(dst).unwrap(),
                    &t.to_dtype(dst).unwrap(),
                );
            }
        }
        // Strided views of every dtype made contiguous, bits kept.
        let v = tg.transpose(0, 1).unwrap();
        check_bits(
            "contiguous",
            &v.contiguous().unwrap(),
            &t.transpose(0, 1).unwrap().contiguous().unwrap(),
        );
        let n = tg.narrow(1, 1, 3).unwrap();
        check_bits(
            "contiguous",
            &n.contiguous().unwrap(),
            &t.narrow(1, 1, 3).unwrap().contiguous().unwrap(),
        );
    }
    // Integer targets: truncation, saturation, NaN to 0 (special values, then 16-bit and
    // integer sources).
    let wide = Tensor::from_vec(
        vec![
            -3e9f32,
            3e9,
            1e19,
            -1e19,
            9.3e18,
            -9.3e18,
            2147483648.0,
            -2147483904.0,
            4.5e12,
            -4.5e12,
            255.9,
            256.0,
            -128.9,
            -129.0,
            127.9,
            -0.9,
        ],
        &[16],
    )
    .unwrap();
    let wg = gpu.put(&wide).unwrap();
    for dt in [DType::I8, DType::U8, DType::I64] {
        check_bits(
            "to_dtype",
            &xg.to_dtype(dt).unwrap(),
            &x.to_dtype(dt).unwrap(),
        );
        check_bits(
            "to_dtype",
            &wg.to_dtype(dt).unwrap(),
            &wide.to_dtype(dt).unwrap(),
        );
        for src in [DType::F16, DType::BF16, DType::I8, DType::U8, DType::I64] {
            let t = ops::mul_scalar(&rand_t(&[3, 9], 148), 300.0)
                .unwrap()
                .to_dtype(src)
                .unwrap();
            let v = gpu.put(&t).unwrap().transpose(0, 1).unwrap();
            check_bits(
                "to_dtype",
                &v.to_dtype(dt).unwrap(),
                &t.transpose(0, 1).unwrap().to_dtype(dt).unwrap(),
            );
        }
    }
    // Broadcast (stride 0) and permuted views; a rank-7 view.
    let b = rand_t(&[3, 1, 5], 142);
    let bg = gpu.put(&b).unwrap();
    check_bits(
        "contiguous",
        &broadcast_view(&bg, 1, 4).contiguous().unwrap(),
        &broadcast_view(&b, 1, 4).contiguous().unwrap(),
    );
    let r7 = rand_t(&[2, 1, 3, 2, 1, 2, 3], 143);
    let p = [6, 5, 4, 3, 2, 1, 0];
    check_bits(
        "contiguous",
        &gpu.put(&r7)
            .unwrap()
            .permute(&p)
            .unwrap()
            .contiguous()
            .unwrap(),
        &r7.permute(&p).unwrap().contiguous().unwrap(),
    );
    // Reshape of a strided device view goes through the same copy.
    check_bits(
        "contiguous",
        &xg.transpose(0, 1).unwrap().reshape(&[64]).unwrap(),
        &x.transpose(0, 1).unwrap().reshape(&[64]).unwrap(),
    );
    // Concatenation: dims 0..2, odd 16-bit and byte slots, a zero-size part, views.
    let a = rand_t(&[2, 3, 5], 144);
    let c = rand_t(&[2, 1, 5], 145);
    let z = Tensor::zeros(&[2, 0, 5], DType::F32);
    for dt in [DType::F32, DType::F16, DType::U8, DType::I64] {
        let (a, c, z) = (
            a.to_dtype(dt).unwrap(),
            c.to_dtype(dt).unwrap(),
            z.to_dtype(dt).unwrap(),
        );
        let (ag, cg, zg) = (
            gpu.put(&a).unwrap(),
            gpu.put(&c).unwrap(),
            gpu.put(&z).unwrap(),
        );
        check_bits(
            "cat",
            &Tensor::cat(&[&ag, &cg, &zg, &ag], 1).unwrap(),
            &Tensor::cat(&[&a, &c, &z, &a], 1).unwrap(),
        );
        check_bits(
            "cat",
            &Tensor::cat(&[&ag, &ag.narrow(1, 1, 2).unwrap()], 1).unwrap(),
            &Tensor::cat(&[&a, &a.narrow(1, 1, 2).unwrap()], 1).unwrap(),
        );
        check_bits(
            "cat",
            &Tensor::cat(&[&ag, &ag], 0).unwrap(),
            &Tensor::cat(&[&a, &a], 0).unwrap(),
        );
        let at = ag.narrow(2, 0, 3).unwrap();
        check_bits(
            "cat",
            &Tensor::cat(&[&at, &ag], 2).unwrap(),
            &Tensor::cat(&[&a.narrow(2, 0, 3).unwrap(), &a], 2).unwrap(),
        );
        check_bits(
            "cat",
            &Tensor::stack(&[&ag, &ag], 3).unwrap(),
            &Tensor::stack(&[&a, &a], 3).unwrap(),
        );
        // Padding: the middle dim of a view, the last, the first.
        let v = ag.transpose(1, 2).unwrap();
        let vc = a.transpose(1, 2).unwrap();
        for (dim, before, after) in [(1usize, 1usize, 2usize), (2, 0, 3), (0, 2, 0), (1, 0, 0)] {
            check_bits(
                "pad",
                &ops::pad(&v, dim, before, after).unwrap(),
                &ops::pad(&vc, dim, before, after).unwrap(),
            );
        }
    }
    assert!(Tensor::cat(
        &[
            &gpu.put(&a).unwrap(),
            &gpu.put(&rand_t(&[2, 3, 4], 1)).unwrap()
        ],
        1
    )
    .is_err());
    assert!(ops::pad(&gpu.put(&a).unwrap(), 3, 1, 1).is_err());
    // Unfold: windows of 1, 3, 5 (longer than the sequence) over a strided input.
    let u = rand_t(&[2, 5, 3], 146);
    let ug = gpu.put(&u).unwrap();
    for k in [1, 3, 5, 13] {
        check_bits(
            "unfold",
            &ops::unfold(&ug, k).unwrap(),
            &ops::unfold(&u, k).unwrap(),
        );
    }
    let ut = rand_t(&[2, 3, 5], 147);
    check_bits(
        "unfold",
        &ops::unfold(&gpu.put(&ut).unwrap().transpose(1, 2).unwrap(), 3).unwrap(),
        &ops::unfold(&ut.transpose(1, 2).unwrap(), 3).unwrap(),
    );
    assert!(ops::unfold(&ug, 2).is_err());
}

/// Tensors past one binding (here a 256-byte limit, so `[40, 8]` f32 spans five buffers of
/// eight rows): the same-shape elementwise and row ops (DyT and axpby included) run buffer by
/// buffer, broadcasting
/// binaries, the layout copies and `embedding` buffer pair by buffer pair (views whose
/// elements straddle buffers included); ops that need one binding refuse by name.
#[test]
fn ops_past_one_binding() {
    let Some(base) = backend() else { return };
    let knobs = aria_wgpu::Knobs {
        max_binding_bytes: 256,
        ..base.knobs()
    };
    let be = WgpuBackend::with_knobs(knobs).unwrap();
    let gpu = be.device();
    let x = scaled(&[40, 8], 170, 3.0);
    let y = rand_t(&[40, 8], 171);
    let w = rand_t(&[8], 172);
    let (xg, yg, wg) = (
        gpu.put(&x).unwrap(),
        gpu.put(&y).unwrap(),
        gpu.put(&w).unwrap(),
    );
    assert_eq!(buffers(&xg), 5);
    check(
        "gelu",
        &ops::gelu(&xg).unwrap(),
        &ops::gelu(&x).unwrap(),
        2e-6,
    );
    check(
        "affine",
        &ops::affine(&xg, 0.5, 1.0).unwrap(),
        &ops::affine(&x, 0.5, 1.0).unwrap(),
        2e-7,
    );
    check(
        "rms_norm",
        &ops::rms_norm(&xg, Some(&wg), 1e-6, RmsStyle::Plain).unwrap(),
        &ops::rms_norm(&x, Some(&w), 1e-6, RmsStyle::Plain).unwrap(),
        2e-6,
    );
    check(
        "layer_norm",
        &ops::layer_norm(&xg, Some(&wg), Some(&wg), 1e-5).unwrap(),
        &ops::layer_norm(&x, Some(&w), Some(&w), 1e-5).unwrap(),
        2e-6,
    );
    check(
        "softmax",
        &ops::softmax_last(&xg).unwrap(),
        &ops::softmax_last(&x).unwrap(),
        2e-6,
    );

    check(
        "dyt",
        &ops::dyt(&xg, 0.7, &wg, &wg).unwrap(),
        &ops::dyt(&x, 0.7, &w, &w).unwrap(),
        2e-6,
    );
    // Four items of 80 elements over buffers of 64: the item index is global.
    let (p3, q3) = (rand_t(&[4, 10, 8], 178), rand_t(&[4, 10, 8], 179));
    let (p3g, q3g) = (gpu.put(&p3).unwrap(), gpu.put(&q3).unwrap());
    let (ca, cb) = ([1.0, 0.5, -2.0, 0.25], [-0.3, 2.0, 1.5, 0.0]);
    check(
        "axpby",
        &ops::axpby(&ca, &p3g, &cb, &q3g).unwrap(),
        &ops::axpby(&ca, &p3, &cb, &q3).unwrap(),
        2e-7,
    );

    // Binaries: equal shapes, a broadcast row, a broadcast column, a transposed operand
    // (every element of a row in another buffer), a row slice starting mid-buffer.
    check(
        "sub",
        &ops::sub(&xg, &yg).unwrap(),
        &ops::sub(&x, &y).unwrap(),
        0.0,
    );
    check(
        "mul (row broadcast)",
        &ops::mul(&xg, &wg).unwrap(),
        &ops::mul(&x, &w).unwrap(),
        0.0,
    );
    let col = rand_t(&[40, 1], 173);
    check(
        "div (column broadcast)",
        &ops::div(&gpu.put(&col).unwrap(), &xg).unwrap(),
        &ops::div(&col, &x).unwrap(),
        0.0,
    );
    let t = rand_t(&[8, 40], 174);
    let tg = gpu.put(&t).unwrap();
    check(
        "add (transposed)",
        &ops::add(&xg, &tg.transpose(0, 1).unwrap()).unwrap(),
        &ops::add(&x, &t.transpose(0, 1).unwrap()).unwrap(),
        0.0,
    );
    check(
        "mul (row slice)",
        &ops::mul(&xg.narrow(0, 3, 30).unwrap(), &yg.narrow(0, 9, 30).unwrap()).unwrap(),
        &ops::mul(&x.narrow(0, 3, 30).unwrap(), &y.narrow(0, 9, 30).unwrap()).unwrap(),
        0.0,
    );
    let x3 = rand_t(&[4, 10, 8], 175);
    let g3 = rand_t(&[4, 1, 8], 176);
    check(
        "mul (gate [B, 1, D])",
        &ops::mul(&gpu.put(&x3).unwrap(), &gpu.put(&g3).unwrap()).unwrap(),
        &ops::mul(&x3, &g3).unwrap(),
        0.0,
    );

    // Layout copies, from and into several buffers.
    check_bits(
        "contiguous (transpose)",
        &xg.transpose(0, 1).unwrap().contiguous().unwrap(),
        &x.transpose(0, 1).unwrap().contiguous().unwrap(),
    );
    check_bits(
        "contiguous (slice)",
        &tg.narrow(1, 5, 30).unwrap().contiguous().unwrap(),
        &t.narrow(1, 5, 30).unwrap().contiguous().unwrap(),
    );
    for dt in [DType::BF16, DType::F16, DType::I64, DType::I8] {
        let got = xg.to_dtype(dt).unwrap();
        check_bits("to_dtype", &got, &x.to_dtype(dt).unwrap());
        check_bits(
            "to_dtype (back to f32)",
            &got.to_dtype(DType::F32).unwrap(),
            &x.to_dtype(dt).unwrap().to_dtype(DType::F32).unwrap(),
        );
    }
    check_bits(
        "to_dtype (transposed)",
        &xg.transpose(0, 1).unwrap().to_dtype(DType::BF16).unwrap(),
        &x.transpose(0, 1).unwrap().to_dtype(DType::BF16).unwrap(),
    );
    for dim in [0, 1] {
        check_bits(
            "cat",
            &Tensor::cat(&[&xg, &yg, &xg], dim).unwrap(),
            &Tensor::cat(&[&x, &y, &x], dim).unwrap(),
        );
        check_bits(
            "pad",
            &ops::pad(&xg, dim, 3, 5).unwrap(),
            &ops::pad(&x, dim, 3, 5).unwrap(),
        );
    }
    let xb = x.to_dtype(DType::BF16).unwrap();
    check_bits(
        "pad (bf16)",
        &ops::pad(&gpu.put(&xb).unwrap(), 0, 1, 2).unwrap(),
        &ops::pad(&xb, 0, 1, 2).unwrap(),
    );

    // Embedding from a table of seven (f32) or four (bf16) buffers, ids at both ends of
    // the vocabulary, into an output of several buffers; ids from the host and the device.
    let table = scaled(&[50, 8], 177, 2.0);
    let idv: Vec<i64> = (0..21)
        .map(|i| (i * 17 + 3) % 50)
        .chain([0, 49, 48])
        .collect();
    let ids = Tensor::from_vec(idv, &[3, 8]).unwrap();
    for tab in [table.clone(), table.to_dtype(DType::BF16).unwrap()] {
        let tg = gpu.put(&tab).unwrap();
        assert!(buffers(&tg) >= 4);
        let want = ops::embedding(&ids, &tab).unwrap();
        check_bits("embedding", &ops::embedding(&ids, &tg).unwrap(), &want);
        check_bits(
            "embedding (device ids)",
            &ops::embedding(&gpu.put(&ids).unwrap(), &tg).unwrap(),
            &want,
        );
    }
    let bad = Tensor::from_vec(vec![3i64, 50], &[2]).unwrap();
    assert!(ops::embedding(&bad, &gpu.put(&table).unwrap()).is_err());

    // An op that needs each operand within one binding refuses by name, never computes
    // wrongly.
    let e = ops::glu(&xg, ops::GluAct::Silu).unwrap_err();
    assert!(matches!(e, CoreError::Backend { .. }), "{e}");
}
