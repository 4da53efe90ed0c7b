//! The thread count travels with the pipeline (`LoadOptions::threads`, no process-wide
//! setting), results are bit-identical whatever the count, and devices are opened through the
//! backend registry by name.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use aria::discover::{resolve_model, SearchPaths};
use aria::synth::{self, Preset};
use aria::{DeviceKind, GenerateRequest, LoadOptions, Pipeline, TorchNoise};
use aria_core::DType;
use aria_testing::{SharedTempDir, TempDir};

fn model_dir() -> Arc<TempDir> {
    static DIR: SharedTempDir = SharedTempDir::new("threads-devices-model");
    DIR.get(|d| {
        synth::write_model(d, Preset::Tiny, DType::F32, 5, &mut |_, _| {}).unwrap();
    })
}

fn load(opts: &LoadOptions) -> aria::Result<(Pipeline, Arc<TempDir>)> {
    let model = model_dir();
    let files = resolve_model(&model.display().to_string(), &SearchPaths::default()).unwrap();
    Ok((Pipeline::load(&files, opts)?, model))
}

fn bits(threads: Option<usize>) -> (usize, Vec<u32>, Vec<u32>) {
    let (p, _m) = load(&LoadOptions {
        threads,
        ..Default::default()
    })
    .unwrap();
    let mut req = GenerateRequest::new("rain on a tin roof", 1.0);
    req.steps = 4;
    let out = p
        .generate(&req, &mut TorchNoise::new(7), &mut |_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    let b = |t: &aria_core::Tensor| {
        t.to_vec_f32()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<u32>>()
    };
    (p.threads(), b(&out.latents), b(&out.audio))
}

#[test]
fn each_pipeline_carries_its_thread_count_and_the_bits_do_not_change() {
    let before = aria_core::threads::num_threads();
    let (n1, lat1, aud1) = bits(Some(1));
    let (n3, lat3, aud3) = bits(Some(3));
    assert_eq!((n1, n3), (1, 3));
    // The process-wide setting is untouched by either pipeline.
    assert_eq!(aria_core::threads::num_threads(), before);
    assert!(!lat1.is_empty() && !aud1.is_empty());
    assert!(lat1 == lat3, "latents differ between 1 and 3 threads");
    assert!(aud1 == aud3, "audio differs between 1 and 3 threads");
}

#[test]
fn zero_threads_is_refused_by_name() {
    let e = load(&LoadOptions {
        threads: Some(0),
        ..Default::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("threads"), "{e}");
}

#[test]
fn devices_are_opened_through_the_registry() {
    aria::backends::register_builtin();
    let names: Vec<&str> = aria_core::backend::registry::registered()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names.first(), Some(&"cpu"));
    for kind in [DeviceKind::Wgpu, DeviceKind::Cuda] {
        let built = cfg!(feature = "wgpu") && kind == DeviceKind::Wgpu
            || cfg!(feature = "cuda") && kind == DeviceKind::Cuda;
        assert_eq!(kind.is_built_in(), built, "{}", kind.name());
        assert_eq!(names.contains(&kind.name()), built, "{}", kind.name());
        if !built {
            let e = kind
                .check()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(&format!("--features {}", kind.name())), "{e}");
        }
    }
    // A CUDA build on a machine without a driver loads nothing and says why, in one line.
    if cfg!(feature = "cuda") && !aria_cuda_present() {
        let e = load(&LoadOptions {
            device: DeviceKind::Cuda,
            ..Default::default()
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains("not available on this machine"), "{e}");
    }
}

/// Whether an NVIDIA driver library can be opened here.
fn aria_cuda_present() -> bool {
    ["libcuda.so.1", "libcuda.so"].iter().any(|n| {
        [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/lib/wsl/lib",
        ]
        .iter()
        .any(|d| std::path::Path::new(d).join(n).exists())
    })
}
