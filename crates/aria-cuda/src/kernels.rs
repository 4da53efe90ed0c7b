//! The kernel sources, their NVRTC compilation and the PTX cache.
//!
//! Every `.cu` file under `kernels/` is embedded in the binary with its list of entry points.
//! [`compile`] prepends the shared prelude (`common.cuh`: no system headers, so NVRTC alone is
//! enough), compiles for a virtual architecture and checks that the PTX defines every entry
//! point. [`PtxCache`] keys the PTX by a hash of the full source, the architecture and the
//! options, in memory and optionally in a directory, so a kernel is compiled once per source.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};

use crate::error::{CudaError, CudaResult};

/// One kernel source file and the `extern "C"` functions the backend launches from it.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// File name under `kernels/`.
    pub file: &'static str,
    /// The CUDA C++ source (without the prelude).
    pub source: &'static str,
    /// Entry points it must define.
    pub entries: &'static [&'static str],
}

/// The prelude prepended to every source.
pub const PRELUDE: &str = include_str!("../kernels/common.cuh");

/// Every kernel source, named like the CPU ops they implement.
pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        file: "elementwise.cu",
        source: include_str!("../kernels/elementwise.cu"),
        entries: &[
            "unary_f32",
            "affine_f32",
            "binary_f32",
            "strided_copy_b64",
            "strided_copy_b32",
            "strided_copy_b16",
            "strided_copy_b8",
            "f16_to_f32",
            "bf16_to_f32",
            "f32_to_f16",
            "f32_to_bf16",
            "i8_to_f32",
            "u8_to_f32",
            "i64_to_f32",
            "add_bias_f32",
            "axpby_f32",
        ],
    },
    KernelSource {
        file: "activation.cu",
        source: include_str!("../kernels/activation.cu"),
        entries: &["glu_f32"],
    },
    KernelSource {
        file: "norm.cu",
        source: include_str!("../kernels/norm.cu"),
        entries: &[
            "rms_norm_f32",
            "layer_norm_f32",
            "dyt_f32",
            "softmax_f32",
            "std_last_f32",
        ],
    },
    KernelSource {
        file: "fused.cu",
        source: include_str!("../kernels/fused.cu"),
        entries: &[
            "rms_norm_modulate_f32",
            "gated_residual_add_f32",
            "split_heads_f32",
            "merge_heads_f32",
            "rope_f32",
        ],
    },
    KernelSource {
        file: "attention.cu",
        source: include_str!("../kernels/attention.cu"),
        entries: &["flash_attn_f32"],
    },
    KernelSource {
        file: "conv.cu",
        source: include_str!("../kernels/conv.cu"),
        entries: &["im2col_f32", "unfold_f32"],
    },
    KernelSource {
        file: "text.cu",
        source: include_str!("../kernels/text.cu"),
        entries: &[
            "fourier_features_f32",
            "fill_masked_rows_f32",
            "embedding_f32",
        ],
    },
    KernelSource {
        file: "guidance.cu",
        source: include_str!("../kernels/guidance.cu"),
        entries: &["apg_guidance_f32", "cfg_rescale_f32"],
    },
    KernelSource {
        file: "packed.cu",
        source: include_str!("../kernels/packed.cu"),
        entries: &[
            "linear_q8_0_f32",
            "quantize_rows_i8",
            "linear_q8_0_w8a8_f32",
            "linear_bf16_pairs_f32",
            "linear_q4_k_f32",
            "linear_q6_k_f32",
        ],
    },
    KernelSource {
        file: "gemm.cu",
        source: include_str!("../kernels/gemm.cu"),
        entries: &["gemm_fallback"],
    },
    KernelSource {
        file: "same.cu",
        source: include_str!("../kernels/same.cu"),
        entries: &["qkv_heads_f32", "rope_table_f32"],
    },
];

/// Every entry point of every source.
pub fn all_entries() -> impl Iterator<Item = (&'static str, &'static str)> {
    SOURCES
        .iter()
        .flat_map(|s| s.entries.iter().map(move |e| (s.file, *e)))
}

/// The source NVRTC compiles: prelude, then the file (with a `#line` so errors name it).
pub fn full_source(k: &KernelSource) -> String {
    format!("{PRELUDE}\n#line 1 \"{}\"\n{}", k.file, k.source)
}

/// The virtual architecture kernels are compiled for when no device says otherwise (Ampere:
/// the oldest with bf16 conversions in PTX).
pub const DEFAULT_ARCH: &str = "compute_80";

/// The virtual architecture for a device of compute capability `major.minor` (`None` below
/// Ampere, which the kernels do not target).
pub fn arch_for(major: i32, minor: i32) -> Option<&'static str> {
    Some(match (major, minor) {
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 7) => "compute_87",
        (8, 9) => "compute_89",
        (8, _) => "compute_80",
        (9, _) => "compute_90",
        (10, _) => "compute_100",
        (12, _) => "compute_120",
        (m, _) if m > 12 => "compute_120",
        _ => return None,
    })
}

/// The NVRTC options every kernel is compiled with.
fn options(arch: &'static str) -> CompileOptions {
    CompileOptions {
        arch: Some(arch),
        // Exact division and square roots, denormals kept: the CPU path's arithmetic.
        prec_div: Some(true),
        prec_sqrt: Some(true),
        ftz: Some(false),
        use_fast_math: Some(false),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    }
}

/// FNV-1a over the bytes of `parts` (stable across builds and machines, unlike `std`'s hasher).
pub fn source_hash(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The cache key of `k` compiled for `arch`.
pub fn cache_key(k: &KernelSource, arch: &'static str) -> u64 {
    let src = full_source(k);
    let opts = format!("{:?}", options(arch).options);
    source_hash(&[&src, arch, &opts])
}

/// Whether `libnvrtc` can be opened (`LD_LIBRARY_PATH` or the system's library path).
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library (caught, no symbol is called).
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compile one source to PTX for `arch` and check its entry points. Needs `libnvrtc` (see
/// [`nvrtc_available`]); no GPU.
pub fn compile(k: &KernelSource, arch: &'static str) -> CudaResult<String> {
    if !nvrtc_available() {
        return Err(CudaError::Unavailable {
            library: "libnvrtc",
            reason: "not found on the library path (set LD_LIBRARY_PATH)".into(),
        });
    }
    let ptx =
        compile_ptx_with_opts(full_source(k), options(arch)).map_err(|e| CudaError::Compile {
            kernel: k.file,
            arch,
            log: e.to_string(),
        })?;
    let text = ptx.to_src();
    check_entries(k, &text)?;
    Ok(text)
}

/// Every entry point of `k` is a `.entry` of the PTX `text`.
pub fn check_entries(k: &KernelSource, text: &str) -> CudaResult<()> {
    for &entry in k.entries {
        let found = text.lines().any(|l| {
            l.trim_start()
                .strip_prefix(".visible .entry ")
                .or_else(|| l.trim_start().strip_prefix(".entry "))
                .is_some_and(|rest| {
                    rest.strip_prefix(entry)
                        .is_some_and(|r| r.starts_with('(') || r.trim().is_empty())
                })
        });
        if !found {
            return Err(CudaError::MissingEntry {
                kernel: k.file,
                entry,
            });
        }
    }
    Ok(())
}

/// Compiled PTX keyed by [`cache_key`]: in memory, and in `dir` when given (files
/// `<key>.ptx`), so later processes skip NVRTC.
#[derive(Debug, Default)]
pub struct PtxCache {
    mem: Mutex<HashMap<u64, Arc<str>>>,
    dir: Option<PathBuf>,
    compiled: Mutex<usize>,
}

impl PtxCache {
    /// An in-memory cache, persisted under `dir` when given.
    pub fn new(dir: Option<PathBuf>) -> Self {
        PtxCache {
            dir,
            ..Default::default()
        }
    }

    /// A cache persisted under `ARIA_CUDA_CACHE` when that variable is set: for programs and
    /// tests to call at their edge (the backend itself reads no environment variable).
    pub fn from_env() -> Self {
        Self::new(std::env::var_os("ARIA_CUDA_CACHE").map(PathBuf::from))
    }

    /// How many sources this cache compiled with NVRTC (cache misses).
    pub fn compiled(&self) -> usize {
        self.compiled.lock().map_or(0, |g| *g)
    }

    /// The PTX of `k` for `arch`, compiling on a miss.
    pub fn get(&self, k: &KernelSource, arch: &'static str) -> CudaResult<Arc<str>> {
        let key = cache_key(k, arch);
        if let Some(p) = self.mem.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(p);
        }
        let file = self.dir.as_ref().map(|d| d.join(format!("{key:016x}.ptx")));
        if let Some(text) = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()) {
            if check_entries(k, &text).is_ok() {
                return Ok(self.insert(key, text));
            }
        }
        let text = compile(k, arch)?;
        if let Ok(mut n) = self.compiled.lock() {
            *n += 1;
        }
        if let (Some(dir), Some(f)) = (&self.dir, &file) {
            let io = |source| CudaError::Cache {
                path: f.display().to_string(),
                source,
            };
            std::fs::create_dir_all(dir).map_err(io)?;
            std::fs::write(f, &text).map_err(io)?;
        }
        Ok(self.insert(key, text))
    }

    fn insert(&self, key: u64, text: String) -> Arc<str> {
        let p: Arc<str> = text.into();
        if let Ok(mut m) = self.mem.lock() {
            m.insert(key, p.clone());
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_unique_and_named_in_their_source() {
        let mut seen = std::collections::HashSet::new();
        for (file, e) in all_entries() {
            assert!(seen.insert(e), "{e} defined twice");
            let src = SOURCES.iter().find(|s| s.file == file).map(|s| s.source);
            let decl = format!("void {e}(");
            assert!(
                src.is_some_and(|s| s.contains(&decl)),
                "{file} lacks {decl}"
            );
        }
    }

    #[test]
    fn hash_depends_on_source_and_arch() {
        let k = &SOURCES[0];
        assert_eq!(cache_key(k, "compute_80"), cache_key(k, "compute_80"));
        assert_ne!(cache_key(k, "compute_80"), cache_key(k, "compute_90"));
        assert_ne!(
            cache_key(&SOURCES[0], "compute_80"),
            cache_key(&SOURCES[1], "compute_80")
        );
        assert_ne!(source_hash(&["ab", "c"]), source_hash(&["a", "bc"]));
    }

    #[test]
    fn arch_mapping() {
        assert_eq!(arch_for(9, 0), Some("compute_90"));
        assert_eq!(arch_for(8, 6), Some("compute_86"));
        assert_eq!(arch_for(7, 5), None);
    }

    #[test]
    fn entry_check_reads_ptx_entries() {
        let k = KernelSource {
            file: "t.cu",
            source: "",
            entries: &["foo"],
        };
        assert!(check_entries(&k, ".visible .entry foo(\n").is_ok());
        assert!(check_entries(&k, ".visible .entry foobar(\n").is_err());
        assert!(check_entries(&k, "// foo\n").is_err());
    }
}
