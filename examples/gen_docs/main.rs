//! Regenerates `completions/` and `man/` from the clap definitions:
//!
//!     cargo run --example gen_docs

mod man;

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let completions = root.join("completions");
    let pages = root.join("man");
    std::fs::create_dir_all(&completions)?;
    std::fs::create_dir_all(&pages)?;
    for shell in lc_cli::docs::SHELLS {
        let path = completions.join(lc_cli::docs::completion_file(shell));
        std::fs::write(path, lc_cli::docs::completion(shell))?;
    }
    for (name, page) in man::man_pages()? {
        std::fs::write(pages.join(name), page)?;
    }
    println!("wrote {} and {}", completions.display(), pages.display());
    Ok(())
}
