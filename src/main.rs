fn main() {
    // The guardian of a running command (src/guardian.rs), before anything else.
    if let Some(spec) = std::env::var_os(lc_cli::guardian::ENV) {
        lc_cli::guardian::main(&spec.to_string_lossy());
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
    lc_cli::exit::exit(result)
}
