//! Graph capture of the per-step denoising work, replayed with new scalars each step.
//!
//! A sampler step runs the same kernels with the same buffers at every step; only a few
//! scalars change (σ, the update coefficients, the steering strength). [`StepScalars`] lays
//! those out in one device buffer; the step is recorded once with
//! [`CudaBackend::capture_step`], reading its scalars from that buffer (e.g. through
//! [`CudaBackend::axpby_device`]); [`StepGraph::replay`] then writes the next step's values
//! into the buffer and relaunches the graph, so nothing is re-captured per step.
//!
//! The capture runs the closure's ops on the backend's stream in capture mode, so a closure
//! must not upload, download or synchronize; its result is copied into a state tensor
//! allocated before the capture, and everything it allocates is freed inside the graph.

use aria_core::{CoreError, DType, Result, Tensor};
use cudarc::driver::{result as drv, sys, CudaGraph};

use crate::backend::{be_err, CudaBackend};
use crate::error::driver;

/// Names and slots of the per-step scalars in their device buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepScalars {
    names: Vec<&'static str>,
}

impl StepScalars {
    /// The slots of the ping-pong sampler with steering: σ of the step, σ of the next, the
    /// two update coefficients and the steering strength.
    pub fn ping_pong() -> Self {
        Self::new(&["sigma", "sigma_next", "coef_x", "coef_d", "steer_strength"])
            .unwrap_or(StepScalars { names: Vec::new() })
    }

    /// A layout of distinct, non-empty names.
    pub fn new(names: &[&'static str]) -> Result<Self> {
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() || names[..i].contains(n) {
                return Err(CoreError::Invalid(format!(
                    "step scalars: bad or repeated name {n:?}"
                )));
            }
        }
        Ok(StepScalars {
            names: names.to_vec(),
        })
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no slots.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The slot (element index in the buffer) of `name`.
    pub fn slot(&self, name: &str) -> Result<usize> {
        self.names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| CoreError::Invalid(format!("step scalars: no slot {name:?}")))
    }

    /// The buffer contents for one step: every slot named exactly once.
    pub fn pack(&self, values: &[(&str, f32)]) -> Result<Vec<f32>> {
        let mut out = vec![f32::NAN; self.len()];
        let mut set = vec![false; self.len()];
        for &(name, v) in values {
            let s = self.slot(name)?;
            if set[s] {
                return Err(CoreError::Invalid(format!(
                    "step scalars: {name:?} given twice"
                )));
            }
            set[s] = true;
            out[s] = v;
        }
        if let Some(i) = set.iter().position(|s| !s) {
            return Err(CoreError::Invalid(format!(
                "step scalars: {:?} not given",
                self.names[i]
            )));
        }
        Ok(out)
    }
}

/// One captured step, the scalar buffer its kernels read and the state it writes.
pub struct StepGraph {
    backend: CudaBackend,
    graph: CudaGraph,
    layout: StepScalars,
    scalars: Tensor,
    state: Tensor,
}

impl std::fmt::Debug for StepGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "StepGraph({:?}, state {:?})",
            self.layout,
            self.state.shape()
        )
    }
}

impl CudaBackend {
    /// A device buffer for `layout`, filled with `initial` (see [`StepScalars::pack`]).
    pub fn step_scalars(&self, layout: &StepScalars, initial: &[(&str, f32)]) -> Result<Tensor> {
        let v = layout.pack(initial)?;
        aria_core::Device::put(&self.device(), &Tensor::from_vec(v, &[layout.len()])?)
    }

    /// Record `step` once as a CUDA graph. `scalars` is the buffer from
    /// [`CudaBackend::step_scalars`] that the step's kernels read (e.g. through narrowed
    /// views passed to [`CudaBackend::axpby_device`]); `state` is a contiguous device tensor
    /// allocated before the capture that the step's result is copied into, so the graph
    /// frees everything it allocates and can be relaunched. The step may read `state` (the
    /// previous step's result): the copy is its last node.
    pub fn capture_step(
        &self,
        layout: &StepScalars,
        scalars: &Tensor,
        state: &Tensor,
        step: impl FnOnce() -> Result<Tensor>,
    ) -> Result<StepGraph> {
        check_capture(layout, scalars, state)?;
        self.storage_of(scalars)?;
        self.storage_of(state)?;
        let st = &self.inner.stream;
        self.synchronize()?;
        st.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver("begin capture"))?;
        let out = step().and_then(|r| {
            if r.shape() != state.shape() || r.dtype() != state.dtype() {
                return Err(CoreError::shape(
                    "capture_step",
                    "the step's result must match the state",
                    &[r.shape(), state.shape()],
                ));
            }
            self.strided_copy(&r, r.strides(), state, 0, state.strides())
            // `r` (allocated inside the capture) is freed inside it here.
        });
        // End the capture whatever the closure returned, so the stream leaves capture mode.
        let graph = st
            .end_capture(sys::CUgraphInstantiate_flags_enum(0))
            .map_err(driver("end capture"));
        out?;
        let graph = graph?.ok_or_else(|| be_err("the captured step launched nothing"))?;
        Ok(StepGraph {
            backend: self.clone(),
            graph,
            layout: layout.clone(),
            scalars: scalars.clone(),
            state: state.clone(),
        })
    }
}

/// The buffers a capture needs: the layout's f32 scalars and a contiguous state.
pub fn check_capture(layout: &StepScalars, scalars: &Tensor, state: &Tensor) -> Result<()> {
    if scalars.dtype() != DType::F32
        || scalars.elem_count() != layout.len()
        || !scalars.is_contiguous()
    {
        return Err(CoreError::shape(
            "capture_step",
            format!(
                "scalars must be a contiguous f32 buffer of {}",
                layout.len()
            ),
            &[scalars.shape()],
        ));
    }
    if !state.is_contiguous() {
        return Err(CoreError::shape(
            "capture_step",
            "the state must be contiguous",
            &[state.shape()],
        ));
    }
    Ok(())
}

impl StepGraph {
    /// Write this step's scalars into the device buffer and replay the graph (queued; the
    /// state is updated once the backend synchronizes or a download waits for it).
    pub fn replay(&self, values: &[(&str, f32)]) -> Result<()> {
        let v = self.layout.pack(values)?;
        let be = &self.backend;
        // The previous replay may still read the buffer: wait, then copy on the stream.
        be.synchronize()?;
        let dst = be.ptr(&self.scalars)?;
        be.bind()?;
        // SAFETY: `dst` addresses the live, contiguous f32 buffer of `layout.len()` elements
        // this graph reads (checked at capture); `v` has exactly that many and outlives the
        // call; pageable host copies are staged before the call returns, and the stream orders
        // the copy before the relaunch below.
        unsafe { drv::memcpy_htod_async(dst, &v, be.inner.stream.cu_stream()) }
            .map_err(driver("write step scalars"))?;
        self.graph.launch().map_err(driver("replay step graph"))?;
        Ok(())
    }

    /// The scalar layout.
    pub fn layout(&self) -> &StepScalars {
        &self.layout
    }

    /// The state the step writes (current after the backend synchronizes).
    pub fn state(&self) -> &Tensor {
        &self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_pack_by_name() {
        let l = StepScalars::ping_pong();
        assert_eq!(l.len(), 5);
        let v = l
            .pack(&[
                ("steer_strength", 0.5),
                ("sigma", 1.0),
                ("sigma_next", 0.8),
                ("coef_x", 0.2),
                ("coef_d", -0.3),
            ])
            .expect("complete");
        assert_eq!(v, vec![1.0, 0.8, 0.2, -0.3, 0.5]);
        assert_eq!(l.slot("steer_strength").ok(), Some(4));
    }

    #[test]
    fn capture_buffers_are_checked() {
        let l = StepScalars::new(&["a", "b"]).expect("distinct");
        let ok = Tensor::zeros(&[2], DType::F32);
        let state = Tensor::zeros(&[3, 4], DType::F32);
        assert!(check_capture(&l, &ok, &state).is_ok());
        assert!(check_capture(&l, &Tensor::zeros(&[3], DType::F32), &state).is_err());
        assert!(check_capture(&l, &Tensor::zeros(&[2], DType::F16), &state).is_err());
        let view = state.transpose(0, 1).expect("view");
        assert!(check_capture(&l, &ok, &view).is_err());
    }

    #[test]
    fn incomplete_or_repeated_scalars_are_refused() {
        let l = StepScalars::new(&["a", "b"]).expect("distinct");
        assert!(l.pack(&[("a", 1.0)]).is_err());
        assert!(l.pack(&[("a", 1.0), ("a", 2.0), ("b", 0.0)]).is_err());
        assert!(l.pack(&[("a", 1.0), ("c", 2.0)]).is_err());
        assert!(StepScalars::new(&["a", "a"]).is_err());
        assert!(StepScalars::new(&[""]).is_err());
    }
}
