//! A counting global allocator: live heap bytes of the process, for `scale`'s bytes per idle
//! session measured from the heap (RSS also counts allocator slack, stacks and page
//! granularity).
//!
//! Counting is off until [`enable`] (the `scale` children turn it on first thing), so the other
//! subcommands pay one relaxed load per allocation and nothing else. The count is what the
//! program asked for (`Layout::size`), not what the system allocator rounds it to.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

pub struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
/// Bytes allocated minus bytes freed since [`enable`] (frees of blocks allocated before it
/// can make it negative for a while; only differences are reported).
static LIVE: AtomicI64 = AtomicI64::new(0);
/// Allocations since [`enable`].
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters have no effect
// on the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ON.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: `ptr` was allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as GlobalAlloc::realloc requires, from our caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Starts counting.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Live heap bytes (allocated − freed since [`enable`]) and allocations since [`enable`].
pub fn snapshot() -> (i64, u64) {
    (LIVE.load(Ordering::Relaxed), ALLOCS.load(Ordering::Relaxed))
}
