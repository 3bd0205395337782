//! The system calls the guardian makes, without libc's wrappers.
//!
//! The guardian shares lc-cli's memory (`clone(CLONE_VM)`, see
//! `guardian::start`), its thread-local storage included: a glibc wrapper
//! that fails writes errno there, under lc-cli's feet (a read that just
//! got EAGAIN could see ESRCH instead), and malloc's per-thread cache is
//! lc-cli's too. So the guardian allocates nothing and makes its calls
//! here: the instruction itself, the error in the value returned.
//!
//! Only x86-64's instruction is here, the one architecture these calls are
//! tested on; elsewhere the guardian is started as a copy of lc-cli
//! instead ([`SHARES_MEMORY`] false), whose errno is its own, and these
//! calls go through libc.

use std::ffi::CStr;
use std::time::Duration;

/// An error number (`libc::E*`).
pub type Errno = i32;

/// Whether the calls below are made without libc, so the guardian may
/// share lc-cli's memory.
pub const SHARES_MEMORY: bool = cfg!(target_arch = "x86_64");

#[cfg(target_arch = "x86_64")]
unsafe fn raw(nr: libc::c_long, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY (the caller's): the kernel's calling convention; the
    // instruction clobbers rcx and r11 and nothing else of ours.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack, preserves_flags)
        );
    }
    ret
}

/// Elsewhere: libc's `syscall`, in a guardian that is a copy of lc-cli.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn raw(nr: libc::c_long, a: [usize; 6]) -> isize {
    // SAFETY (the caller's): as for the instruction.
    let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r == -1 {
        -(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as isize)
    } else {
        r as isize
    }
}

/// A system call's value, or its error: the kernel returns -errno.
fn call(nr: libc::c_long, a: [usize; 6]) -> Result<usize, Errno> {
    // SAFETY: every caller below passes the arguments its call documents,
    // with pointers into buffers alive for the call.
    let r = unsafe { raw(nr, a) };
    if (-4095..0).contains(&r) {
        Err(-r as Errno)
    } else {
        Ok(r as usize)
    }
}

/// This process in a process group of its own.
pub fn setpgid_self() -> Result<(), Errno> {
    call(libc::SYS_setpgid, [0; 6]).map(drop)
}

/// `openat(AT_FDCWD, path, flags | O_CLOEXEC)`.
pub fn open(path: &CStr, flags: i32) -> Result<i32, Errno> {
    let at = libc::AT_FDCWD as isize as usize;
    let flags = (flags | libc::O_CLOEXEC) as usize;
    call(
        libc::SYS_openat,
        [at, path.as_ptr() as usize, flags, 0, 0, 0],
    )
    .map(|fd| fd as i32)
}

/// `new` becomes a copy of `old` (not close-on-exec); nothing if they are
/// the same descriptor.
pub fn dup_to(old: i32, new: i32) -> Result<(), Errno> {
    if old == new {
        return Ok(());
    }
    // dup3: dup2 is not a system call on every architecture.
    call(libc::SYS_dup3, [old as usize, new as usize, 0, 0, 0, 0]).map(drop)
}

/// A copy of `fd` at `min` or above, close-on-exec.
pub fn dup_above(fd: i32, min: i32) -> Result<i32, Errno> {
    let args = [
        fd as usize,
        libc::F_DUPFD_CLOEXEC as usize,
        min as usize,
        0,
        0,
        0,
    ];
    call(libc::SYS_fcntl, args).map(|fd| fd as i32)
}

/// `fd` kept open across an exec.
pub fn keep_on_exec(fd: i32) -> Result<(), Errno> {
    call(
        libc::SYS_fcntl,
        [fd as usize, libc::F_SETFD as usize, 0, 0, 0, 0],
    )
    .map(drop)
}

/// `execve(path, argv, envp)`: returns only its error.
///
/// # Safety
/// `argv` and `envp` are null-terminated arrays of pointers to
/// NUL-terminated strings, alive for the call.
pub unsafe fn execve(
    path: &CStr,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> Errno {
    let args = [
        path.as_ptr() as usize,
        argv as usize,
        envp as usize,
        0,
        0,
        0,
    ];
    match call(libc::SYS_execve, args) {
        Err(e) => e,
        Ok(_) => libc::EINVAL,
    }
}

pub fn close(fd: i32) {
    let _ = call(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]);
}

/// Closes every descriptor from `first` on.
pub fn close_from(first: i32) {
    let all = [first as usize, u32::MAX as usize, 0, 0, 0, 0];
    if call(libc::SYS_close_range, all).is_err() {
        // A kernel before 5.9.
        for fd in first..1024 {
            close(fd);
        }
    }
}

/// The process's name as `ps` shows it (at most 15 bytes are kept).
pub fn set_name(name: &CStr) {
    let _ = call(
        libc::SYS_prctl,
        [
            libc::PR_SET_NAME as usize,
            name.as_ptr() as usize,
            0,
            0,
            0,
            0,
        ],
    );
}

/// Waits up to `wait` (None: without end) for `fd` to be readable, or
/// just sleeps when there is no `fd`. True if it is readable; a signal or
/// an error counts as nothing.
pub fn wait_readable(fd: Option<i32>, wait: Option<Duration>) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.unwrap_or(-1),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = wait.map(|w| libc::timespec {
        tv_sec: w.as_secs() as libc::time_t,
        tv_nsec: w.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(0, |t| t as *const libc::timespec as usize);
    // ppoll: poll is not a system call on every architecture. A negative
    // descriptor is skipped, so with none this is a sleep.
    let nfds = usize::from(fd.is_some());
    let args = [
        &mut pfd as *mut libc::pollfd as usize,
        nfds,
        ts_ptr,
        0,
        0,
        0,
    ];
    matches!(call(libc::SYS_ppoll, args), Ok(n) if n > 0)
}

/// `recvmsg(fd, msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC)`: the bytes read.
pub fn recvmsg(fd: i32, msg: &mut libc::msghdr) -> Result<usize, Errno> {
    let flags = (libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) as usize;
    let msg = msg as *mut libc::msghdr as usize;
    call(libc::SYS_recvmsg, [fd as usize, msg, flags, 0, 0, 0])
}

/// `kill(-pgid, sig)`: a signal to a whole group; 0 only asks whether any
/// process of it is left.
pub fn kill_group(pgid: i32, sig: i32) -> Result<(), Errno> {
    let target = (-(pgid as isize)) as usize;
    call(libc::SYS_kill, [target, sig as usize, 0, 0, 0, 0]).map(drop)
}

pub fn read(fd: i32, buf: &mut [u8]) -> Result<usize, Errno> {
    call(
        libc::SYS_read,
        [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
    )
}

/// A directory's next entries (`linux_dirent64` records) into `buf`: the
/// bytes filled, 0 at its end.
pub fn getdents(fd: i32, buf: &mut [u8]) -> Result<usize, Errno> {
    call(
        libc::SYS_getdents64,
        [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_come_back_as_values() {
        assert_eq!(kill_group(i32::MAX - 1, 0), Err(libc::ESRCH));
        assert_eq!(open(c"/nonexistent/x", libc::O_RDONLY), Err(libc::ENOENT));
        let fd = open(c"/dev/null", libc::O_RDONLY).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(read(fd, &mut buf), Ok(0));
        close(fd);
        assert_eq!(dup_to(-1, 1000), Err(libc::EBADF));
    }

    #[test]
    fn a_sleep_and_a_readable_socket() {
        let t = std::time::Instant::now();
        assert!(!wait_readable(None, Some(Duration::from_millis(20))));
        assert!(t.elapsed() >= Duration::from_millis(20));
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::os::fd::AsRawFd;
        assert!(!wait_readable(Some(b.as_raw_fd()), Some(Duration::ZERO)));
        std::io::Write::write_all(&mut &a, b"x").unwrap();
        assert!(wait_readable(Some(b.as_raw_fd()), None));
    }
}
