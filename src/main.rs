// lc-cli's own entry point in place of std's (see `main` below); the test
// harness keeps its own.
#![cfg_attr(not(test), no_main)]

/// malloc, with tokio's 128-byte aligned tasks kept apart (see `alloc`).
#[global_allocator]
static ALLOCATOR: lc_cli::alloc::Allocator = lc_cli::alloc::Allocator;

/// The C entry point, in place of std's start-up, which reads
/// /proc/self/maps on every start (glibc's pthread_getattr_np, a tenth of
/// lc-cli's instructions on the lock path; `--version` 0.37 -> 0.30 ms over
/// `true`, BENCHMARKS.md) only to find the main thread's stack guard for its
/// "has overflowed its stack" message: a stack overflow is now a plain
/// SIGSEGV. The rest of std's start-up is done here, as std does it;
/// arguments and the environment come from glibc as before.
#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(argc: libc::c_int, argv: *const *const libc::c_char) -> libc::c_int {
    standard_fds_open();
    // A guardian leaving lc-cli's memory runs this binary again (src/guardian/watch.rs).
    // SAFETY: argc and argv as the C runtime passes them.
    unsafe { lc_cli::guardian::resume_if_asked(argc, argv) };
    // As std does: a write to a closed pipe fails with EPIPE instead of
    // killing lc-cli (a command started later gets the default back).
    // SAFETY: SIG_IGN runs no code of ours.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    run()
}

/// std's `sanitize_standard_fds`: a closed stdin, stdout or stderr is opened
/// on /dev/null, so that no socket or log file lc-cli opens takes its number
/// and receives what is meant for it.
#[cfg(not(test))]
fn standard_fds_open() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: poll on our own array, then open and fcntl with plain values.
    unsafe {
        let closed: Vec<bool> = loop {
            if libc::poll(fds.as_mut_ptr(), 3, 0) != -1 {
                break fds
                    .iter()
                    .map(|p| p.revents & libc::POLLNVAL != 0)
                    .collect();
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // poll cannot say (a sandbox refusing it): ask each one.
                _ => {
                    break (0..3)
                        .map(|fd| libc::fcntl(fd, libc::F_GETFD) == -1)
                        .collect()
                }
            }
        };
        for (fd, closed) in closed.into_iter().enumerate() {
            if closed && libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) != fd as libc::c_int {
                std::process::abort();
            }
        }
    }
}

#[cfg_attr(test, allow(dead_code))]
fn run() -> ! {
    // `--version` alone: clap's line, without building clap's command.
    if version_only(std::env::args_os()) {
        use std::io::Write;
        let _ = std::io::stdout().write_all(VERSION_LINE.as_bytes());
        // No hand-off: so small a process unmaps faster than a helper
        // starts (src/teardown.rs).
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
    // Everything is written: the end is left to a helper (src/teardown.rs).
    lc_cli::teardown::hand_off();
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
