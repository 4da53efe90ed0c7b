//! Every elementwise and row op of the contract on the wgpu backend, through the same call as
//! on the CPU, against the CPU result: broadcasting, strided and broadcast views, masks, odd
//! sizes and zero-size dimensions. Each comparison prints `parity <op>: <rel err>`. Skips
//! (with a message) when no adapter is available, except under `CI=true`. The data-movement
//! ops and tensors past one binding are in `wgpu_layout.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod wgpu_common;

use aria_core::ops::{self, FourierLayout, GluAct, HeadNorm, RmsStyle};
use aria_core::{CoreError, DType, Device, Tensor};
use aria_wgpu::WgpuBackend;
use wgpu_common::{backend, broadcast_view, check, check_bits, rand_t, scaled};

#[test]
fn unary_and_scalar_maps() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    type F = fn(&Tensor) -> aria_core::Result<Tensor>;
    let fs: [(&str, F); 6] = [
        ("silu", ops::silu),
        ("sigmoid", ops::sigmoid),
        ("tanh", ops::tanh),
        ("sin_pi", ops::sin_pi),
        ("gelu", ops::gelu),
        ("gelu_tanh", ops::gelu_tanh),
    ];
    let x = scaled(&[3, 37], 1, 6.0);
    let xt = scaled(&[9, 5], 2, 3.0).transpose(0, 1).unwrap();
    let empty = Tensor::zeros(&[0, 5], DType::F32);
    for (name, f) in fs {
        for t in [&x, &xt, &empty] {
            let g = gpu.put(&t.contiguous().unwrap()).unwrap();
            let g = if t.is_contiguous() {
                g
            } else {
                // The same strided view on the device.
                gpu.put(&scaled(&[9, 5], 2, 3.0))
                    .unwrap()
                    .transpose(0, 1)
                    .unwrap()
            };
            check(name, &f(&g).unwrap(), &f(t).unwrap(), 2e-6);
        }
    }
    // Large arguments and the saturated tails.
    let big = Tensor::from_vec(
        vec![
            -30.0f32, -9.5, -0.5, -1e-4, 0.0, 1e-4, 0.54, 0.56, 9.5, 30.0, 88.0, -88.0,
        ],
        &[12],
    )
    .unwrap();
    let bg = gpu.put(&big).unwrap();
    for (name, f) in fs {
        check(name, &f(&bg).unwrap(), &f(&big).unwrap(), 2e-6);
    }
    let xg = gpu.put(&x).unwrap();
    check(
        "affine",
        &ops::affine(&xg, 1.5, -0.25).unwrap(),
        &ops::affine(&x, 1.5, -0.25).unwrap(),
        2e-7,
    );
    check_bits(
        "mul_scalar",
        &ops::mul_scalar(&xg, -3.0).unwrap(),
        &ops::mul_scalar(&x, -3.0).unwrap(),
    );
    check_bits(
        "add_scalar",
        &ops::add_scalar(&xg, 0.75).unwrap(),
        &ops::add_scalar(&x, 0.75).unwrap(),
    );
}

#[test]
fn binary_broadcasting() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    let cases: &[(&[usize], &[usize])] = &[
        (&[2, 3, 4], &[2, 3, 4]),
        (&[2, 3, 4], &[4]),
        (&[2, 1, 4], &[3, 1]),
        (&[5], &[2, 5]),
        (&[1], &[3, 3]),
        (&[2, 1, 3, 1, 2, 1, 2], &[3, 2, 2, 2]),
        (&[0, 3], &[3]),
        (&[4, 0], &[1]),
    ];
    type F = fn(&Tensor, &Tensor) -> aria_core::Result<Tensor>;
    let fs: [(&str, F); 4] = [
        ("add", ops::add),
        ("sub", ops::sub),
        ("mul", ops::mul),
        ("div", ops::div),
    ];
    for (i, &(sa, sb)) in cases.iter().enumerate() {
        let a = rand_t(sa, 10 + i as u64);
        // Denominators away from zero.
        let b = ops::add_scalar(
            &ops::mul_scalar(&rand_t(sb, 20 + i as u64), 0.5).unwrap(),
            1.0,
        )
        .unwrap();
        let (ag, bg) = (gpu.put(&a).unwrap(), gpu.put(&b).unwrap());
        for (name, f) in fs {
            check(name, &f(&ag, &bg).unwrap(), &f(&a, &b).unwrap(), 1e-6);
            check(name, &f(&bg, &ag).unwrap(), &f(&b, &a).unwrap(), 1e-6);
        }
    }
    // Strided views read in place, a broadcast (stride 0) view, a CPU operand mixed in.
    let a = rand_t(&[6, 4], 30);
    let at = a.transpose(0, 1).unwrap();
    let agt = gpu.put(&a).unwrap().transpose(0, 1).unwrap();
    let b = rand_t(&[4, 1], 31);
    let bb = broadcast_view(&b, 1, 6);
    let bgb = broadcast_view(&gpu.put(&b).unwrap(), 1, 6);
    check(
        "mul",
        &ops::mul(&agt, &bgb).unwrap(),
        &ops::mul(&at, &bb).unwrap(),
        1e-7,
    );
    check(
        "add",
        &ops::add(&agt.narrow(1, 2, 3).unwrap(), &b).unwrap(),
        &ops::add(&at.narrow(1, 2, 3).unwrap(), &b).unwrap(),
        1e-7,
    );
    let e = ops::add(&gpu.put(&rand_t(&[2, 3], 1)).unwrap(), &rand_t(&[4], 2)).unwrap_err();
    assert!(matches!(e, CoreError::Shape { .. }), "{e}");
}

#[test]
fn glu_and_softmax() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    for (i, s) in [&[3usize, 10][..], &[2, 3, 14], &[1, 2], &[0, 4]]
        .into_iter()
        .enumerate()
    {
        let x = scaled(s, 40 + i as u64, 3.0);
        let xg = gpu.put(&x).unwrap();
        for act in [GluAct::Silu, GluAct::Gelu, GluAct::GeluTanh, GluAct::SinPi] {
            check(
                &format!("glu {act:?}"),
                &ops::glu(&xg, act).unwrap(),
                &ops::glu(&x, act).unwrap(),
                2e-6,
            );
        }
    }
    let e = ops::glu(&gpu.put(&rand_t(&[2, 5], 1)).unwrap(), GluAct::Silu).unwrap_err();
    assert!(matches!(e, CoreError::Shape { op: "glu", .. }), "{e}");
    for (i, s) in [&[4usize, 33][..], &[2, 3, 128], &[1, 1], &[3, 0], &[5, 300]]
        .into_iter()
        .enumerate()
    {
        let x = scaled(s, 50 + i as u64, 8.0);
        let xg = gpu.put(&x).unwrap();
        check(
            "softmax",
            &ops::softmax_last(&xg).unwrap(),
            &ops::softmax_last(&x).unwrap(),
            2e-6,
        );
    }
}

#[test]
fn norms() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    for (i, s) in [&[3usize, 17][..], &[2, 130], &[1, 1], &[2, 3, 64], &[0, 8]]
        .into_iter()
        .enumerate()
    {
        let x = scaled(s, 60 + i as u64, 2.0);
        let d = *s.last().unwrap();
        let w = rand_t(&[d], 70 + i as u64);
        let b = rand_t(&[d], 80 + i as u64);
        let (xg, wg, bg) = (
            gpu.put(&x).unwrap(),
            gpu.put(&w).unwrap(),
            gpu.put(&b).unwrap(),
        );
        for style in [RmsStyle::Plain, RmsStyle::OnePlus] {
            for (wc, wd) in [(None, None), (Some(&w), Some(&wg))] {
                check(
                    "rms_norm",
                    &ops::rms_norm(&xg, wd, 1e-6, style).unwrap(),
                    &ops::rms_norm(&x, wc, 1e-6, style).unwrap(),
                    2e-6,
                );
            }
        }
        for (wc, wd) in [(None, None), (Some(&w), Some(&wg))] {
            for (bc, bd) in [(None, None), (Some(&b), Some(&bg))] {
                check(
                    "layer_norm",
                    &ops::layer_norm(&xg, wd, bd, 1e-5).unwrap(),
                    &ops::layer_norm(&x, wc, bc, 1e-5).unwrap(),
                    2e-6,
                );
            }
        }
        check(
            "dyt",
            &ops::dyt(&xg, 0.7, &wg, &bg).unwrap(),
            &ops::dyt(&x, 0.7, &w, &b).unwrap(),
            2e-6,
        );
        if d > 1 {
            check(
                "std_last",
                &ops::std_last(&xg).unwrap(),
                &ops::std_last(&x).unwrap(),
                2e-6,
            );
        }
    }
    // A strided input, a CPU weight mixed in, rows of one (NaN std).
    let x = scaled(&[9, 4], 90, 2.0);
    let xgt = gpu.put(&x).unwrap().transpose(0, 1).unwrap();
    let w = rand_t(&[9], 91);
    check(
        "rms_norm",
        &ops::rms_norm(&xgt, Some(&w), 1e-6, RmsStyle::Plain).unwrap(),
        &ops::rms_norm(&x.transpose(0, 1).unwrap(), Some(&w), 1e-6, RmsStyle::Plain).unwrap(),
        2e-6,
    );
    // 16-bit weights on the device are widened there.
    for dt in [DType::BF16, DType::F16] {
        let wh = w.to_dtype(dt).unwrap();
        check(
            "rms_norm",
            &ops::rms_norm(&xgt, Some(&gpu.put(&wh).unwrap()), 1e-6, RmsStyle::OnePlus).unwrap(),
            &ops::rms_norm(
                &x.transpose(0, 1).unwrap(),
                Some(&wh),
                1e-6,
                RmsStyle::OnePlus,
            )
            .unwrap(),
            2e-6,
        );
    }
    let one = rand_t(&[3, 1], 92);
    check(
        "std_last",
        &ops::std_last(&gpu.put(&one).unwrap()).unwrap(),
        &ops::std_last(&one).unwrap(),
        0.0,
    );
    let e = ops::rms_norm(
        &gpu.put(&x).unwrap(),
        Some(&rand_t(&[3], 1)),
        1e-6,
        RmsStyle::Plain,
    )
    .unwrap_err();
    assert!(matches!(e, CoreError::Shape { op: "rms_norm", .. }), "{e}");
    // Modulated RMSNorm: scale and shift are column views of one projection.
    for (b, n, e) in [(2usize, 3usize, 5usize), (1, 7, 130), (2, 0, 4)] {
        let x = scaled(&[b, n, e], 93, 2.0);
        let g = rand_t(&[e], 94);
        let p = rand_t(&[b, 3 * e], 95);
        let (sc, sh) = (p.narrow(1, e, e).unwrap(), p.narrow(1, 2 * e, e).unwrap());
        let pg = gpu.put(&p).unwrap();
        let (scg, shg) = (pg.narrow(1, e, e).unwrap(), pg.narrow(1, 2 * e, e).unwrap());
        let (xg, gg) = (gpu.put(&x).unwrap(), gpu.put(&g).unwrap());
        check(
            "rms_norm_modulate",
            &ops::rms_norm_modulate(&xg, &gg, 1e-5, Some((&scg, &shg))).unwrap(),
            &ops::rms_norm_modulate(&x, &g, 1e-5, Some((&sc, &sh))).unwrap(),
            2e-6,
        );
        check(
            "rms_norm_modulate",
            &ops::rms_norm_modulate(&xg, &gg, 1e-5, None).unwrap(),
            &ops::rms_norm_modulate(&x, &g, 1e-5, None).unwrap(),
            2e-6,
        );
    }
}

#[test]
fn rope_and_tables() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    let inv = Tensor::from_vec(vec![1.0f32, 0.3, 0.05], &[3]).unwrap();
    let (c, s) = ops::rope_tables(&inv, 7).unwrap();
    let (cg, sg) = (gpu.put(&c).unwrap(), gpu.put(&s).unwrap());
    let x = rand_t(&[2, 3, 5, 8], 100);
    check(
        "rope",
        &ops::rope(&gpu.put(&x).unwrap(), &cg, &sg).unwrap(),
        &ops::rope(&x, &c, &s).unwrap(),
        1e-6,
    );
    // A permuted view, exactly 6 rotated dims of 6.
    let y = rand_t(&[2, 5, 3, 6], 101);
    let yv = y.permute(&[0, 2, 1, 3]).unwrap();
    let ygv = gpu.put(&y).unwrap().permute(&[0, 2, 1, 3]).unwrap();
    check(
        "rope",
        &ops::rope(&ygv, &cg, &sg).unwrap(),
        &ops::rope(&yv, &c, &s).unwrap(),
        1e-6,
    );
    let z = Tensor::zeros(&[2, 0, 8], DType::F32);
    check(
        "rope",
        &ops::rope(&gpu.put(&z).unwrap(), &cg, &sg).unwrap(),
        &ops::rope(&z, &c, &s).unwrap(),
        0.0,
    );
    let e = ops::rope(&gpu.put(&rand_t(&[9, 8], 1)).unwrap(), &cg, &sg).unwrap_err();
    assert!(matches!(e, CoreError::Shape { op: "rope", .. }), "{e}");
    // Tables at absolute positions, far from zero too.
    let inv = Tensor::from_vec(vec![1.0f32, 0.1, 0.01, 0.001], &[4]).unwrap();
    let ig = gpu.put(&inv).unwrap();
    for (pos0, n) in [(0usize, 9usize), (17, 9), (3000, 5), (5, 0)] {
        check(
            "rope_table",
            &ops::rope_table(&ig, pos0, n).unwrap(),
            &ops::rope_table(&inv, pos0, n).unwrap(),
            2e-6,
        );
    }
}

#[test]
fn fused_head_ops() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    let (b, n, h, d) = (2, 5, 3, 8);
    let e = h * d;
    let src = rand_t(&[b, n, 2 * e + 3], 110);
    let sg = gpu.put(&src).unwrap();
    let gamma = rand_t(&[d], 111);
    let gg = gpu.put(&gamma).unwrap();
    let (c, s) =
        ops::rope_tables(&Tensor::from_vec(vec![0.5f32, 0.1], &[2]).unwrap(), n + 2).unwrap();
    let (cg, sgn) = (gpu.put(&c).unwrap(), gpu.put(&s).unwrap());
    for col in [0, e + 3] {
        for norm in [false, true] {
            for rope in [false, true] {
                let nc = norm.then_some((&gamma, 1e-6));
                let ng = norm.then_some((&gg, 1e-6));
                let rc = rope.then_some((&c, &s));
                let rg = rope.then_some((&cg, &sgn));
                check(
                    "split_heads",
                    &ops::split_heads(&sg, col, h, d, ng, rg).unwrap(),
                    &ops::split_heads(&src, col, h, d, nc, rc).unwrap(),
                    2e-6,
                );
            }
        }
    }
    let e_ = ops::split_heads(&sg, e + 4, h, d, None, None).unwrap_err();
    assert!(matches!(e_, CoreError::Shape { .. }), "{e_}");
    // Merge: a contiguous and a strided input, with and without a mask.
    let heads = rand_t(&[b, h, n, d], 112);
    let hg = gpu.put(&heads).unwrap();
    let m = Tensor::from_vec(vec![1u8, 1, 0, 1, 0, 1, 1, 1, 1, 0], &[b, n]).unwrap();
    let mg = gpu.put(&m).unwrap();
    check_bits(
        "merge_heads",
        &ops::merge_heads(&hg, None).unwrap(),
        &ops::merge_heads(&heads, None).unwrap(),
    );
    check_bits(
        "merge_heads",
        &ops::merge_heads(&hg, Some(&mg)).unwrap(),
        &ops::merge_heads(&heads, Some(&m)).unwrap(),
    );
    let tok = rand_t(&[b, n, h, d], 113);
    let tv = tok.permute(&[0, 2, 1, 3]).unwrap();
    let tgv = gpu.put(&tok).unwrap().permute(&[0, 2, 1, 3]).unwrap();
    check_bits(
        "merge_heads",
        &ops::merge_heads(&tgv, Some(&mg)).unwrap(),
        &ops::merge_heads(&tv, Some(&m)).unwrap(),
    );
    // Gated residual: gate a column view, u on the last tokens only, masked rows kept.
    let hh = rand_t(&[b, n, e], 114);
    let proj = rand_t(&[b, 2 * e], 115);
    let gate = proj.narrow(1, e, e).unwrap();
    let pg = gpu.put(&proj).unwrap();
    let gate_g = pg.narrow(1, e, e).unwrap();
    let hgd = gpu.put(&hh).unwrap();
    for nu in [n, 2, 0] {
        let u = rand_t(&[b, nu, e], 116);
        let ug = gpu.put(&u).unwrap();
        for (gc, gd) in [(None, None), (Some(&gate), Some(&gate_g))] {
            for (mc, md) in [(None, None), (Some(&m), Some(&mg))] {
                check(
                    "gated_residual_add",
                    &ops::gated_residual_add(&hgd, &ug, gd, md).unwrap(),
                    &ops::gated_residual_add(&hh, &u, gc, mc).unwrap(),
                    2e-7,
                );
            }
        }
    }
    // SAME's fused q/k/v heads with DyT and partial RoPE.
    let (parts, hq, dh) = (3, 2, 8);
    let x = scaled(&[b, n, parts * hq * dh], 117, 2.0);
    let xg = gpu.put(&x).unwrap();
    let g2 = rand_t(&[dh], 118);
    let b2 = rand_t(&[dh], 119);
    let (g2g, b2g) = (gpu.put(&g2).unwrap(), gpu.put(&b2).unwrap());
    let tab = ops::rope_table(&Tensor::from_vec(vec![1.0f32, 0.25], &[2]).unwrap(), 3, n).unwrap();
    let (tc, ts) = (tab.get(0).unwrap(), tab.get(1).unwrap());
    let tabg = gpu.put(&tab).unwrap();
    let (tcg, tsg) = (tabg.get(0).unwrap(), tabg.get(1).unwrap());
    for part in 0..parts {
        for norm in [false, true] {
            for rope in [false, true] {
                let nc = norm.then_some(HeadNorm {
                    alpha: 0.7,
                    gamma: &g2,
                    beta: &b2,
                });
                let ng = norm.then_some(HeadNorm {
                    alpha: 0.7,
                    gamma: &g2g,
                    beta: &b2g,
                });
                check(
                    "qkv_heads",
                    &ops::qkv_heads(&xg, parts, part, hq, ng, rope.then_some((&tcg, &tsg)))
                        .unwrap(),
                    &ops::qkv_heads(&x, parts, part, hq, nc, rope.then_some((&tc, &ts))).unwrap(),
                    2e-6,
                );
            }
        }
    }
    assert!(ops::qkv_heads(&xg, parts, 3, hq, None, None).is_err());
}

#[test]
fn sampler_ops() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    let x = rand_t(&[2, 3, 5], 120);
    let y = rand_t(&[2, 3, 5], 121);
    let (xg, yg) = (gpu.put(&x).unwrap(), gpu.put(&y).unwrap());
    check(
        "axpby",
        &ops::axpby(&[1.0, 0.5], &xg, &[-0.3, 2.0], &yg).unwrap(),
        &ops::axpby(&[1.0, 0.5], &x, &[-0.3, 2.0], &y).unwrap(),
        2e-7,
    );
    let z = Tensor::zeros(&[3, 0], DType::F32);
    let zg = gpu.put(&z).unwrap();
    check(
        "axpby",
        &ops::axpby(&[1.0; 3], &zg, &[1.0; 3], &zg).unwrap(),
        &ops::axpby(&[1.0; 3], &z, &[1.0; 3], &z).unwrap(),
        0.0,
    );
    assert!(ops::axpby(&[1.0], &xg, &[1.0], &yg).is_err());
    // Guidance: CFG, APG (full and partial), the norm clamp, a validity mask.
    let (b, c, t) = (2, 4, 33);
    let x = rand_t(&[b, c, t], 122);
    let vc = rand_t(&[b, c, t], 123);
    let vu = rand_t(&[b, c, t], 124);
    let m = Tensor::from_vec(
        (0..b * t).map(|i| u8::from(i % 7 != 3)).collect::<Vec<_>>(),
        &[b, t],
    )
    .unwrap();
    let (xg, vcg, vug, mg) = (
        gpu.put(&x).unwrap(),
        gpu.put(&vc).unwrap(),
        gpu.put(&vu).unwrap(),
        gpu.put(&m).unwrap(),
    );
    let sigma = [0.7f32, 0.2];
    for (apg, thr) in [
        (0.0f32, 0.0f32),
        (1.0, 0.0),
        (0.5, 0.0),
        (1.0, 0.5),
        (0.0, 0.3),
    ] {
        for (mc, md) in [(None, None), (Some(&m), Some(&mg))] {
            check(
                "apg_guidance",
                &ops::apg_guidance(&xg, &vcg, &vug, &sigma, md, 5.0, apg, thr).unwrap(),
                &ops::apg_guidance(&x, &vc, &vu, &sigma, mc, 5.0, apg, thr).unwrap(),
                1e-5,
            );
        }
    }
    assert!(ops::apg_guidance(&xg, &vcg, &vug, &[1.0], None, 5.0, 1.0, 0.0).is_err());
}

#[test]
fn conditioning_ops() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    let v = Tensor::from_vec(vec![0.0f32, 0.25, 0.5, 0.999, 0.013], &[5]).unwrap();
    let f = Tensor::from_vec(vec![1.0f32, 2.5, 16.0, 100.0, 700.0, 0.001], &[6]).unwrap();
    let (vg, fg) = (gpu.put(&v).unwrap(), gpu.put(&f).unwrap());
    let f0 = Tensor::zeros(&[0], DType::F32);
    let f0g = gpu.put(&f0).unwrap();
    for layout in [FourierLayout::CosSin, FourierLayout::ValueSinCos] {
        check(
            "fourier_features",
            &ops::fourier_features(&vg, &fg, layout).unwrap(),
            &ops::fourier_features(&v, &f, layout).unwrap(),
            2e-6,
        );
        check(
            "fourier_features",
            &ops::fourier_features(&vg, &f0g, layout).unwrap(),
            &ops::fourier_features(&v, &f0, layout).unwrap(),
            0.0,
        );
    }
    let x = rand_t(&[2, 3, 4], 130);
    let xg = gpu.put(&x).unwrap();
    let m = Tensor::from_vec(vec![1u8, 0, 1, 0, 0, 1], &[2, 3]).unwrap();
    let mf = m.to_dtype(DType::F32).unwrap();
    let fill = rand_t(&[4], 131);
    let (mg, mfg, fillg) = (
        gpu.put(&m).unwrap(),
        gpu.put(&mf).unwrap(),
        gpu.put(&fill).unwrap(),
    );
    for (mc, md) in [(&m, &mg), (&mf, &mfg)] {
        check_bits(
            "fill_masked_rows",
            &ops::fill_masked_rows(&xg, md, Some(&fillg)).unwrap(),
            &ops::fill_masked_rows(&x, mc, Some(&fill)).unwrap(),
        );
        check_bits(
            "fill_masked_rows",
            &ops::fill_masked_rows(&xg, md, None).unwrap(),
            &ops::fill_masked_rows(&x, mc, None).unwrap(),
        );
    }
    assert!(ops::fill_masked_rows(&xg, &fillg, None).is_err());
    // Embedding: f32 / f16 / bf16 tables, i64 ids on the host and the device, float ids.
    let table = rand_t(&[10, 7], 132);
    let ids = Tensor::from_vec(vec![3i64, 0, 9, 9, 1, 4], &[2, 3]).unwrap();
    let idg = gpu.put(&ids).unwrap();
    let idf = ids.to_dtype(DType::F32).unwrap();
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let t = table.to_dtype(dt).unwrap();
        let tg = gpu.put(&t).unwrap();
        let want = ops::embedding(&ids, &t).unwrap();
        check_bits("embedding", &ops::embedding(&idg, &tg).unwrap(), &want);
        check_bits("embedding", &ops::embedding(&ids, &tg).unwrap(), &want);
        check_bits(
            "embedding",
            &ops::embedding(&gpu.put(&idf).unwrap(), &tg).unwrap(),
            &want,
        );
    }
    let bad = Tensor::from_vec(vec![10i64], &[1]).unwrap();
    let e = ops::embedding(&bad, &gpu.put(&table).unwrap()).unwrap_err();
    assert!(matches!(e, CoreError::Invalid(_)), "{e}");
    // Ids already on the device cannot be checked without a download: an id outside the
    // vocabulary reads as a zero row there.
    let mixed = gpu
        .put(&Tensor::from_vec(vec![2i64, 10, -1], &[3]).unwrap())
        .unwrap();
    let rows = ops::embedding(&mixed, &gpu.put(&table).unwrap())
        .unwrap()
        .to_cpu()
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(
        rows[..7],
        table.get(2).unwrap().to_vec::<f32>().unwrap()[..]
    );
    assert!(rows[7..].iter().all(|v| *v == 0.0));
    let none = Tensor::zeros(&[0], DType::I64);
    check_bits(
        "embedding",
        &ops::embedding(&gpu.put(&none).unwrap(), &gpu.put(&table).unwrap()).unwrap(),
        &ops::embedding(&none, &table).unwrap(),
    );
}

#[test]
fn replay_ops_are_unsupported_by_name() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    let x = gpu.put(&rand_t(&[2, 3], 150)).unwrap();
    match ops::torch_bf16::round_tensor(&x) {
        Err(CoreError::Unsupported { op, backend }) => {
            assert_eq!((op, backend.as_str()), ("torch_bf16_round", "wgpu"));
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // Device results feed further device ops with no host copy (a short chain).
    let y = ops::silu(&ops::rms_norm(&x, None, 1e-6, RmsStyle::Plain).unwrap()).unwrap();
    assert!(!y.device().is_cpu());
    assert!(matches!(Device::Cpu.put(&y).unwrap().device(), Device::Cpu));
}

/// The workgroup-size knob changes nothing but speed: one invocation per workgroup (so that
/// 70 000 elements or rows need a 2-D grid past the 65 535 workgroups of one dimension) and
/// 256 (wider than most rows here).
#[test]
fn knobs_and_two_dimensional_grids() {
    let Some(base) = backend() else { return };
    for wg in [1u32, 256] {
        let knobs = aria_wgpu::Knobs {
            elementwise: wg,
            ..base.knobs()
        };
        let be = WgpuBackend::with_knobs(knobs).unwrap();
        let gpu = be.device();
        let limit = be.limits().max_compute_workgroups_per_dimension as usize;
        let n = if wg == 1 { limit + 4465 } else { 4096 };
        let x = scaled(&[n, 1], 160, 3.0);
        let xg = gpu.put(&x).unwrap();
        check(
            "silu",
            &ops::silu(&xg).unwrap(),
            &ops::silu(&x).unwrap(),
            2e-6,
        );
        let w = scaled(&[n, 2], 161, 3.0);
        let wg_ = gpu.put(&w).unwrap();
        check(
            "softmax",
            &ops::softmax_last(&wg_).unwrap(),
            &ops::softmax_last(&w).unwrap(),
            2e-6,
        );
        check_bits(
            "contiguous",
            &wg_.transpose(0, 1).unwrap().contiguous().unwrap(),
            &w.transpose(0, 1).unwrap().contiguous().unwrap(),
        );
        let r = scaled(&[3, 130], 162, 2.0);
        check(
            "layer_norm",
            &ops::layer_norm(&gpu.put(&r).unwrap(), None, None, 1e-5).unwrap(),
            &ops::layer_norm(&r, None, None, 1e-5).unwrap(),
            2e-6,
        );
    }
}
