//! # aria-cuda
//!
//! **Status: planned; nothing is implemented yet.** The CUDA backend for `aria-core`: it will
//! implement `aria_core::Backend` (device memory, kernels compiled at run time with NVRTC, graph
//! capture of the denoising loop), build on machines without CUDA, and skip its tests there.
