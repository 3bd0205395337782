//! Spawning the command, forwarding signals to its process group, stopping it
//! by policy, and turning its end into our exit status.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::exit::ExitCode;

pub struct Running {
    child: tokio::process::Child,
    pgid: Pid,
}

pub enum ChildEnd {
    Exited(i32),
    Signalled(i32),
}

/// Why the command could not start, and the status that says so.
pub struct SpawnError {
    pub code: ExitCode,
    pub message: String,
}

pub fn spawn(argv: &[OsString], env: &[(String, String)]) -> Result<Running, SpawnError> {
    let program = &argv[0];
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&argv[1..]).envs(env.iter().map(|(k, v)| (k, v)));
    // Its own process group, so a forwarded signal reaches the grandchildren.
    cmd.process_group(0);
    unsafe {
        cmd.pre_exec(|| {
            // If lc-cli dies (even by SIGKILL), the child is told.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| {
        let name = program.to_string_lossy();
        match e.kind() {
            io::ErrorKind::NotFound => SpawnError {
                code: ExitCode::NotFound,
                message: format!("{name}: command not found"),
            },
            _ => SpawnError {
                code: ExitCode::CannotExecute,
                message: format!("{name}: cannot execute: {e}"),
            },
        }
    })?;
    let pid = child.id().expect("a child that was just spawned has a pid");
    Ok(Running {
        child,
        pgid: Pid::from_raw(pid as i32),
    })
}

impl Running {
    pub async fn wait(&mut self) -> Result<ChildEnd> {
        let status = self.child.wait().await.context("waiting for the command")?;
        Ok(match (status.code(), status.signal()) {
            (Some(code), _) => ChildEnd::Exited(code),
            (None, Some(sig)) => ChildEnd::Signalled(sig),
            (None, None) => ChildEnd::Exited(1),
        })
    }

    /// Sends `sig` to the child's whole process group.
    pub fn forward(&self, sig: i32) {
        if let Ok(sig) = Signal::try_from(sig) {
            let _ = killpg(self.pgid, sig);
        }
    }

    /// SIGTERM to the group, then SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: Duration) -> Result<ChildEnd> {
        let _ = killpg(self.pgid, Signal::SIGTERM);
        if let Ok(end) = tokio::time::timeout(grace, self.wait()).await {
            let _ = killpg(self.pgid, Signal::SIGKILL);
            return end;
        }
        let _ = killpg(self.pgid, Signal::SIGKILL);
        self.wait().await
    }
}
