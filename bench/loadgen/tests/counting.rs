//! The counting allocator as a test binary's global allocator: every
//! thread's allocations are counted, those of the threads past the last
//! stripe of its own included (they share one).

#![allow(clippy::unwrap_used)]

use x402_loadgen::counting::{Counting, STRIPES};

#[global_allocator]
static COUNTING: Counting = Counting;

#[test]
fn counts_every_thread() {
    const THREADS: usize = STRIPES + 8;
    const EACH: u64 = 1_000;
    let before = COUNTING.counts();
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            std::thread::spawn(|| {
                for i in 0..EACH {
                    std::hint::black_box(Box::new([i; 4]));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let after = COUNTING.counts();
    // The harness allocates meanwhile too: at least these are counted.
    let threads = THREADS as u64;
    assert!(after.allocations - before.allocations >= threads * EACH);
    assert!(after.bytes - before.bytes >= threads * EACH * 32);
}
