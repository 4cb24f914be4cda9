//! Temporary directories for tests that write files (certificates, captures, key logs): unique
//! per call and per process (several test binaries run at once), removed when dropped, also
//! when the test panics.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh directory under the system's temporary directory, removed with everything in it
/// when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// `$TMPDIR/tcpls-test-TAG-PID-N-NANOS`, created (panics if it cannot be: the test cannot
    /// run without it, and the message says where).
    pub fn new(tag: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let path = std::env::temp_dir().join(format!("tcpls-test-{tag}-{}-{n}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::TempDir;

    #[test]
    fn directories_are_distinct_and_removed_on_drop() {
        let (a, b) = (TempDir::new("x"), TempDir::new("x"));
        assert_ne!(a.path(), b.path());
        std::fs::write(a.path().join("f"), b"data").unwrap();
        let kept = a.path().to_path_buf();
        drop(a);
        assert!(!kept.exists(), "{} is still there", kept.display());
        assert!(b.path().is_dir());
    }
}
