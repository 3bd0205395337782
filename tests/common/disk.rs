//! A small file system for full-disk tests: a tmpfs of a given size
//! mounted on a fresh temporary directory (the tests run as root), and a
//! file that fills it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::action::LOCK;
use super::frame;
use super::serve::Server;

/// A tmpfs of `size` mounted at `mnt`, unmounted (then the directory
/// removed) when dropped.
pub(crate) struct SmallDisk {
    pub mnt: PathBuf,
    // Dropped in this order: unmount, then remove the directory.
    _tmpfs: Tmpfs,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    pub(crate) fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let tmpfs = Tmpfs::mount(&mnt, size);
        SmallDisk {
            mnt,
            _tmpfs: tmpfs,
            _dir: dir,
        }
    }

    /// Fills the file system with one file, until it refuses; its path.
    pub(crate) fn fill(&self) -> PathBuf {
        let p = self.mnt.join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let block = [0xabu8; 4096];
        for _ in 0..100_000 {
            if f.write_all(&block).is_err() {
                break;
            }
        }
        let _ = f.flush();
        p
    }

    /// Fills the disk, then grows `server`'s log (which is on this disk)
    /// with short grants until one is refused: the log's last page is then
    /// too full for a long key's release. The filler's path.
    pub(crate) fn fill_to_the_page(&self, server: &Server) -> PathBuf {
        let filler = self.fill();
        for i in 0..4000 {
            match server.raw(&frame(LOCK, format!("p{i}").as_bytes(), Some(b"s"))) {
                Some(b'+') => continue,
                Some(b'-') => return filler,
                other => panic!("pad p{i}: {other:?}"),
            }
        }
        panic!("the full disk never refused a grant");
    }
}

struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "lc-test-tmpfs",
            ])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount -t tmpfs failed (the test needs root)"
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
