//! Locks that shrug off poisoning, for the whole workspace (every crate depends on this one).
//!
//! A mutex is poisoned when a thread panicked while holding it. Everywhere in TCPLS-rs the
//! data behind a lock stays consistent across such a panic (each critical section is one short
//! update), so the right reaction is to keep going with the data, not to spread the panic to
//! every other thread. [`LockExt`] says that once instead of
//! `.lock().unwrap_or_else(|e| e.into_inner())` at every call site.
//!
//! Workspace plumbing, not part of the protocol API: hidden from the docs.

use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, WaitTimeoutResult};
use std::time::Duration;

/// [`Mutex::lock`] that returns the guard even when the mutex is poisoned.
pub trait LockExt<T: ?Sized> {
    /// Locks, ignoring poison (see the module docs for why that is sound here).
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// [`RwLock`] read and write locks, ignoring poison.
pub trait RwLockExt<T: ?Sized> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|e| e.into_inner())
    }
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// [`Condvar::wait_timeout`], ignoring poison.
pub fn wait_timeout_unpoisoned<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    cv.wait_timeout(guard, timeout).unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        let m = std::sync::Arc::new(Mutex::new(5));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock_unpoisoned();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *m.lock_unpoisoned() += 1;
        assert_eq!(*m.lock_unpoisoned(), 6);
        let rw = RwLock::new(1);
        *rw.write_unpoisoned() += 1;
        assert_eq!(*rw.read_unpoisoned(), 2);
    }
}
