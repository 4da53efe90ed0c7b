//! The backend registry: device backends announce themselves by name, and programs open them by
//! name without knowing which crates were built in.
//!
//! A backend crate (`aria-wgpu`, `aria-cuda`) exposes a `register()` that calls [`register`]
//! with an opener; a program (or the `aria` library, once, in one place) calls the `register()`
//! of every backend it was built with. Everything else (the pipeline, the CLI, the server)
//! opens a device with [`open`], so no model or pipeline code carries a `#[cfg(feature)]`
//! branch per backend.
//!
//! Settings come in as [`BackendOptions`], filled at the program's edge (command line, server
//! settings, environment variables read there): libraries below never read the environment.
//!
//! ```
//! use std::sync::Arc;
//! use aria_tensor::backend::registry::{self, BackendOptions};
//! # fn main() -> aria_tensor::Result<()> {
//! // The CPU backend is always registered (first), and opens like any other.
//! assert_eq!(registry::registered()[0].0, "cpu");
//! assert!(registry::open("cpu", &BackendOptions::default())?.is_cpu());
//! // A name nobody registered is an error that lists what is available.
//! let err = registry::open("tpu", &BackendOptions::default()).unwrap_err();
//! assert!(err.to_string().contains("tpu"));
//! # Ok(()) }
//! ```

use std::path::PathBuf;
use std::sync::{LazyLock, RwLock};

use crate::backend::Device;
use crate::{CoreError, Result};

/// Settings a program passes to a backend when it opens one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendOptions {
    /// Where a backend may keep compiled kernels between runs (`None`: no cache on disk).
    pub cache_dir: Option<PathBuf>,
    /// Backend-specific tuning values by name (e.g. wgpu's `gemm_tile`), parsed by the backend;
    /// an unknown name or a value that does not parse is an error naming it.
    pub settings: Vec<(String, String)>,
}

impl BackendOptions {
    /// The value of a setting, when given.
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Opens a backend: the [`Device`] its tensors live on.
pub type Opener = fn(&BackendOptions) -> Result<Device>;

#[derive(Clone)]
struct Entry {
    name: &'static str,
    about: &'static str,
    open: Opener,
}

fn open_cpu(_: &BackendOptions) -> Result<Device> {
    Ok(Device::Cpu)
}

/// The registered backends in registration order; the CPU backend (`aria_cpu::Cpu`, whose
/// tensors are host memory) is registered from the start.
static REGISTRY: LazyLock<RwLock<Vec<Entry>>> = LazyLock::new(|| {
    RwLock::new(vec![Entry {
        name: "cpu",
        about: "the CPU kernels (scalar, AVX2, AVX-512, AMX, NEON; chosen at run time)",
        open: open_cpu,
    }])
});

/// Make a backend available under `name` (lower case, as on the command line). Registering a
/// name again replaces its opener (registration is idempotent).
pub fn register(name: &'static str, about: &'static str, open: Opener) {
    let mut r = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    let entry = Entry { name, about, open };
    match r.iter_mut().find(|e| e.name == name) {
        Some(e) => *e = entry,
        None => r.push(entry),
    }
}

/// Whether a backend of this name can be opened (`cpu` always can).
pub fn is_registered(name: &str) -> bool {
    REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|e| e.name == name)
}

/// The registered backends as `(name, description)`, the CPU first.
pub fn registered() -> Vec<(&'static str, &'static str)> {
    REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|e| (e.name, e.about))
        .collect()
}

/// Open the backend registered as `name` (`cpu`: [`Device::Cpu`], host memory, whose ops run
/// on the CPU backend, `aria_cpu::Cpu`).
///
/// Errors: [`CoreError::NoBackend`] naming the backend and listing the registered ones when
/// nothing is registered under `name`; whatever the backend's opener returns otherwise (no
/// adapter, no driver, a bad setting).
pub fn open(name: &str, opts: &BackendOptions) -> Result<Device> {
    let found = REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|e| e.name == name)
        .cloned();
    match found {
        Some(e) => (e.open)(opts),
        None => Err(CoreError::NoBackend {
            name: name.to_string(),
            available: registered()
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_backend_opens_and_is_listed_once() {
        register("test-a", "a test backend", open_cpu);
        register("test-a", "a test backend", open_cpu);
        assert!(is_registered("test-a"));
        assert_eq!(
            registered().iter().filter(|(n, _)| *n == "test-a").count(),
            1
        );
        assert!(matches!(
            open("test-a", &BackendOptions::default()),
            Ok(Device::Cpu)
        ));
    }

    #[test]
    fn an_unknown_backend_names_itself_and_what_is_there() {
        let e = open("nope", &BackendOptions::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("nope") && e.contains("cpu"), "{e}");
    }

    #[test]
    fn the_last_value_of_a_setting_wins() {
        let o = BackendOptions {
            cache_dir: None,
            settings: vec![("a".into(), "1".into()), ("a".into(), "2".into())],
        };
        assert_eq!(o.setting("a"), Some("2"));
        assert_eq!(o.setting("b"), None);
    }
}
