//! Store calls that may outlive the request that started them.
//!
//! A claim or a session redemption sent to Redis is applied by the server
//! whether or not anyone reads its answer. When the request gives up on it
//! (its deadline passed, or the client hung up and the request's future was
//! dropped), the write may still land, and then it must be undone: a claim
//! released, a redemption given back. [`Late`] holds such a call; dropped
//! before its answer was taken, it finishes the call on a task and hands the
//! answer to its `on_late` handler.

use std::{future::Future, pin::Pin, time::Duration};

/// How long a call nobody waits for any more is still awaited, to undo what
/// it did, before it is dropped.
pub(crate) const LATE_ANSWER_WAIT: Duration = Duration::from_secs(60);

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What is done with an answer nobody took: any `FnOnce(T) -> impl Future`.
/// Kept as the closure it is (not boxed) until it is needed, which on the
/// usual path, where the answer is taken, it never is.
pub(crate) trait OnLate<T>: Send + 'static {
    /// The work to do with `answer`.
    fn run(self, answer: T) -> impl Future<Output = ()> + Send + 'static;
}

impl<T, H, HF> OnLate<T> for H
where
    H: FnOnce(T) -> HF + Send + 'static,
    HF: Future<Output = ()> + Send + 'static,
{
    fn run(self, answer: T) -> impl Future<Output = ()> + Send + 'static {
        self(answer)
    }
}

/// A handler whose kind is decided later ([`Late::on_late`] replaces it).
pub(crate) type Boxed<T> = Box<dyn FnOnce(T) -> BoxFuture<()> + Send + 'static>;

/// `on_late` as a [`Boxed`] handler.
pub(crate) fn boxed<T, H, HF>(on_late: H) -> Boxed<T>
where
    H: FnOnce(T) -> HF + Send + 'static,
    HF: Future<Output = ()> + Send + 'static,
{
    Box::new(move |answer| Box::pin(on_late(answer)))
}

/// A store call whose answer, if nobody takes it, goes to a handler.
pub(crate) struct Late<T: Send + 'static, H: OnLate<T>> {
    /// Boxed, so that a call abandoned mid-await can move to a task.
    call: Option<BoxFuture<T>>,
    on_late: Option<H>,
    what: &'static str,
}

impl<T: Send + 'static, H: OnLate<T>> Late<T, H> {
    /// `call`, whose answer goes to `on_late` unless [`answer`](Self::answer)
    /// returns it. `what` names the call in logs.
    pub(crate) fn new<F>(what: &'static str, call: F, on_late: H) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        Self {
            call: Some(Box::pin(call)),
            on_late: Some(on_late),
            what,
        }
    }

    /// Replaces what is done with an answer nobody takes.
    pub(crate) fn on_late(&mut self, on_late: H) {
        self.on_late = Some(on_late);
    }

    /// The call's answer, if it comes within `deadline`. A call that answers
    /// without waiting is never cut off, even with [`Duration::ZERO`]. On
    /// `None` the call keeps running once `self` is dropped.
    pub(crate) async fn answer(&mut self, deadline: Duration) -> Option<T> {
        let call = self.call.as_mut()?;
        match tokio::time::timeout(deadline, call).await {
            Ok(answer) => {
                self.call = None;
                Some(answer)
            }
            Err(_elapsed) => None,
        }
    }
}

impl<T: Send + 'static, H: OnLate<T>> Drop for Late<T, H> {
    fn drop(&mut self) {
        let (Some(call), Some(on_late)) = (self.call.take(), self.on_late.take()) else {
            return;
        };
        let what = self.what;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                what,
                "x402: a store call was abandoned outside a Tokio runtime; what it did is not undone"
            );
            return;
        };
        runtime.spawn(async move {
            match tokio::time::timeout(LATE_ANSWER_WAIT, call).await {
                Ok(answer) => on_late.run(answer).await,
                Err(_elapsed) => tracing::warn!(
                    what,
                    "x402: a store call nobody waits for gave no answer within 60 s; if it lands later it is not undone"
                ),
            }
        });
    }
}

impl<T: Send + 'static, H: OnLate<T>> std::fmt::Debug for Late<T, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Late")
            .field("what", &self.what)
            .field("answered", &self.call.is_none())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    };

    use super::*;

    #[tokio::test]
    async fn an_answer_taken_goes_nowhere_else() {
        let undone = Arc::new(AtomicUsize::new(0));
        let seen = undone.clone();
        let mut late = Late::new("test", async { 7 }, move |_| async move {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(late.answer(Duration::ZERO).await, Some(7));
        drop(late);
        tokio::task::yield_now().await;
        assert_eq!(undone.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_finished_and_undone() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut late = Late::new(
            "test",
            async {
                tokio::time::sleep(Duration::from_millis(30)).await;
                5
            },
            move |answer| async move {
                let _ = tx.send(answer);
            },
        );
        assert_eq!(late.answer(Duration::from_millis(1)).await, None);
        drop(late);
        assert_eq!(rx.await.ok(), Some(5));
    }

    #[tokio::test]
    async fn a_call_abandoned_mid_await_is_finished_and_undone() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let request = async move {
            let mut late = Late::new(
                "test",
                async {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    9
                },
                move |answer| async move {
                    let _ = tx.send(answer);
                },
            );
            late.answer(Duration::from_secs(10)).await
        };
        // The client hangs up: the request's future is dropped mid-call.
        assert!(tokio::time::timeout(Duration::from_millis(5), request)
            .await
            .is_err());
        assert_eq!(rx.await.ok(), Some(9));
    }
}
