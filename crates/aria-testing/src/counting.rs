//! [`CountingBackend`]: CPU arithmetic behind a device boundary, with counters.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aria_core::backend::{Backend, Op, Recorded};
use aria_core::nn::{PackedBlocks, WeightFormat};
use aria_core::storage::{DeviceStorage, Storage};
use aria_core::{Device, Result, Tensor};

const NAME: &str = "counting";

/// What a [`CountingBackend`] has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Explicit uploads ([`Device::put`] of a CPU tensor).
    pub uploads: usize,
    /// Downloads ([`Tensor::to_cpu`] of a device tensor, or any read of device data).
    pub downloads: usize,
    /// CPU tensors passed as operands of a device op (an implicit upload each).
    pub implicit_uploads: usize,
    /// Op calls by op name.
    pub ops: BTreeMap<&'static str, usize>,
    /// Op calls whose operands held a CPU tensor, by op name (where the implicit uploads are).
    pub mixed_ops: BTreeMap<&'static str, usize>,
    /// Recordings made ([`Backend::record`], on a [`CountingBackend::recording`] backend).
    pub recordings: usize,
    /// Replays of a recording.
    pub replays: usize,
    /// In-place writes ([`Backend::write_into`]).
    pub writes: usize,
    /// Uploads, downloads and host operands inside a replay: a recording may do none (CUDA
    /// refuses them while it records a graph).
    pub transfers_in_replays: usize,
}

impl Counts {
    /// Total op calls.
    pub fn total_ops(&self) -> usize {
        self.ops.values().sum()
    }
}

/// A device backend that runs every op of the set with the CPU kernels ([`Cpu`](aria_core::backend::Cpu)'s `run`) on
/// data it keeps behind [`Storage::Device`], counting uploads, downloads and op calls. Results
/// are bit-identical to the CPU path by construction; what a test learns is whether the code
/// under test stays on the device.
#[derive(Clone, Default)]
pub struct CountingBackend {
    counts: Arc<Mutex<Counts>>,
    /// No packed weight format (a backend that runs dense weights only).
    dense_only: bool,
    /// Records work ([`Backend::record`]) the way CUDA records a graph.
    records: bool,
    /// Replays running now (their transfers are counted apart).
    replaying: Arc<std::sync::atomic::AtomicUsize>,
}

impl std::fmt::Debug for CountingBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CountingBackend({:?})", self.counts())
    }
}

/// The device buffer: a flat contiguous CPU tensor (replaced whole by an in-place write).
#[derive(Debug)]
struct CountingStorage {
    backend: CountingBackend,
    flat: Mutex<Tensor>,
    len_bytes: usize,
}

impl CountingStorage {
    fn flat(&self) -> Tensor {
        self.flat.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl DeviceStorage for CountingStorage {
    fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(self.backend.clone())
    }
    fn len_bytes(&self) -> usize {
        self.len_bytes
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl CountingBackend {
    /// A new backend with zero counts.
    pub fn new() -> Self {
        Self::default()
    }

    /// A backend with no packed weight format, as a device that runs dense weights only: for
    /// the refusals a packed layer gets there.
    pub fn without_packed() -> Self {
        CountingBackend {
            dense_only: true,
            ..Self::default()
        }
    }

    /// A backend that also records work ([`Backend::record`]) the way CUDA records a graph:
    /// nothing runs at recording time, each replay runs the recorded closure again, and the
    /// transfers made inside a replay are counted ([`Counts::transfers_in_replays`]), so a
    /// test learns whether a recorded step would capture on a GPU and whether it reads its
    /// per-step values from device buffers rather than from values baked in when recorded.
    pub fn recording() -> Self {
        CountingBackend {
            records: true,
            ..Self::default()
        }
    }

    /// The device to move tensors to.
    pub fn device(&self) -> Device {
        Device::Backend(Arc::new(self.clone()))
    }

    /// A snapshot of the counters.
    pub fn counts(&self) -> Counts {
        self.lock().clone()
    }

    /// Reset every counter to zero.
    pub fn reset(&self) {
        *self.lock() = Counts::default();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a transfer (inside a replay, also as such).
    fn transfer(&self, what: impl FnOnce(&mut Counts)) {
        let mut c = self.lock();
        what(&mut c);
        if self.replaying.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            c.transfers_in_replays += 1;
        }
    }

    /// Wrap a contiguous CPU tensor as a device tensor (not counted).
    fn wrap(&self, t: &Tensor) -> Result<Tensor> {
        let t = t.contiguous()?;
        let flat = t.reshape(&[t.elem_count()])?;
        let st = CountingStorage {
            backend: self.clone(),
            len_bytes: flat.elem_count() * flat.dtype().size(),
            flat: Mutex::new(flat),
        };
        Tensor::from_storage(
            Arc::new(Storage::Device(Arc::new(st))),
            t.dtype(),
            t.shape().to_vec(),
            t.strides().to_vec(),
            0,
        )
    }

    /// The CPU view of one of this backend's tensors with the same layout (not counted), or
    /// `None` for a tensor that is not ours.
    fn host_view(t: &Tensor) -> Result<Option<Tensor>> {
        let Storage::Device(d) = &**t.storage() else {
            return Ok(None);
        };
        let Some(s) = d.as_any().downcast_ref::<CountingStorage>() else {
            return Ok(None);
        };
        let flat = s.flat();
        Tensor::from_storage(
            flat.storage().clone(),
            t.dtype(),
            t.shape().to_vec(),
            t.strides().to_vec(),
            t.offset() + flat.offset(),
        )
        .map(Some)
    }

    /// The storage of one of this backend's tensors.
    fn storage_of(t: &Tensor) -> Option<&CountingStorage> {
        let Storage::Device(d) = &**t.storage() else {
            return None;
        };
        d.as_any().downcast_ref::<CountingStorage>()
    }
}

/// A closure recorded by a [`CountingBackend::recording`] backend.
struct CountingRecording<'a> {
    backend: CountingBackend,
    work: Mutex<Box<dyn FnMut() -> Result<()> + Send + 'a>>,
}

impl Recorded for CountingRecording<'_> {
    fn replay(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        self.backend.lock().replays += 1;
        let mut work = self.work.lock().unwrap_or_else(|e| e.into_inner());
        self.backend.replaying.fetch_add(1, Ordering::SeqCst);
        let r = work();
        self.backend.replaying.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

impl Backend for CountingBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        self.transfer(|c| c.uploads += 1);
        self.wrap(t)
    }

    fn to_cpu(&self, t: &Tensor) -> Result<Tensor> {
        self.transfer(|c| c.downloads += 1);
        match Self::host_view(t)? {
            Some(h) => h.contiguous(),
            None => Ok(t.clone()),
        }
    }

    /// `q8_0` (weight-only and W8A8) and `bf16_panels`: the blocks are kept as they are and run
    /// by the op set's CPU reference (`ops::linear_packed`).
    fn packed_formats(&self) -> Vec<(WeightFormat, bool)> {
        if self.dense_only {
            return Vec::new();
        }
        vec![
            (WeightFormat::Q8_0, true),
            (WeightFormat::Bf16Panels, false),
        ]
    }

    fn upload_packed(&self, w: &PackedBlocks) -> Result<Tensor> {
        if self.dense_only || !matches!(w.format, WeightFormat::Q8_0 | WeightFormat::Bf16Panels) {
            return Err(aria_core::CoreError::Backend {
                backend: NAME.into(),
                reason: format!(
                    "no kernel for packed {} weights (formats here: {})",
                    w.format,
                    aria_core::backend::format_list(&self.packed_formats())
                ),
            });
        }
        self.upload(&w.data)
    }

    fn run(&self, mut op: Op) -> Result<Tensor> {
        let name = op.name();
        let mut mixed = 0;
        for t in op.operands_mut() {
            match Self::host_view(t)? {
                Some(h) => *t = h,
                None => mixed += 1,
            }
        }
        {
            let mut c = self.lock();
            *c.ops.entry(name).or_default() += 1;
            if mixed > 0 {
                c.implicit_uploads += mixed;
                *c.mixed_ops.entry(name).or_default() += 1;
                if self.replaying.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                    c.transfers_in_replays += mixed;
                }
            }
        }
        let out = aria_core::backend::Backend::run(&aria_core::backend::Cpu, op)?;
        self.wrap(&out)
    }

    /// Replaces the destination's buffer with the source's values (a CPU source is an upload;
    /// one inside a replay is counted as such).
    fn write_into(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        let bad =
            |why: &str| aria_core::CoreError::shape("write_into", why, &[dst.shape(), src.shape()]);
        let Some(st) = Self::storage_of(dst) else {
            return Err(bad("the destination is not a counting-backend tensor"));
        };
        if dst.shape() != src.shape() || dst.dtype() != src.dtype() {
            return Err(bad(
                "the source must have the destination's shape and dtype",
            ));
        }
        if !dst.is_contiguous()
            || dst.offset() != 0
            || st.len_bytes != dst.elem_count() * dst.dtype().size()
        {
            return Err(bad("the destination must be a whole contiguous buffer"));
        }
        let host = match Self::host_view(src)? {
            Some(h) => h,
            None => {
                self.transfer(|c| c.uploads += 1);
                src.clone()
            }
        };
        let flat = host.contiguous()?.reshape(&[dst.elem_count()])?;
        *st.flat.lock().unwrap_or_else(|e| e.into_inner()) = flat;
        self.lock().writes += 1;
        Ok(())
    }

    fn record<'a>(
        &self,
        work: Box<dyn FnMut() -> Result<()> + Send + 'a>,
    ) -> Result<Option<Box<dyn Recorded + 'a>>> {
        if !self.records {
            return Ok(None);
        }
        self.lock().recordings += 1;
        Ok(Some(Box::new(CountingRecording {
            backend: self.clone(),
            work: Mutex::new(work),
        })))
    }
}
