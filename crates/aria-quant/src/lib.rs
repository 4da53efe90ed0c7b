//! # aria-quant
//!
//! **Status: planned; nothing is implemented yet.** This crate will own aria's quantized
//! weight storage so that model code can use packed weights without knowing it:
//!
//! - packed formats `q8` and `q4` (block structs with compile-time size checks, a format tag and
//!   version), quantized from f32/f16 once at load, the full-precision source freed;
//! - quantized matmul kernels per ISA (scalar reference, AVX2, NEON) and a W8A8 mode that also
//!   quantizes activations;
//! - a `Linear` weight enum (dense or packed) consumed by `aria-dit` and `aria-codec`;
//! - saving and loading pre-quantized checkpoints, with quality measured against f32.
