//! The `aria` command-line program.

fn main() {
    println!("aria: see README.md");
}
