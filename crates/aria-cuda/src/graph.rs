//! Recording device work as a CUDA graph, the CUDA side of the op contract's recordings
//! ([`Backend::record`](aria_tensor::Backend::record), [`Backend::write_into`](aria_tensor::Backend::write_into)).
//!
//! A sampler step runs the same kernels on the same buffers at every step; what changes (the
//! state, σ) is written into device buffers before each replay. The sampler of `aria-dit`
//! records its DiT evaluation this way (one graph per kind of step) and replays it, so a step
//! costs one graph launch instead of hundreds of kernel launches.
//!
//! The work runs once with the stream in capture mode: it must not upload, download or
//! synchronize, and it leaves its result in a buffer allocated before the capture; what it
//! allocates (stream-ordered) is freed inside the graph.

use aria_tensor::backend::Recorded;
use aria_tensor::storage::DeviceStorage;
use aria_tensor::{CoreError, Result, Tensor};
use cudarc::driver::{result as drv, sys, CudaGraph};

use crate::backend::{be_err, CudaBackend};
use crate::error::driver;

/// A recording of [`Backend::record`](aria_tensor::Backend::record): one CUDA graph.
struct GraphRecording {
    backend: CudaBackend,
    graph: CudaGraph,
}

// SAFETY: a CUDA graph's handles belong to its context, not to the thread that made them;
// `replay` binds the context to the calling thread before launching. The type is not `Sync`,
// so one thread at a time launches it.
unsafe impl Send for GraphRecording {}

impl Recorded for GraphRecording {
    fn replay(&self) -> Result<()> {
        self.backend.bind()?;
        self.graph
            .launch()
            .map_err(driver("replay recorded graph"))?;
        Ok(())
    }
}

impl CudaBackend {
    /// [`Backend::record`](aria_tensor::Backend::record): `work` runs once with the stream in
    /// capture mode (its kernels are recorded, not run) and becomes a graph.
    pub(crate) fn record_graph<'a>(
        &self,
        mut work: Box<dyn FnMut() -> Result<()> + Send + 'a>,
    ) -> Result<Option<Box<dyn Recorded + 'a>>> {
        let st = &self.inner.stream;
        self.synchronize()?;
        st.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver("begin capture"))?;
        let out = work();
        // End the capture whatever the work returned, so the stream leaves capture mode.
        let graph = st
            .end_capture(sys::CUgraphInstantiate_flags_enum(0))
            .map_err(driver("end capture"));
        out?;
        let graph = graph?.ok_or_else(|| be_err("the recorded work launched nothing"))?;
        Ok(Some(Box::new(GraphRecording {
            backend: self.clone(),
            graph,
        })))
    }

    /// [`Backend::write_into`](aria_tensor::Backend::write_into): a device source by a copy
    /// kernel, a host source by a copy on the stream (after the queued work, which may still
    /// read the buffer, has finished).
    pub(crate) fn write_buffer(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        let s = self.storage_of(dst)?;
        if dst.shape() != src.shape() || dst.dtype() != src.dtype() || !dst.is_contiguous() {
            return Err(CoreError::shape(
                "write_into",
                format!(
                    "the source ({:?}) must have the shape and dtype of the contiguous destination ({:?})",
                    src.dtype(),
                    dst.dtype()
                ),
                &[dst.shape(), src.shape()],
            ));
        }
        if !src.device().is_cpu() {
            return self.strided_copy(src, src.strides(), dst, 0, dst.strides());
        }
        let host = src.contiguous()?;
        let bytes = host.as_bytes()?;
        let end = dst.offset() * crate::backend::elem_size(dst.dtype()) + bytes.len();
        if end > s.len_bytes() {
            return Err(be_err(format!(
                "write_into: {end} bytes past a buffer of {}",
                s.len_bytes()
            )));
        }
        self.synchronize()?;
        let ptr = self.ptr(dst)?;
        self.bind()?;
        // SAFETY: `ptr` addresses `dst`'s live buffer with at least `bytes.len()` bytes from it
        // (checked above); `bytes` outlives the call, and pageable host copies are staged
        // before the call returns; the stream orders the copy before any later work.
        unsafe { drv::memcpy_htod_async(ptr, bytes, self.inner.stream.cu_stream()) }
            .map_err(driver("write into a device buffer"))?;
        Ok(())
    }
}
