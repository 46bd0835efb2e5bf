//! A counting allocator: [`std::alloc::System`] plus the live bytes, the peak of the
//! live bytes and the largest single request, so that the driver can fail an input
//! that allocates without bound. A binary opts in with
//! `#[global_allocator] static A: oram_fuzz::alloc::Counting = oram_fuzz::alloc::Counting;`
//! (the driver binary and the CI test do).
//!
//! This is the one module of the workspace that allows `unsafe` code: `GlobalAlloc`
//! is an unsafe trait. Every method forwards to `System` with the caller's
//! arguments unchanged and only updates atomic counters besides (no allocation, no
//! panic inside the allocator). One refusal: a single request above
//! [`HARD_LIMIT`] gets a null pointer (the process then aborts with Rust's
//! "memory allocation of N bytes failed"), so that a decoder that asks for
//! terabytes fails the run at once instead of swapping the machine.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Single requests above this are refused (null): see the module documentation.
pub const HARD_LIMIT: usize = 1 << 30;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The counting allocator (see the module documentation).
pub struct Counting;

fn grew(size: usize) {
    INSTALLED.store(true, Ordering::Relaxed);
    LARGEST.fetch_max(size, Ordering::Relaxed);
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn shrank(size: usize) {
    LIVE.fetch_sub(size, Ordering::Relaxed);
}

// SAFETY: every method passes its arguments unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; the only other effects are relaxed atomic updates of
// counters, which neither allocate nor unwind. A refused request returns null,
// which the contract allows for an allocation that cannot be satisfied.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > HARD_LIMIT {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > HARD_LIMIT {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        // SAFETY: as in `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (so by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > HARD_LIMIT {
            LARGEST.fetch_max(new_size, Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's pointer, layout and size, as `GlobalAlloc::realloc`
        // requires; `ptr` came from `System` through this allocator.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}

/// What the allocator saw since the last [`reset`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Live bytes at the reset.
    pub base: usize,
    /// The highest live byte count since, minus `base` (0 if it stayed below).
    pub peak_growth: usize,
    /// The largest single request since (in bytes).
    pub largest: usize,
}

/// Whether the counting allocator is the global allocator of this process (it has
/// seen an allocation).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// Starts a measurement: the peak restarts at the live bytes, the largest request
/// at 0. Returns the live bytes now.
pub fn reset() -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    LARGEST.store(0, Ordering::Relaxed);
    live
}

/// The usage since the [`reset`] that returned `base`.
pub fn usage(base: usize) -> Usage {
    Usage {
        base,
        peak_growth: PEAK.load(Ordering::Relaxed).saturating_sub(base),
        largest: LARGEST.load(Ordering::Relaxed),
    }
}
