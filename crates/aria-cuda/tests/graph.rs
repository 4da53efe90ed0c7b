//! A captured sampler step replays with new per-step scalars read from device memory (the
//! form `aria-cuda`'s graph capture takes), and an op the backend lacks is refused by name.
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
