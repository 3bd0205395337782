//! lc-cli's exit without its parent waiting for the unmapping of its memory.
//!
//! The kernel tears down a process's address space before it tells the
//! parent of the exit. lc-cli's is about 1,500 mapped pages (the kernel maps
//! a 10 MB binary's text 16 pages around each fault), and unmapping them was
//! the largest part of the time from lc-cli's `exit` to its parent's
//! `wait` (BENCHMARKS.md, the lock path): a script waits for it after every
//! `lc-cli lock`, where flock's exit costs a fraction of that.
//!
//! So at its end lc-cli hands the address space to a helper that shares it
//! (`clone(CLONE_VM)`, a process, not a thread of lc-cli's). lc-cli's exit
//! then drops one of two users of the memory, and the parent's wait returns;
//! the helper, killed by its parent-death signal as lc-cli goes, is the last
//! user and does the unmapping. The work is the same, only no one waits for
//! it. What keeps this harmless:
//! - lc-cli closes every descriptor first (after flushing its output): the
//!   helper holds none, so no reader waits for it to see EOF and no socket,
//!   log lock or held key outlives lc-cli by a moment;
//! - the helper blocks every signal (SIGKILL excepted) and runs three system
//!   calls on a stack of its own. It shares lc-cli's thread-local storage,
//!   so it never allocates and makes no call that could fail and write errno;
//! - it dies within lc-cli's own exit (SIGKILL, as PR_SET_PDEATHSIG fires),
//!   and is reaped by whoever inherits it, as the guardian is;
//! - only a process of one thread hands off (`serve` does not): another
//!   thread could open a descriptor between the close and the clone;
//! - if any step fails (no close_range, no clone), lc-cli exits as before.
//!
//! `--version` does not hand off: its few pages unmap faster than a helper
//! starts (BENCHMARKS.md).

/// The helper's stack: it runs a few system calls and nothing else.
const STACK: usize = 8192;

#[repr(align(64))]
struct Stack(std::cell::UnsafeCell<[u8; STACK]>);

// SAFETY: only the one helper ever runs on it (`hand_off` is called once,
// by `main`, as the process ends).
unsafe impl Sync for Stack {}

static HELPER_STACK: Stack = Stack(std::cell::UnsafeCell::new([0; STACK]));

/// Flushes stdout, closes every descriptor and starts the helper. Called
/// by `main` right before `exit::end` (an exit, or a re-raised signal):
/// nothing may be written or read after it.
pub fn hand_off() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    if !crate::threads::only_one() {
        return;
    }
    // SAFETY: plain system calls. All descriptors go (the process is about
    // to end); a kernel without close_range (before 5.9) keeps them and
    // gets no helper, which would hold copies of them.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            return;
        }
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        let top = (HELPER_STACK.0.get() as *mut u8).add(STACK);
        // CLONE_VM: the memory is shared, not copied (that is the point);
        // not CLONE_FILES (its empty table stays its own), not CLONE_THREAD
        // (lc-cli's exit must not take it along). SIGCHLD: an ordinary
        // child to whoever reaps it.
        libc::clone(
            helper,
            top.cast(),
            libc::CLONE_VM | libc::SIGCHLD,
            libc::getpid() as usize as *mut libc::c_void,
        );
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
    }
}

/// The helper: dies with lc-cli, doing nothing till then. Only system calls
/// that cannot fail here, so errno (lc-cli's, shared) is never written.
extern "C" fn helper(parent: *mut libc::c_void) -> libc::c_int {
    let parent = parent as usize as libc::pid_t;
    // SAFETY: system calls on plain values; the helper owns nothing.
    unsafe {
        libc::syscall(
            libc::SYS_prctl,
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL,
            0,
            0,
            0,
        );
        // lc-cli may have gone before the line above: then nothing would
        // come, and the helper goes now.
        if libc::syscall(libc::SYS_getppid) as libc::pid_t == parent {
            loop {
                // No descriptors, no timeout, every signal blocked: only the
                // SIGKILL ends it.
                libc::syscall(
                    libc::SYS_ppoll,
                    std::ptr::null_mut::<libc::pollfd>(),
                    0usize,
                    std::ptr::null::<libc::timespec>(),
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                );
            }
        }
    }
    0
}
