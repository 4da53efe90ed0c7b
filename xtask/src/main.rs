//! `cargo xtask`: development tasks.

fn main() {
    println!("xtask: no task given");
}
