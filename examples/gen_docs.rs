//! Regenerates `completions/` and `man/` from the clap definitions:
//!
//!     cargo run --example gen_docs
fn main() -> std::io::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    lc_cli::docs::write_all(root)?;
    println!(
        "wrote {} and {}",
        root.join("completions").display(),
        root.join("man").display()
    );
    Ok(())
}
