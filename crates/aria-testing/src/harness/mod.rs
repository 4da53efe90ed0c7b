//! The op harness, in the style of ggml's `test-backend-ops`: every op of the set, in every
//! weight format, at a set of shapes (edge shapes included), run on a backend and compared with
//! the CPU reference, under tolerances taken from one table ([`TOLERANCES`]), each with its
//! reason.
//!
//! - [`cases`] is the table of calls. A case names its op (as in
//!   [`Op::NAMES`](aria_core::backend::Op::NAMES)) and its format, holds CPU inputs, and runs
//!   through the public `ops` functions (so the check step, the routing and the result check of
//!   [`run_checked`](aria_core::backend::run_checked) are exercised as a model exercises them).
//! - [`run_case`] runs one case on the CPU and on a device and measures the difference.
//! - [`malformed`] is the table of calls the check step must refuse before any backend sees
//!   them.
//!
//! A backend that lacks an op or a format answers [`CoreError::Unsupported`] (or a
//! [`CoreError::Backend`] naming the format): [`run_case`] reports that as
//! [`Outcome::Unsupported`], never as a pass.

mod cases;
mod tolerances;

pub use cases::{cases, malformed, Malformed};
pub use tolerances::{tolerance, Tol, TOLERANCES};

use aria_core::{CoreError, Device, Result, Tensor};

use crate::fixtures::rel_err;

type RunFn = Box<dyn Fn(&Device, &[Tensor]) -> Result<Tensor>>;

/// One call of the table.
pub struct Case {
    /// The op's name (an entry of `Op::NAMES`).
    pub op: &'static str,
    /// The weight or data format the case runs in (`f32`, `bf16`, `f16`, `q8_0`, `q8_0+w8a8`,
    /// `q4_k`, `q6_k`, `i64`): the tolerance table's second key.
    pub format: &'static str,
    /// What distinguishes this case (shapes, options).
    pub label: String,
    /// The operands, on the CPU; [`run_case`] moves them to the device.
    pub inputs: Vec<Tensor>,
    run: RunFn,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{}] {}", self.op, self.format, self.label)
    }
}

impl Case {
    pub(crate) fn new(
        op: &'static str,
        format: &'static str,
        label: impl Into<String>,
        inputs: Vec<Tensor>,
        run: impl Fn(&Device, &[Tensor]) -> Result<Tensor> + 'static,
    ) -> Case {
        Case {
            op,
            format,
            label: label.into(),
            inputs,
            run: Box::new(run),
        }
    }

    /// Run the case on `device` with these operands (already there).
    pub fn call(&self, device: &Device, inputs: &[Tensor]) -> Result<Tensor> {
        (self.run)(device, inputs)
    }
}

/// What one case gave on one backend.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// It ran: the relative error against the CPU (`max|Δ| / max|ref|`, infinite on a
    /// non-finite value or a length mismatch) and whether the bits are identical.
    Ran {
        /// The relative error.
        err: f32,
        /// Whether every bit is identical to the CPU result.
        identical: bool,
    },
    /// The backend lacks the op or the format (its message).
    Unsupported(String),
}

/// Run `case` on the CPU and on `device`, and compare. An error other than "unsupported" is
/// returned as an error (a backend must not fail a well-formed op for another reason), as is a
/// result that left the device or differs in shape or dtype.
pub fn run_case(case: &Case, device: &Device) -> Result<Outcome> {
    let want = case.call(&Device::Cpu, &case.inputs)?;
    let on: Vec<Tensor> = case
        .inputs
        .iter()
        .map(|t| device.put(t))
        .collect::<Result<_>>()?;
    let got = match case.call(device, &on) {
        Ok(t) => t,
        Err(CoreError::Unsupported { op, backend }) => {
            return Ok(Outcome::Unsupported(format!(
                "{op} unsupported on {backend}"
            )))
        }
        Err(CoreError::Backend { reason, .. }) if reason.contains("no kernel for packed") => {
            return Ok(Outcome::Unsupported(reason))
        }
        Err(e) => return Err(e),
    };
    if !device.is_cpu() && got.device().is_cpu() {
        return Err(CoreError::Invalid(format!(
            "{case:?}: the result left the device"
        )));
    }
    let got = got.to_cpu()?;
    if got.shape() != want.shape() || got.dtype() != want.dtype() {
        return Err(CoreError::Invalid(format!(
            "{case:?}: {:?} {} where the CPU gives {:?} {}",
            got.shape(),
            got.dtype(),
            want.shape(),
            want.dtype()
        )));
    }
    let (a, r) = (got.to_vec_f32()?, want.to_vec_f32()?);
    let identical = got.as_bytes()? == want.as_bytes()?;
    Ok(Outcome::Ran {
        err: if identical { 0.0 } else { rel_err(&a, &r) },
        identical,
    })
}

/// One line of a backend's report: the worst case of an (op, format) pair.
#[derive(Debug, Clone)]
pub struct Row {
    /// The op.
    pub op: &'static str,
    /// The format.
    pub format: &'static str,
    /// Cases run.
    pub ran: usize,
    /// Cases the backend lacks.
    pub unsupported: usize,
    /// The largest relative error over the cases run.
    pub worst: f32,
    /// The table's bound.
    pub bound: f32,
}

/// Run every case on `device`: one row per (op, format), and the failures (a case over its
/// bound, or an error), each described.
pub fn run_all(device: &Device) -> (Vec<Row>, Vec<String>) {
    let mut rows: Vec<Row> = Vec::new();
    let mut failures = Vec::new();
    for case in cases() {
        let bound = match tolerance(case.op, case.format) {
            Some(t) => t.rel,
            None => {
                failures.push(format!("{case:?}: no row in the tolerance table"));
                continue;
            }
        };
        let i = match rows
            .iter()
            .position(|r| r.op == case.op && r.format == case.format)
        {
            Some(i) => i,
            None => {
                rows.push(Row {
                    op: case.op,
                    format: case.format,
                    ran: 0,
                    unsupported: 0,
                    worst: 0.0,
                    bound,
                });
                rows.len() - 1
            }
        };
        match run_case(&case, device) {
            Ok(Outcome::Ran { err, .. }) => {
                rows[i].ran += 1;
                rows[i].worst = rows[i].worst.max(err);
                if err.is_nan() || err > bound {
                    failures.push(format!("{case:?}: relative error {err:.3e} > {bound:.1e}"));
                }
            }
            Ok(Outcome::Unsupported(_)) => rows[i].unsupported += 1,
            Err(e) => failures.push(format!("{case:?}: {e}")),
        }
    }
    (rows, failures)
}

/// The report as a table (op, format, cases run, cases unsupported, worst error, bound).
pub fn render(backend: &str, rows: &[Row]) -> String {
    let mut s = format!(
        "op harness on {backend}\n{:<22} {:<10} {:>4} {:>5} {:>10} {:>8}\n",
        "op", "format", "ran", "lacks", "worst", "bound"
    );
    for r in rows {
        s.push_str(&format!(
            "{:<22} {:<10} {:>4} {:>5} {:>10.2e} {:>8.0e}\n",
            r.op, r.format, r.ran, r.unsupported, r.worst, r.bound
        ));
    }
    s
}
