//! Packed `q8_0` weights on wgpu: uploaded in the backend's layout, weight-only and W8A8
//! products against the CPU (the op's reference and the `aria-quant` kernels), a layer moved
//! to the device and back, and the refusals (another format, a wrong shape).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod wgpu_common;

use std::sync::Arc;

use aria_core::nn::{Linear, PackedWeight, Weight, WeightFormat};
use aria_core::{ops, Backend, Device, Tensor};
use aria_quant::{Compute, Format, PackedMatrix};
use aria_testing::fixtures::rel_err;
use wgpu_common::{backend, rand_t};

fn packed(w: &Tensor, format: Format, compute: Compute) -> PackedMatrix {
    PackedMatrix::quantize("w", w, format)
        .unwrap()
        .with_compute(compute)
        .unwrap()
}

#[test]
fn q8_products_match_the_cpu() {
    let Some(be) = backend() else { return };
    let dev = Device::Backend(Arc::new(be.clone()));
    assert_eq!(be.packed_formats(), vec![(WeightFormat::Q8_0, true)]);
    // Edge shapes: one row, one block, rows not a multiple of the workgroup, a zero row, widths
    // that end in a padded block.
    for (m, k, n) in [
        (1, 32, 1),
        (3, 64, 65),
        (17, 96, 130),
        (5, 256, 7),
        (3, 40, 5),
        (2, 16, 9),
    ] {
        let mut x = rand_t(&[m, k], 1 + m as u64).to_vec::<f32>().unwrap();
        x[..k].fill(0.0);
        let x = Tensor::from_vec(x, &[m, k]).unwrap();
        let w = rand_t(&[n, k], 2 + n as u64);
        let b = rand_t(&[n], 3);
        for compute in [Compute::WeightOnly, Compute::W8A8] {
            let pm = packed(&w, Format::Q8_0, compute);
            let blocks = pm.blocks().expect("q8_0 has blocks");
            let fast = pm.forward(&x, Some(&b)).unwrap().to_vec::<f32>().unwrap();
            let reference = ops::linear_packed(
                &x,
                &blocks.data,
                blocks.format,
                blocks.w8a8,
                [n, k],
                Some(&b),
            )
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
            let p: Arc<dyn PackedWeight> = Arc::new(pm);
            let on = dev.put_packed(&p).unwrap();
            assert!(!on.device().is_cpu());
            let got = on
                .linear(&dev.put(&x).unwrap(), Some(&dev.put(&b).unwrap()))
                .unwrap();
            assert!(!got.device().is_cpu(), "the result stays on the device");
            assert_eq!(got.shape(), [m, n]);
            let got = got.to_cpu().unwrap().to_vec::<f32>().unwrap();
            // The CPU reference and the device sum the same products in the same block order.
            let e_ref = rel_err(&got, &reference);
            let e_fast = rel_err(&got, &fast);
            assert!(
                e_ref < 1e-5,
                "{m}x{k}x{n} {compute:?}: vs reference {e_ref}"
            );
            assert!(
                e_fast < 1e-5,
                "{m}x{k}x{n} {compute:?}: vs aria-quant {e_fast}"
            );
            // The zero row is exactly the bias.
            assert_eq!(&got[..n], &b.to_vec::<f32>().unwrap()[..], "{compute:?}");
        }
    }
}

#[test]
fn a_packed_layer_moves_to_the_device_and_back() {
    let Some(be) = backend() else { return };
    let dev = Device::Backend(Arc::new(be));
    let (k, n) = (64, 48);
    let w = rand_t(&[n, k], 9);
    let x = rand_t(&[4, k], 10);
    let pm = packed(&w, Format::Q8_0, Compute::WeightOnly);
    let mut layer = Linear::new("proj", Weight::Packed(Arc::new(pm)), None).unwrap();
    let want = layer.forward(&x).unwrap().to_vec::<f32>().unwrap();
    layer.to_device(&dev).unwrap();
    let got = layer.forward(&dev.put(&x).unwrap()).unwrap();
    let got = got.to_cpu().unwrap().to_vec::<f32>().unwrap();
    assert!(rel_err(&got, &want) < 1e-5);
    layer.to_device(&Device::Cpu).unwrap();
    let back = layer.forward(&x).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(back, want, "back on the CPU: the CPU kernels, bit for bit");
}

#[test]
fn other_formats_and_bad_shapes_are_refused_by_name() {
    let Some(be) = backend() else { return };
    let dev = Device::Backend(Arc::new(be));
    let w = rand_t(&[8, 256], 11);
    let p: Arc<dyn PackedWeight> = Arc::new(packed(&w, Format::Q4K, Compute::WeightOnly));
    let e = dev.put_packed(&p).unwrap_err().to_string();
    assert!(e.contains("q4_k") && e.contains("q8_0"), "{e}");
    let p: Arc<dyn PackedWeight> = Arc::new(packed(&w, Format::Q8_0, Compute::WeightOnly));
    let on = dev.put_packed(&p).unwrap();
    let e = on
        .linear(&dev.put(&rand_t(&[2, 128], 12)).unwrap(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("linear_packed") && e.contains("[2, 128]"), "{e}");
}
