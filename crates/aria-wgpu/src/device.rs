//! Opening an adapter and device, the limits queried from it, and the tuning knobs.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

use super::{be_err, launch::PipelineKey};
use aria_tensor::backend::registry::BackendOptions;
use aria_tensor::Result;

/// Workgroup sizes and tiles of the kernels.
///
/// Defaults ([`Knobs::for_adapter`]): [`Knobs::discrete`] on discrete GPUs, [`Knobs::integrated`]
/// on integrated GPUs, CPUs (lavapipe) and unknown devices. Each value is clamped to what the
/// device's limits allow when a kernel is built, so any setting is safe. Every field can be
/// set by name through [`BackendOptions::settings`] ([`Knobs::with_settings`]); the `aria`
/// program fills them from `ARIA_WGPU_<FIELD>` (upper case, e.g. `ARIA_WGPU_GEMM_TILE=8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knobs {
    /// Side of the square output tile of `linear`, `matmul` and `conv1d` (workgroup
    /// `gemm_tile × gemm_tile`; 8 or 16). Default 16 discrete, 8 integrated.
    pub gemm_tile: u32,
    /// Queries per attention workgroup (one invocation each). Default 64 discrete, 32
    /// integrated.
    pub attn_queries: u32,
    /// Keys staged per attention tile (lowered to fit the device's workgroup memory). Default
    /// 32 discrete, 16 integrated.
    pub attn_keys: u32,
    /// Invocations per workgroup of the elementwise and row kernels. Default 256 discrete,
    /// 64 integrated.
    pub elementwise: u32,
    /// Largest storage binding in bytes (also bounded by the device's
    /// `max_storage_buffer_binding_size`): larger tensors are stored as several buffers.
    /// Default 128 MiB.
    pub max_binding_bytes: u64,
}

/// 128 MiB: the binding size every adapter supports.
pub const DEFAULT_MAX_BINDING: u64 = 128 << 20;

impl Knobs {
    /// Defaults for a discrete GPU.
    pub fn discrete() -> Self {
        Knobs {
            gemm_tile: 16,
            attn_queries: 64,
            attn_keys: 32,
            elementwise: 256,
            max_binding_bytes: DEFAULT_MAX_BINDING,
        }
    }

    /// Defaults for an integrated GPU or a software device.
    pub fn integrated() -> Self {
        Knobs {
            gemm_tile: 8,
            attn_queries: 32,
            attn_keys: 16,
            elementwise: 64,
            max_binding_bytes: DEFAULT_MAX_BINDING,
        }
    }

    /// The defaults for an adapter kind.
    pub fn for_adapter(kind: wgpu::DeviceType) -> Self {
        match kind {
            wgpu::DeviceType::DiscreteGpu => Self::discrete(),
            _ => Self::integrated(),
        }
    }

    /// The names [`Knobs::with_settings`] takes (the fields, in lower case).
    pub const SETTINGS: [&'static str; 5] = [
        "gemm_tile",
        "attn_queries",
        "attn_keys",
        "elementwise",
        "max_binding_bytes",
    ];

    /// These knobs with a backend's settings applied (`gemm_tile=8`, ...; see
    /// [`Knobs::SETTINGS`]). Programs fill the settings at their edge (the `aria` program
    /// reads `ARIA_WGPU_<FIELD>` from the environment); an unknown name or a value that is
    /// not a positive integer is an error naming it.
    pub fn with_settings(mut self, opts: &BackendOptions) -> Result<Self> {
        for (name, value) in &opts.settings {
            let bad = || {
                be_err(format!(
                    "setting `{name}`: `{value}` is not a positive integer"
                ))
            };
            let n: u64 = value.trim().parse().map_err(|_| bad())?;
            if n == 0 {
                return Err(bad());
            }
            let small = || u32::try_from(n).map_err(|_| bad());
            match name.as_str() {
                "gemm_tile" => self.gemm_tile = small()?,
                "attn_queries" => self.attn_queries = small()?,
                "attn_keys" => self.attn_keys = small()?,
                "elementwise" => self.elementwise = small()?,
                "max_binding_bytes" => self.max_binding_bytes = n,
                _ => {
                    return Err(be_err(format!(
                        "unknown setting `{name}` (known: {})",
                        Self::SETTINGS.join(", ")
                    )))
                }
            }
        }
        Ok(self)
    }
}

/// The device, its queue and limits, and the compiled pipelines.
pub(crate) struct Ctx {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    /// The limits the device was opened with (the adapter's own).
    pub(crate) limits: wgpu::Limits,
    pub(crate) knobs: Knobs,
    /// Largest bytes per storage binding: the knob bounded by the device limit, a multiple of
    /// 256.
    pub(crate) max_binding: u64,
    /// Pipelines by shader, entry point and constants.
    pub(crate) pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
    /// A 16-byte storage buffer bound where an optional operand is absent.
    pub(crate) dummy: wgpu::Buffer,
    /// Host-to-device and device-to-host transfers so far (tensors, not buffers).
    pub(crate) uploads: AtomicUsize,
    pub(crate) downloads: AtomicUsize,
}

pub(crate) async fn open(knobs: Option<Knobs>, opts: &BackendOptions) -> Result<Ctx> {
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
    let limits = adapter.limits();
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: Some("aria"),
            required_limits: limits.clone(),
            ..Default::default()
        })
        .await
        .map_err(|e| be_err(format!("cannot open {}: {e}", info.name)))?;
    let knobs = match knobs {
        Some(k) => k,
        None => Knobs::for_adapter(info.device_type).with_settings(opts)?,
    };
    let device_max = limits
        .max_storage_buffer_binding_size
        .min(limits.max_buffer_size);
    let max_binding = (knobs.max_binding_bytes.min(device_max) / 256 * 256).max(256);
    let dummy = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("absent operand"),
        size: 16,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    Ok(Ctx {
        device,
        queue,
        info,
        limits,
        knobs,
        max_binding,
        pipelines: Mutex::new(HashMap::new()),
        dummy,
        uploads: AtomicUsize::new(0),
        downloads: AtomicUsize::new(0),
    })
}
