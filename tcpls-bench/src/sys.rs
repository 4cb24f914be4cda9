//! The few OS calls the benchmark needs: a clock shared by processes, CPU time, kill.
#![allow(unsafe_code)]

/// `CLOCK_MONOTONIC` in nanoseconds. Unlike `std::time::Instant` its value means the same in
/// every process of the machine, so the client's first write and the server's last read can be
/// subtracted from each other.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes to it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// User and system CPU time of this process (all threads) so far, in nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    pub user_ns: u64,
    pub sys_ns: u64,
}

impl Cpu {
    pub fn now() -> Self {
        // SAFETY: rusage is plain old data; all-zero is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage; getrusage only writes to it.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        if rc != 0 {
            return Self::default();
        }
        let ns = |tv: libc::timeval| (tv.tv_sec as u64) * 1_000_000_000 + (tv.tv_usec as u64) * 1_000;
        Self { user_ns: ns(ru.ru_utime), sys_ns: ns(ru.ru_stime) }
    }

    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu { user_ns: self.user_ns.saturating_sub(earlier.user_ns), sys_ns: self.sys_ns.saturating_sub(earlier.sys_ns) }
    }
}

/// SIGKILL to a child process we spawned and have not reaped yet (its pid cannot be reused).
pub fn kill_child(pid: u32) {
    // SAFETY: kill has no memory-safety preconditions; the pid is one of our unreaped children.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}
