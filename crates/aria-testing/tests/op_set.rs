//! The backend contract, op by op: every op of the set runs on the counting backend with its
//! operands resident there, gives the CPU path's bits, and downloads nothing; a backend that
//! lacks an op says so instead of falling back to the host.

use std::sync::Arc;

use aria_core::backend::{Backend, Op};
use aria_core::ops::{self, AttnOpts, GluAct, KeyMaskMode, RmsStyle};
use aria_core::{CoreError, DType, Device, Result, Tensor};
use aria_testing::counting::CountingBackend;

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let v = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed * 97)
                >> 8;
            (v % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn t(shape: &[usize], seed: u32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(data(n, seed), shape).expect("shape")
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32()
        .expect("readable")
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Run `f` on CPU tensors and on their device copies; compare bits and counts.
fn check(name: &str, inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<()> {
    let cpu = f(inputs)?;
    let be = CountingBackend::new();
    let dev = be.device();
    let on: Vec<Tensor> = inputs.iter().map(|x| dev.put(x)).collect::<Result<_>>()?;
    be.reset();
    let out = f(&on)?;
    let c = be.counts();
    assert!(!out.device().is_cpu(), "{name}: result left the device");
    assert_eq!(c.downloads, 0, "{name}: downloaded during the op ({c:?})");
    assert_eq!(c.implicit_uploads, 0, "{name}: CPU operands ({c:?})");
    assert!(c.total_ops() >= 1, "{name}: no op reached the backend");
    let host = out.to_cpu()?;
    assert_eq!(be.counts().downloads, 1);
    assert_eq!(host.shape(), cpu.shape(), "{name}: shape");
    assert_eq!(
        bits(&host),
        bits(&cpu),
        "{name}: bits differ from the CPU path"
    );
    Ok(())
}

#[test]
fn every_op_matches_cpu_on_the_counting_backend() -> Result<()> {
    let x = t(&[2, 3, 8], 1);
    let w = t(&[5, 8], 2);
    let b = t(&[5], 3);
    check("linear", &[x.clone(), w.clone(), b.clone()], |v| {
        ops::linear(&v[0], &v[1], Some(&v[2]))
    })?;
    let w16 = w.to_dtype(DType::BF16)?;
    check("linear bf16 weight", &[x.clone(), w16], |v| {
        ops::linear(&v[0], &v[1], None)
    })?;
    check("matmul", &[t(&[2, 3, 4], 4), t(&[2, 4, 5], 5)], |v| {
        ops::matmul(&v[0], &v[1])
    })?;
    check(
        "conv1d",
        &[t(&[2, 3, 9], 6), t(&[4, 3, 3], 7), t(&[4], 8)],
        |v| ops::conv1d(&v[0], &v[1], Some(&v[2]), 1),
    )?;
    let (q, k, vv) = (
        t(&[1, 2, 6, 4], 9),
        t(&[1, 2, 7, 4], 10),
        t(&[1, 2, 7, 4], 11),
    );
    let mask = Tensor::from_vec(vec![1.0f32, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0], &[1, 7])?;
    for mode in [KeyMaskMode::ZeroValues, KeyMaskMode::Exclude] {
        check(
            "attention masked",
            &[q.clone(), k.clone(), vv.clone(), mask.clone()],
            |v| {
                let mut o = AttnOpts::new(0.5);
                o.key_mask = Some(&v[3]);
                o.mask_mode = mode;
                ops::attention(&v[0], &v[1], &v[2], &o)
            },
        )?;
    }
    let sq = t(&[1, 2, 7, 4], 12);
    check(
        "attention banded",
        &[sq.clone(), k.clone(), vv.clone()],
        |v| {
            let mut o = AttnOpts::new(0.5);
            o.window = Some((2, 1));
            o.softcap = Some(3.0);
            ops::attention(&v[0], &v[1], &v[2], &o)
        },
    )?;
    check(
        "attention_diff",
        &[
            q.clone(),
            k.clone(),
            t(&[1, 2, 6, 4], 13),
            t(&[1, 2, 7, 4], 14),
            vv,
        ],
        |v| ops::attention_diff(&v[0], &v[1], &v[2], &v[3], &v[4], &AttnOpts::new(0.5)),
    )?;
    type Un = fn(&Tensor) -> Result<Tensor>;
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
        check(name, std::slice::from_ref(&x), |v| f(&v[0]))?;
    }
    check("affine", std::slice::from_ref(&x), |v| {
        ops::affine(&v[0], 1.5, -0.25)
    })?;
    check("mul_scalar", std::slice::from_ref(&x), |v| {
        ops::mul_scalar(&v[0], -2.0)
    })?;
    check("add_scalar", std::slice::from_ref(&x), |v| {
        ops::add_scalar(&v[0], 0.75)
    })?;
    type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let binary: [(&str, Bin); 4] = [
        ("add", ops::add),
        ("sub", ops::sub),
        ("mul", ops::mul),
        ("div", ops::div),
    ];
    for (name, f) in binary {
        check(name, &[x.clone(), t(&[2, 1, 8], 15)], |v| f(&v[0], &v[1]))?;
    }
    for act in [GluAct::Silu, GluAct::Gelu, GluAct::GeluTanh, GluAct::SinPi] {
        check("glu", std::slice::from_ref(&x), |v| ops::glu(&v[0], act))?;
    }
    let ids = Tensor::from_vec(vec![3i64, 0, 4, 4], &[2, 2])?;
    check(
        "embedding",
        &[ids, t(&[5, 6], 16).to_dtype(DType::BF16)?],
        |v| ops::embedding(&v[0], &v[1]),
    )?;
    let inv = Tensor::from_vec(vec![1.0f32, 0.1], &[2])?;
    let (c, s) = ops::rope_tables(&inv, 3)?;
    check("rope", &[x.clone(), c, s], |v| {
        ops::rope(&v[0], &v[1], &v[2])
    })?;
    let g = t(&[8], 17);
    for style in [RmsStyle::Plain, RmsStyle::OnePlus] {
        check("rms_norm", &[x.clone(), g.clone()], |v| {
            ops::rms_norm(&v[0], Some(&v[1]), 1e-6, style)
        })?;
    }
    check("layer_norm", &[x.clone(), g.clone(), t(&[8], 18)], |v| {
        ops::layer_norm(&v[0], Some(&v[1]), Some(&v[2]), 1e-5)
    })?;
    check("dyt", &[x.clone(), g.clone(), t(&[8], 19)], |v| {
        ops::dyt(&v[0], 0.7, &v[1], &v[2])
    })?;
    check("unfold", &[t(&[2, 5, 3], 20)], |v| ops::unfold(&v[0], 3))?;
    check(
        "contiguous (transposed view)",
        std::slice::from_ref(&x),
        |v| v[0].transpose(1, 2)?.contiguous(),
    )?;
    check("reshape of a strided view", std::slice::from_ref(&x), |v| {
        v[0].narrow(2, 1, 4)?.reshape(&[24])
    })?;
    check("to_dtype", std::slice::from_ref(&x), |v| {
        v[0].to_dtype(DType::BF16)?.to_dtype(DType::F32)
    })?;
    check("cat", &[x.clone(), t(&[2, 1, 8], 21)], |v| {
        Tensor::cat(&[&v[0], &v[1]], 1)
    })?;
    Ok(())
}

/// A backend with no ops at all.
struct Bare;

impl Backend for Bare {
    fn name(&self) -> &str {
        "bare"
    }
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        CountingBackend::new().device().put(t)
    }
    fn to_cpu(&self, t: &Tensor) -> Result<Tensor> {
        t.to_cpu()
    }
}

#[test]
fn missing_ops_are_errors_not_downloads() -> Result<()> {
    // Tensors resident on the counting backend, run through a backend that implements nothing:
    // the op must be refused by name.
    let be = CountingBackend::new();
    let x = be.device().put(&t(&[2, 4], 1))?;
    let bare: Arc<dyn Backend> = Arc::new(Bare);
    match bare.run(Op::Softmax { x: x.clone() }) {
        Err(CoreError::Unsupported { op, backend }) => {
            assert_eq!((op, backend.as_str()), ("softmax", "bare"));
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // `map` takes a closure, which no device can run: refused, nothing downloaded.
    be.reset();
    let r = ops::map(&x, |v| v + 1.0);
    assert!(matches!(r, Err(CoreError::Unsupported { .. })), "{r:?}");
    assert_eq!(be.counts().downloads, 0);
    // Every declared op has a distinct name.
    let mut names = Op::NAMES.to_vec();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Op::NAMES.len());
    let _ = Device::Cpu;
    Ok(())
}
