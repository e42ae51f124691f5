//! Sessions in Redis, shared by every instance.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, OnceLock},
    time::Duration,
};

use ::redis::{cluster_routing::Slot, RedisError, Script, ScriptInvocation};
use async_trait::async_trait;
use futures_util::{
    future::Either,
    stream::{FuturesUnordered, StreamExt as _},
};
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

use super::{
    BoundedRedemption, Redemption, SessionRecord, SessionStore, SessionStoreError, TokenHash,
};
use crate::{
    redis_conn::{RedisConnection, Timeouts},
    unix::now as unix_now,
};

/// The default key prefix.
const DEFAULT_PREFIX: &str = "x402:session:";

/// Redis forgets a session this long after it expires, so that a redemption
/// just after the expiry answers `Expired` rather than `Unknown`.
const EXPIRY_GRACE_SECS: u64 = 60;

/// The largest time `EXPIREAT` accepts (unix seconds).
const MAX_EXPIREAT: u64 = (i64::MAX as u64) / 1000;

/// The response timeout of the connections [`RedisSessionStore::connect`]
/// opens.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long [`RedisSessionStore::connect`] waits to open a connection.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);

const TIMEOUTS: Timeouts = Timeouts::new(RESPONSE_TIMEOUT, CONNECTION_TIMEOUT);

/// The most redemptions sent to Redis in one script call.
const MAX_BATCH: usize = 128;

/// How long the sessions of a script call whose answer was lost are
/// reconciled for ([`RECONCILE_LUA`]), retried while Redis does not answer;
/// their slot waits for it.
const RECONCILE_FOR: Duration = Duration::from_secs(60);

/// Redeems one call from each of `KEYS[1..n]`. `ARGV[1]`: the call's
/// batch id (hex); `ARGV[2i]`, `ARGV[2i+1]`: the scope and now (unix
/// seconds) of the redemption of `KEYS[i]`. Returns, for each key in order,
/// the calls left (≥ 0) or a refusal: -1 unknown, -2 expired, -3 out of
/// scope, -4 exhausted, -5 not a session record (the key holds something
/// else), -6 cancelled (this call's answer was given up for lost, and
/// [`RECONCILE_LUA`] fenced the session before the call arrived). A key
/// may appear more than once; its redemptions are made in order, each
/// seeing the one before. A bad key never fails the others: a script error
/// would leave the redemptions made before it in place while their callers
/// were told it failed.
///
/// Each session redeemed records, in its field `lb`, the batch id, followed
/// by `:<n>` when this script call took n > 1 of its calls: what
/// [`RECONCILE_LUA`] reads should the answer be lost. The count and the
/// record are written by one `HSET` (below 2^53 calls, where the count is
/// exact as a Lua number; `HINCRBY` above). In the common case (a
/// session once in the call) that costs no Lua table or string building:
/// about 0.1 µs of Redis's time per redemption in calls of 16, 0.7 µs in
/// calls of one.
const REDEEM_LUA: &str = r"
local batch = ARGV[1]
local fence = 'x' .. batch
local out = {}
for i = 1, #KEYS do
  local h = redis.pcall('HMGET', KEYS[i], 'scope', 'remaining', 'expires_at', 'lb')
  local r
  if h.err then r = -5
  elseif not h[1] and not h[2] and not h[3] then r = -1
  elseif h[4] == fence then r = -6
  else
    local left, expires = tonumber(h[2]), tonumber(h[3])
    if not h[1] or not left or not expires then r = -5
    elseif expires <= tonumber(ARGV[2 * i + 1]) then r = -2
    elseif h[1] ~= ARGV[2 * i] then r = -3
    elseif left <= 0 then r = -4
    else
      -- The first call this script call takes from the session is
      -- recorded as its id, the n-th (a key named n times) as '<id>:<n>'.
      local lb, mark = h[4], batch
      if lb == batch then mark = batch .. ':2'
      elseif lb and #lb > #batch + 1 and string.sub(lb, 1, #batch + 1) == batch .. ':' then
        mark = batch .. ':' .. (tonumber(string.sub(lb, #batch + 2)) + 1)
      end
      if left < 9007199254740992 then
        -- Exact as a Lua number: the count and the record in one write.
        r = left - 1
        local set = redis.pcall('HSET', KEYS[i], 'remaining', string.format('%d', r), 'lb', mark)
        if type(set) ~= 'number' then r = -5 end
      else
        r = redis.pcall('HINCRBY', KEYS[i], 'remaining', -1)
        if type(r) ~= 'number' then r = -5 else redis.pcall('HSET', KEYS[i], 'lb', mark) end
      end
    end
  end
  out[i] = r
end
return out
";

/// After a [`REDEEM_LUA`] call whose answer was lost (it timed out, or the
/// connection failed): gives back what that call took, or makes sure it
/// takes nothing. `KEYS`: the call's sessions, each once; `ARGV[1]`: its
/// batch id; `ARGV[2]`: now (unix seconds). A session whose `lb` names the
/// call had that many calls taken by it (one, or the `:<n>` after the id),
/// and nothing since: they are given
/// back (within what was sold, unless it has expired). Every session of
/// the call that exists is then fenced (`lb` = `x<id>`), so that the call,
/// should it arrive after this, takes nothing, and so that a second run
/// gives nothing back twice. A session that another call (another
/// instance's) redeemed since keeps what both took: which of them to give
/// back cannot be told. Returns the calls given back.
const RECONCILE_LUA: &str = r"
local batch, now = ARGV[1], tonumber(ARGV[2])
local more, fence = '^' .. batch .. ':(%d+)$', 'x' .. batch
local given = 0
for i = 1, #KEYS do
  local h = redis.pcall('HMGET', KEYS[i], 'lb', 'remaining', 'sold', 'expires_at')
  if not h.err and h[2] then
    local n = nil
    if h[1] == batch then n = 1 elseif h[1] then n = tonumber(string.match(h[1], more)) end
    local left, sold, expires = tonumber(h[2]), tonumber(h[3]), tonumber(h[4])
    if n and left and sold and expires and expires > now then
      local back = math.min(n, sold - left)
      if back > 0 then
        redis.pcall('HINCRBY', KEYS[i], 'remaining', back)
        given = given + back
      end
    end
    if h[1] ~= fence then redis.pcall('HSET', KEYS[i], 'lb', fence) end
  end
end
return given
";

/// Gives one call back, if the session exists, has not expired and has
/// fewer calls left than were sold. `KEYS[1]`: the session; `ARGV[1]`: now
/// (unix seconds). Returns 1 if a call was given back, else 0.
const GIVE_BACK_LUA: &str = r"
local h = redis.call('HMGET', KEYS[1], 'remaining', 'sold', 'expires_at')
if not h[1] or not h[2] or not h[3] then return 0 end
if tonumber(h[3]) <= tonumber(ARGV[1]) then return 0 end
if tonumber(h[1]) >= tonumber(h[2]) then return 0 end
redis.call('HINCRBY', KEYS[1], 'remaining', 1)
return 1
";

fn redeem_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(REDEEM_LUA))
}

fn give_back_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(GIVE_BACK_LUA))
}

fn reconcile_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(RECONCILE_LUA))
}

/// Sessions in Redis (feature `redis`), shared by every instance that uses
/// the same server and prefix.
///
/// A session is a hash at `{prefix}{sha256 of the token, hex}` with the
/// fields `scope`, `remaining`, `sold` and `expires_at` (and, once redeemed
/// from, `lb`: see below); Redis deletes it
/// (`EXPIREAT`) a minute after it expires. Redemptions are made by a Lua
/// script (check and decrement), so instances sharing the server never redeem
/// more calls than were sold. The token itself is never sent to Redis.
///
/// Redemptions that arrive while one script call is on its way are sent
/// together, up to 128 in the next call: under load one round trip and one
/// script run serve many requests, and an idle store sends each redemption at
/// once. Each is still atomic and made in arrival order. A redemption whose
/// caller has gone (its future was dropped) before it was sent is not made;
/// one whose caller has gone by the time Redis answers is given back. The
/// batching runs in a task spawned on the Tokio runtime of the first
/// redemption, and ends when the last clone of the store is dropped.
///
/// A script call whose answer is lost (Redis stalled past the 2 s
/// response timeout, or the connection failed after the call was sent) may
/// still have been made. Its callers are answered with the error, and,
/// before that slot's next call, the store reconciles its sessions: what
/// the call took is given back, or, should it not have arrived, it is
/// fenced off so that it takes nothing if it does later (each redeemed
/// session records the last call that took from it, in a field `lb`). This
/// is retried for a minute while Redis does not answer. A session that
/// another instance redeemed from in between keeps what both took, as
/// which to give back cannot be told.
///
/// The engine's session deadline is kept by that task too
/// ([`SessionStore::redeem_within`]): one timer, armed for the earliest
/// deadline of the redemptions waiting, rather than one per redemption. A
/// redemption past its deadline is answered
/// [`Timeout`](SessionStoreError::Timeout); if it was not sent yet it is not
/// made, and if it was, what Redis then answers is given back.
///
/// On a Redis Cluster ([`connect_cluster`](Self::connect_cluster)) a script
/// call may only name keys of one hash slot, so redemptions are batched by
/// slot: each slot has at most one call on its way, and the redemptions of
/// one session (one key, one slot) arriving meanwhile go together in its next
/// call. Calls for different slots run side by side, so a slot whose primary
/// is failing over holds up only its own sessions. Key names are those of
/// one server (every other operation names one key); sessions spread over
/// the primaries by their tokens' hashes. Keep hash tags (`{...}`) out of the
/// prefix, or every session lands on one shard.
///
/// The connection (a [`RedisConnection`]) reconnects by itself after Redis
/// restarts or the connection drops; until then the store answers
/// [`SessionStoreError`].
///
/// ```no_run
/// use x402_core::session::{RedisSessionStore, SessionStoreError};
///
/// # async fn run() -> Result<(), SessionStoreError> {
/// let store = RedisSessionStore::connect("redis://127.0.0.1:6379")
///     .await?
///     .prefix("shop:session:");
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisSessionStore {
    connection: RedisConnection,
    prefix: Arc<str>,
    /// The queue of the batching task, started by the first redemption.
    batcher: Arc<OnceLock<mpsc::UnboundedSender<Message>>>,
}

impl fmt::Debug for RedisSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSessionStore")
            .field("connection", &self.connection)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedisSessionStore {
    /// A store over an existing connection (a redis-rs `ConnectionManager`
    /// or cluster connection, or a [`RedisConnection`]), with the key prefix
    /// `x402:session:`.
    pub fn new(connection: impl Into<RedisConnection>) -> Self {
        Self {
            connection: connection.into(),
            prefix: Arc::from(DEFAULT_PREFIX),
            batcher: Arc::new(OnceLock::new()),
        }
    }

    /// Connects to `url` (`redis://host:port/db`, `rediss://...`), failing if
    /// Redis cannot be reached now (after redis-rs's few retries, which take
    /// some seconds). Each connection attempt times out after 1 s, and each
    /// answer after 2 s ([`SessionStoreError::Timeout`]).
    pub async fn connect(url: &str) -> Result<Self, SessionStoreError> {
        let connection = RedisConnection::connect(url, TIMEOUTS)
            .await
            .map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Connects to the Redis Cluster that `urls` belong to (some or all of
    /// its nodes, `redis://host:port`), failing if it cannot be reached now.
    /// Same timeouts as [`connect`](Self::connect): 1 s to open a connection
    /// to a node, 2 s for an answer. A script call is sent once, never again
    /// after an error (sent again, a redemption could count twice).
    pub async fn connect_cluster<I>(urls: I) -> Result<Self, SessionStoreError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let connection = RedisConnection::connect_cluster(urls, TIMEOUTS)
            .await
            .map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Prefixes every key with `prefix` instead of `x402:session:`, to share
    /// a Redis database with other data or other applications.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    fn key(&self, token: &TokenHash) -> String {
        store_key(&self.prefix, token)
    }

    /// Queues a redemption for the batching task, and the receiver of its
    /// answer; `None` if that task has gone.
    fn send(
        &self,
        token: &TokenHash,
        scope: &str,
        now: u64,
        until: Option<Instant>,
    ) -> Option<oneshot::Receiver<Result<Redemption, SessionStoreError>>> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            key: self.key(token),
            scope: scope.to_owned(),
            now,
            until,
            reply: Some(reply),
        };
        self.batcher().send(Message::Redeem(job)).ok()?;
        Some(answer)
    }

    /// The batching task's queue, starting the task on first use.
    fn batcher(&self) -> &mpsc::UnboundedSender<Message> {
        self.batcher.get_or_init(|| {
            let (jobs, queue) = mpsc::unbounded_channel();
            let (arm, deadlines) = mpsc::unbounded_channel();
            tokio::spawn(keep_deadlines(deadlines, jobs.downgrade()));
            tokio::spawn(redeem_in_batches(queue, arm, self.connection.clone()));
            jobs
        })
    }
}

/// `prefix` followed by the lowercase hex of `token`
/// ([`TokenHash::to_hex`]), written in place.
fn store_key(prefix: &str, token: &TokenHash) -> String {
    let mut key = String::with_capacity(prefix.len() + 2 * token.0.len());
    key.push_str(prefix);
    crate::payment_id::push_hex_lower(&mut key, &token.0);
    key
}

/// What the batching task is sent.
enum Message {
    /// A redemption.
    Redeem(Job),
    /// From [`keep_deadlines`]: the earliest deadline it was given has come.
    Due,
}

/// One redemption waiting for the batching task.
struct Job {
    key: String,
    scope: String,
    now: u64,
    /// When its caller stops waiting (`None`: never; [`SessionStore::redeem`]).
    until: Option<Instant>,
    /// Taken when the caller is answered before Redis (its deadline passed).
    reply: Option<Reply>,
}

type Reply = oneshot::Sender<Result<Redemption, SessionStoreError>>;

impl Job {
    /// Whether someone still waits for this job's answer.
    fn awaited(&self) -> bool {
        self.reply.as_ref().is_some_and(|reply| !reply.is_closed())
    }

    /// Answers `Timeout` if the deadline has passed by `now`; else its
    /// deadline, if it has one and is still awaited.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        let until = self.until.filter(|_| self.reply.is_some())?;
        if until > now {
            return Some(until);
        }
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(Err(SessionStoreError::Timeout));
        }
        None
    }
}

/// Which redemptions may share a script call: all of them on one server
/// (`None`), those of one hash slot on a cluster.
type Group = Option<Slot>;

/// The batching task. Each group has at most one script call on its way;
/// redemptions that arrive meanwhile wait, and go together (up to
/// [`MAX_BATCH`]) in the group's next call, in arrival order. Calls of
/// different groups run side by side. The deadlines of every redemption,
/// waiting or sent, are kept with one timer, in [`keep_deadlines`]: armed
/// (through `arm`) for the earliest, and, when it comes ([`Message::Due`]),
/// those past theirs are answered and the timer armed for the next. The
/// task ends when every sender (every clone of the store) is gone and every
/// call has been answered.
async fn redeem_in_batches(
    mut queue: mpsc::UnboundedReceiver<Message>,
    arm: mpsc::UnboundedSender<Instant>,
    connection: RedisConnection,
) {
    let mut received = Vec::with_capacity(MAX_BATCH);
    let mut waiting: HashMap<Group, Vec<Job>> = HashMap::new();
    // The jobs of each group's call on its way.
    let mut sent: HashMap<Group, Vec<Job>> = HashMap::new();
    let mut calls = FuturesUnordered::new();
    // What the timer is armed for: no later than the earliest deadline of
    // a job still awaited (a job answered since leaves it early, which
    // costs one look at the jobs when it comes).
    let mut armed: Option<Instant> = None;
    let mut open = true;
    loop {
        tokio::select! {
            n = queue.recv_many(&mut received, MAX_BATCH), if open => {
                if n == 0 {
                    open = false;
                }
                let mut due = false;
                for message in received.drain(..) {
                    let job = match message {
                        Message::Redeem(job) => job,
                        Message::Due => {
                            due = true;
                            continue;
                        }
                    };
                    if let Some(until) = job.until {
                        if armed.is_none_or(|armed| until < armed) {
                            armed = Some(until);
                            let _ = arm.send(until);
                        }
                    }
                    waiting.entry(connection.slot(&job.key)).or_default().push(job);
                }
                if due {
                    armed = expire(&mut waiting, &mut sent, Instant::now());
                    if let Some(until) = armed {
                        let _ = arm.send(until);
                    }
                }
            }
            Some((group, called)) = calls.next() => {
                let batch = sent.remove(&group).unwrap_or_default();
                match called {
                    Called::Answered(replies) => answer(&connection, batch, replies),
                    Called::Lost(error, id) => {
                        // What the call took is given back, or it is fenced
                        // off, before the group's next call: no later call
                        // of this instance touches its sessions meanwhile.
                        let keys = distinct_keys(&batch);
                        for job in batch {
                            if let Some(reply) = job.reply {
                                let _ = reply.send(Err(backend(error.clone())));
                            }
                        }
                        calls.push(Either::Right(reconcile(connection.clone(), group, keys, id)));
                        sent.insert(group, Vec::new());
                    }
                    Called::Reconciled => {}
                }
            }
            else => break,
        }
        // Start a call for every group with redemptions waiting and none on
        // its way.
        waiting.retain(|group, jobs| {
            if sent.contains_key(group) {
                return true;
            }
            // A caller that has gone, or was answered at its deadline, loses
            // nothing: its redemption is not made.
            jobs.retain(Job::awaited);
            if jobs.is_empty() {
                return false;
            }
            let rest = jobs.split_off(jobs.len().min(MAX_BATCH));
            let batch = std::mem::replace(jobs, rest);
            calls.push(Either::Left(call(
                connection.clone(),
                *group,
                invocation(batch.iter().map(|job| (&*job.key, &*job.scope, job.now))),
            )));
            sent.insert(*group, batch);
            !jobs.is_empty()
        });
    }
}

/// The batching task's timer, in a task of its own so that the batching
/// task, woken for every redemption, does not poll it each time: armed for
/// the latest instant `arm` was sent, it then sends [`Message::Due`] on
/// `queue`, and waits to be armed again. It ends with the batching task.
async fn keep_deadlines(
    mut arm: mpsc::UnboundedReceiver<Instant>,
    queue: mpsc::WeakUnboundedSender<Message>,
) {
    let mut armed = None;
    loop {
        let timer = async {
            match armed {
                Some(until) => tokio::time::sleep_until(until).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            until = arm.recv() => match until {
                Some(until) => armed = Some(until),
                None => return,
            },
            () = timer => {
                armed = None;
                let Some(queue) = queue.upgrade() else { return };
                if queue.send(Message::Due).is_err() {
                    return;
                }
            }
        }
    }
}

/// Answers `Timeout` to every job past its deadline at `now`, and drops
/// those that wait to be sent; returns the earliest deadline left.
fn expire(
    waiting: &mut HashMap<Group, Vec<Job>>,
    sent: &mut HashMap<Group, Vec<Job>>,
    now: Instant,
) -> Option<Instant> {
    let mut earliest: Option<Instant> = None;
    let mut keep = |until: Option<Instant>| {
        if let Some(until) = until {
            earliest = Some(earliest.map_or(until, |e| e.min(until)));
        }
    };
    for jobs in waiting.values_mut() {
        jobs.retain_mut(|job| {
            keep(job.expire(now));
            job.awaited()
        });
    }
    waiting.retain(|_, jobs| !jobs.is_empty());
    // A sent job stays: Redis's answer to it is given back.
    for job in sent.values_mut().flatten() {
        keep(job.expire(now));
    }
    earliest
}

/// What a group's script call came to.
enum Called {
    /// Redis's answer to each redemption, in order.
    Answered(Vec<Result<Redemption, SessionStoreError>>),
    /// No answer (a timeout, a connection that failed): the call may have
    /// been made. Its batch id, for [`reconcile`].
    Lost(RedisError, String),
    /// A lost call's sessions were reconciled (or given up on).
    Reconciled,
}

/// One script call, with its group.
async fn call(
    mut connection: RedisConnection,
    group: Group,
    (invocation, count, id): (ScriptInvocation<'static>, usize, String),
) -> (Group, Called) {
    let called = match redeem_all(&mut connection, &invocation, count).await {
        Ok(replies) => Called::Answered(replies),
        // Whatever the error (even one Redis answered, or an answer that
        // could not be read), reconciling is safe: it gives back only what
        // the call took, and holds the slot only while Redis does not
        // answer.
        Err(error) => Called::Lost(error, id),
    };
    (group, called)
}

/// After the script call of batch `id` on `keys` was lost: gives back
/// what it took, or fences it off ([`RECONCILE_LUA`]), retrying for
/// [`RECONCILE_FOR`] while Redis does not answer. On the connection the
/// call went on, this runs after it should it reach Redis; on another,
/// the fence stops it.
async fn reconcile(
    mut connection: RedisConnection,
    group: Group,
    keys: Vec<String>,
    id: String,
) -> (Group, Called) {
    let started = Instant::now();
    let mut pause = Duration::from_millis(50);
    loop {
        let invocation = reconciliation(keys.iter().map(String::as_str), &id);
        match invocation.invoke_async::<u64>(&mut connection).await {
            Ok(given) => {
                if given > 0 {
                    tracing::warn!(
                        given,
                        "x402: session calls taken by a redemption whose answer was lost were given back"
                    );
                }
                return (group, Called::Reconciled);
            }
            Err(e) if started.elapsed() < RECONCILE_FOR => {
                tracing::debug!(error = %e, "x402: lost session redemptions not reconciled yet; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "x402: could not learn whether lost session redemptions were made; nothing given back"
                );
                return (group, Called::Reconciled);
            }
        }
    }
}

/// The [`RECONCILE_LUA`] call for the sessions `keys` of batch `id`, as
/// of now.
fn reconciliation<'k>(
    keys: impl IntoIterator<Item = &'k str>,
    id: &str,
) -> ScriptInvocation<'static> {
    let mut invocation = reconcile_script().prepare_invoke();
    for key in keys {
        invocation.key(key);
    }
    invocation.arg(id).arg(unix_now());
    invocation
}

/// A fresh batch id: 64 random bits in hex.
fn batch_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// The sessions `jobs` name, each once.
fn distinct_keys(jobs: &[Job]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::with_capacity(jobs.len());
    for job in jobs {
        if !keys.contains(&job.key) {
            keys.push(job.key.clone());
        }
    }
    keys
}

/// Answers each job of `batch`; a redemption whose caller left while Redis
/// was answering, or was answered at its deadline, is given back.
fn answer(
    connection: &RedisConnection,
    batch: Vec<Job>,
    replies: Vec<Result<Redemption, SessionStoreError>>,
) {
    for (job, reply) in batch.into_iter().zip(replies) {
        let unclaimed = match job.reply {
            Some(waiter) => waiter.send(reply).err().and_then(Result::ok),
            None => reply.ok(),
        };
        if let Some(Redemption::Redeemed { .. }) = unclaimed {
            let mut connection = connection.clone();
            tokio::spawn(async move {
                if let Err(e) = give_back_key(&mut connection, &job.key).await {
                    tracing::error!(error = %e, "x402: could not give back an abandoned session redemption");
                }
            });
        }
    }
}

/// The script call that makes the redemptions `(key, scope, now)`, how
/// many they are, and its batch id.
fn invocation<'j>(
    redemptions: impl Iterator<Item = (&'j str, &'j str, u64)>,
) -> (ScriptInvocation<'static>, usize, String) {
    invocation_as(batch_id(), redemptions)
}

/// [`invocation`], with the batch id `id`.
fn invocation_as<'j>(
    id: String,
    redemptions: impl Iterator<Item = (&'j str, &'j str, u64)>,
) -> (ScriptInvocation<'static>, usize, String) {
    let mut invocation = redeem_script().prepare_invoke();
    invocation.arg(&id);
    let mut count = 0;
    for (key, scope, now) in redemptions {
        invocation.key(key).arg(scope).arg(now);
        count += 1;
    }
    (invocation, count, id)
}

/// Makes the `count` redemptions of `invocation` in one script call: one
/// answer per redemption, in order, or the error that left the call
/// without an answer (it may have been made). On a cluster, every key must
/// be in one hash slot.
async fn redeem_all(
    connection: &mut RedisConnection,
    invocation: &ScriptInvocation<'_>,
    count: usize,
) -> Result<Vec<Result<Redemption, SessionStoreError>>, RedisError> {
    Ok(
        match invocation.invoke_async::<Vec<i64>>(connection).await? {
            replies if replies.len() == count => replies.into_iter().map(redemption).collect(),
            replies => (0..count)
                .map(|_| {
                    Err(SessionStoreError::Backend(
                        format!(
                            "the session redeem script answered {} replies for {count} redemptions",
                            replies.len(),
                        )
                        .into(),
                    ))
                })
                .collect(),
        },
    )
}

async fn give_back_key(
    connection: &mut RedisConnection,
    key: &str,
) -> Result<(), SessionStoreError> {
    let _given: i64 = give_back_script()
        .key(key)
        .arg(unix_now())
        .invoke_async(connection)
        .await
        .map_err(backend)?;
    Ok(())
}

/// What the batching task answered, or why it did not.
fn answered(
    answer: Result<Result<Redemption, SessionStoreError>, oneshot::error::RecvError>,
) -> Result<Redemption, SessionStoreError> {
    answer.unwrap_or_else(|_| {
        Err(SessionStoreError::Backend(
            "the session batching task stopped (its Tokio runtime shut down?)".into(),
        ))
    })
}

fn backend(error: RedisError) -> SessionStoreError {
    if error.is_timeout() {
        SessionStoreError::Timeout
    } else {
        SessionStoreError::Backend(Box::new(error))
    }
}

/// The script's answer to one redemption.
fn redemption(reply: i64) -> Result<Redemption, SessionStoreError> {
    Ok(match reply {
        -1 => Redemption::Unknown,
        -2 => Redemption::Expired,
        -3 => Redemption::OutOfScope,
        -4 => Redemption::Exhausted,
        -5 => {
            return Err(SessionStoreError::Backend(
                "the session's key in Redis does not hold a session record".into(),
            ))
        }
        -6 => {
            return Err(SessionStoreError::Backend(
                "the redemption arrived after it was given up for lost, and was not made".into(),
            ))
        }
        n => match u64::try_from(n) {
            Ok(remaining) => Redemption::Redeemed { remaining },
            Err(_) => {
                return Err(SessionStoreError::Backend(
                    format!("unexpected reply {n} from the session redeem script").into(),
                ))
            }
        },
    })
}

#[async_trait]
impl SessionStore for RedisSessionStore {
    async fn open(
        &self,
        token: &TokenHash,
        record: SessionRecord,
    ) -> Result<(), SessionStoreError> {
        // HINCRBY works on signed 64-bit integers.
        if i64::try_from(record.remaining).is_err() {
            return Err(SessionStoreError::Backend(
                "a Redis session holds at most i64::MAX calls".into(),
            ));
        }
        let key = self.key(token);
        let forget_at = record
            .expires_at
            .saturating_add(EXPIRY_GRACE_SECS)
            .min(MAX_EXPIREAT);
        let mut connection = self.connection.clone();
        ::redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg(&key)
            .arg("scope")
            .arg(&record.scope)
            .arg("remaining")
            .arg(record.remaining)
            .arg("sold")
            .arg(record.remaining)
            .arg("expires_at")
            .arg(record.expires_at)
            .ignore()
            .cmd("EXPIREAT")
            .arg(&key)
            .arg(forget_at)
            .ignore()
            .query_async::<()>(&mut connection)
            .await
            .map_err(backend)
    }

    async fn redeem(
        &self,
        token: &TokenHash,
        scope: &str,
        now: u64,
    ) -> Result<Redemption, SessionStoreError> {
        match self.send(token, scope, now, None) {
            Some(answer) => answered(answer.await),
            // The task has gone with the runtime that ran it: redeem directly.
            None => {
                let key = self.key(token);
                let mut connection = self.connection.clone();
                let (invocation, count, id) = invocation(std::iter::once((&*key, scope, now)));
                match redeem_all(&mut connection, &invocation, count).await {
                    Ok(mut replies) => replies.pop().unwrap_or_else(|| {
                        Err(SessionStoreError::Backend(
                            "no reply to a redemption".into(),
                        ))
                    }),
                    Err(error) => {
                        // Made or not, the call is reconciled (on this
                        // runtime, if there is one) as the batching task would.
                        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                            runtime.spawn(reconcile(connection, None, vec![key], id));
                        }
                        Err(backend(error))
                    }
                }
            }
        }
    }

    /// The batching task keeps the deadline (see the type's docs); `None`
    /// when that task has gone with the runtime that ran it, and the engine
    /// then keeps the deadline of a direct [`redeem`](Self::redeem).
    fn redeem_within<'a>(
        &'a self,
        token: &'a TokenHash,
        scope: &'a str,
        now: u64,
        deadline: Duration,
    ) -> Option<BoundedRedemption<'a>> {
        // A deadline too far to count is none.
        let until = Instant::now().checked_add(deadline);
        let answer = self.send(token, scope, now, until)?;
        Some(Box::pin(async move { answered(answer.await) }))
    }

    async fn give_back(&self, token: &TokenHash) -> Result<(), SessionStoreError> {
        give_back_key(&mut self.connection.clone(), &self.key(token)).await
    }

    async fn close(&self, token: &TokenHash) -> Result<(), SessionStoreError> {
        ::redis::cmd("DEL")
            .arg(self.key(token))
            .query_async::<()>(&mut self.connection.clone())
            .await
            .map_err(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_replies_map_to_redemptions() {
        assert_eq!(redemption(-1).ok(), Some(Redemption::Unknown));
        assert_eq!(redemption(-2).ok(), Some(Redemption::Expired));
        assert_eq!(redemption(-3).ok(), Some(Redemption::OutOfScope));
        assert_eq!(redemption(-4).ok(), Some(Redemption::Exhausted));
        assert_eq!(
            redemption(0).ok(),
            Some(Redemption::Redeemed { remaining: 0 })
        );
        assert_eq!(
            redemption(41).ok(),
            Some(Redemption::Redeemed { remaining: 41 })
        );
        assert!(redemption(-5).is_err());
        assert!(redemption(-6).is_err());
    }

    #[test]
    fn keys_are_the_prefix_and_the_hash_in_hex() {
        for token in [
            TokenHash([0; 32]),
            TokenHash([0xff; 32]),
            crate::session::SessionToken::generate().hash(),
        ] {
            assert_eq!(
                store_key("x402:session:", &token),
                format!("x402:session:{}", token.to_hex())
            );
            assert_eq!(store_key("", &token), token.to_hex());
        }
    }
}

/// The scripts against Redis at `REDIS_URL`: what a lost call took is given
/// back once, and a call that arrives after its reconciliation takes nothing.
#[cfg(test)]
mod lost_calls {
    use ::redis::AsyncCommands as _;

    use super::*;

    const SCOPE: &str = "GET /reconcile";

    async fn connection() -> RedisConnection {
        let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        match RedisConnection::connect(&url, TIMEOUTS).await {
            Ok(c) => c,
            Err(e) => panic!("these tests need Redis at {url}: {e}"),
        }
    }

    /// A session of `calls` calls (of which `left` remain) under a key of
    /// its own, expiring in five minutes.
    async fn session(connection: &RedisConnection, calls: u64, left: u64) -> String {
        let key = format!("test:session:lost:{}", batch_id());
        let _: () = ::redis::cmd("HSET")
            .arg(&key)
            .arg("scope")
            .arg(SCOPE)
            .arg("remaining")
            .arg(left)
            .arg("sold")
            .arg(calls)
            .arg("expires_at")
            .arg(unix_now() + 300)
            .query_async(&mut connection.clone())
            .await
            .unwrap();
        let _: () = connection.clone().expire(&key, 600).await.unwrap();
        key
    }

    async fn redeem(connection: &RedisConnection, id: &str, keys: &[&str]) -> Vec<i64> {
        let now = unix_now();
        let (invocation, _, _) =
            invocation_as(id.to_owned(), keys.iter().map(|key| (*key, SCOPE, now)));
        invocation
            .invoke_async(&mut connection.clone())
            .await
            .unwrap()
    }

    async fn reconcile_now(connection: &RedisConnection, id: &str, keys: &[&str]) -> u64 {
        reconciliation(keys.iter().copied(), id)
            .invoke_async(&mut connection.clone())
            .await
            .unwrap()
    }

    async fn left(connection: &RedisConnection, key: &str) -> u64 {
        connection.clone().hget(key, "remaining").await.unwrap()
    }

    #[tokio::test]
    async fn what_a_lost_call_took_is_given_back_once() {
        let redis = connection().await;
        let (one, five) = (session(&redis, 10, 1).await, session(&redis, 10, 5).await);
        let id = batch_id();
        // The key left with one call is named twice: the second is refused.
        assert_eq!(redeem(&redis, &id, &[&one, &one, &five]).await, [0, -4, 4]);
        assert_eq!(reconcile_now(&redis, &id, &[&one, &five]).await, 2);
        assert_eq!(
            (left(&redis, &one).await, left(&redis, &five).await),
            (1, 5)
        );
        // Run again (a retry whose first answer was lost), nothing more.
        assert_eq!(reconcile_now(&redis, &id, &[&one, &five]).await, 0);
        assert_eq!(
            (left(&redis, &one).await, left(&redis, &five).await),
            (1, 5)
        );
        // The sessions redeem as before.
        assert_eq!(redeem(&redis, &batch_id(), &[&five]).await, [4]);

        // A key named three times, each redeemed: three given back.
        let id = batch_id();
        assert_eq!(redeem(&redis, &id, &[&five, &five, &five]).await, [3, 2, 1]);
        assert_eq!(reconcile_now(&redis, &id, &[&five]).await, 3);
        assert_eq!(left(&redis, &five).await, 4);
    }

    #[tokio::test]
    async fn a_call_that_arrives_after_its_reconciliation_takes_nothing() {
        let redis = connection().await;
        let key = session(&redis, 10, 10).await;
        let id = batch_id();
        assert_eq!(reconcile_now(&redis, &id, &[&key]).await, 0);
        assert_eq!(redeem(&redis, &id, &[&key, &key]).await, [-6, -6]);
        assert_eq!(left(&redis, &key).await, 10);
        assert!(redemption(-6).is_err());
        // Another call is not fenced.
        assert_eq!(redeem(&redis, &batch_id(), &[&key]).await, [9]);
    }

    #[tokio::test]
    async fn a_session_redeemed_since_or_gone_gets_nothing_back() {
        let redis = connection().await;
        // Redeemed again by another call (another instance's): which of the
        // two to give back cannot be told; both stay taken.
        let key = session(&redis, 10, 10).await;
        let (lost, later) = (batch_id(), batch_id());
        assert_eq!(redeem(&redis, &lost, &[&key]).await, [9]);
        assert_eq!(redeem(&redis, &later, &[&key]).await, [8]);
        assert_eq!(reconcile_now(&redis, &lost, &[&key]).await, 0);
        assert_eq!(left(&redis, &key).await, 8);

        // A session that is not there is not made by the reconciliation.
        let missing = format!("test:session:lost:{}", batch_id());
        assert_eq!(reconcile_now(&redis, &batch_id(), &[&missing]).await, 0);
        let exists: bool = redis.clone().exists(&missing).await.unwrap();
        assert!(!exists);

        // An expired session gets nothing back.
        let expired = session(&redis, 10, 10).await;
        let id = batch_id();
        assert_eq!(redeem(&redis, &id, &[&expired]).await, [9]);
        let _: () = redis
            .clone()
            .hset(&expired, "expires_at", unix_now() - 1)
            .await
            .unwrap();
        assert_eq!(reconcile_now(&redis, &id, &[&expired]).await, 0);
        assert_eq!(left(&redis, &expired).await, 9);
    }

    /// Counts past 2^53 are not exact as Lua numbers: they are decremented
    /// by `HINCRBY`, and a reconciliation, which compares them as numbers
    /// (as a give-back does), gives nothing back rather than a wrong count.
    #[tokio::test]
    async fn counts_past_two_to_the_53_stay_exact() {
        let redis = connection().await;
        let huge = i64::MAX as u64;
        let key = session(&redis, huge, huge).await;
        let id = batch_id();
        assert_eq!(redeem(&redis, &id, &[&key]).await.len(), 1);
        let stored: String = redis.clone().hget(&key, "remaining").await.unwrap();
        assert_eq!(stored, (huge - 1).to_string());
        assert_eq!(reconcile_now(&redis, &id, &[&key]).await, 0);
        let stored: String = redis.clone().hget(&key, "remaining").await.unwrap();
        assert_eq!(stored, (huge - 1).to_string());
    }
}
