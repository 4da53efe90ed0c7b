//! Every kernel source compiles to PTX with NVRTC (no GPU needed: only `libnvrtc`).
//!
//! Skips with a message when `libnvrtc` cannot be opened, unless `ARIA_REQUIRE_NVRTC=1` or
//! `ARIA_REQUIRE_CUDA=1` (then its absence fails, as in the CUDA CI job).

use aria_cuda::kernels::{self, PtxCache, SOURCES};

fn required() -> bool {
    ["ARIA_REQUIRE_NVRTC", "ARIA_REQUIRE_CUDA"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| s == "1"))
}

fn nvrtc_or_skip(test: &str) -> bool {
    if kernels::nvrtc_available() {
        return true;
    }
    assert!(
        !required(),
        "{test}: libnvrtc not found but ARIA_REQUIRE_NVRTC/ARIA_REQUIRE_CUDA=1"
    );
    aria_testing::skip_for_hardware("libnvrtc not found (set LD_LIBRARY_PATH; see .ci/cuda.sh)");
    false
}

#[test]
fn every_kernel_compiles_for_every_target_arch() {
    if !nvrtc_or_skip("every_kernel_compiles_for_every_target_arch") {
        return;
    }
    let mut failures = Vec::new();
    for arch in ["compute_80", "compute_90"] {
        for k in SOURCES {
            match kernels::compile(k, arch) {
                Ok(ptx) => eprintln!(
                    "{arch} {}: {} entry points, {} bytes of PTX",
                    k.file,
                    k.entries.len(),
                    ptx.len()
                ),
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn cache_compiles_once_per_source() {
    if !nvrtc_or_skip("cache_compiles_once_per_source") {
        return;
    }
    let dir = aria_testing::TempDir::new("cuda-ptx");
    let cache = PtxCache::new(Some(dir.to_path_buf()));
    let k = &SOURCES[1];
    let a = cache.get(k, "compute_80").expect("compile");
    let b = cache.get(k, "compute_80").expect("cached");
    assert_eq!(a, b);
    assert_eq!(cache.compiled(), 1);
    // A second cache over the same directory reads the file instead of compiling.
    let again = PtxCache::new(Some(dir.to_path_buf()));
    let c = again.get(k, "compute_80").expect("from disk");
    assert_eq!(a, c);
    assert_eq!(again.compiled(), 0);
}

#[test]
fn a_broken_kernel_is_reported_with_its_file() {
    if !nvrtc_or_skip("a_broken_kernel_is_reported_with_its_file") {
        return;
    }
    let k = kernels::KernelSource {
        file: "broken.cu",
        source: "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }",
        entries: &["broken"],
    };
    let e = kernels::compile(&k, "compute_80").expect_err("must not compile");
    let msg = e.to_string();
    assert!(
        msg.contains("broken.cu") && msg.contains("undefined_name"),
        "{msg}"
    );
}
