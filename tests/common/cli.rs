//! Helpers for the client tests: process inspection, and a pseudo-terminal
//! to run lc-cli at.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::wait_until;

/// A spawned process killed (by its pid) if the test ends while it runs.
pub(crate) struct Guard(pub Child);

impl Guard {
    pub(crate) fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// Waits up to `limit` for the exit; the status code (128+N for signal N).
    pub(crate) fn wait_for(&mut self, limit: Duration) -> Option<i32> {
        let mut code = None;
        wait_until(limit, || match self.0.try_wait() {
            Ok(Some(status)) => {
                use std::os::unix::process::ExitStatusExt;
                code = status.code().or(status.signal().map(|s| 128 + s));
                true
            }
            _ => false,
        });
        code
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Kills a process the test did not start itself (found by pid) with
/// SIGKILL when dropped, if it is still there.
pub(crate) struct KillOnDrop(pub i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !is_dead(self.0) {
            // SAFETY: kill(2) takes only integers: no memory of ours is involved.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
}

/// The state letter of a process from /proc (R, S, T, Z...), None if gone.
pub(crate) fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.chars().next()
}

/// Field `n` (1-based, as in proc(5)) of /proc/PID/stat.
pub(crate) fn proc_field(pid: i32, n: usize) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(n - 3)?.parse().ok()
}

/// Gone, or a zombie waiting to be reaped.
pub(crate) fn is_dead(pid: i32) -> bool {
    matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

pub(crate) fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes only integers: no memory of ours is involved.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// Reads a pid a script wrote to `path`, waiting up to 10 s for it.
pub(crate) fn read_pid(path: &std::path::Path) -> i32 {
    let mut pid = None;
    wait_until(Duration::from_secs(10), || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap_or_else(|| panic!("no pid in {}", path.display()))
}

/// A pseudo-terminal: the master side, and everything read from it.
pub(crate) struct Pty {
    master: File,
    read: Arc<(Mutex<Seen>, Condvar)>,
}

/// What the reader thread has read from the master side so far.
#[derive(Default)]
struct Seen {
    bytes: Vec<u8>,
    /// The read ended (EIO, or EOF): no process has the terminal (the
    /// slave side) open any more, and everything written to it was read.
    drained: bool,
}

impl Pty {
    /// Runs `cmd` as a session leader whose controlling terminal is a new
    /// pseudo-terminal (stdin, stdout and stderr on it), as a login shell
    /// would be.
    pub(crate) fn spawn(mut cmd: Command) -> (Pty, Guard) {
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize {
            ws_row: 24,
            ws_col: 200,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty writes the two descriptors into live integers and reads `size`; the name and termios pointers may be null.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // Not inherited by anything else the tests start.
        for fd in [master, slave] {
            // SAFETY: fcntl on descriptors this function owns; no memory is passed.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        // SAFETY: openpty just returned this descriptor, and nothing else owns it.
        let master = unsafe { File::from(OwnedFd::from_raw_fd(master)) };
        // SAFETY: openpty just returned this descriptor, and nothing else owns it.
        let slave = unsafe { File::from(OwnedFd::from_raw_fd(slave)) };
        cmd.stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // SAFETY: the closure calls only setsid and ioctl, both async-signal-safe, and allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn in a pseudo-terminal");
        drop(cmd); // closes our copies of the slave
        let read = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
        let sink = read.clone();
        let mut reader = master.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // The master side reads EIO once every slave end is closed,
            // after what was written before the last close (Linux drains
            // the slave's writes before it reports the close).
            loop {
                let n = match reader.read(&mut buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                sink.0.lock().unwrap().bytes.extend_from_slice(&buf[..n]);
                sink.1.notify_all();
            }
            sink.0.lock().unwrap().drained = true;
            sink.1.notify_all();
        });
        (Pty { master, read }, Guard(child))
    }

    /// Types `bytes` at the terminal (0x03 is Ctrl-C, 0x1a Ctrl-Z).
    pub(crate) fn type_bytes(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
        self.master.flush().unwrap();
    }

    /// What was read so far: while a process still has the terminal open,
    /// its last writes may not be in it yet (see [`Pty::final_output`]).
    pub(crate) fn output(&self) -> String {
        String::from_utf8_lossy(&self.read.0.lock().unwrap().bytes).into_owned()
    }

    /// Everything written to the terminal, once every process that had it
    /// open has closed it (for a test whose command ended: lc-cli and what
    /// it started): waits up to `limit` for the reader to drain it, and
    /// fails naming what it read so far if something still holds it. A
    /// status check of the child (its exit) says nothing of whether the
    /// reader has read its last line yet.
    pub(crate) fn final_output(&self, limit: Duration) -> String {
        let (lock, cvar) = &*self.read;
        let (read, _) = cvar
            .wait_timeout_while(lock.lock().unwrap(), limit, |r| !r.drained)
            .unwrap();
        let text = String::from_utf8_lossy(&read.bytes).into_owned();
        assert!(
            read.drained,
            "the terminal was still open {limit:?} later (a process of the test lives on?); \
             read so far: {text:?}"
        );
        text
    }

    /// Waits up to `limit` for `text` to appear in the output.
    pub(crate) fn wait_for_output(&self, text: &str, limit: Duration) -> bool {
        wait_until(limit, || self.output().contains(text))
    }
}

/// Stopped (state T), or frozen by a stop: a shell waiting in `vfork`
/// (state D) for a child that the stop caught before its `exec`.
fn stopped_or_frozen(pid: i32) -> bool {
    match proc_state(pid) {
        Some('T') => true,
        Some('D') => std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .any(|c| proc_state(c) == Some('T')),
        _ => false,
    }
}

/// Waits up to 10 s for both the command and lc-cli (its parent) to be
/// stopped (state T; the command may be frozen in `vfork` instead, see
/// [`stopped_or_frozen`]); the failure names both states and what
/// `context` adds (the terminal's output, say).
pub(crate) fn assert_both_stopped(command: i32, lc: i32, context: impl Fn() -> String) {
    assert!(
        wait_until(Duration::from_secs(10), || stopped_or_frozen(command)
            && proc_state(lc) == Some('T')),
        "not both stopped: command {:?}, lc-cli {:?}{}",
        proc_state(command),
        proc_state(lc),
        context()
    );
}

/// A temporary directory and the paths of files named `names` in it (not
/// created): the pid files, gates and marks a test's scripts write.
pub(crate) fn temp_files<const N: usize>(
    names: [&str; N],
) -> (tempfile::TempDir, [std::path::PathBuf; N]) {
    let dir = tempfile::tempdir().unwrap();
    let paths = names.map(|n| dir.path().join(n));
    (dir, paths)
}
