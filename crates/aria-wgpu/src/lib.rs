//! The wgpu (WGSL compute) backend.
//!
//! [`WgpuBackend`] implements [`Backend`] on any adapter wgpu finds (Vulkan, Metal, DX12, or a
//! software Vulkan device such as lavapipe). Tensors move to it with [`Device::put`] and live in
//! [`Storage::Device`](aria_tensor::storage::Storage::Device) buffers ([`WgpuStorage`]);
//! `aria_core::ops` functions route to it when their input lives there, so model code is
//! unchanged. Nothing is downloaded behind the caller's back: an op without a kernel is
//! [`CoreError::Unsupported`].
//!
//! # Layout of the backend
//!
//! * `device`: adapter and device; limits are queried from the adapter, never assumed;
//!   [`Knobs`] (workgroup sizes and tiles, with defaults for discrete and integrated GPUs).
//! * `buffer`: [`WgpuStorage`]. Tensors larger than one binding (≤ 128 MiB and the device's
//!   `max_storage_buffer_binding_size`) are split into several buffers of whole rows.
//! * `launch`: the pipeline cache (by shader, entry point and constants) and the launch helper
//!   every op uses: bindings + a uniform block + workgroup counts (see its docs for how to
//!   write a kernel).
//! * `dispatch`: [`Op`] → kernel. The products and attention are here (`linear.wgsl`,
//!   `matmul.wgsl`, `conv1d.wgsl`, `attention.wgsl`); every other op is tried on `pointwise`
//!   (elementwise, row and data-movement kernels).
//!
//! # Kernels
//!
//! | op | kernel | notes |
//! |---|---|---|
//! | `linear` | `linear.wgsl` | tiled; weights f32, f16 or bf16 (16-bit storage, f32 accumulate); weights past one binding run chunk by chunk |
//! | `matmul` | `matmul.wgsl` | tiled, batched |
//! | `conv1d` | `conv1d.wgsl` | implicit im2col, any kernel width and padding (the models use 1 and 3); f32/f16/bf16 weights |
//! | `attention` | `attention.wgsl` | flash-style (keys streamed in tiles, online softmax); key masks in both CPU modes, bands (e.g. ±17), soft-cap, the differential pair; strided q/k/v views read in place |
//!
//! ```no_run
//! # fn main() -> aria_core::Result<()> {
//! use aria_core::{ops, Tensor};
//! use aria_wgpu::WgpuBackend;
//! let gpu = WgpuBackend::new()?.device();
//! let x = gpu.put(&Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2])?)?;
//! let w = gpu.put(&Tensor::from_vec(vec![3.0f32, 4.0], &[1, 2])?)?;
//! let y = ops::linear(&x, &w, None)?; // runs linear.wgsl
//! assert_eq!(y.to_cpu()?.to_vec::<f32>()?, vec![11.0]);
//! # Ok(()) }
//! ```

use std::sync::Arc;

use aria_tensor::backend::registry::{self, BackendOptions};
use aria_tensor::backend::{Backend, Device, Op};
use aria_tensor::{CoreError, Result, Tensor};

mod attention;
mod buffer;
mod conv;
mod device;
mod dispatch;
mod launch;
mod linear;
mod linear_q8;
pub(crate) mod pointwise;

pub use buffer::WgpuStorage;
pub use device::{Knobs, DEFAULT_MAX_BINDING};
#[allow(unused_imports)]
pub(crate) use launch::{Bind, Shader, Uniforms};

const NAME: &str = "wgpu";

/// Register this backend as `wgpu` in aria-core's
/// [backend registry](aria_tensor::backend::registry), so programs open it by name.
pub fn register() {
    registry::register(
        NAME,
        "WGSL compute shaders on any wgpu adapter (Vulkan, Metal, DX12, lavapipe)",
        |opts| Ok(WgpuBackend::open(opts)?.device()),
    );
}

pub(crate) fn be_err(reason: impl std::fmt::Display) -> CoreError {
    CoreError::Backend {
        backend: NAME.into(),
        reason: reason.to_string(),
    }
}

/// A wgpu device and queue with the compiled kernels. Cloning is cheap (shared).
#[derive(Clone)]
pub struct WgpuBackend {
    pub(crate) ctx: Arc<device::Ctx>,
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WgpuBackend({} / {:?})",
            self.ctx.info.name, self.ctx.info.backend
        )
    }
}

impl WgpuBackend {
    /// Open the default adapter (high-performance preference; Vulkan, Metal or DX12 unless the
    /// `WGPU_BACKEND` environment variable says otherwise) with the default [`Knobs`] for its
    /// kind. Errors with [`CoreError::Backend`] when no adapter is available.
    pub fn new() -> Result<Self> {
        Self::with_knobs_opt(None)
    }

    /// [`WgpuBackend::new`] with explicit knobs.
    pub fn with_knobs(knobs: Knobs) -> Result<Self> {
        Self::with_knobs_opt(Some(knobs))
    }

    /// Open the default adapter with the knobs of its kind and `opts`' settings applied
    /// ([`Knobs::with_settings`]); what the registry calls (see [`register`]).
    pub fn open(opts: &BackendOptions) -> Result<Self> {
        let ctx = pollster::block_on(device::open(None, opts))?;
        Self::from_ctx(ctx)
    }

    fn with_knobs_opt(knobs: Option<Knobs>) -> Result<Self> {
        let ctx = pollster::block_on(device::open(knobs, &BackendOptions::default()))?;
        Self::from_ctx(ctx)
    }

    fn from_ctx(ctx: device::Ctx) -> Result<Self> {
        let be = WgpuBackend { ctx: Arc::new(ctx) };
        // Compile the product kernel now: a device that cannot run it fails here, by name.
        be.warm_up()?;
        Ok(be)
    }

    /// The [`Device`] that puts tensors on this backend.
    pub fn device(&self) -> Device {
        Device::Backend(Arc::new(self.clone()))
    }

    /// The adapter's name and API (e.g. "llvmpipe (LLVM 15.0.6, 256 bits) / Vulkan").
    pub fn adapter_name(&self) -> String {
        format!("{} / {:?}", self.ctx.info.name, self.ctx.info.backend)
    }

    /// The adapter's kind (discrete, integrated, CPU, ...).
    pub fn adapter_kind(&self) -> wgpu::DeviceType {
        self.ctx.info.device_type
    }

    /// Tensors moved so far: `(uploads, downloads)` ([`Device::put`] or a CPU operand of an op;
    /// [`Tensor::to_cpu`] or any read of device data). Code that keeps its work on the device
    /// shows no download between its first upload and its result.
    pub fn transfers(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.ctx.uploads.load(Relaxed),
            self.ctx.downloads.load(Relaxed),
        )
    }

    /// Wait until every queued kernel has finished (for timing).
    pub fn synchronize(&self) -> Result<()> {
        self.ctx
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| be_err(format!("synchronize: {e}")))
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        self.ctx
            .uploads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.upload_impl(t)
    }

    fn to_cpu(&self, t: &Tensor) -> Result<Tensor> {
        self.ctx
            .downloads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.to_cpu_impl(t)
    }

    fn run(&self, op: Op) -> Result<Tensor> {
        // The op set's check step (the `ops` functions run it before handing an op over; this
        // covers direct callers): the kernels below may rely on its shape and dtype rules.
        op.check()?;
        dispatch::run(self, &op)
    }

    fn packed_formats(&self) -> Vec<(aria_tensor::format::WeightFormat, bool)> {
        self.packed_formats_impl()
    }

    fn upload_packed(&self, w: &aria_tensor::format::PackedBlocks) -> Result<Tensor> {
        self.ctx
            .uploads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.upload_packed_impl(w)
    }
}
