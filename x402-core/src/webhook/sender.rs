//! Sending: the enqueueing handle, the background worker, the payment hooks.

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use tokio::{sync::watch, task::JoinSet};

use super::{
    outbox::{DeadLetter, MemoryOutbox, Outbox, OutboxError, OutboxMessage},
    sign,
    time::{rfc3339_now, unix_now},
    EventData, EventType, WebhookEvent, WebhookSecret, WEBHOOK_ID, WEBHOOK_SIGNATURE,
    WEBHOOK_TIMESTAMP,
};
use crate::{
    facilitator::FacilitatorError,
    hooks::{HookSteps, PaymentContext, PaymentHooks, SessionOpenFailed, SessionOpened},
    proto::SettleResponse,
};

/// How failed deliveries are retried.
///
/// Attempt `n` (from 1) that fails waits `min(max_backoff, initial_backoff ×
/// 2ⁿ⁻¹)`, halved and then topped up by a random amount up to the other half
/// (jitter), before attempt `n + 1`. After `max_attempts` the message becomes
/// a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1; default 5).
    pub max_attempts: u32,
    /// The wait after the first failure (default 5 s).
    pub initial_backoff: Duration,
    /// The longest wait (default 10 min).
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(600),
        }
    }
}

impl RetryPolicy {
    /// The jittered wait after failed attempt `attempt` (from 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(31);
        let base = self
            .initial_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff);
        let half = base / 2;
        let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
        let extra = if jitter_ms == 0 {
            0
        } else {
            rand::random::<u64>() % (jitter_ms + 1)
        };
        half + Duration::from_millis(extra)
    }
}

/// Sends signed webhooks to one endpoint. Cheap to clone.
///
/// Events are written to an outbox (in memory by default; see
/// [`RedisOutbox`](super::outbox) with feature `redis`) and delivered by a
/// background worker started with [`start`](Self::start): a paid request
/// never waits for the receiver. Register [`hooks`](Self::hooks) with the
/// engine to emit payment events.
///
/// ```no_run
/// use x402_core::webhook::{WebhookSecret, Webhooks};
/// use x402_core::{Engine, Offer, Route};
/// # async fn run(facilitator: impl x402_core::Facilitator) -> Result<(), Box<dyn std::error::Error>> {
/// let secret = WebhookSecret::parse(&std::env::var("WEBHOOK_SECRET")?)?;
/// let webhooks = Webhooks::builder("https://shop.example/webhooks/x402", [secret])
///     .max_attempts(8)
///     .build()?;
/// let worker = webhooks.start();
///
/// let engine = Engine::builder(facilitator)
///     .route(Route::get("/report").offer(Offer::exact("eip155:8453", "$0.01", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")))
///     .hooks(webhooks.hooks())
///     .build()?;
/// // ... serve `engine` ...
/// # let _ = engine;
/// worker.shutdown(std::time::Duration::from_secs(5)).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Webhooks {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    secrets: Vec<WebhookSecret>,
    outbox: Arc<dyn Outbox>,
    client: reqwest::Client,
    policy: RetryPolicy,
    timeout: Duration,
    lease: Duration,
    concurrency: usize,
    enqueue_timeout: Duration,
    poll_interval: Duration,
}

impl fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhooks")
            .field("secrets", &self.inner.secrets.len())
            .field("outbox", &self.inner.outbox)
            .field("policy", &self.inner.policy)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

/// Configures [`Webhooks`].
#[must_use]
pub struct WebhooksBuilder {
    url: String,
    secrets: Vec<WebhookSecret>,
    outbox: Option<Arc<dyn Outbox>>,
    client: Option<reqwest::Client>,
    policy: RetryPolicy,
    timeout: Duration,
    lease: Option<Duration>,
    concurrency: usize,
    enqueue_timeout: Duration,
    poll_interval: Duration,
}

impl fmt::Debug for WebhooksBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhooksBuilder")
            .field("secrets", &self.secrets.len())
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// [`WebhooksBuilder::build`] refused the configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookConfigError {
    /// The endpoint is not an absolute `http`/`https` URL.
    #[error("webhook endpoint is not an http(s) URL")]
    InvalidUrl,
    /// No signing secret.
    #[error("no webhook signing secret")]
    NoSecret,
    /// `max_attempts` or `concurrency` is zero, or the lease is shorter than
    /// the attempt timeout.
    #[error("invalid webhook setting: {0}")]
    Invalid(&'static str),
    /// The HTTP client could not be built.
    #[error("webhook HTTP client")]
    Client(#[source] reqwest::Error),
}

impl WebhooksBuilder {
    /// Where events are stored until delivered ([`MemoryOutbox`] by default).
    pub fn outbox(mut self, outbox: impl Outbox) -> Self {
        self.outbox = Some(Arc::new(outbox));
        self
    }

    /// A shared outbox.
    pub fn outbox_arc(mut self, outbox: Arc<dyn Outbox>) -> Self {
        self.outbox = Some(outbox);
        self
    }

    /// The HTTP client (a rustls client with no redirects by default).
    pub fn client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// The whole retry policy.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Attempts in all, the first included (default 5).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.policy.max_attempts = attempts;
        self
    }

    /// The first wait and the longest wait between attempts (default 5 s and
    /// 10 min), before jitter.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.policy.initial_backoff = initial;
        self.policy.max_backoff = max;
        self
    }

    /// How long one attempt may take, connection included (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long a claimed message stays reserved for its worker (default:
    /// the timeout plus 5 s). A worker that dies mid-delivery leaves the
    /// message to be retried once this has passed.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Deliveries in flight at once (default 4).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// How long the payment hooks wait for the outbox write (default
    /// 250 ms); a write that takes longer is logged and the event dropped,
    /// never the payment failed.
    pub fn enqueue_timeout(mut self, timeout: Duration) -> Self {
        self.enqueue_timeout = timeout;
        self
    }

    /// How often an idle worker polls an outbox that cannot wake it (Redis;
    /// default 250 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Checks the configuration.
    pub fn build(self) -> Result<Webhooks, WebhookConfigError> {
        let url = reqwest::Url::parse(&self.url).map_err(|_| WebhookConfigError::InvalidUrl)?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(WebhookConfigError::InvalidUrl);
        }
        if self.secrets.is_empty() {
            return Err(WebhookConfigError::NoSecret);
        }
        if self.policy.max_attempts == 0 {
            return Err(WebhookConfigError::Invalid(
                "max_attempts must be at least 1",
            ));
        }
        if self.concurrency == 0 {
            return Err(WebhookConfigError::Invalid(
                "concurrency must be at least 1",
            ));
        }
        let lease = self.lease.unwrap_or(self.timeout + Duration::from_secs(5));
        if lease <= self.timeout {
            return Err(WebhookConfigError::Invalid(
                "lease must be longer than the attempt timeout",
            ));
        }
        let client = match self.client {
            Some(client) => client,
            None => reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("x402-webhooks/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(WebhookConfigError::Client)?,
        };
        Ok(Webhooks {
            inner: Arc::new(Inner {
                url: self.url,
                secrets: self.secrets,
                outbox: self.outbox.unwrap_or_else(|| Arc::new(MemoryOutbox::new())),
                client,
                policy: self.policy,
                timeout: self.timeout,
                lease,
                concurrency: self.concurrency,
                enqueue_timeout: self.enqueue_timeout,
                poll_interval: self.poll_interval,
            }),
        })
    }
}

impl Webhooks {
    /// Starts configuring delivery to `url`, signing with each of `secrets`
    /// (one `v1,` signature per secret, for rotation).
    pub fn builder(
        url: impl Into<String>,
        secrets: impl IntoIterator<Item = WebhookSecret>,
    ) -> WebhooksBuilder {
        WebhooksBuilder {
            url: url.into(),
            secrets: secrets.into_iter().collect(),
            outbox: None,
            client: None,
            policy: RetryPolicy::default(),
            timeout: Duration::from_secs(10),
            lease: None,
            concurrency: 4,
            enqueue_timeout: Duration::from_millis(250),
            poll_interval: Duration::from_millis(250),
        }
    }

    /// Payment hooks that enqueue `payment.settled`,
    /// `payment.settlement_failed` and `payment.settlement_unknown` (its
    /// `errorReason` `facilitator_timeout`, `facilitator_unavailable`, or
    /// `settlement_pending` with the broadcast `transaction`).
    pub fn hooks(&self) -> WebhookHooks {
        WebhookHooks {
            webhooks: self.clone(),
        }
    }

    /// The outbox.
    pub fn outbox(&self) -> &Arc<dyn Outbox> {
        &self.inner.outbox
    }

    /// The retry policy.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.inner.policy
    }

    /// Writes `event` to the outbox (within the enqueue timeout) and returns
    /// its `webhook-id`. Does not wait for delivery.
    pub async fn enqueue(&self, event: &WebhookEvent) -> Result<String, OutboxError> {
        let body = event.to_body().map_err(OutboxError::Corrupt)?;
        let body = String::from_utf8(body).map_err(|e| OutboxError::Backend(Box::new(e)))?;
        let message = OutboxMessage::new(event.id.clone(), event.event_type.as_str(), body);
        tokio::time::timeout(self.inner.enqueue_timeout, self.inner.outbox.push(message))
            .await
            .map_err(|_| OutboxError::Timeout)??;
        Ok(event.id.clone())
    }

    /// Messages that exhausted their attempts, with ids and bodies intact.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>, OutboxError> {
        self.inner.outbox.dead_letters().await
    }

    /// Puts a dead letter back in line (same id, same body, attempts reset).
    pub async fn redeliver(&self, id: &str) -> Result<bool, OutboxError> {
        self.inner.outbox.redeliver(id).await
    }

    /// Starts the background worker on the current Tokio runtime. Several
    /// workers (in this or other processes) may share a durable outbox.
    ///
    /// Dropping the returned handle stops the worker; messages it had
    /// claimed are retried after their lease.
    pub fn start(&self) -> WebhookWorker {
        let (stop, stopped) = watch::channel(false);
        let inner = Arc::clone(&self.inner);
        let task = tokio::spawn(run(inner, stopped));
        WebhookWorker {
            stop,
            task: Some(task),
        }
    }
}

/// The running delivery worker of [`Webhooks::start`].
#[must_use = "dropping the worker stops delivery"]
#[derive(Debug)]
pub struct WebhookWorker {
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl WebhookWorker {
    /// Stops claiming new messages, lets deliveries in flight finish for up
    /// to `grace`, then stops.
    pub async fn shutdown(mut self, grace: Duration) {
        let _ = self.stop.send(true);
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(grace, &mut task).await.is_err() {
                task.abort();
            }
        }
    }
}

impl Drop for WebhookWorker {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn run(inner: Arc<Inner>, mut stopped: watch::Receiver<bool>) {
    let permits = Arc::new(tokio::sync::Semaphore::new(inner.concurrency));
    let mut deliveries = JoinSet::new();
    loop {
        while deliveries.try_join_next().is_some() {}
        let permit = tokio::select! {
            _ = stopped.changed() => break,
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let claimed = tokio::select! {
            _ = stopped.changed() => break,
            c = inner.outbox.claim(inner.lease) => c,
        };
        match claimed {
            Ok(Some(message)) => {
                let inner = Arc::clone(&inner);
                deliveries.spawn(async move {
                    deliver(&inner, message).await;
                    drop(permit);
                });
            }
            Ok(None) => {
                drop(permit);
                tokio::select! {
                    _ = stopped.changed() => break,
                    () = inner.outbox.wait(inner.poll_interval) => {}
                }
            }
            Err(error) => {
                drop(permit);
                tracing::warn!(%error, "x402 webhooks: outbox claim failed");
                tokio::select! {
                    _ = stopped.changed() => break,
                    () = tokio::time::sleep(inner.poll_interval) => {}
                }
            }
        }
    }
    while deliveries.join_next().await.is_some() {}
}

async fn attempt(inner: &Inner, message: &OutboxMessage) -> Result<(), String> {
    let timestamp = unix_now();
    let signature = sign(
        &inner.secrets,
        &message.id,
        timestamp,
        message.body.as_bytes(),
    );
    let response = inner
        .client
        .post(&inner.url)
        .timeout(inner.timeout)
        .header(WEBHOOK_ID, &message.id)
        .header(WEBHOOK_TIMESTAMP, timestamp.to_string())
        .header(WEBHOOK_SIGNATURE, signature)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(message.body.clone())
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                "timeout".to_owned()
            } else {
                e.without_url().to_string()
            }
        })?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("status {}", status.as_u16()))
    }
}

async fn deliver(inner: &Inner, message: OutboxMessage) {
    let id = message.id.as_str();
    let attempts = message.attempts;
    let result = match attempt(inner, &message).await {
        Ok(()) => {
            tracing::debug!(id, attempts, "x402 webhooks: delivered");
            inner.outbox.ack(id).await
        }
        Err(error) if attempts >= inner.policy.max_attempts => {
            tracing::warn!(id, attempts, %error, "x402 webhooks: giving up, dead letter");
            inner
                .outbox
                .bury(DeadLetter {
                    message: message.clone(),
                    last_error: error,
                    failed_at: rfc3339_now(),
                })
                .await
        }
        Err(error) => {
            let delay = inner.policy.backoff(attempts);
            tracing::info!(id, attempts, %error, ?delay, "x402 webhooks: attempt failed, will retry");
            inner.outbox.retry(id, delay).await
        }
    };
    if let Err(error) = result {
        tracing::warn!(id, %error, "x402 webhooks: outbox update failed; the lease will expire and the message be retried");
    }
}

/// The [`PaymentHooks`] of [`Webhooks::hooks`]: turn settlement outcomes into
/// events. They only write to the outbox (bounded by the enqueue timeout) and
/// never change the payment's outcome.
#[derive(Debug, Clone)]
pub struct WebhookHooks {
    webhooks: Webhooks,
}

impl WebhookHooks {
    /// Records `event` as a dead letter (a separate copy, with its own id),
    /// listed by [`Webhooks::dead_letters`] until the seller acts on it.
    async fn keep_for_seller(&self, event: &WebhookEvent) {
        let copy = WebhookEvent::new(event.event_type.clone(), event.data.clone());
        let body = match copy.to_body() {
            Ok(body) => String::from_utf8_lossy(&body).into_owned(),
            Err(error) => {
                tracing::error!(%error, "x402 webhooks: a dead letter could not be written");
                return;
            }
        };
        let letter = DeadLetter {
            message: OutboxMessage::new(copy.id.clone(), copy.event_type.as_str(), body),
            last_error: format!(
                "not a delivery failure: {} (event {}) needs the seller",
                copy.event_type, event.id
            ),
            failed_at: rfc3339_now(),
        };
        let outbox = self.webhooks.outbox();
        let deadline = self.webhooks.inner.enqueue_timeout;
        match tokio::time::timeout(deadline, outbox.bury(letter)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::error!(id = %copy.id, %error, "x402 webhooks: a dead letter could not be stored");
            }
            Err(_) => {
                tracing::error!(id = %copy.id, "x402 webhooks: storing a dead letter timed out");
            }
        }
    }

    async fn emit(&self, event: WebhookEvent) {
        let event_type = event.event_type.clone();
        if let Err(error) = self.webhooks.enqueue(&event).await {
            tracing::error!(
                id = %event.id,
                %event_type,
                %error,
                "x402 webhooks: event could not be enqueued and is lost"
            );
        }
    }
}

#[async_trait]
impl PaymentHooks for WebhookHooks {
    fn inspects_requests(&self) -> bool {
        false
    }

    fn steps(&self) -> HookSteps {
        HookSteps::AFTER_SETTLE
            | HookSteps::SETTLE_FAILURE
            | HookSteps::SESSION_OPENED
            | HookSteps::SESSION_OPEN_FAILED
    }

    async fn after_settle(&self, ctx: &PaymentContext<'_>, receipt: &SettleResponse) {
        let event_type = if receipt.success {
            EventType::PaymentSettled
        } else {
            EventType::PaymentSettlementFailed
        };
        self.emit(WebhookEvent::new(
            event_type,
            EventData::from_context(ctx, Some(receipt)),
        ))
        .await;
    }

    async fn on_settle_failure(
        &self,
        ctx: &PaymentContext<'_>,
        error: &FacilitatorError,
    ) -> Option<SettleResponse> {
        let mut data = EventData::from_context(ctx, None);
        data.error_reason = Some(
            match error {
                FacilitatorError::Timeout => "facilitator_timeout",
                FacilitatorError::SettlementPending { transaction, .. } => {
                    // Broadcast, not final: the event names the transaction
                    // to reconcile.
                    data.transaction.clone_from(transaction);
                    crate::engine::SETTLEMENT_PENDING
                }
                _ => "facilitator_unavailable",
            }
            .to_owned(),
        );
        self.emit(WebhookEvent::new(EventType::PaymentSettlementUnknown, data))
            .await;
        None
    }

    async fn on_session_opened(
        &self,
        ctx: &PaymentContext<'_>,
        receipt: &SettleResponse,
        session: &SessionOpened,
    ) {
        let mut data = EventData::from_context(ctx, Some(receipt));
        data.extra
            .insert("sessionOffer".into(), session.offer_id.clone().into());
        data.extra.insert("calls".into(), session.calls.into());
        data.extra
            .insert("remaining".into(), session.remaining.into());
        data.extra
            .insert("expiresAt".into(), session.expires_at.into());
        data.extra
            .insert("scope".into(), session.scope.clone().into());
        self.emit(WebhookEvent::new(EventType::SessionOpened, data))
            .await;
    }

    async fn on_session_open_failed(
        &self,
        ctx: &PaymentContext<'_>,
        receipt: &SettleResponse,
        failure: &SessionOpenFailed,
    ) {
        let mut data = EventData::from_context(ctx, Some(receipt));
        data.error_reason = Some("session_open_failed".to_owned());
        data.extra
            .insert("sessionOffer".into(), failure.offer_id.clone().into());
        data.extra.insert("calls".into(), failure.calls.into());
        data.extra
            .insert("scope".into(), failure.scope.clone().into());
        data.extra
            .insert("attempts".into(), failure.attempts.into());
        let event = WebhookEvent::new(EventType::SessionOpenFailed, data);
        // Kept among the dead letters too, where it waits for the seller
        // whether or not the event is delivered.
        self.keep_for_seller(&event).await;
        self.emit(event).await;
    }
}
