//! The wgpu (WGSL compute) backend.
//!
//! [`WgpuBackend`] implements [`Backend`] on any adapter wgpu finds (Vulkan, Metal, DX12, or a
//! software Vulkan device such as lavapipe). Tensors move to it with [`Device::put`] and live in
//! [`Storage::Device`] buffers ([`WgpuStorage`]); [`crate::ops`] functions route to it when their
//! input lives there, so model code is unchanged. Ops so far: `linear` (f32, `linear.wgsl`).
//!
//! ```no_run
//! # fn main() -> aria_core::Result<()> {
//! use aria_core::{ops, wgpu::WgpuBackend, Tensor};
//! let gpu = WgpuBackend::new()?.device();
//! let x = gpu.put(&Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2])?)?;
//! let w = gpu.put(&Tensor::from_vec(vec![3.0f32, 4.0], &[1, 2])?)?;
//! let y = ops::linear(&x, &w, None)?; // runs linear.wgsl
//! assert_eq!(y.to_cpu()?.to_vec::<f32>()?, vec![11.0]);
//! # Ok(()) }
//! ```

use std::any::Any;
use std::sync::{mpsc, Arc};

use wgpu::util::DeviceExt;

use crate::backend::{Backend, Device, Op};
use crate::storage::{CpuData, DeviceStorage, Storage};
use crate::{contiguous_strides, CoreError, DType, Result, Tensor};

const NAME: &str = "wgpu";
const TILE: u32 = 16;

fn be_err(reason: impl std::fmt::Display) -> CoreError {
    CoreError::Backend {
        backend: NAME.into(),
        reason: reason.to_string(),
    }
}

struct Ctx {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    linear: wgpu::ComputePipeline,
}

/// A wgpu device and queue with the compiled kernels. Cloning is cheap (shared).
#[derive(Clone)]
pub struct WgpuBackend {
    ctx: Arc<Ctx>,
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

/// A device buffer holding a tensor's elements (padded to a multiple of 4 bytes).
pub struct WgpuStorage {
    backend: WgpuBackend,
    buffer: wgpu::Buffer,
    len: usize,
    dtype: DType,
}

impl std::fmt::Debug for WgpuStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WgpuStorage({} bytes of {})", self.len, self.dtype)
    }
}

impl DeviceStorage for WgpuStorage {
    fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(self.backend.clone())
    }
    fn len_bytes(&self) -> usize {
        self.len
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl WgpuStorage {
    /// The element type stored.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
}

impl WgpuBackend {
    /// Open the default adapter (high-performance preference; Vulkan, Metal or DX12 unless the
    /// `WGPU_BACKEND` environment variable says otherwise) and compile the kernels. Errors with
    /// [`CoreError::Backend`] when no adapter is available.
    pub fn new() -> Result<Self> {
        pollster::block_on(Self::new_async())
    }

    async fn new_async() -> Result<Self> {
        // Vulkan, Metal, DX12 (GL has no use for compute here); `WGPU_BACKEND` overrides.
        let desc = wgpu::InstanceDescriptor {
            backends: wgpu::Backends::PRIMARY,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        };
        let instance = wgpu::Instance::new(desc.with_env());
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| be_err(format!("no adapter: {e}")))?;
        let info = adapter.get_info();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("aria"),
                required_limits: adapter.limits(),
                ..Default::default()
            })
            .await
            .map_err(|e| be_err(format!("cannot open {}: {e}", info.name)))?;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("linear.wgsl"),
            source: wgpu::ShaderSource::Wgsl(include_str!("linear.wgsl").into()),
        });
        let linear = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("linear"),
            layout: None,
            module: &module,
            entry_point: Some("linear"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = scope.pop().await {
            return Err(be_err(format!("compiling linear.wgsl: {e}")));
        }
        Ok(WgpuBackend {
            ctx: Arc::new(Ctx {
                device,
                queue,
                info,
                linear,
            }),
        })
    }

    /// The [`Device`] that puts tensors on this backend.
    pub fn device(&self) -> Device {
        Device::Backend(Arc::new(self.clone()))
    }

    /// The adapter's name and API (e.g. "llvmpipe (LLVM 15.0.6, 256 bits) / Vulkan").
    pub fn adapter_name(&self) -> String {
        format!("{} / {:?}", self.ctx.info.name, self.ctx.info.backend)
    }

    /// Run `f` inside a validation + out-of-memory error scope; wgpu errors become
    /// [`CoreError::Backend`] instead of panics.
    fn scoped<T>(&self, what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let oom = self
            .ctx
            .device
            .push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = self
            .ctx
            .device
            .push_error_scope(wgpu::ErrorFilter::Validation);
        let out = f();
        let v = pollster::block_on(val.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = v.or(o) {
            return Err(be_err(format!("{what}: {e}")));
        }
        out
    }

    fn buffer_size(&self, len: usize) -> Result<u64> {
        let padded = len.div_ceil(4).max(1) * 4;
        let max = self.ctx.device.limits().max_buffer_size;
        let size = u64::try_from(padded).unwrap_or(u64::MAX);
        if size > max {
            return Err(be_err(format!(
                "{len} bytes exceed the adapter's buffer limit of {max}"
            )));
        }
        Ok(size)
    }

    fn storage_buffer(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer> {
        let size = self.buffer_size(bytes.len())?;
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST;
        let mut padded;
        let contents = if bytes.len() as u64 == size {
            bytes
        } else {
            padded = bytes.to_vec();
            padded.resize(size as usize, 0);
            &padded
        };
        Ok(self
            .ctx
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage,
            }))
    }

    fn wrap(
        &self,
        buffer: wgpu::Buffer,
        len: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Tensor> {
        let storage = WgpuStorage {
            backend: self.clone(),
            buffer,
            len,
            dtype,
        };
        Tensor::from_storage(
            Arc::new(Storage::Device(Arc::new(storage))),
            dtype,
            shape.to_vec(),
            contiguous_strides(shape),
            0,
        )
    }

    /// The wgpu storage of `t`, if it lives on this backend.
    fn storage_of<'a>(&self, t: &'a Tensor) -> Result<&'a WgpuStorage> {
        let Storage::Device(d) = &**t.storage() else {
            return Err(be_err("tensor is not on a device"));
        };
        let s = d.as_any().downcast_ref::<WgpuStorage>().ok_or_else(|| {
            be_err(format!(
                "tensor lives on the {} backend",
                d.backend().name()
            ))
        })?;
        if !Arc::ptr_eq(&s.backend.ctx, &self.ctx) {
            return Err(be_err("tensor lives on another wgpu device"));
        }
        Ok(s)
    }

    /// `t` as a contiguous f32 tensor on this device, uploading CPU tensors and compacting
    /// strided device views. Returns the tensor (kept alive for the binding) and the element
    /// offset of its first element in the buffer.
    fn operand(&self, op: &'static str, t: &Tensor) -> Result<(Tensor, u32)> {
        if t.dtype() != DType::F32 {
            return Err(CoreError::DType {
                op,
                dtype: t.dtype(),
                reason: "the wgpu backend computes in f32 only".into(),
            });
        }
        let t = match &**t.storage() {
            Storage::Device(_) if t.is_contiguous() => t.clone(),
            // No strided-copy kernel yet: a view must not round-trip through the host.
            Storage::Device(_) => {
                return Err(CoreError::Unsupported {
                    op: "contiguous",
                    backend: NAME.into(),
                })
            }
            _ => self.upload(&t.contiguous()?)?,
        };
        self.storage_of(&t)?;
        let off =
            u32::try_from(t.offset()).map_err(|_| be_err(format!("{op}: offset too large")))?;
        Ok((t, off))
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        let t = t.contiguous()?;
        let bytes = t.as_bytes()?;
        let buf = self.scoped("upload", || self.storage_buffer("tensor", bytes))?;
        self.wrap(buf, bytes.len(), t.dtype(), t.shape())
    }

    fn to_cpu(&self, t: &Tensor) -> Result<Tensor> {
        let s = self.storage_of(t)?;
        let size = self.buffer_size(s.len)?;
        let ctx = &self.ctx;
        let staging = self.scoped("download", || {
            let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("download"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&s.buffer, 0, &staging, 0, size);
            ctx.queue.submit([enc.finish()]);
            Ok(staging)
        })?;
        let slice = staging.slice(..);
        let (tx, rx) = mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            // The receiver outlives this callback (it waits below); a send error cannot occur.
            let _ = tx.send(r);
        });
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| be_err(format!("download: {e}")))?;
        rx.recv()
            .map_err(|e| be_err(format!("download: {e}")))?
            .map_err(|e| be_err(format!("download: {e}")))?;
        let data = {
            let view = slice
                .get_mapped_range()
                .map_err(|e| be_err(format!("download: {e}")))?;
            let bytes = view
                .get(..s.len)
                .ok_or_else(|| be_err("download: short buffer"))?;
            cpu_data(s.dtype, bytes)
        };
        staging.unmap();
        // Same layout as the device tensor (it may be a view), then compacted.
        Tensor::from_storage(
            Arc::new(Storage::Cpu(data)),
            t.dtype(),
            t.shape().to_vec(),
            t.strides().to_vec(),
            t.offset(),
        )?
        .contiguous()
    }

    fn run(&self, op: Op) -> Result<Tensor> {
        match &op {
            Op::Linear { x, w, b } => self.linear(x, w, b.as_ref()),
            _ => Err(self.unsupported(&op)),
        }
    }
}

impl WgpuBackend {
    fn linear(&self, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
        let xs = x.shape();
        let (m, k, n) = crate::ops::linear_dims(x, w, b)?;
        let mut shape = xs.to_vec();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        let (xt, x_off) = self.operand("linear", x)?;
        let (wt, w_off) = self.operand("linear", w)?;
        let bt = b.map(|b| self.operand("linear", b)).transpose()?;
        if m == 0 || n == 0 {
            return self.upload(&Tensor::zeros(&shape, DType::F32));
        }
        let too_big = |v: usize| u32::try_from(v).is_err();
        let (gx, gy) = ((n as u32).div_ceil(TILE), (m as u32).div_ceil(TILE));
        let max_groups = self
            .ctx
            .device
            .limits()
            .max_compute_workgroups_per_dimension;
        if too_big(m * k) || too_big(n * k) || too_big(m * n) || gx > max_groups || gy > max_groups
        {
            return Err(be_err(format!(
                "linear: [{m}, {k}]·[{n}, {k}]ᵀ exceeds 32-bit indexing"
            )));
        }
        let params: [u32; 8] = [
            m as u32,
            n as u32,
            k as u32,
            u32::from(bt.is_some()),
            x_off,
            w_off,
            bt.as_ref().map_or(0, |(_, o)| *o),
            0,
        ];
        let ctx = &self.ctx;
        let out_len = m * n * 4;
        let out = self.scoped("linear", || {
            let dummy;
            let b_buf = match &bt {
                Some((t, _)) => &self.storage_of(t)?.buffer,
                None => {
                    dummy = self.storage_buffer("no bias", &[0; 4])?;
                    &dummy
                }
            };
            let out = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("linear out"),
                size: self.buffer_size(out_len)?,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let uniform = ctx
                .device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("linear params"),
                    contents: bytemuck::cast_slice(&params),
                    usage: wgpu::BufferUsages::UNIFORM,
                });
            let bind = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("linear"),
                layout: &ctx.linear.get_bind_group_layout(0),
                entries: &[
                    entry(0, &self.storage_of(&xt)?.buffer),
                    entry(1, &self.storage_of(&wt)?.buffer),
                    entry(2, b_buf),
                    entry(3, &out),
                    entry(4, &uniform),
                ],
            });
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&ctx.linear);
                pass.set_bind_group(0, &bind, &[]);
                pass.dispatch_workgroups(gx, gy, 1);
            }
            ctx.queue.submit([enc.finish()]);
            Ok(out)
        })?;
        self.wrap(out, out_len, DType::F32, &shape)
    }
}

fn entry(binding: u32, buffer: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding,
        resource: buffer.as_entire_binding(),
    }
}

/// Typed CPU data from raw little-endian bytes (copied, so alignment does not matter).
fn cpu_data(dtype: DType, b: &[u8]) -> CpuData {
    match dtype {
        DType::F32 => CpuData::F32(bytemuck::pod_collect_to_vec(b)),
        DType::F16 => CpuData::F16(bytemuck::pod_collect_to_vec(b)),
        DType::BF16 => CpuData::BF16(bytemuck::pod_collect_to_vec(b)),
        DType::I8 => CpuData::I8(bytemuck::pod_collect_to_vec(b)),
        DType::U8 => CpuData::U8(b.to_vec()),
        DType::I64 => CpuData::I64(bytemuck::pod_collect_to_vec(b)),
    }
}
