//! Device storage: tensors as one or more storage buffers, uploads, downloads, allocation.
//!
//! A tensor whose bytes exceed the binding limit ([`super::Knobs::max_binding_bytes`], bounded
//! by the device's `max_storage_buffer_binding_size`) is stored as several buffers ("chunks")
//! of whole rows (rows of its last dimension): a kernel binds one chunk at a time, and an op
//! over a large weight runs once per chunk (see `linear`). Every other tensor is one buffer.

use std::any::Any;
use std::sync::{mpsc, Arc};

use wgpu::util::DeviceExt;

use super::{be_err, WgpuBackend, NAME};
use aria_tensor::backend::Backend;
use aria_tensor::storage::{CpuData, DeviceStorage, Storage};
use aria_tensor::{contiguous_strides, CoreError, DType, Result, Tensor};

/// A tensor's elements on the device: one buffer, or several of whole rows when larger than
/// the binding limit.
pub struct WgpuStorage {
    pub(crate) backend: WgpuBackend,
    pub(crate) chunks: Vec<wgpu::Buffer>,
    /// Bytes per chunk (all chunks but the last hold exactly this many; a multiple of 4).
    pub(crate) chunk_bytes: usize,
    pub(crate) len: usize,
    pub(crate) dtype: DType,
}

impl std::fmt::Debug for WgpuStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WgpuStorage({} bytes of {} in {} buffer(s))",
            self.len,
            self.dtype,
            self.chunks.len()
        )
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

    /// How many buffers hold the elements (more than one only past the binding limit).
    pub fn buffers(&self) -> usize {
        self.chunks.len()
    }

    /// Elements per chunk.
    pub(crate) fn chunk_elems(&self) -> usize {
        self.chunk_bytes / elem_size(self.dtype)
    }
}

/// Bytes per element.
pub(crate) fn elem_size(d: DType) -> usize {
    match d {
        DType::F32 => 4,
        DType::F16 | DType::BF16 => 2,
        DType::I8 | DType::U8 => 1,
        DType::I64 => 8,
    }
}

impl WgpuBackend {
    /// Round a byte length up to a buffer size (a multiple of 4, at least 4), checked against
    /// the device's buffer limit.
    pub(crate) fn buffer_size(&self, len: usize) -> Result<u64> {
        let padded = len.div_ceil(4).max(1) * 4;
        let max = self.ctx.limits.max_buffer_size;
        let size = u64::try_from(padded).unwrap_or(u64::MAX);
        if size > max {
            return Err(be_err(format!(
                "{len} bytes exceed the adapter's buffer limit of {max}"
            )));
        }
        Ok(size)
    }

    /// Bytes per chunk of a tensor of `shape`: everything when it fits one binding, else as
    /// many whole rows (last dimension) as fit, a multiple of 4 bytes.
    fn chunk_bytes(&self, shape: &[usize], dtype: DType) -> Result<usize> {
        let es = elem_size(dtype);
        let len = shape.iter().product::<usize>() * es;
        let max = usize::try_from(self.ctx.max_binding).unwrap_or(usize::MAX);
        if len <= max {
            return Ok(len.max(4));
        }
        let row = shape.last().copied().unwrap_or(1).max(1) * es;
        let mut rows = max / row;
        while rows > 0 && !(rows * row).is_multiple_of(4) {
            rows -= 1;
        }
        if rows == 0 {
            return Err(be_err(format!(
                "one row of {shape:?} ({row} bytes of {dtype}) exceeds the binding limit of {max} bytes"
            )));
        }
        Ok(rows * row)
    }

    fn usage() -> wgpu::BufferUsages {
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST
    }

    /// Run `f` inside a validation + out-of-memory error scope; wgpu errors become
    /// [`CoreError::Backend`] instead of panics.
    pub(crate) fn scoped<T>(&self, what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
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

    fn wrap(
        &self,
        chunks: Vec<wgpu::Buffer>,
        chunk_bytes: usize,
        len: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Tensor> {
        let storage = WgpuStorage {
            backend: self.clone(),
            chunks,
            chunk_bytes,
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

    /// A new contiguous device tensor, zero-filled (wgpu zero-initialises buffers).
    pub(crate) fn alloc(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let len = shape.iter().product::<usize>() * elem_size(dtype);
        let cb = self.chunk_bytes(shape, dtype)?;
        let chunks = self.scoped("alloc", || {
            (0..len.div_ceil(cb).max(1))
                .map(|i| {
                    let bytes = cb.min(len - (i * cb).min(len));
                    Ok(self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("tensor"),
                        size: self.buffer_size(bytes)?,
                        usage: Self::usage(),
                        mapped_at_creation: false,
                    }))
                })
                .collect::<Result<Vec<_>>>()
        })?;
        self.wrap(chunks, cb, len, dtype, shape)
    }

    /// The wgpu storage of `t`, if it lives on this backend.
    pub(crate) fn storage_of<'a>(&self, t: &'a Tensor) -> Result<&'a WgpuStorage> {
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

    /// `t` on this device and contiguous: CPU tensors are uploaded, strided device views made
    /// contiguous by the `contiguous` op (on the device; never through the host).
    pub(crate) fn operand(&self, t: &Tensor) -> Result<Tensor> {
        let t = match &**t.storage() {
            Storage::Device(_) if t.is_contiguous() => t.clone(),
            Storage::Device(_) => t.contiguous()?,
            _ => self.upload(&t.contiguous()?)?,
        };
        self.storage_of(&t)?;
        Ok(t)
    }

    /// [`WgpuBackend::operand`] that must hold f32 (`op` names the caller in the error).
    #[allow(dead_code)] // for the kernels that take no other dtype
    pub(crate) fn operand_f32(&self, op: &'static str, t: &Tensor) -> Result<Tensor> {
        if t.dtype() != DType::F32 {
            return Err(CoreError::DType {
                op,
                dtype: t.dtype(),
                reason: "the wgpu backend computes in f32 (weights may be f16/bf16)".into(),
            });
        }
        self.operand(t)
    }

    /// `t` on this device, contiguous, as f32 (other dtypes converted by the `to_dtype` op).
    pub(crate) fn operand_as_f32(&self, t: &Tensor) -> Result<Tensor> {
        let t = self.operand(t)?;
        if t.dtype() == DType::F32 {
            Ok(t)
        } else {
            self.operand(&t.to_dtype(DType::F32)?)
        }
    }

    pub(crate) fn upload_impl(&self, t: &Tensor) -> Result<Tensor> {
        let t = t.contiguous()?;
        let bytes = t.as_bytes()?;
        let cb = self.chunk_bytes(t.shape(), t.dtype())?;
        let chunks = self.scoped("upload", || {
            let mut out = Vec::new();
            let mut rest = bytes;
            loop {
                let (head, tail) = rest.split_at(cb.min(rest.len()));
                out.push(self.buffer_from(head)?);
                rest = tail;
                if rest.is_empty() {
                    break;
                }
            }
            Ok(out)
        })?;
        self.wrap(chunks, cb, bytes.len(), t.dtype(), t.shape())
    }

    /// A storage buffer holding `bytes` (zero-padded to a multiple of 4).
    pub(crate) fn buffer_from(&self, bytes: &[u8]) -> Result<wgpu::Buffer> {
        let size = self.buffer_size(bytes.len())?;
        let padded;
        let contents = if bytes.len() as u64 == size {
            bytes
        } else {
            let mut p = bytes.to_vec();
            p.resize(size as usize, 0);
            padded = p;
            &padded
        };
        Ok(self
            .ctx
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("tensor"),
                contents,
                usage: Self::usage(),
            }))
    }

    pub(crate) fn to_cpu_impl(&self, t: &Tensor) -> Result<Tensor> {
        let s = self.storage_of(t)?;
        let ctx = &self.ctx;
        let mut bytes = Vec::with_capacity(s.len);
        for (i, chunk) in s.chunks.iter().enumerate() {
            let want = s.chunk_bytes.min(s.len - (i * s.chunk_bytes).min(s.len));
            let size = self.buffer_size(want)?;
            let staging = self.scoped("download", || {
                let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("download"),
                    size,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                let mut enc = ctx.device.create_command_encoder(&Default::default());
                enc.copy_buffer_to_buffer(chunk, 0, &staging, 0, size);
                ctx.queue.submit([enc.finish()]);
                Ok(staging)
            })?;
            let slice = staging.slice(..);
            let (tx, rx) = mpsc::channel();
            slice.map_async(wgpu::MapMode::Read, move |r| {
                // The receiver outlives this callback (it waits below); a send error cannot
                // occur.
                let _ = tx.send(r);
            });
            ctx.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| be_err(format!("download: {e}")))?;
            rx.recv()
                .map_err(|e| be_err(format!("download: {e}")))?
                .map_err(|e| be_err(format!("download: {e}")))?;
            {
                let view = slice
                    .get_mapped_range()
                    .map_err(|e| be_err(format!("download: {e}")))?;
                let got = view
                    .get(..want)
                    .ok_or_else(|| be_err("download: short buffer"))?;
                bytes.extend_from_slice(got);
            }
            staging.unmap();
        }
        let data = cpu_data(s.dtype, &bytes);
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

    /// The buffer holding `t` (a view must lie within one chunk) and the element offset of
    /// its first element in that buffer.
    pub(crate) fn binding_of<'a>(&self, t: &'a Tensor) -> Result<(&'a wgpu::Buffer, u32)> {
        let s = self.storage_of(t)?;
        let ce = s.chunk_elems().max(1);
        let first = t.offset();
        let last = first
            + t.shape()
                .iter()
                .zip(t.strides())
                .map(|(&d, &st)| d.saturating_sub(1) * st)
                .sum::<usize>();
        let (c, c_last) = (first / ce, last / ce);
        if c != c_last && t.elem_count() > 0 {
            return Err(CoreError::Backend {
                backend: NAME.into(),
                reason: format!(
                    "a {:?} tensor spans {} buffers of {} bytes (binding limit); this op binds one",
                    t.shape(),
                    s.chunks.len(),
                    s.chunk_bytes
                ),
            });
        }
        let buf = s
            .chunks
            .get(c)
            .ok_or_else(|| be_err("view outside its storage"))?;
        let off =
            u32::try_from(first - c * ce).map_err(|_| be_err("element offset exceeds 32 bits"))?;
        Ok((buf, off))
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
