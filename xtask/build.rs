//! Records the host triple for `cargo xtask nostd`'s freestanding link.

fn main() {
    let host = std::env::var("HOST").unwrap_or_else(|_| "x86_64-unknown-linux-gnu".into());
    println!("cargo:rustc-env=XTASK_HOST={host}");
}
