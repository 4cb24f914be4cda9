//! The few OS calls the benchmark needs: a clock shared by processes, CPU time, kill.
#![allow(unsafe_code)]

/// The CPUs this process may run on.
pub fn nproc() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

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
        Cpu {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            sys_ns: self.sys_ns.saturating_sub(earlier.sys_ns),
        }
    }
}

/// SIGKILL to a child process we spawned and have not reaped yet (its pid cannot be reused).
pub fn kill_child(pid: u32) {
    // SAFETY: kill has no memory-safety preconditions; the pid is one of our unreaped children.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// CPU time (user + system) of all reaped children of this process so far, in nanoseconds.
pub fn children_cpu_ns() -> u64 {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; getrusage only writes to it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    if rc != 0 {
        return 0;
    }
    let ns = |tv: libc::timeval| (tv.tv_sec as u64) * 1_000_000_000 + (tv.tv_usec as u64) * 1_000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

/// CPU time all CPUs of the machine spent busy (user, nice, system, irq, softirq) so far, in
/// nanoseconds, from /proc/stat; `None` where that is unavailable.
pub fn machine_busy_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal ...
    let busy = f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    Some(busy * (1_000_000_000 / hz))
}

/// Restricts this process (the calling thread and the threads it starts later) to one CPU.
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit of `set`; `cpu` is checked against the set's size.
    unsafe {
        if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "CPU number too large"));
        }
        libc::CPU_SET(cpu, &mut set);
    }
    // SAFETY: `set` is a valid cpu_set_t of the size given; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// How much of the machine other programs used while a measurement ran: what makes a run noisy.
/// "Other" excludes this process (`longfat` runs the link emulator in it) and its children.
pub struct LoadMeter {
    busy0: Option<u64>,
    ours0: u64,
    wall0: u64,
}

/// CPU time of this process and its reaped children so far, ns.
fn our_cpu_ns() -> u64 {
    let me = Cpu::now();
    children_cpu_ns() + me.user_ns + me.sys_ns
}

impl LoadMeter {
    pub fn start() -> Self {
        Self { busy0: machine_busy_ns(), ours0: our_cpu_ns(), wall0: monotonic_ns() }
    }

    /// Share of all CPUs busy with something other than this process and its child processes
    /// since `start`.
    pub fn others(&self) -> Option<f64> {
        let wall = monotonic_ns().saturating_sub(self.wall0) as f64;
        let ours = our_cpu_ns().saturating_sub(self.ours0) as f64;
        match (self.busy0, machine_busy_ns()) {
            (Some(a), Some(b)) if wall > 0.0 => {
                Some(((b.saturating_sub(a) as f64 - ours) / (wall * nproc() as f64)).max(0.0))
            }
            _ => None,
        }
    }
}

/// Asks for `bytes` of socket buffer each way on a UDP socket: SO_RCVBUFFORCE/SO_SNDBUFFORCE
/// (root may exceed net.core.rmem_max/wmem_max), else the ordinary options (capped by the
/// kernel). Best effort: a smaller buffer only makes the benchmark slower, not wrong.
pub fn force_socket_buffers(socket: &std::net::UdpSocket, bytes: usize) {
    use std::os::fd::AsRawFd;
    let fd = socket.as_raw_fd();
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for (forced, plain) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
        for opt in [forced, plain] {
            // SAFETY: `fd` is an open socket owned by `socket`; `value` is a c_int that lives for the
            // call and its size is passed.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&value as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
    }
}

/// Raises this process' open-file limit to its hard limit, and the hard limit to 1 048 576 when
/// allowed (root), so that one process can hold tens of thousands of sockets. Best effort.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, writable rlimit; getrlimit only writes to it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    let wanted = lim.rlim_max.max(1 << 20);
    for max in [wanted, lim.rlim_max] {
        let new = libc::rlimit { rlim_cur: max, rlim_max: max };
        // SAFETY: `new` is a valid rlimit read by setrlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } == 0 {
            return;
        }
    }
}

/// This process' open-file limit (RLIMIT_NOFILE, soft), 1024 if it cannot be read.
pub fn fd_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, writable rlimit; getrlimit only writes to it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur
}

/// Resident set size of this process in bytes (VmRSS, from /proc/self/statm), 0 if unknown.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * if page > 0 { page as u64 } else { 4096 }
}

/// Sets the TCP congestion control of a socket (`TCP_CONGESTION`; root may pick one that
/// `net.ipv4.tcp_allowed_congestion_control` does not list) and returns what the socket then
/// reports.
pub fn set_congestion_control(socket: &impl std::os::fd::AsFd, name: &str) -> std::io::Result<String> {
    let socket = socket2::SockRef::from(socket);
    socket.set_tcp_congestion(name.as_bytes())?;
    let got = socket.tcp_congestion()?;
    Ok(String::from_utf8_lossy(&got).trim_end_matches('\0').to_string())
}
