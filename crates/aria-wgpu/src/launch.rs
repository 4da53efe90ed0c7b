//! Kernel launches: the pipeline cache and one helper that binds tensors and a uniform block
//! and dispatches.
//!
//! # Writing a kernel
//!
//! A kernel is a [`Shader`] (a WGSL file, `include_str!`-ed) and an entry point. Its bindings
//! are all in group 0: one uniform block at binding 0 filled from [`Uniforms`] (32-bit words,
//! in order; zero-padded to at least 256 bytes, so `common.wgsl`'s 64-word `Params` fits),
//! then the storage buffers at bindings 1.., in the order of the [`Bind`] list given to
//! [`WgpuBackend::launch`]. Compile-time constants (`defs`,
//! e.g. the workgroup size) are prepended to the source as `const NAME: u32 = V;` lines, so
//! the WGSL file uses them without declaring them; each distinct set of `defs` is its own
//! cached pipeline. Layouts are derived from the shader, so every declared binding must be
//! used by the entry point (read absent optional operands under a flag in the uniforms).
//!
//! ```ignore
//! // In an op (`be: &WgpuBackend`): y = silu(x), f32.
//! const SHADER: Shader = Shader::new("unary.wgsl", include_str!("unary.wgsl"));
//! let x = be.operand_f32("unary", x)?;             // on the device, contiguous
//! let y = be.alloc(x.shape(), DType::F32)?;        // zero-filled output
//! let n = x.elem_count();
//! let wg = be.knobs().elementwise;
//! let (_, x_off) = be.binding_of(&x)?;             // element offset of a view
//! be.launch(
//!     &SHADER, "silu", &[("WG", wg)],
//!     &[Bind::T(&x), Bind::T(&y)],
//!     Uniforms::new().u32(n as u32).u32(x_off),
//!     be.groups_1d(n, wg)?,
//! )?;
//! // WGSL: `@compute @workgroup_size(WG) fn silu(@builtin(global_invocation_id) g: vec3<u32>,
//! //        @builtin(num_workgroups) nw: vec3<u32>) { let i = g.x + g.y * nw.x * WG; ... }`
//! ```
//!
//! Launches are queued in order on the device's one queue; downloads wait for them.

use std::sync::PoisonError;

use super::{be_err, WgpuBackend};
use aria_tensor::{Result, Tensor};

/// A WGSL source file.
#[derive(Debug)]
pub(crate) struct Shader {
    /// The file name (for errors and the cache key).
    pub(crate) name: &'static str,
    /// The WGSL text.
    pub(crate) source: &'static str,
}

impl Shader {
    /// A shader from its file name and text.
    pub(crate) const fn new(name: &'static str, source: &'static str) -> Self {
        Shader { name, source }
    }
}

/// A [`Shader`] named after `file` whose source is the shared pieces, in order, then `file`
/// (all WGSL files of this folder, joined at compile time by `concat!(include_str!(…), …)`),
/// so that each shared piece is written once: `shader!("norm.wgsl", "common.wgsl",
/// "math.wgsl", "reduce.wgsl")`.
macro_rules! shader {
    ($file:literal $(, $piece:literal)* $(,)?) => {
        $crate::launch::Shader::new(
            $file,
            concat!($(include_str!($piece),)* include_str!($file)),
        )
    };
}
pub(crate) use shader;

/// Pipelines are cached by shader file, entry point and constants.
pub(crate) type PipelineKey = (&'static str, &'static str, Vec<(&'static str, u32)>);

/// One storage binding of a launch.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bind<'a> {
    /// A device tensor (its buffer; a view's offset is passed in the uniforms, see
    /// [`WgpuBackend::binding_of`]).
    T(&'a Tensor),
    /// An optional tensor: absent binds a small placeholder buffer.
    Opt(Option<&'a Tensor>),
    /// A raw buffer.
    Buf(&'a wgpu::Buffer),
}

/// The uniform block of a launch: 32-bit words in declaration order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Uniforms(Vec<u32>);

impl Uniforms {
    /// An empty block.
    pub(crate) fn new() -> Self {
        Uniforms(Vec::new())
    }
    /// Append a `u32`.
    pub(crate) fn u32(mut self, v: u32) -> Self {
        self.0.push(v);
        self
    }
    /// Append an `f32`.
    pub(crate) fn f32(mut self, v: f32) -> Self {
        self.0.push(v.to_bits());
        self
    }
    /// Append a size, checked to fit 32 bits (`what` names it in the error).
    pub(crate) fn size(self, what: &str, v: usize) -> Result<Self> {
        let v = u32::try_from(v).map_err(|_| be_err(format!("{what} = {v} exceeds 32 bits")))?;
        Ok(self.u32(v))
    }
    fn bytes(&self) -> Vec<u8> {
        let mut w = self.0.clone();
        w.resize(w.len().div_ceil(4).max(16) * 4, 0);
        bytemuck::cast_slice(&w).to_vec()
    }
}

impl WgpuBackend {
    /// The pipeline of `entry` in `shader` with `defs`, compiled on first use.
    fn pipeline(
        &self,
        shader: &Shader,
        entry: &'static str,
        defs: &[(&'static str, u32)],
    ) -> Result<wgpu::ComputePipeline> {
        let key: PipelineKey = (shader.name, entry, defs.to_vec());
        let mut cache = self
            .ctx
            .pipelines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        let mut src = String::new();
        for (name, v) in defs {
            src.push_str(&format!("const {name}: u32 = {v}u;\n"));
        }
        src.push_str(shader.source);
        let dev = &self.ctx.device;
        let p = self.scoped(&format!("compiling {}::{entry}", shader.name), || {
            let module = dev.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(shader.name),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
            Ok(
                dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(entry),
                    layout: None,
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: Default::default(),
                    cache: None,
                }),
            )
        })?;
        cache.insert(key, p.clone());
        Ok(p)
    }

    /// Dispatch `entry` of `shader` over `groups` workgroups with `uniforms` (group 0,
    /// binding 0) and `bindings` (bindings 1..). See the module docs.
    pub(crate) fn launch(
        &self,
        shader: &Shader,
        entry: &'static str,
        defs: &[(&'static str, u32)],
        bindings: &[Bind<'_>],
        uniforms: Uniforms,
        groups: [u32; 3],
    ) -> Result<()> {
        let max = self.ctx.limits.max_compute_workgroups_per_dimension;
        if groups.iter().any(|&g| g > max) {
            return Err(be_err(format!(
                "{}::{entry}: {groups:?} workgroups exceed the device limit of {max} per dimension",
                shader.name
            )));
        }
        if groups.contains(&0) {
            return Ok(());
        }
        let pipeline = self.pipeline(shader, entry, defs)?;
        let mut bufs = Vec::with_capacity(bindings.len());
        for b in bindings {
            bufs.push(match b {
                Bind::T(t) => self.binding_of(t)?.0,
                Bind::Opt(Some(t)) => self.binding_of(t)?.0,
                Bind::Opt(None) => &self.ctx.dummy,
                Bind::Buf(b) => b,
            });
        }
        let dev = &self.ctx.device;
        self.scoped(&format!("{}::{entry}", shader.name), || {
            use wgpu::util::DeviceExt;
            let ubuf = dev.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("uniforms"),
                contents: &uniforms.bytes(),
                usage: wgpu::BufferUsages::UNIFORM,
            });
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: ubuf.as_entire_binding(),
            }];
            entries.extend(bufs.iter().enumerate().map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource: b.as_entire_binding(),
            }));
            let bind = dev.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(entry),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            });
            let mut enc = dev.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind, &[]);
                pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
            }
            self.ctx.queue.submit([enc.finish()]);
            Ok(())
        })
    }

    /// Workgroup counts covering `n` invocations of `wg` each, spread over x and y when more
    /// than one dimension's limit is needed (the kernel computes its index as
    /// `g.x + g.y · nw.x · wg`, with `g` the global invocation id and `nw` the workgroup
    /// counts, and returns when it is `≥ n`).
    pub(crate) fn groups_1d(&self, n: usize, wg: u32) -> Result<[u32; 3]> {
        let max = self.ctx.limits.max_compute_workgroups_per_dimension.max(1) as usize;
        let groups = n.div_ceil(wg.max(1) as usize);
        if groups <= max {
            return Ok([groups as u32, 1, 1]);
        }
        let y = groups.div_ceil(max);
        if y > max {
            return Err(be_err(format!(
                "{n} invocations exceed the dispatch limits"
            )));
        }
        Ok([max as u32, y as u32, 1])
    }

    /// The tuning knobs in effect.
    pub fn knobs(&self) -> super::Knobs {
        self.ctx.knobs
    }

    /// The device limits the backend was opened with (the adapter's own).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.ctx.limits
    }

    /// The largest bytes one storage binding holds here (the knob bounded by the device).
    pub fn max_binding_bytes(&self) -> u64 {
        self.ctx.max_binding
    }
}
