//! Every op of the CUDA backend against the CPU path: ≤ 1e-5 relative in f32, ≤ 1e-3 with
//! fp16/bf16 tensor-core products. Needs a CUDA device: skips with a message without one,
//! unless `ARIA_REQUIRE_CUDA=1`.
#![allow(clippy::unwrap_used)]

mod common;

use aria_core::backend::Backend;
use aria_core::ops::{self, AttnOpts, FourierLayout, GluAct, KeyMaskMode, RmsStyle};
use aria_core::{DType, Device, Tensor};
use aria_testing::fixtures::assert_close;
use common::{backend, mask, put, rand};

const F32_TOL: f32 = 1e-5;
const HALF_TOL: f32 = 1e-3;

fn close(what: &str, dev: &Tensor, cpu: &Tensor, tol: f32) {
    assert!(!dev.device().is_cpu(), "{what}: result left the device");
    assert_close(what, &dev.to_cpu().unwrap(), cpu, tol);
}

#[test]
fn products() {
    let Some(be) = backend("products") else {
        return;
    };
    let d = be.device();
    let x = rand(&[3, 5, 64], 1);
    let w = rand(&[48, 64], 2);
    let b = rand(&[48], 3);
    let cpu = ops::linear(&x, &w, Some(&b)).unwrap();
    let dev = ops::linear(&put(&d, &x), &put(&d, &w), Some(&put(&d, &b))).unwrap();
    close("linear f32", &dev, &cpu, F32_TOL);
    for dt in [DType::F16, DType::BF16] {
        let wh = w.to_dtype(dt).unwrap();
        let cpu = ops::linear(&x, &wh, Some(&b)).unwrap();
        let dev = ops::linear(&put(&d, &x), &put(&d, &wh), Some(&put(&d, &b))).unwrap();
        close(&format!("linear {dt}"), &dev, &cpu, HALF_TOL);
    }
    let a = rand(&[2, 3, 7, 9], 4);
    let bm = rand(&[2, 3, 9, 5], 5);
    close(
        "matmul",
        &ops::matmul(&put(&d, &a), &put(&d, &bm)).unwrap(),
        &ops::matmul(&a, &bm).unwrap(),
        F32_TOL,
    );
    for (k, pad) in [(1, 0), (3, 1), (3, 0), (7, 3)] {
        let x = rand(&[2, 16, 40], 6);
        let w = rand(&[24, 16, k], 7);
        let b = rand(&[24], 8);
        let cpu = ops::conv1d(&x, &w, Some(&b), pad).unwrap();
        let dev = ops::conv1d(&put(&d, &x), &put(&d, &w), Some(&put(&d, &b)), pad).unwrap();
        close(&format!("conv1d k={k} pad={pad}"), &dev, &cpu, F32_TOL);
    }
}

#[test]
fn attention_variants() {
    let Some(be) = backend("attention_variants") else {
        return;
    };
    let d = be.device();
    for &(n, hd) in &[(37, 64), (130, 128), (5, 32)] {
        let q = rand(&[2, 3, n, hd], 10);
        let k = rand(&[2, 3, n, hd], 11);
        let v = rand(&[2, 3, n, hd], 12);
        let q2 = rand(&[2, 3, n, hd], 13);
        let k2 = rand(&[2, 3, n, hd], 14);
        let m = mask(&[2, n], 15);
        let (qd, kd, vd, q2d, k2d, md) = (
            put(&d, &q),
            put(&d, &k),
            put(&d, &v),
            put(&d, &q2),
            put(&d, &k2),
            put(&d, &m),
        );
        let scale = 1.0 / (hd as f32).sqrt();
        let cases: Vec<(&str, AttnOpts<'_>, AttnOpts<'_>)> = vec![
            ("full", AttnOpts::new(scale), AttnOpts::new(scale)),
            (
                "masked zero-values",
                AttnOpts {
                    key_mask: Some(&m),
                    ..AttnOpts::new(scale)
                },
                AttnOpts {
                    key_mask: Some(&md),
                    ..AttnOpts::new(scale)
                },
            ),
            (
                "masked exclude",
                AttnOpts {
                    key_mask: Some(&m),
                    mask_mode: KeyMaskMode::Exclude,
                    ..AttnOpts::new(scale)
                },
                AttnOpts {
                    key_mask: Some(&md),
                    mask_mode: KeyMaskMode::Exclude,
                    ..AttnOpts::new(scale)
                },
            ),
            (
                "banded ±17",
                AttnOpts {
                    window: Some((17, 17)),
                    ..AttnOpts::new(scale)
                },
                AttnOpts {
                    window: Some((17, 17)),
                    ..AttnOpts::new(scale)
                },
            ),
            (
                "softcap",
                AttnOpts {
                    softcap: Some(5.0),
                    ..AttnOpts::new(scale)
                },
                AttnOpts {
                    softcap: Some(5.0),
                    ..AttnOpts::new(scale)
                },
            ),
        ];
        for (name, oc, od) in &cases {
            let what = format!("attention {name} n={n} d={hd}");
            let cpu = ops::attention(&q, &k, &v, oc).unwrap();
            close(
                &what,
                &ops::attention(&qd, &kd, &vd, od).unwrap(),
                &cpu,
                F32_TOL,
            );
            let cpu = ops::attention_diff(&q, &k, &q2, &k2, &v, oc).unwrap();
            let dev = ops::attention_diff(&qd, &kd, &q2d, &k2d, &vd, od).unwrap();
            close(&format!("differential {what}"), &dev, &cpu, F32_TOL);
        }
        // Head-split views (strided operands) are compacted on the device.
        let qt = q
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
            .transpose(1, 2)
            .unwrap();
        let qtd = put(&d, &q.transpose(1, 2).unwrap().contiguous().unwrap())
            .transpose(1, 2)
            .unwrap();
        close(
            "attention strided q",
            &ops::attention(&qtd, &kd, &vd, &AttnOpts::new(scale)).unwrap(),
            &ops::attention(&qt, &k, &v, &AttnOpts::new(scale)).unwrap(),
            F32_TOL,
        );
        // Chunked: each chunk of 16 attends to itself only.
        let chunk = 16;
        let parts: Vec<Tensor> = (0..n.div_ceil(chunk))
            .map(|c| {
                let (s, l) = (c * chunk, chunk.min(n - c * chunk));
                let nq = |t: &Tensor| t.narrow(2, s, l).unwrap();
                ops::attention(&nq(&q), &nq(&k), &nq(&v), &AttnOpts::new(scale)).unwrap()
            })
            .collect();
        let refs: Vec<&Tensor> = parts.iter().collect();
        let cpu = Tensor::cat(&refs, 2).unwrap();
        let dev = be
            .attention_chunked(&qd, &kd, &vd, &AttnOpts::new(scale), chunk)
            .unwrap();
        close(&format!("chunked attention n={n}"), &dev, &cpu, F32_TOL);
    }
}

#[test]
fn elementwise_and_rows() {
    let Some(be) = backend("elementwise_and_rows") else {
        return;
    };
    let d = be.device();
    let x = rand(&[4, 7, 96], 20);
    let xd = put(&d, &x);
    type Un = fn(&Tensor) -> aria_core::Result<Tensor>;
    let unary: [(&str, Un); 7] = [
        ("silu", ops::silu),
        ("sigmoid", ops::sigmoid),
        ("tanh", ops::tanh),
        ("sin_pi", ops::sin_pi),
        ("gelu", ops::gelu),
        ("gelu_tanh", ops::gelu_tanh),
        ("softmax", ops::softmax_last),
    ];
    for (name, f) in unary {
        close(name, &f(&xd).unwrap(), &f(&x).unwrap(), F32_TOL);
    }
    close(
        "affine",
        &ops::affine(&xd, 1.5, -0.25).unwrap(),
        &ops::affine(&x, 1.5, -0.25).unwrap(),
        F32_TOL,
    );
    close(
        "mul_scalar",
        &ops::mul_scalar(&xd, 3.0).unwrap(),
        &ops::mul_scalar(&x, 3.0).unwrap(),
        F32_TOL,
    );
    close(
        "add_scalar",
        &ops::add_scalar(&xd, 3.0).unwrap(),
        &ops::add_scalar(&x, 3.0).unwrap(),
        F32_TOL,
    );
    let y = rand(&[7, 1], 21);
    let yd = put(&d, &y);
    for (name, f) in [
        (
            "add",
            ops::add as fn(&Tensor, &Tensor) -> aria_core::Result<Tensor>,
        ),
        ("sub", ops::sub),
        ("mul", ops::mul),
        ("div", ops::div),
    ] {
        close(
            &format!("{name} broadcast"),
            &f(&xd, &yd).unwrap(),
            &f(&x, &y).unwrap(),
            F32_TOL,
        );
    }
    for act in [GluAct::Silu, GluAct::Gelu, GluAct::GeluTanh, GluAct::SinPi] {
        close(
            &format!("glu {act:?}"),
            &ops::glu(&xd, act).unwrap(),
            &ops::glu(&x, act).unwrap(),
            F32_TOL,
        );
    }
    let w = rand(&[96], 22);
    let b = rand(&[96], 23);
    let (wd, bd) = (put(&d, &w), put(&d, &b));
    for style in [RmsStyle::Plain, RmsStyle::OnePlus] {
        close(
            &format!("rms_norm {style:?}"),
            &ops::rms_norm(&xd, Some(&wd), 1e-6, style).unwrap(),
            &ops::rms_norm(&x, Some(&w), 1e-6, style).unwrap(),
            F32_TOL,
        );
    }
    close(
        "layer_norm",
        &ops::layer_norm(&xd, Some(&wd), Some(&bd), 1e-5).unwrap(),
        &ops::layer_norm(&x, Some(&w), Some(&b), 1e-5).unwrap(),
        F32_TOL,
    );
    close(
        "dyt",
        &ops::dyt(&xd, 0.7, &wd, &bd).unwrap(),
        &ops::dyt(&x, 0.7, &w, &b).unwrap(),
        F32_TOL,
    );
    close(
        "std_last",
        &ops::std_last(&xd).unwrap(),
        &ops::std_last(&x).unwrap(),
        F32_TOL,
    );
    let inv = Tensor::from_vec(
        (0..16)
            .map(|i| 1.0 / 10000f32.powf(i as f32 / 16.0))
            .collect::<Vec<_>>(),
        &[16],
    )
    .unwrap();
    let (c, s) = ops::rope_tables(&inv, 7).unwrap();
    close(
        "rope",
        &ops::rope(&xd, &put(&d, &c), &put(&d, &s)).unwrap(),
        &ops::rope(&x, &c, &s).unwrap(),
        F32_TOL,
    );
    close(
        "unfold",
        &ops::unfold(&xd, 3).unwrap(),
        &ops::unfold(&x, 3).unwrap(),
        F32_TOL,
    );
    close(
        "pad",
        &ops::pad(&xd, 1, 2, 3).unwrap(),
        &ops::pad(&x, 1, 2, 3).unwrap(),
        0.0,
    );
    let t = x.transpose(0, 2).unwrap();
    close(
        "contiguous",
        &xd.transpose(0, 2).unwrap().contiguous().unwrap(),
        &t.contiguous().unwrap(),
        0.0,
    );
    close(
        "cat",
        &Tensor::cat(&[&xd, &xd.narrow(1, 2, 3).unwrap()], 1).unwrap(),
        &Tensor::cat(&[&x, &x.narrow(1, 2, 3).unwrap()], 1).unwrap(),
        0.0,
    );
    for dt in [DType::F16, DType::BF16] {
        // Rounding to half precision is bit-exact with the CPU conversion.
        let dev = xd.to_dtype(dt).unwrap().to_cpu().unwrap();
        let cpu = x.to_dtype(dt).unwrap();
        assert_eq!(
            dev.as_bytes().unwrap(),
            cpu.as_bytes().unwrap(),
            "to_dtype {dt}"
        );
        let back = put(&d, &cpu).to_dtype(DType::F32).unwrap();
        close(
            &format!("{dt} to f32"),
            &back,
            &cpu.to_dtype(DType::F32).unwrap(),
            0.0,
        );
    }
    let vals = Tensor::from_vec(vec![0.0f32, 0.3, 0.99, 0.5], &[4]).unwrap();
    let freqs = rand(&[8], 24);
    for layout in [FourierLayout::CosSin, FourierLayout::ValueSinCos] {
        close(
            &format!("fourier {layout:?}"),
            &ops::fourier_features(&put(&d, &vals), &put(&d, &freqs), layout).unwrap(),
            &ops::fourier_features(&vals, &freqs, layout).unwrap(),
            F32_TOL,
        );
    }
    let m = mask(&[4, 7], 25);
    close(
        "fill_masked_rows",
        &ops::fill_masked_rows(&xd, &put(&d, &m), Some(&wd)).unwrap(),
        &ops::fill_masked_rows(&x, &m, Some(&w)).unwrap(),
        0.0,
    );
}

#[test]
fn fused_dit_and_sampler_ops() {
    let Some(be) = backend("fused_dit_and_sampler_ops") else {
        return;
    };
    let d = be.device();
    let (b, n, e) = (2, 9, 128);
    let x = rand(&[b, n, e], 30);
    let g = rand(&[e], 31);
    let proj = rand(&[b, 3 * e], 32);
    let (sc, sh) = (proj.narrow(1, 0, e).unwrap(), proj.narrow(1, e, e).unwrap());
    let pd = put(&d, &proj);
    let (scd, shd) = (pd.narrow(1, 0, e).unwrap(), pd.narrow(1, e, e).unwrap());
    let (xd, gd) = (put(&d, &x), put(&d, &g));
    close(
        "rms_norm_modulate",
        &ops::rms_norm_modulate(&xd, &gd, 1e-6, Some((&scd, &shd))).unwrap(),
        &ops::rms_norm_modulate(&x, &g, 1e-6, Some((&sc, &sh))).unwrap(),
        F32_TOL,
    );
    let u = rand(&[b, n - 2, e], 33);
    let m = mask(&[b, n], 34);
    close(
        "gated_residual_add",
        &ops::gated_residual_add(&xd, &put(&d, &u), Some(&scd), Some(&put(&d, &m))).unwrap(),
        &ops::gated_residual_add(&x, &u, Some(&sc), Some(&m)).unwrap(),
        F32_TOL,
    );
    let qkv = rand(&[b, n, 3 * e], 35);
    let gain = rand(&[64], 36);
    let inv = Tensor::from_vec(
        (0..16)
            .map(|i| 1.0 / 100f32.powf(i as f32 / 16.0))
            .collect::<Vec<_>>(),
        &[16],
    )
    .unwrap();
    let (c, s) = ops::rope_tables(&inv, n).unwrap();
    let qd = put(&d, &qkv);
    let heads_dev = ops::split_heads(
        &qd,
        e,
        2,
        64,
        Some((&put(&d, &gain), 1e-6)),
        Some((&put(&d, &c), &put(&d, &s))),
    )
    .unwrap();
    let heads_cpu = ops::split_heads(&qkv, e, 2, 64, Some((&gain, 1e-6)), Some((&c, &s))).unwrap();
    close("split_heads", &heads_dev, &heads_cpu, F32_TOL);
    close(
        "merge_heads",
        &ops::merge_heads(&heads_dev, Some(&put(&d, &m))).unwrap(),
        &ops::merge_heads(&heads_cpu, Some(&m)).unwrap(),
        F32_TOL,
    );
    // SAME: fused q/k/v head split with DyT and partial RoPE, tables at absolute positions.
    let table = ops::rope_table(&inv, 5, n).unwrap();
    let table_dev = ops::rope_table(&put(&d, &inv), 5, n).unwrap();
    close("rope_table", &table_dev, &table, F32_TOL);
    let (tc, ts) = (table.get(0).unwrap(), table.get(1).unwrap());
    let (tcd, tsd) = (table_dev.get(0).unwrap(), table_dev.get(1).unwrap());
    let (gq, bq) = (rand(&[64], 42), rand(&[64], 43));
    let (gqd, bqd) = (put(&d, &gq), put(&d, &bq));
    for part in 0..3 {
        let cpu = ops::qkv_heads(
            &qkv,
            3,
            part,
            2,
            Some(ops::HeadNorm {
                alpha: 0.8,
                gamma: &gq,
                beta: &bq,
            }),
            Some((&tc, &ts)),
        )
        .unwrap();
        let dev = ops::qkv_heads(
            &qd,
            3,
            part,
            2,
            Some(ops::HeadNorm {
                alpha: 0.8,
                gamma: &gqd,
                beta: &bqd,
            }),
            Some((&tcd, &tsd)),
        )
        .unwrap();
        close(&format!("qkv_heads part {part}"), &dev, &cpu, F32_TOL);
    }
    let y = rand(&[b, n, e], 37);
    close(
        "axpby",
        &ops::axpby(&[0.5, -1.0], &xd, &[2.0, 0.25], &put(&d, &y)).unwrap(),
        &ops::axpby(&[0.5, -1.0], &x, &[2.0, 0.25], &y).unwrap(),
        F32_TOL,
    );
    let (xa, vc, vu) = (
        rand(&[b, 16, 40], 38),
        rand(&[b, 16, 40], 39),
        rand(&[b, 16, 40], 40),
    );
    let ma = mask(&[b, 40], 41);
    for (apg, thr, with_mask) in [
        (0.0, 0.0, false),
        (1.0, 0.0, true),
        (0.5, 2.0, true),
        (1.0, 5.0, false),
    ] {
        let mk = with_mask.then_some(&ma);
        let mkd = with_mask.then(|| put(&d, &ma));
        close(
            &format!("apg_guidance apg={apg} thr={thr} mask={with_mask}"),
            &ops::apg_guidance(
                &put(&d, &xa),
                &put(&d, &vc),
                &put(&d, &vu),
                &[0.9, 0.4],
                mkd.as_ref(),
                5.0,
                apg,
                thr,
            )
            .unwrap(),
            &ops::apg_guidance(&xa, &vc, &vu, &[0.9, 0.4], mk, 5.0, apg, thr).unwrap(),
            F32_TOL,
        );
    }
}

#[test]
fn step_graph_replays_with_new_scalars() {
    let Some(be) = backend("step_graph_replays_with_new_scalars") else {
        return;
    };
    let d: Device = be.device();
    let layout = aria_cuda::StepScalars::new(&["a", "b"]).unwrap();
    let scalars = be.step_scalars(&layout, &[("a", 0.0), ("b", 0.0)]).unwrap();
    let x0 = rand(&[1, 4, 33], 50);
    let y = rand(&[1, 4, 33], 51);
    let state = put(&d, &x0);
    let yd = put(&d, &y);
    let (a_view, b_view) = (
        scalars.narrow(0, 0, 1).unwrap(),
        scalars.narrow(0, 1, 1).unwrap(),
    );
    let graph = be
        .capture_step(&layout, &scalars, &state, || {
            let t = be.axpby_device(&a_view, &state, &b_view, &yd)?;
            ops::tanh(&t)
        })
        .unwrap();
    let mut cpu = x0.clone();
    for (a, b) in [(0.9f32, 0.1f32), (0.5, -0.3), (1.0, 0.0), (0.2, 0.7)] {
        graph.replay(&[("a", a), ("b", b)]).unwrap();
        cpu = ops::tanh(&ops::axpby(&[a], &cpu, &[b], &y).unwrap()).unwrap();
        be.synchronize().unwrap();
        assert_close(
            "replayed step",
            &graph.state().to_cpu().unwrap(),
            &cpu,
            F32_TOL,
        );
    }
    // An op the backend lacks is refused by name, on the device, not run on the CPU.
    let ids = put(&d, &Tensor::from_vec(vec![0i64, 1], &[2]).unwrap());
    let e = ops::embedding(&ids, &put(&d, &rand(&[4, 8], 52))).unwrap_err();
    assert!(
        e.to_string().contains("embedding") && e.to_string().contains("cuda"),
        "{e}"
    );
    assert_eq!(be.name(), "cuda");
}
