//! A counting global allocator whose counters stay on the core that counts.
//!
//! The bench servers report their heap allocations per request
//! (`GET /__bench/allocations`), so every allocation is counted. A single
//! set of shared atomic counters (what `stats_alloc` keeps) makes each
//! allocation and each free a locked read-modify-write on one cache line
//! that both of Tokio's workers write: under load, that line moves between
//! the cores on nearly every allocation, a cost that grows with the server's
//! allocations and that a server without the counter does not pay.
//!
//! Here each thread counts in a stripe of its own, on a cache line of its
//! own, with a plain load and store (no locked instruction, no sharing);
//! frees are not counted at all. A reader adds the stripes up. The first
//! [`STRIPES`] `- 1` threads each own a stripe; any thread after them counts
//! in the last, shared one, with atomic adds.
//!
//! This file is also compiled into the x402-rs peer (`bench/peer-x402rs`,
//! by `#[path]`), so that every server the harness compares carries the
//! same instrument.

#![allow(unsafe_code)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
    sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
};

/// How many stripes: one per thread for this many threads, minus the shared
/// one.
pub const STRIPES: usize = 64;

/// One thread's counts, alone on its cache line (128 bytes: two lines, as
/// adjacent-line prefetching pairs them).
#[repr(align(128))]
struct Stripe {
    allocations: AtomicU64,
    bytes: AtomicU64,
}

impl Stripe {
    const fn new() -> Self {
        Self {
            allocations: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }
}

static COUNTS: [Stripe; STRIPES] = [const { Stripe::new() }; STRIPES];

/// The next stripe to hand to a thread that has none.
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Where a thread's stripe is not assigned yet.
const UNASSIGNED: usize = usize::MAX;

std::thread_local! {
    // `const` and without a destructor: reading it never allocates.
    static MINE: Cell<usize> = const { Cell::new(UNASSIGNED) };
}

/// The system allocator, counting allocations (a reallocation counts as one)
/// and the bytes asked for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counting;

/// Allocations and bytes counted so far, over every thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Allocations and reallocations.
    pub allocations: u64,
    /// Bytes asked for by them (for a reallocation, what it grew by).
    pub bytes: u64,
}

impl Counting {
    /// The counts so far: every stripe added up.
    pub fn counts(&self) -> Counts {
        COUNTS.iter().fold(Counts::default(), |sum, s| Counts {
            allocations: sum.allocations + s.allocations.load(Relaxed),
            bytes: sum.bytes + s.bytes.load(Relaxed),
        })
    }
}

/// Counts one allocation of `bytes` in the calling thread's stripe.
fn count(bytes: usize) {
    let bytes = bytes as u64;
    let index = MINE
        .try_with(|mine| {
            let mut index = mine.get();
            if index == UNASSIGNED {
                index = NEXT.fetch_add(1, Relaxed).min(STRIPES - 1);
                mine.set(index);
            }
            index
        })
        // A thread being torn down counts in the shared stripe.
        .unwrap_or(STRIPES - 1);
    let stripe = &COUNTS[index];
    if index < STRIPES - 1 {
        // Only this thread writes this stripe: a load and a store.
        stripe
            .allocations
            .store(stripe.allocations.load(Relaxed) + 1, Relaxed);
        stripe
            .bytes
            .store(stripe.bytes.load(Relaxed) + bytes, Relaxed);
    } else {
        stripe.allocations.fetch_add(1, Relaxed);
        stripe.bytes.fetch_add(bytes, Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, and counting neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size.saturating_sub(layout.size()));
        // SAFETY: as for `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
