//! A backend's own layout of a dense weight, made once ([`Prepared`]).

use std::any::Any;
use std::sync::Arc;

/// A dense weight `w [N, K]` laid out once by the backend it lives on
/// ([`Backend::prepare_weight`](super::Backend::prepare_weight)), carried by
/// [`Op::Linear`](super::Op::Linear) beside `w` so that a layer run many times (a diffusion
/// model's, at every sampler step) does not lay its weight out again in every call: the CPU
/// backend's packed f32 panels of its matrix product, for example.
///
/// It is a hint that never changes a result: the op's value is that of `w`, bit for bit, and a
/// backend that does not recognise the layout (or cannot use it on the current path) reads `w`.
/// The check step holds its shape to `w`'s.
#[derive(Clone)]
pub struct Prepared {
    backend: String,
    shape: [usize; 2],
    nbytes: usize,
    layout: Arc<dyn Any + Send + Sync>,
}

impl Prepared {
    /// `layout` (of `nbytes` bytes), made by `backend` for a weight of `shape`.
    pub fn new<T: Any + Send + Sync>(
        backend: &str,
        shape: [usize; 2],
        nbytes: usize,
        layout: T,
    ) -> Prepared {
        Prepared {
            backend: backend.to_string(),
            shape,
            nbytes,
            layout: Arc::new(layout),
        }
    }

    /// The backend that made it.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// The weight's shape `[N, K]`.
    pub fn shape(&self) -> [usize; 2] {
        self.shape
    }

    /// The bytes it holds.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The layout, when it is a `T` (what the backend that made it reads back).
    pub fn layout<T: Any>(&self) -> Option<&T> {
        self.layout.downcast_ref::<T>()
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Prepared({}, {:?}, {} bytes)",
            self.backend, self.shape, self.nbytes
        )
    }
}
