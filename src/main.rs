//! lc-cli's entry point: the guardian's start, the `--version` shortcut,
//! then parse, run, report, exit.

fn main() {
    // lc-cli's binary started as its own guardian (src/guardian.rs) goes no
    // further: it watches, and exits.
    lc_cli::guardian::run_if_asked();
    run()
}

fn run() -> ! {
    // `--version` alone: clap's line, without building clap's command.
    if version_only(std::env::args_os()) {
        use std::io::Write;
        let _ = std::io::stdout().write_all(VERSION_LINE.as_bytes());
        std::process::exit(0)
    }
    let result = match lc_cli::cmd::parse(std::env::args_os().collect()) {
        Ok(cli) => lc_cli::cmd::run(cli),
        Err(err) => {
            // Help and version are not errors; everything else is a usage error.
            let code = if err.use_stderr() {
                lc_cli::exit::ExitCode::Usage
            } else {
                lc_cli::exit::ExitCode::Success
            };
            let _ = err.print();
            Ok(code)
        }
    };
    let code = lc_cli::exit::report(result);
    lc_cli::exit::end(code)
}

/// What `lc-cli --version` prints (clap's `render_version`: the unit test
/// below holds them equal).
const VERSION_LINE: &str = concat!("lc-cli ", env!("CARGO_PKG_VERSION"), "\n");

/// `--version` or `-V` and no other argument.
fn version_only(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let mut args = args.skip(1);
    matches!((args.next(), args.next()), (Some(a), None) if a == "--version" || a == "-V")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_fast_version_line_is_claps() {
        let clap = lc_cli::cli::Cli::command().render_version();
        assert_eq!(VERSION_LINE, clap);
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert!(version_only(args(&["lc-cli", "--version"]).into_iter()));
        assert!(version_only(args(&["x", "-V"]).into_iter()));
        assert!(!version_only(
            args(&["lc-cli", "--version", "lock"]).into_iter()
        ));
        assert!(!version_only(
            args(&["lc-cli", "lock", "--version"]).into_iter()
        ));
        assert!(!version_only(args(&["lc-cli"]).into_iter()));
    }
}
