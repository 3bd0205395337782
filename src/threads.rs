//! Whether this process runs one thread: what the end's hand-off needs
//! (`teardown`: no other thread can open a descriptor behind its back).

/// procfs counts a process's threads in its `task` directory's link count
/// (two plus one per thread, as `proc_task_getattr` sets it): one `stat`,
/// not a read and parse of /proc/self/stat. No /proc: false.
pub fn only_one() -> bool {
    // SAFETY: stat writes the struct given.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::stat(c"/proc/self/task".as_ptr(), &mut st) == 0 && st.st_nlink == 3
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_thread_is_seen() {
        // The test harness runs tests on threads of its own: at least two.
        assert!(!super::only_one());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv());
        assert!(!super::only_one());
        drop(tx);
        let _ = t.join();
    }
}
