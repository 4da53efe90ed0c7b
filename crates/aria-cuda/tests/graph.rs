//! Recorded work (a CUDA graph, through the op contract's `Backend::record`) replays with new
//! per-step values written into device buffers, and an op the backend lacks is refused by name.
//! The ops themselves are tested by the op harness (`aria-testing`'s `op_harness`). Needs a CUDA
//! device: records a hardware skip without one, unless `ARIA_REQUIRE_CUDA=1`.
#![allow(clippy::unwrap_used)]

mod common;

use aria_core::backend::Backend;
use aria_core::ops;
use aria_core::{Device, Tensor};
use aria_testing::fixtures::assert_close;
use common::{backend, put, rand};

const F32_TOL: f32 = 1e-5;

/// A sampler-like step recorded once: it reads its two per-step scalars from a device buffer
/// (written in place before each replay) and its state, and writes the new state back.
#[test]
fn a_recorded_step_replays_with_new_scalars() {
    let Some(be) = backend("a_recorded_step_replays_with_new_scalars") else {
        return;
    };
    let d: Device = be.device();
    let scalars = put(&d, &Tensor::zeros(&[2], aria_core::DType::F32));
    let x0 = rand(&[1, 4, 33], 50);
    let y = rand(&[1, 4, 33], 51);
    let state = put(&d, &x0);
    let yd = put(&d, &y);
    let (a_view, b_view) = (
        scalars.narrow(0, 0, 1).unwrap(),
        scalars.narrow(0, 1, 1).unwrap(),
    );
    let (st, bw) = (state.clone(), be.clone());
    let rec = be
        .record(Box::new(move || {
            let t = bw.axpby_device(&a_view, &st, &b_view, &yd)?;
            bw.write_into(&st, &ops::tanh(&t)?)
        }))
        .unwrap()
        .expect("CUDA records");
    let mut cpu = x0.clone();
    for (a, b) in [(0.9f32, 0.1f32), (0.5, -0.3), (1.0, 0.0), (0.2, 0.7)] {
        be.write_into(&scalars, &Tensor::from_vec(vec![a, b], &[2]).unwrap())
            .unwrap();
        rec.replay().unwrap();
        cpu = ops::tanh(&ops::axpby(&[a], &cpu, &[b], &y).unwrap()).unwrap();
        assert_close("replayed step", &state.to_cpu().unwrap(), &cpu, F32_TOL);
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

/// The contract's recording ([`Backend::record`]) on CUDA: buffers written in place
/// ([`Backend::write_into`], from the host and from the device) feed a recorded graph, which
/// runs nothing when recorded and gives each replay's result from that replay's inputs.
#[test]
fn recorded_work_reads_its_buffers_at_each_replay() {
    let Some(be) = backend("recorded_work_reads_its_buffers_at_each_replay") else {
        return;
    };
    let d: Device = be.device();
    let x_buf = put(&d, &Tensor::zeros(&[2, 3, 17], aria_core::DType::F32));
    let out = put(&d, &Tensor::zeros(&[2, 3, 17], aria_core::DType::F32));
    let w = rand(&[2, 3, 17], 60);
    let wd = put(&d, &w);
    let (xr, or, wr, bw) = (x_buf.clone(), out.clone(), wd.clone(), be.clone());
    let rec = be
        .record(Box::new(move || {
            let y = ops::tanh(&ops::mul(&xr, &wr)?)?;
            bw.write_into(&or, &y)
        }))
        .unwrap()
        .expect("CUDA records");
    for seed in 61..65 {
        let x = rand(&[2, 3, 17], seed);
        if seed % 2 == 0 {
            be.write_into(&x_buf, &x).unwrap();
        } else {
            be.write_into(&x_buf, &put(&d, &x)).unwrap();
        }
        rec.replay().unwrap();
        let want = ops::tanh(&ops::mul(&x, &w).unwrap()).unwrap();
        assert_close("replayed work", &out.to_cpu().unwrap(), &want, F32_TOL);
    }
    let wrong = Tensor::zeros(&[3, 2, 17], aria_core::DType::F32);
    assert!(be.write_into(&x_buf, &wrong).is_err());
}
