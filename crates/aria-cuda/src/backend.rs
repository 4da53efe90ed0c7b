//! [`CudaBackend`]: device memory, uploads and downloads, kernel launches and cuBLAS.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aria_tensor::backend::{Backend, Device, Op};
use aria_tensor::storage::{CpuData, DeviceStorage, Storage};
use aria_tensor::{contiguous_strides, CoreError, DType, Result, Tensor};
use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use crate::error::{driver, CudaError};
use crate::gemm::{Gemm, GemmArgs, GemmType};
use crate::kernels::{self, PtxCache, SOURCES};
use crate::launch::{AttnArgs, Strides6};
use crate::{plan, NAME};

/// A kernel argument (device pointers are passed as raw addresses).
#[derive(Debug, Clone, Copy)]
pub(crate) enum KArg {
    /// A device address (0: null).
    P(u64),
    /// An unsigned size.
    U(u64),
    /// A float.
    F(f32),
    /// An int code.
    I(i32),
    /// Shapes and strides.
    S(Strides6),
    /// Attention arguments.
    A(AttnArgs),
    /// Fallback GEMM arguments.
    G(GemmArgs),
}

pub(crate) struct Inner {
    /// The context (kept alive for the stream, modules and handle created from it).
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    funcs: HashMap<&'static str, CudaFunction>,
    /// `None` when libcublas is absent: products run on `gemm_fallback`.
    blas: Option<Mutex<CudaBlas>>,
    arch: &'static str,
    device_name: String,
}

/// The CUDA backend on one device. Cloning is cheap (shared). All work is queued on one
/// stream in order; downloads wait for it.
#[derive(Clone)]
pub struct CudaBackend {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaBackend({} / {})",
            self.inner.device_name, self.inner.arch
        )
    }
}

/// Whether a CUDA driver and at least one device are present.
pub fn cuda_available() -> bool {
    // SAFETY: only tries to dlopen libcuda; no symbol is called when it is absent.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return false;
    }
    CudaContext::device_count().is_ok_and(|n| n > 0)
}

/// A device buffer holding a tensor's elements.
pub struct CudaStorage {
    backend: CudaBackend,
    buf: CudaSlice<u8>,
    len: usize,
    dtype: DType,
}

impl std::fmt::Debug for CudaStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaStorage({} bytes of {})", self.len, self.dtype)
    }
}

impl DeviceStorage for CudaStorage {
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

impl CudaStorage {
    /// The element type stored.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
}

pub(crate) fn elem_size(d: DType) -> usize {
    match d {
        DType::F32 => 4,
        DType::F16 | DType::BF16 => 2,
        DType::I8 | DType::U8 => 1,
        DType::I64 => 8,
    }
}

impl CudaBackend {
    /// Open device `ordinal`, compile every kernel for its architecture with NVRTC (no cache
    /// on disk; [`CudaBackend::with_cache`] takes one) and create the cuBLAS handle. Fails with [`CudaError::Unavailable`] on a machine without a driver, a device or
    /// NVRTC (unless the PTX cache has every kernel). Without libcublas the products run on a
    /// tiled fallback kernel ([`CudaBackend::has_cublas`] says which).
    pub fn new(ordinal: usize) -> std::result::Result<Self, CudaError> {
        Self::with_cache(ordinal, true, PtxCache::new(None))
    }

    /// [`CudaBackend::open`] with compiled kernels read from and written to `cache` (a
    /// machine without NVRTC runs from a cache written elsewhere: `xtask cuda-check
    /// --write-ptx`).
    pub fn with_cache(
        ordinal: usize,
        cublas: bool,
        cache: PtxCache,
    ) -> std::result::Result<Self, CudaError> {
        Self::open_inner(ordinal, cublas, cache)
    }

    /// [`CudaBackend::new`], with `cublas == false` running every product on the fallback
    /// kernel even where libcublas exists (to check one against the other).
    pub fn open(ordinal: usize, cublas: bool) -> std::result::Result<Self, CudaError> {
        Self::open_inner(ordinal, cublas, PtxCache::new(None))
    }

    fn open_inner(
        ordinal: usize,
        cublas: bool,
        cache: PtxCache,
    ) -> std::result::Result<Self, CudaError> {
        let unavailable = |library, reason: &str| CudaError::Unavailable {
            library,
            reason: reason.into(),
        };
        // SAFETY: only tries to dlopen the libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(unavailable("libcuda", "no NVIDIA driver found"));
        }
        let ctx = CudaContext::new(ordinal).map_err(driver(format!("open device {ordinal}")))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver("compute capability"))?;
        let arch = kernels::arch_for(major, minor).ok_or_else(|| CudaError::Limit {
            op: "device",
            reason: format!("compute capability {major}.{minor} is below 8.0 (Ampere)"),
        })?;
        // SAFETY: the backend queues everything on its one stream, in order, so no buffer is
        // ever used by two streams and per-buffer events are not needed.
        unsafe { ctx.disable_event_tracking() };
        // A created stream (not the legacy default one): graphs can be captured on it.
        let stream = ctx.new_stream().map_err(driver("create stream"))?;
        let mut funcs = HashMap::new();
        for k in SOURCES {
            let ptx = cache.get(k, arch)?;
            let module = ctx
                .load_module(Ptx::from_src(ptx.to_string()))
                .map_err(driver(format!("load {}", k.file)))?;
            for &e in k.entries {
                let f = module
                    .load_function(e)
                    .map_err(driver(format!("{}: function {e}", k.file)))?;
                funcs.insert(e, f);
            }
        }
        // SAFETY: only tries to dlopen libcublas.
        let blas = if cublas && unsafe { blas_sys::is_culib_present() } {
            let b = CudaBlas::new(stream.clone()).map_err(|e| CudaError::Blas {
                what: "create handle".into(),
                reason: e.to_string(),
            })?;
            Some(Mutex::new(b))
        } else {
            None
        };
        let device_name = ctx.name().unwrap_or_else(|_| format!("device {ordinal}"));
        Ok(CudaBackend {
            inner: Arc::new(Inner {
                ctx,
                stream,
                funcs,
                blas,
                arch,
                device_name,
            }),
        })
    }

    /// The [`Device`] that puts tensors on this backend.
    pub fn device(&self) -> Device {
        Device::Backend(Arc::new(self.clone()))
    }

    /// The device's name and the architecture the kernels were compiled for.
    pub fn device_name(&self) -> String {
        format!("{} ({})", self.inner.device_name, self.inner.arch)
    }

    /// Make the context current on this thread (before raw driver or cuBLAS calls; cudarc's
    /// own calls do it themselves).
    pub(crate) fn bind(&self) -> Result<()> {
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(driver("bind context"))
            .map_err(CoreError::from)
    }

    /// Whether the products run on cuBLAS (otherwise on the fallback kernel: libcublas absent).
    pub fn has_cublas(&self) -> bool {
        self.inner.blas.is_some()
    }

    /// Wait for all queued work.
    pub fn synchronize(&self) -> Result<()> {
        self.inner
            .stream
            .synchronize()
            .map_err(driver("synchronize"))
            .map_err(CoreError::from)
    }

    pub(crate) fn storage_of<'a>(&self, t: &'a Tensor) -> Result<&'a CudaStorage> {
        let Storage::Device(d) = &**t.storage() else {
            return Err(be_err("tensor is not on a device"));
        };
        let s = d.as_any().downcast_ref::<CudaStorage>().ok_or_else(|| {
            be_err(format!(
                "tensor lives on the {} backend",
                d.backend().name()
            ))
        })?;
        if !Arc::ptr_eq(&s.backend.inner, &self.inner) {
            return Err(be_err("tensor lives on another CUDA device"));
        }
        Ok(s)
    }

    /// The device address of `t`'s first element.
    pub(crate) fn ptr(&self, t: &Tensor) -> Result<u64> {
        let s = self.storage_of(t)?;
        let (p, _sync) = s.buf.device_ptr(&self.inner.stream);
        Ok(p + (t.offset() * elem_size(t.dtype())) as u64)
    }

    /// A new device tensor of `shape` whose every element the caller's kernel writes.
    pub(crate) fn alloc(&self, shape: &[usize], dtype: DType, zeroed: bool) -> Result<Tensor> {
        let len = shape.iter().product::<usize>() * elem_size(dtype);
        let st = &self.inner.stream;
        let buf = if zeroed {
            st.alloc_zeros::<u8>(len.max(1))
        } else {
            // SAFETY: `zeroed == false` only for outputs a kernel writes in full before any
            // read (a u8 buffer has no invalid bit patterns either way).
            unsafe { st.alloc::<u8>(len.max(1)) }
        }
        .map_err(driver(format!("allocate {len} bytes")))?;
        self.wrap(buf, len, dtype, shape)
    }

    fn wrap(
        &self,
        buf: CudaSlice<u8>,
        len: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Tensor> {
        let storage = CudaStorage {
            backend: self.clone(),
            buf,
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

    /// Launch `entry` (a function of [`SOURCES`]).
    pub(crate) fn launch(
        &self,
        entry: &'static str,
        cfg: LaunchConfig,
        args: &[KArg],
    ) -> Result<()> {
        let f = self
            .inner
            .funcs
            .get(entry)
            .ok_or_else(|| be_err(format!("no kernel {entry}")))?;
        let mut b = self.inner.stream.launch_builder(f);
        for a in args {
            match a {
                KArg::P(v) | KArg::U(v) => b.arg(v),
                KArg::F(v) => b.arg(v),
                KArg::I(v) => b.arg(v),
                KArg::S(v) => b.arg(v),
                KArg::A(v) => b.arg(v),
                KArg::G(v) => b.arg(v),
            };
        }
        // SAFETY: every entry point's parameter list is the one its wrapper in `ops.rs` passes
        // (checked by the parity tests on a device); pointers address live buffers of this
        // context, held by the operand tensors until the stream is synchronized or the buffer
        // is freed stream-ordered.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(driver(format!("launch {entry}")))
            .map_err(CoreError::from)
    }

    /// `t` on this device, contiguous, in f32 (uploading a CPU operand, compacting a view and
    /// converting other dtypes on the device).
    pub(crate) fn f32c(&self, t: &Tensor) -> Result<Tensor> {
        let t = self.on_device(t)?;
        let t = if t.is_contiguous() {
            t
        } else {
            self.copy_contiguous(&t)?
        };
        if t.dtype() == DType::F32 {
            return Ok(t);
        }
        self.convert(&t, DType::F32)
    }

    /// `t` on this device (CPU operands are uploaded: weights the caller did not move).
    pub(crate) fn on_device(&self, t: &Tensor) -> Result<Tensor> {
        match &**t.storage() {
            Storage::Device(_) => {
                self.storage_of(t)?;
                Ok(t.clone())
            }
            _ => self.upload(&t.contiguous()?),
        }
    }

    /// A contiguous copy of a device view (any dtype).
    pub(crate) fn copy_contiguous(&self, t: &Tensor) -> Result<Tensor> {
        let out = self.alloc(t.shape(), t.dtype(), false)?;
        self.strided_copy(t, t.strides(), &out, 0, &contiguous_strides(t.shape()))?;
        Ok(out)
    }

    /// Copy every element of `src` (layout `src_strides`) into `dst` starting `dst_off`
    /// elements in, with `dst_strides`.
    pub(crate) fn strided_copy(
        &self,
        src: &Tensor,
        src_strides: &[usize],
        dst: &Tensor,
        dst_off: usize,
        dst_strides: &[usize],
    ) -> Result<()> {
        let n = src.elem_count();
        if n == 0 {
            return Ok(());
        }
        let st = Strides6::new("contiguous", src.shape(), src_strides, dst_strides)?;
        let es = elem_size(src.dtype());
        let entry = match es {
            8 => "strided_copy_b64",
            4 => "strided_copy_b32",
            2 => "strided_copy_b16",
            _ => "strided_copy_b8",
        };
        let d = self.ptr(dst)? + (dst_off * es) as u64;
        self.launch(
            entry,
            crate::launch::elementwise(n),
            &[
                KArg::P(self.ptr(src)?),
                KArg::P(d),
                KArg::U(n as u64),
                KArg::S(st),
            ],
        )
    }

    /// Convert a contiguous device tensor (through f32 when neither side is f32).
    pub(crate) fn convert(&self, t: &Tensor, to: DType) -> Result<Tensor> {
        let from = t.dtype();
        if from == to {
            return Ok(t.clone());
        }
        let entry = match (from, to) {
            (DType::F16, DType::F32) => "f16_to_f32",
            (DType::BF16, DType::F32) => "bf16_to_f32",
            (DType::I8, DType::F32) => "i8_to_f32",
            (DType::U8, DType::F32) => "u8_to_f32",
            (DType::I64, DType::F32) => "i64_to_f32",
            (DType::F32, DType::F16) => "f32_to_f16",
            (DType::F32, DType::BF16) => "f32_to_bf16",
            (_, DType::F16 | DType::BF16) => {
                let f = self.convert(t, DType::F32)?;
                return self.convert(&f, to);
            }
            _ => {
                return Err(CoreError::DType {
                    op: "to_dtype",
                    dtype: from,
                    reason: format!("the CUDA backend does not convert {from} to {to}"),
                })
            }
        };
        let out = self.alloc(t.shape(), to, false)?;
        let n = t.elem_count();
        if n > 0 {
            self.launch(
                entry,
                crate::launch::elementwise(n),
                &[
                    KArg::P(self.ptr(t)?),
                    KArg::P(self.ptr(&out)?),
                    KArg::U(n as u64),
                ],
            )?;
        }
        Ok(out)
    }

    /// `c = gemm(a, b)` in cuBLAS terms (see [`Gemm`]), f32 output, f32 accumulation.
    pub(crate) fn gemm(
        &self,
        g: &Gemm,
        ty: GemmType,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
    ) -> Result<()> {
        if g.m == 0 || g.n == 0 || g.batch == 0 {
            return Ok(());
        }
        use blas_sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        use blas_sys::cudaDataType::{CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F};
        let in_ty = match ty {
            GemmType::F32 => CUDA_R_32F,
            GemmType::F16 => CUDA_R_16F,
            GemmType::Bf16 => CUDA_R_16BF,
        };
        let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
        let (alpha, beta) = (1f32, 0f32);
        let (pa, pb, pc) = (self.ptr(a)?, self.ptr(b)?, self.ptr(c)?);
        let Some(lock) = &self.inner.blas else {
            let (args, cfg) = g.fallback(ty)?;
            return self.launch(
                "gemm_fallback",
                cfg,
                &[KArg::P(pa), KArg::P(pb), KArg::P(pc), KArg::G(args)],
            );
        };
        let handle = lock.lock().map_err(|_| be_err("cuBLAS handle poisoned"))?;
        self.bind()?;
        // SAFETY: the pointers address live device buffers of this context whose sizes cover
        // the strided-batched extents `g` describes (built from the operands' shapes by
        // `Gemm::linear`/`matmul`/`conv`); alpha and beta are host scalars (the default
        // pointer mode); the handle runs on the backend's stream.
        unsafe {
            blas::gemm_strided_batched_ex(
                *handle.handle(),
                op(g.trans_a),
                op(g.trans_b),
                g.m,
                g.n,
                g.k,
                (&alpha as *const f32).cast(),
                pa as *const _,
                in_ty,
                g.lda,
                g.stride_a,
                pb as *const _,
                in_ty,
                g.ldb,
                g.stride_b,
                (&beta as *const f32).cast(),
                pc as *mut _,
                CUDA_R_32F,
                g.ldc,
                g.stride_c,
                g.batch,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| {
            CoreError::from(CudaError::Blas {
                what: format!("gemm {}x{}x{} (batch {})", g.m, g.n, g.k, g.batch),
                reason: e.to_string(),
            })
        })
    }
}

pub(crate) fn be_err(reason: impl std::fmt::Display) -> CoreError {
    CoreError::Backend {
        backend: NAME.into(),
        reason: reason.to_string(),
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        let t = t.contiguous()?;
        let bytes = t.as_bytes()?;
        let st = &self.inner.stream;
        let buf = if bytes.is_empty() {
            st.alloc_zeros::<u8>(1)
        } else {
            st.clone_htod(bytes)
        }
        .map_err(driver(format!("upload {} bytes", bytes.len())))?;
        self.wrap(buf, bytes.len(), t.dtype(), t.shape())
    }

    fn write_into(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        self.write_buffer(dst, src)
    }

    fn record<'a>(
        &self,
        work: Box<dyn FnMut() -> Result<()> + Send + 'a>,
    ) -> Result<Option<Box<dyn aria_tensor::backend::Recorded + 'a>>> {
        self.record_graph(work)
    }

    fn to_cpu(&self, t: &Tensor) -> Result<Tensor> {
        let s = self.storage_of(t)?;
        let bytes = self
            .inner
            .stream
            .clone_dtoh(&s.buf)
            .map_err(driver(format!("download {} bytes", s.len)))?;
        let bytes = bytes
            .get(..s.len)
            .ok_or_else(|| be_err("download: short buffer"))?;
        Tensor::from_storage(
            Arc::new(Storage::Cpu(cpu_data(s.dtype, bytes))),
            t.dtype(),
            t.shape().to_vec(),
            t.strides().to_vec(),
            t.offset(),
        )?
        .contiguous()
    }

    /// `q8_0` (weight-only and W8A8) and `bf16_panels`, kept in the op set's block layout
    /// (`kernels/packed.cu`).
    fn packed_formats(&self) -> Vec<(aria_tensor::format::WeightFormat, bool)> {
        crate::ops::PACKED_FORMATS.to_vec()
    }

    fn upload_packed(&self, w: &aria_tensor::format::PackedBlocks) -> Result<Tensor> {
        crate::ops::check_blocks(w)?;
        self.upload(&w.data)
    }

    fn run(&self, op: Op) -> Result<Tensor> {
        // The op set's check step (the `ops` functions run it before handing an op over; this
        // covers direct callers): the kernels may rely on its shape and dtype rules.
        op.check()?;
        plan::check(&op)?;
        crate::ops::run(self, &op)
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
