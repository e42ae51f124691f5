//! Several members' `/supported` answers as one, and the concurrent asking
//! of them.

use super::*;

/// Members' `/supported` answers, in member order, merged: kinds first
/// listed win, extensions and signers are the union. All failing: the first
/// error; none asked: [`FailoverError::AllOpen`].
pub(super) fn merge<N: fmt::Display>(
    answers: impl IntoIterator<Item = (N, Result<SupportedResponse, FacilitatorError>)>,
) -> Result<SupportedResponse, FacilitatorError> {
    let mut merged = SupportedResponse::default();
    let mut first_error = None;
    let mut answered = false;
    for (name, answer) in answers {
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => {
                tracing::warn!(member = %name, %error, "x402: facilitator member's /supported failed");
                first_error.get_or_insert(error);
                continue;
            }
        };
        answered = true;
        merged.absorb(answer, |_| true);
    }
    if answered {
        return Ok(merged);
    }
    Err(first_error.unwrap_or_else(|| other(FailoverError::AllOpen)))
}

/// Runs the futures at once and returns their outputs in order.
pub(super) async fn join_all<'a, T>(
    mut futures: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>,
) -> Vec<T> {
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
