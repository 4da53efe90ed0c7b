//! # aria-serve
//!
//! HTTP serving of aria text-to-audio, for putting a resident model in front of users:
//!
//! * a durable job queue ([`jobs`]: SQLite here, PostgreSQL with the `postgres` feature) —
//!   a job is stored before its `202 Accepted`, and a restart loses none;
//! * one model thread that claims compatible queued jobs together and runs them as one
//!   `generate_batch`, with progress, cancellation and leases (several processes may share a
//!   store; a killed worker's jobs are retried);
//! * `GET /v1/jobs/{id}/audio` streamed while the decoder runs;
//! * `POST|GET /v1/stream`: open-ended generation sent chunk by chunk as it is generated, its
//!   prompt changeable while it runs (`POST /v1/stream/{id}/prompt`);
//! * limits named in every refusal, a bounded queue (`429` + `Retry-After`), a bearer token
//!   off loopback, graceful shutdown;
//! * a plain HTML page at `/`, `/health`, `/info`, `/metrics` (Prometheus) and
//!   `/openapi.json`.
//!
//! ```no_run
//! # async fn f() -> aria_serve::Result<()> {
//! let cfg = aria_serve::ServeConfig::demo("/tmp/aria-serve-demo");
//! let server = aria_serve::start(cfg).await?;
//! println!("listening on http://{}", server.addr());
//! server.shutdown().await?;
//! # Ok(()) }
//! ```

pub mod api;
pub mod config;
pub mod error;
pub mod jobs;
mod listen;
pub mod live;
pub mod metrics;
pub mod picture;
pub mod request;
mod server;
pub mod state;
pub mod worker;

pub use config::{Limits, ModelSource, ServeConfig, StoreSpec};
pub use error::{Result, ServeError};
pub use server::{serve_blocking, start, RunningServer, ShutdownHandle};

/// The OpenAPI 3 document the server serves at `/openapi.json`.
pub const OPENAPI: &str = api::OPENAPI;
