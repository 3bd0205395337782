//! The unwinder linked into the lc-cli binary (libgcc_eh) instead of loaded
//! from libgcc_s.so.1 at every start: one shared library fewer to map,
//! which was 0.14 ms of each `lc-cli` run (BENCHMARKS.md, "The lock path
//! and start-up"); panics unwind as before. The binary only (not the tests
//! or the proc-macros), on glibc Linux, and not in the static build, which
//! links libgcc_eh already.

fn main() {
    let var = |name| std::env::var(name).unwrap_or_default();
    let features = var("CARGO_CFG_TARGET_FEATURE");
    if var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && !features.split(',').any(|f| f == "crt-static")
    {
        println!("cargo:rustc-link-arg-bins=-Wl,--whole-archive,-lgcc_eh,--no-whole-archive");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
