//! The device backends built into this library, registered in aria-core's
//! [backend registry](aria_core::backend::registry).
//!
//! This is the one place where cargo features choose backends: [`register_builtin`] registers
//! each backend crate the build includes (`wgpu` → `aria-wgpu`, `cuda` → `aria-cuda`), and
//! everything else opens devices by name through the registry. [`crate::Pipeline::load`] and
//! [`crate::DeviceKind::check`] call it, so a program only calls it itself to list or open
//! backends before loading a model.
//!
//! ```
//! aria::backends::register_builtin();
//! let names: Vec<_> = aria_core::backend::registry::registered()
//!     .into_iter()
//!     .map(|(name, _)| name)
//!     .collect();
//! assert_eq!(names[0], "cpu");
//! ```

use std::sync::Once;

/// Register every backend this build includes (idempotent, cheap after the first call).
pub fn register_builtin() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        #[cfg(feature = "wgpu")]
        aria_wgpu::register();
        #[cfg(feature = "cuda")]
        aria_cuda::register();
    });
}
