//! `cargo xtask` task module (in progress).

/// Run the task with its arguments.
pub fn run(_args: &[String]) -> Result<(), String> {
    Err("not implemented yet".into())
}
