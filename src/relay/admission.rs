//! Which connections are served: at most `limits.connections` at once, and at most
//! `limits.connections_per_uid` from one uid (the peer's `SO_PEERCRED`), so that one client,
//! or one compromised pod with the socket mounted, cannot take every slot.
//!
//! The connections fall into two pools: the main socket's (the kubelet's) and the scoped
//! sockets' (`endpoints`, which pods may have mounted), which together hold at most
//! `limits.scoped_connections`. The per-uid count is kept per pool: most containers run as
//! uid 0, as the kubelet does, and a root process on a scoped socket must not use up the
//! kubelet's uid-0 slots. So the main socket can always reach `limits.connections -
//! limits.scoped_connections`, whatever the scoped sockets' callers do.
//!
//! At a limit, a new connection first reclaims an idle one: the connection of that uid (or, at
//! a pool's limit or `limits.connections`, of any uid) that has had no call open for longest,
//! and for at least [`RECLAIMABLE_AFTER`], is told to go away (GOAWAY; its client reconnects
//! when it next calls, as after `limits.idle_timeout_seconds`), and its slot passes to the new
//! connection once it has closed. A scoped newcomer reclaims only scoped connections; a main one
//! at `limits.connections` takes a scoped connection before a main one. A call is open once its
//! request has arrived: a connection that holds only streams whose request never came (for
//! [`RECLAIMABLE_AFTER`]) is idle, and reclaimed before any other. Real clients hold many idle
//! connections (critest keeps one per test client, over 256 in a run). Only when every
//! connection the newcomer may reclaim is busy is it closed at once, before anything is read
//! from it, and counted; the bounds themselves never move.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};

/// How often a refusal is logged at most (each is counted in the metrics).
const WARN_EVERY: Duration = Duration::from_secs(10);

/// A connection that had a call open within this long is busy: never reclaimed (a client that
/// has just connected is about to call). So is one whose stream has waited less than this for
/// its request (real clients send it with the stream's headers).
pub const RECLAIMABLE_AFTER: Duration = Duration::from_secs(1);

/// `waiting_since` while no stream waits: a stream counted in before its time is stored looks
/// as if it had just begun to wait, never as silent for long.
const NONE_WAITING: u64 = u64::MAX;

/// Which listening socket a connection came on, as the connection limits see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pool {
    /// The main socket: the kubelet's.
    Main,
    /// Any scoped socket (`endpoints`): together they hold at most `limits.scoped_connections`.
    Scoped,
}

impl Pool {
    fn name(self) -> &'static str {
        match self {
            Pool::Main => "main socket",
            Pool::Scoped => "scoped sockets",
        }
    }
}

/// What one connection's streams tell the admission: how many calls are open (their request has
/// arrived), how many streams still wait for their request and since when, since when no call
/// is open, and whether its slot has been asked for.
#[derive(Debug)]
pub struct Activity {
    open: AtomicUsize,
    /// Streams accepted whose request has not arrived: they do not make the connection busy.
    waiting: AtomicUsize,
    /// Milliseconds since the admission's epoch when `waiting` last rose from 0
    /// ([`NONE_WAITING`] while it is 0).
    waiting_since: AtomicU64,
    /// Milliseconds since the admission's epoch when the last call ended (or the connection
    /// was admitted).
    idle_since: AtomicU64,
    epoch: Instant,
    /// Set, and `reclaim` notified, when a new connection takes this one's slot.
    reclaimed: AtomicBool,
    reclaim: Notify,
}

/// Why a connection may be reclaimed, for ranking it against others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Reclaimable {
    /// It holds streams whose request never came: taken before merely idle connections.
    silent: bool,
    /// How long it has been idle (or silent).
    idle: Duration,
}

impl Activity {
    fn new(epoch: Instant) -> Activity {
        let now = epoch.elapsed().as_millis() as u64;
        Activity {
            open: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            waiting_since: AtomicU64::new(NONE_WAITING),
            idle_since: AtomicU64::new(now),
            epoch,
            reclaimed: AtomicBool::new(false),
            reclaim: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A stream was accepted on the connection: it waits for its request, and does not make
    /// the connection busy, until the handle returned is told the request has arrived.
    pub fn stream_accepted(self: &Arc<Self>) -> Arrival {
        // SeqCst here and in `arrived`: the admission, reading `waiting` before `open`, never
        // sees a stream in neither count.
        if self.waiting.fetch_add(1, Ordering::SeqCst) == 0 {
            self.waiting_since.store(self.now_ms(), Ordering::SeqCst);
        }
        Arrival { activity: self.clone(), arrived: false }
    }

    /// A stream stopped waiting for its request (it arrived, or the stream ended).
    fn stream_left_waiting(&self) {
        if self.waiting.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.waiting_since.store(NONE_WAITING, Ordering::SeqCst);
        }
    }

    /// A call (a stream whose request had arrived) ended on the connection.
    fn call_ended(&self) {
        if self.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle_since.store(self.now_ms(), Ordering::Relaxed);
        }
    }

    /// Calls open now: streams whose request has arrived, not ended.
    pub fn open_calls(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Streams accepted whose request has not arrived.
    pub fn waiting_streams(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// How long no call has been open (zero while one is).
    pub fn idle_for(&self) -> Duration {
        if self.open_calls() > 0 {
            return Duration::ZERO;
        }
        let since = self.idle_since.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(since))
    }

    /// Whether the connection may be reclaimed, and how it ranks; `None` while it is busy: a call
    /// open or ended within [`RECLAIMABLE_AFTER`], or a stream waiting less than that for its
    /// request.
    fn reclaimable(&self) -> Option<Reclaimable> {
        // `waiting` before `open` (see `stream_accepted`).
        let waiting = self.waiting_streams() > 0;
        let idle = self.idle_for();
        if idle < RECLAIMABLE_AFTER {
            return None;
        }
        if !waiting {
            return Some(Reclaimable { silent: false, idle });
        }
        let waited = Duration::from_millis(self.now_ms().saturating_sub(self.waiting_since.load(Ordering::SeqCst)));
        (waited >= RECLAIMABLE_AFTER).then_some(Reclaimable { silent: true, idle: idle.min(waited) })
    }

    /// Completes when a new connection has taken this one's slot: the connection should go.
    pub async fn reclaimed(&self) {
        loop {
            let notified = self.reclaim.notified();
            if self.reclaimed.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// One stream of a connection, from when it is accepted until it ends: first waiting for its
/// request (which does not make the connection busy: a caller cannot hold a slot with streams it
/// never sends on), then, once [`Arrival::arrived`] is called, an open call. Dropping it counts
/// the stream out of whichever it is in.
#[derive(Debug)]
pub struct Arrival {
    activity: Arc<Activity>,
    arrived: bool,
}

impl Arrival {
    /// The stream's request has arrived: the connection is busy until the call ends (this is
    /// dropped). Again, it does nothing.
    pub fn arrived(&mut self) {
        if !self.arrived {
            self.arrived = true;
            self.activity.open.fetch_add(1, Ordering::SeqCst);
            self.activity.stream_left_waiting();
        }
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        if self.arrived {
            self.activity.call_ended();
        } else {
            self.activity.stream_left_waiting();
        }
    }
}

/// Whose slots a connection counts against: its pool, and its uid within that pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Peer {
    pool: Pool,
    uid: u32,
}

/// The connections a newcomer at a limit may reclaim.
#[derive(Clone, Copy, Debug)]
enum Among {
    /// Those of its pool and uid (at `limits.connections_per_uid`).
    Peer(Peer),
    /// The scoped sockets' (a scoped newcomer never takes the main socket's slots).
    Scoped,
    /// Any, scoped ones first (a main newcomer at `limits.connections`).
    Any,
}

impl Among {
    fn includes(self, peer: Peer) -> bool {
        match self {
            Among::Peer(among) => among == peer,
            Among::Scoped => peer.pool == Pool::Scoped,
            Among::Any => true,
        }
    }
}

#[derive(Debug)]
struct Live {
    peer: Peer,
    activity: Arc<Activity>,
    /// The connection waiting for this one's slot: whose it is, and where to hand the slot.
    heir: Option<(Peer, oneshot::Sender<Admitted>)>,
}

#[derive(Debug)]
struct Open {
    total: usize,
    /// Of `total`, the scoped sockets' connections.
    scoped: usize,
    per_uid_limit: usize,
    scoped_limit: usize,
    per_uid: HashMap<Peer, usize>,
    live: HashMap<u64, Live>,
    next_id: u64,
    last_warned: Option<Instant>,
    refused_since_warned: u64,
}

impl Open {
    /// Counts a slot for `peer`.
    fn take(&mut self, peer: Peer) {
        self.total += 1;
        if peer.pool == Pool::Scoped {
            self.scoped += 1;
        }
        *self.per_uid.entry(peer).or_default() += 1;
    }

    /// Gives back a slot of `peer`.
    fn release(&mut self, peer: Peer) {
        self.total -= 1;
        if peer.pool == Pool::Scoped {
            self.scoped -= 1;
        }
        if let Some(count) = self.per_uid.get_mut(&peer) {
            *count -= 1;
            if *count == 0 {
                self.per_uid.remove(&peer);
            }
        }
    }

    /// Whether `heir` may take the slot `leaving` gives up: others of its uid or pool may have
    /// been admitted meanwhile, and its limits still hold.
    fn room_for(&self, heir: Peer, leaving: Peer) -> bool {
        let uid = heir == leaving || self.per_uid.get(&heir).copied().unwrap_or(0) < self.per_uid_limit;
        let pool = heir.pool == leaving.pool || heir.pool == Pool::Main || self.scoped < self.scoped_limit;
        uid && pool
    }

    /// Registers a connection of `peer` whose slot is already counted.
    fn register(&mut self, shared: &Arc<Mutex<Open>>, peer: Peer, epoch: Instant) -> Admitted {
        let id = self.next_id;
        self.next_id += 1;
        let activity = Arc::new(Activity::new(epoch));
        self.live.insert(id, Live { peer, activity: activity.clone(), heir: None });
        Admitted { open: shared.clone(), id, peer, activity }
    }

    /// The connection to reclaim for a newcomer that may take those `among`: of those that may
    /// be reclaimed and are not already, scoped ones first (for `Among::Any`), then those
    /// holding streams whose request never came, then the longest idle.
    fn victim(&self, among: Among) -> Option<u64> {
        self.live
            .iter()
            .filter(|(_, live)| among.includes(live.peer) && live.heir.is_none())
            .filter_map(|(id, live)| Some((*id, live.peer.pool == Pool::Scoped, live.activity.reclaimable()?)))
            .max_by_key(|(_, scoped, reclaimable)| (*scoped, *reclaimable))
            .map(|(id, ..)| id)
    }
}

/// The connections open now, by pool and uid.
#[derive(Debug, Clone)]
pub struct Admission {
    open: Arc<Mutex<Open>>,
    total: usize,
    scoped: usize,
    per_uid: usize,
    epoch: Instant,
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    Total,
    /// The scoped sockets' pool is full.
    Scoped,
    PerUid,
}

impl Refused {
    pub fn label(self) -> &'static str {
        match self {
            Refused::Total => "limits.connections",
            Refused::Scoped => "limits.scoped_connections",
            Refused::PerUid => "limits.connections_per_uid",
        }
    }
}

/// How a connection is admitted.
#[derive(Debug)]
pub enum Admit {
    /// A slot was free.
    Now(Admitted),
    /// An idle connection was told to go; its slot comes here once it has closed (the sender is
    /// dropped if the slot cannot pass: the newcomer is then refused at `Refused`'s limit).
    After(oneshot::Receiver<Admitted>, Refused),
}

/// One admitted connection; its slot is given back (or passed on) when this is dropped.
#[derive(Debug)]
pub struct Admitted {
    open: Arc<Mutex<Open>>,
    id: u64,
    peer: Peer,
    activity: Arc<Activity>,
}

impl Admitted {
    /// What the connection's streams report to the admission.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let heir = open.live.remove(&self.id).and_then(|live| live.heir);
        if let Some((heir, to)) = heir {
            // The slot passes on: the total stays, the pool and per-uid counts move if they differ.
            if open.room_for(heir, self.peer) {
                open.release(self.peer);
                open.take(heir);
                let admitted = open.register(&self.open, heir, self.activity.epoch);
                // Sent with the lock released: a newcomer that gave up drops it, which locks.
                drop(open);
                let _ = to.send(admitted);
                return;
            }
        }
        open.release(self.peer);
    }
}

impl Admission {
    /// At most `total` connections, `scoped` of them on the scoped sockets (kept below `total`,
    /// as the config is validated: the main socket keeps a share), and `per_uid` from one uid
    /// in each pool.
    pub fn new(total: usize, scoped: usize, per_uid: usize) -> Admission {
        let scoped = scoped.min(total.saturating_sub(1));
        let open = Open {
            total: 0,
            scoped: 0,
            per_uid_limit: per_uid,
            scoped_limit: scoped,
            per_uid: HashMap::new(),
            live: HashMap::new(),
            next_id: 0,
            last_warned: None,
            refused_since_warned: 0,
        };
        Admission { open: Arc::new(Mutex::new(open)), total, scoped, per_uid, epoch: Instant::now() }
    }

    /// Admits a connection from `uid` on a socket of `pool`: now, after an idle connection has
    /// gone, or not at all (saying which limit it is over, and logging now and then).
    pub fn admit(&self, pool: Pool, uid: u32) -> Result<Admit, Refused> {
        let peer = Peer { pool, uid };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let of_uid = open.per_uid.get(&peer).copied().unwrap_or(0);
        // At the per-uid limit only that uid's connections (in its pool) may make room; at a
        // pool's limit or the total, any uid's, but a scoped newcomer's only among the scoped.
        let at_limit = if of_uid >= self.per_uid {
            Some((Refused::PerUid, Among::Peer(peer)))
        } else if pool == Pool::Scoped && open.scoped >= self.scoped {
            Some((Refused::Scoped, Among::Scoped))
        } else if open.total >= self.total {
            let among = match pool {
                Pool::Main => Among::Any,
                Pool::Scoped => Among::Scoped,
            };
            Some((Refused::Total, among))
        } else {
            None
        };
        let Some((limit, among)) = at_limit else {
            open.take(peer);
            let admitted = open.register(&self.open, peer, self.epoch);
            return Ok(Admit::Now(admitted));
        };
        if let Some(victim) = open.victim(among) {
            let (to, from) = oneshot::channel();
            if let Some(live) = open.live.get_mut(&victim) {
                live.heir = Some((peer, to));
                live.activity.reclaimed.store(true, Ordering::Release);
                live.activity.reclaim.notify_one();
                tracing::debug!(
                    uid,
                    pool = pool.name(),
                    limit = limit.label(),
                    "an idle connection makes room for a new one: GOAWAY"
                );
                return Ok(Admit::After(from, limit));
            }
        }
        open.refused_since_warned += 1;
        if open.last_warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            let (bound, count) = match limit {
                Refused::Total => (self.total, open.total),
                Refused::Scoped => (self.scoped, open.scoped),
                Refused::PerUid => (self.per_uid, of_uid),
            };
            tracing::warn!(
                uid,
                pool = pool.name(),
                open = count,
                refused = open.refused_since_warned,
                "closing new connections: {} ({bound}) reached, every connection it may reclaim busy",
                limit.label()
            );
            open.last_warned = Some(Instant::now());
            open.refused_since_warned = 0;
        }
        Err(limit)
    }
}

#[cfg(test)]
mod tests;
