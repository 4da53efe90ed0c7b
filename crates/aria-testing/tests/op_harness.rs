//! The op harness on every backend of the workspace: the counting backend (the CPU reference
//! behind the device boundary: bit-identical, nothing downloaded), wgpu (lavapipe in CI) and
//! CUDA (when a GPU is present). One table of cases, one table of tolerances
//! (`aria_testing::harness`); the check step refuses malformed calls before any backend sees
//! them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use aria_core::backend::registry::{self, BackendOptions};
use aria_core::backend::{Backend, Op};
use aria_core::{ops, CoreError, Device, Result, Tensor};
use aria_testing::counting::CountingBackend;
use aria_testing::harness::{self, Outcome, TOLERANCES};

#[test]
fn the_tables_cover_each_other_and_the_op_set() {
    let cases = harness::cases();
    for c in &cases {
        assert!(
            harness::tolerance(c.op, c.format).is_some(),
            "{c:?}: no row in the tolerance table"
        );
        assert!(Op::NAMES.contains(&c.op), "{c:?}: not an op of the set");
    }
    for name in Op::NAMES {
        assert!(
            cases.iter().any(|c| c.op == *name),
            "the op `{name}` has no case"
        );
    }
    for t in TOLERANCES {
        assert!(
            cases.iter().any(|c| c.op == t.op && c.format == t.format),
            "the row ({}, {}) has no case",
            t.op,
            t.format
        );
        assert!(!t.why.is_empty() && t.rel >= 0.0);
    }
}

#[test]
fn the_docs_print_the_tolerance_table() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/op-harness.md"
    ))
    .expect("docs/op-harness.md");
    let section = doc
        .split("## Tolerances")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a Tolerances section");
    let rows: Vec<(String, String, f32)> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (
                cells[1].trim_matches('`').to_string(),
                cells[2].trim_matches('`').to_string(),
                cells[3].parse::<f32>().expect("a bound"),
            )
        })
        .collect();
    let want: Vec<(String, String, f32)> = TOLERANCES
        .iter()
        .map(|t| (t.op.to_string(), t.format.to_string(), t.rel))
        .collect();
    assert_eq!(
        rows, want,
        "docs/op-harness.md differs from harness::TOLERANCES"
    );
}

#[test]
fn counting_backend_runs_every_case_exactly_and_on_the_device() -> Result<()> {
    let be = CountingBackend::new();
    let dev = be.device();
    let mut lacks = Vec::new();
    for case in harness::cases() {
        be.reset();
        let outcome = harness::run_case(&case, &dev)?;
        let c = be.counts();
        if let Outcome::Unsupported(why) = &outcome {
            assert_eq!(c.downloads, 0, "{case:?}: downloads ({c:?})");
            lacks.push(format!("{} [{}]: {why}", case.op, case.format));
            continue;
        }
        assert_eq!(
            c.downloads, 1,
            "{case:?}: downloads besides the result ({c:?})"
        );
        assert_eq!(c.implicit_uploads, 0, "{case:?}: CPU operands ({c:?})");
        assert!(c.total_ops() >= 1, "{case:?}: no op reached the backend");
        match outcome {
            // The counting backend runs the CPU reference: bits, except for packed weights,
            // whose CPU layer runs the format's own kernels (held to the table).
            Outcome::Ran { identical, err } if case.op == "linear_packed" => {
                let bound = harness::tolerance(case.op, case.format).unwrap().rel;
                assert!(
                    identical || err <= bound,
                    "{case:?}: {err:.3e} > {bound:.1e}"
                );
            }
            Outcome::Ran { identical, err } => {
                assert!(identical, "{case:?}: bits differ from the CPU ({err:.3e})")
            }
            Outcome::Unsupported(_) => {}
        }
    }
    // It has the q8_0 blocks only (the k-quants run on the CPU through their kernels).
    assert!(
        lacks
            .iter()
            .all(|l| l.contains("q4_k") || l.contains("q6_k")),
        "{lacks:#?}"
    );
    Ok(())
}

/// The error of a malformed call, on the CPU and on `dev`: the same, and no op reached the
/// backend (`ops_seen` counts what it saw).
fn refused_everywhere(dev: &Device, ops_seen: &dyn Fn() -> usize) {
    for m in harness::malformed() {
        let cpu = (m.call)(&m.inputs).expect_err(m.what);
        assert!(
            matches!(
                cpu,
                CoreError::Shape { .. } | CoreError::DType { .. } | CoreError::Invalid(_)
            ),
            "{}: {cpu}",
            m.what
        );
        let on: Vec<Tensor> = m.inputs.iter().map(|t| dev.put(t).unwrap()).collect();
        let before = ops_seen();
        let got = (m.call)(&on).expect_err(m.what);
        assert_eq!(got.to_string(), cpu.to_string(), "{}", m.what);
        assert_eq!(ops_seen(), before, "{}: the backend saw the op", m.what);
    }
}

#[test]
fn malformed_calls_are_refused_before_any_backend() {
    let be = CountingBackend::new();
    refused_everywhere(&be.device(), &|| be.counts().total_ops());
}

/// A backend that answers every op with a result of the wrong shape.
struct Liar(CountingBackend);

impl Backend for Liar {
    fn name(&self) -> &str {
        "liar"
    }
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        self.0.upload(t)
    }
    fn to_cpu(&self, t: &Tensor) -> Result<Tensor> {
        self.0.to_cpu(t)
    }
    fn run(&self, op: Op) -> Result<Tensor> {
        let out = self.0.run(op)?;
        out.reshape(&[out.elem_count()])
    }
}

#[test]
fn a_result_is_held_to_the_check_step() {
    let liar = Liar(CountingBackend::new());
    let x = liar
        .0
        .device()
        .put(&Tensor::zeros(&[2, 4], aria_core::DType::F32))
        .unwrap();
    // A backend's result of another shape than the check step promised is an error naming
    // the op and both shapes, not a silently reshaped tensor.
    let op = Op::Softmax { x };
    let spec = op.check().unwrap();
    let e = aria_core::backend::run_checked(&liar, op, &spec).expect_err("wrong shape");
    let msg = e.to_string();
    assert!(
        msg.contains("softmax") && msg.contains("[8]") && msg.contains("[2, 4]"),
        "{msg}"
    );
}

/// A backend with no ops at all.
struct Bare;

impl Backend for Bare {
    fn name(&self) -> &str {
        "bare"
    }
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        CountingBackend::new().device().put(t)
    }
    fn to_cpu(&self, t: &Tensor) -> Result<Tensor> {
        t.to_cpu()
    }
}

#[test]
fn missing_ops_are_errors_not_downloads() -> Result<()> {
    let be = CountingBackend::new();
    let x = be
        .device()
        .put(&Tensor::zeros(&[2, 4], aria_core::DType::F32))?;
    let bare: Arc<dyn Backend> = Arc::new(Bare);
    match bare.run(Op::Softmax { x: x.clone() }) {
        Err(CoreError::Unsupported { op, backend }) => {
            assert_eq!((op, backend.as_str()), ("softmax", "bare"));
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // `map` takes a closure, which no device can run: refused, nothing downloaded.
    be.reset();
    let r = ops::map(&x, |v| v + 1.0);
    assert!(matches!(r, Err(CoreError::Unsupported { .. })), "{r:?}");
    assert_eq!(be.counts().downloads, 0);
    let mut names = Op::NAMES.to_vec();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Op::NAMES.len(), "op names are distinct");
    Ok(())
}

/// Run the table on a registered backend; print its report.
fn run_table(name: &str, dev: &Device) {
    let (rows, failures) = harness::run_all(dev);
    println!("{}", harness::render(name, &rows));
    assert!(failures.is_empty(), "{name}:\n{}", failures.join("\n"));
    refused_everywhere(dev, &|| 0);
}

#[test]
fn the_cpu_is_a_registered_backend_that_runs_every_case() {
    // Opened by name like the device backends, and the first of the registry.
    assert_eq!(registry::registered().first().map(|e| e.0), Some("cpu"));
    let dev = registry::open("cpu", &BackendOptions::default()).unwrap();
    assert_eq!(aria_core::backend::of(&dev).name(), "cpu");
    let (rows, failures) = harness::run_all(&dev);
    println!("{}", harness::render("cpu", &rows));
    assert!(failures.is_empty(), "cpu:\n{}", failures.join("\n"));
    // The reference is itself: every case runs, to the bit, none unsupported.
    let cases = harness::cases();
    assert!(!cases.is_empty());
    for case in &cases {
        match harness::run_case(case, &dev).unwrap() {
            Outcome::Ran { identical, .. } => assert!(identical, "{case:?}"),
            Outcome::Unsupported(why) => panic!("{case:?}: the CPU backend refused: {why}"),
        }
    }
    refused_everywhere(&dev, &|| 0);
}

#[test]
fn wgpu_runs_the_table() {
    aria_wgpu::register();
    match registry::open("wgpu", &BackendOptions::default()) {
        Ok(dev) => run_table("wgpu", &dev),
        Err(e) => aria_testing::skip(format!("op_harness::wgpu_runs_the_table: {e}")),
    }
}

#[test]
fn cuda_runs_the_table() {
    aria_cuda::register();
    match registry::open("cuda", &BackendOptions::default()) {
        Ok(dev) => run_table("cuda", &dev),
        Err(e) => {
            assert!(
                std::env::var("ARIA_REQUIRE_CUDA").as_deref() != Ok("1"),
                "no CUDA device but ARIA_REQUIRE_CUDA=1: {e}"
            );
            aria_testing::skip_for_hardware(format!(
                "op_harness::cuda_runs_the_table: no CUDA device ({e})"
            ))
        }
    }
}
