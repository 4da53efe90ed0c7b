//! The wgpu (WGSL compute) backend.
