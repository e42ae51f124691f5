//! Values and futures boxed where they are built.
//!
//! The engine boxes several futures for every paid request, and so do the
//! adapters that drive it (x402-tower's layer, x402-actix's middleware):
//! each is built here, in its box, rather than on the stack and then
//! copied in.

use std::{future::Future, pin::Pin};

/// Boxes the value `make` returns, building it in its box: `Box::new(make())`
/// builds it on the stack and copies it into the box, which for the paid
/// path's large values (a prepared facilitator request is about 900 bytes)
/// is a copy into memory that another request used last.
#[inline(always)]
pub(crate) fn boxed_value<T>(make: impl FnOnce() -> T) -> Box<T> {
    Box::write(Box::new_uninit(), make())
}

/// Boxes the future `make` returns, building it in its box.
///
/// `Box::pin(make())` builds the future on the stack and then copies all of
/// it into the box: as many bytes as its largest state (up to 1 KiB on the
/// paid path), though a future not yet polled holds only what it captured.
/// Built in the box, only the captured values are written, and nothing is
/// copied. Every paid request boxes several such futures, each into memory
/// that another request used last.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let future = x402_core::boxed::boxed(|| async { 402 });
/// assert_eq!(future.await, 402);
/// # }
/// ```
#[inline(always)]
pub fn boxed<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(boxed_value(make))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_boxed_whole() {
        let value = boxed_value(|| {
            let mut bytes = [0u8; 2048];
            bytes[2047] = 7;
            bytes
        });
        assert_eq!(value[2047], 7);
        assert_eq!(value.iter().map(|&b| usize::from(b)).sum::<usize>(), 7);
    }

    #[tokio::test]
    async fn a_future_is_boxed_unpolled_and_runs_once_awaited() {
        let polled = std::cell::Cell::new(false);
        let future = boxed(|| async {
            polled.set(true);
            [9u8; 1024]
        });
        assert!(!polled.get(), "building the box polls nothing");
        assert_eq!(future.await[1023], 9);
        assert!(polled.get());
    }

    /// A `make` that panics unwinds through `boxed_value`: the empty box
    /// is freed, and nothing half built is dropped.
    #[test]
    fn a_panicking_make_frees_its_box() {
        let outcome = std::panic::catch_unwind(|| {
            boxed_value::<Vec<u8>>(|| panic!("make failed"));
        });
        assert!(outcome.is_err());
    }
}
