//! Which connections are served: at most `limits.connections` at once, and at most
//! `limits.connections_per_uid` from one uid (the peer's `SO_PEERCRED`), so that one client,
//! or one compromised pod with the socket mounted, cannot take every slot.
//!
//! At a limit, a new connection first reclaims an idle one: the connection of that uid (or, at
//! `limits.connections`, of any uid) that has had no call open for longest, and for at least
//! [`RECLAIMABLE_AFTER`], is told to go away (GOAWAY; its client reconnects when it next
//! calls, as after `limits.idle_timeout_seconds`), and its slot passes to the new connection
//! once it has closed. Real clients hold many idle connections (critest keeps one per test
//! client, over 256 in a run). Only when every connection at the limit is busy is the new one
//! closed at once, before anything is read from it, and counted; the bound itself never moves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};

/// How often a refusal is logged at most (each is counted in the metrics).
const WARN_EVERY: Duration = Duration::from_secs(10);

/// A connection that had a call open within this long is busy: never reclaimed (a client that
/// has just connected is about to call).
pub const RECLAIMABLE_AFTER: Duration = Duration::from_secs(1);

/// What one connection's calls tell the admission: how many are open, since when none is, and
/// whether its slot has been asked for.
#[derive(Debug)]
pub struct Activity {
    open: AtomicUsize,
    /// Milliseconds since the admission's epoch when the last call ended (or the connection
    /// was admitted).
    idle_since: AtomicU64,
    epoch: Instant,
    /// Set, and `reclaim` notified, when a new connection takes this one's slot.
    reclaimed: AtomicBool,
    reclaim: Notify,
}

impl Activity {
    fn new(epoch: Instant) -> Activity {
        let now = epoch.elapsed().as_millis() as u64;
        Activity {
            open: AtomicUsize::new(0),
            idle_since: AtomicU64::new(now),
            epoch,
            reclaimed: AtomicBool::new(false),
            reclaim: Notify::new(),
        }
    }

    /// A call began on the connection.
    pub fn call_began(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
    }

    /// A call ended on the connection.
    pub fn call_ended(&self) {
        if self.open.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.idle_since.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
    }

    /// Calls open now.
    pub fn open_calls(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// How long no call has been open (zero while one is).
    pub fn idle_for(&self) -> Duration {
        if self.open_calls() > 0 {
            return Duration::ZERO;
        }
        let since = self.idle_since.load(Ordering::Relaxed);
        Duration::from_millis((self.epoch.elapsed().as_millis() as u64).saturating_sub(since))
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

#[derive(Debug)]
struct Live {
    uid: u32,
    activity: Arc<Activity>,
    /// The connection waiting for this one's slot: its uid, and where to hand the slot.
    heir: Option<(u32, oneshot::Sender<Admitted>)>,
}

#[derive(Debug)]
struct Open {
    total: usize,
    per_uid_limit: usize,
    per_uid: HashMap<u32, usize>,
    live: HashMap<u64, Live>,
    next_id: u64,
    last_warned: Option<Instant>,
    refused_since_warned: u64,
}

impl Open {
    /// Registers a connection of `uid` whose slot is already counted.
    fn register(&mut self, shared: &Arc<Mutex<Open>>, uid: u32, epoch: Instant) -> Admitted {
        let id = self.next_id;
        self.next_id += 1;
        let activity = Arc::new(Activity::new(epoch));
        self.live.insert(id, Live { uid, activity: activity.clone(), heir: None });
        Admitted { open: shared.clone(), id, uid, activity }
    }

    /// The connection to reclaim for a newcomer of `uid` (`None`: any uid): the longest idle of
    /// those idle for [`RECLAIMABLE_AFTER`] and not already reclaimed.
    fn victim(&self, uid: Option<u32>) -> Option<u64> {
        self.live
            .iter()
            .filter(|(_, live)| uid.is_none_or(|u| live.uid == u) && live.heir.is_none())
            .map(|(id, live)| (*id, live.activity.idle_for()))
            .filter(|(_, idle)| *idle >= RECLAIMABLE_AFTER)
            .max_by_key(|(_, idle)| *idle)
            .map(|(id, _)| id)
    }
}

/// The connections open now, by uid.
#[derive(Debug, Clone)]
pub struct Admission {
    open: Arc<Mutex<Open>>,
    total: usize,
    per_uid: usize,
    epoch: Instant,
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    Total,
    PerUid,
}

impl Refused {
    pub fn label(self) -> &'static str {
        match self {
            Refused::Total => "limits.connections",
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
    uid: u32,
    activity: Arc<Activity>,
}

impl Admitted {
    /// What the connection's calls report to the admission.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let heir = open.live.remove(&self.id).and_then(|live| live.heir);
        if let Some((heir_uid, to)) = heir {
            // The slot passes on: the total stays, the per-uid counts move if the uids differ.
            // (Others of the heir's uid may have been admitted meanwhile: its limit still holds.)
            let room = heir_uid == self.uid || open.per_uid.get(&heir_uid).copied().unwrap_or(0) < open.per_uid_limit;
            if room {
                release_uid(&mut open, self.uid);
                *open.per_uid.entry(heir_uid).or_default() += 1;
                let admitted = open.register(&self.open, heir_uid, self.activity.epoch);
                // Sent with the lock released: a newcomer that gave up drops it, which locks.
                drop(open);
                let _ = to.send(admitted);
                return;
            }
        }
        open.total -= 1;
        release_uid(&mut open, self.uid);
    }
}

fn release_uid(open: &mut Open, uid: u32) {
    if let Some(count) = open.per_uid.get_mut(&uid) {
        *count -= 1;
        if *count == 0 {
            open.per_uid.remove(&uid);
        }
    }
}

impl Admission {
    pub fn new(total: usize, per_uid: usize) -> Admission {
        let open = Open {
            total: 0,
            per_uid_limit: per_uid,
            per_uid: HashMap::new(),
            live: HashMap::new(),
            next_id: 0,
            last_warned: None,
            refused_since_warned: 0,
        };
        Admission { open: Arc::new(Mutex::new(open)), total, per_uid, epoch: Instant::now() }
    }

    /// Admits a connection from `uid`: now, after an idle connection has gone, or not at all
    /// (saying which limit it is over, and logging now and then).
    pub fn admit(&self, uid: u32) -> Result<Admit, Refused> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let of_uid = open.per_uid.get(&uid).copied().unwrap_or(0);
        // At the per-uid limit only that uid's connections may make room; at the total, any.
        let at_limit = if of_uid >= self.per_uid {
            Some((Refused::PerUid, Some(uid)))
        } else if open.total >= self.total {
            Some((Refused::Total, None))
        } else {
            None
        };
        let Some((limit, among)) = at_limit else {
            open.total += 1;
            *open.per_uid.entry(uid).or_default() += 1;
            let admitted = open.register(&self.open, uid, self.epoch);
            return Ok(Admit::Now(admitted));
        };
        if let Some(victim) = open.victim(among) {
            let (to, from) = oneshot::channel();
            let live = open.live.get_mut(&victim).expect("the victim is live");
            live.heir = Some((uid, to));
            live.activity.reclaimed.store(true, Ordering::Release);
            live.activity.reclaim.notify_one();
            tracing::debug!(uid, limit = limit.label(), "an idle connection makes room for a new one: GOAWAY");
            return Ok(Admit::After(from, limit));
        }
        open.refused_since_warned += 1;
        if open.last_warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            let (bound, count) = match limit {
                Refused::Total => (self.total, open.total),
                Refused::PerUid => (self.per_uid, of_uid),
            };
            tracing::warn!(
                uid,
                open = count,
                refused = open.refused_since_warned,
                "closing new connections: {} ({bound}) reached, every connection at it busy",
                limit.label()
            );
            open.last_warned = Some(Instant::now());
            open.refused_since_warned = 0;
        }
        Err(limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(admit: Result<Admit, Refused>) -> Admitted {
        match admit {
            Ok(Admit::Now(admitted)) => admitted,
            other => panic!("expected a free slot, got {other:?}"),
        }
    }

    /// An admission whose clock started a minute ago, so that connections can be made to look
    /// idle for up to a minute.
    fn admission(total: usize, per_uid: usize) -> Admission {
        let epoch = Instant::now().checked_sub(Duration::from_secs(60)).expect("a minute back");
        Admission { epoch, ..Admission::new(total, per_uid) }
    }

    /// Makes `admitted` look idle since `at_ms` of the minute (0: a minute).
    fn idle_since(admitted: &Admitted, at_ms: u64) {
        admitted.activity.idle_since.store(at_ms, Ordering::Relaxed);
    }

    #[test]
    fn slots_are_counted_per_uid_and_in_all_and_given_back() {
        let admission = admission(3, 2);
        let a = now(admission.admit(1));
        let b = now(admission.admit(1));
        // Both are busy (just admitted, within RECLAIMABLE_AFTER): refused.
        assert_eq!(admission.admit(1).unwrap_err(), Refused::PerUid);
        let c = now(admission.admit(2));
        assert_eq!(admission.admit(3).unwrap_err(), Refused::Total);
        drop(a);
        let _d = now(admission.admit(1));
        drop((b, c));
    }

    #[test]
    fn a_new_connection_takes_the_slot_of_the_longest_idle_one_of_its_uid() {
        let admission = admission(10, 2);
        let (a, b) = (now(admission.admit(1)), now(admission.admit(1)));
        idle_since(&a, 0);
        idle_since(&b, 10_000);
        a.activity.call_began();
        // a is busy now; b is the one reclaimed.
        let Ok(Admit::After(mut slot, Refused::PerUid)) = admission.admit(1) else { panic!("b should be reclaimed") };
        assert!(b.activity.reclaimed.load(Ordering::Acquire));
        assert!(!a.activity.reclaimed.load(Ordering::Acquire));
        assert!(slot.try_recv().is_err(), "the slot passes only once b has closed");
        // b is being reclaimed and a is busy: a fourth waits for nothing, it is refused.
        assert_eq!(admission.admit(1).unwrap_err(), Refused::PerUid);
        drop(b);
        let c = slot.try_recv().expect("b's slot passed on");
        assert_eq!(c.uid, 1);
        let open = admission.open.lock().unwrap();
        assert_eq!((open.total, open.per_uid[&1], open.live.len()), (2, 2, 2));
        drop(open);
        drop((a, c));
        let open = admission.open.lock().unwrap();
        assert_eq!((open.total, open.per_uid.len(), open.live.len()), (0, 0, 0));
    }

    #[test]
    fn at_the_total_any_uids_idle_connection_makes_room_and_the_counts_move() {
        let admission = admission(2, 2);
        let a = now(admission.admit(1));
        let b = now(admission.admit(2));
        b.activity.call_began();
        idle_since(&a, 0);
        let Ok(Admit::After(mut slot, Refused::Total)) = admission.admit(3) else { panic!("a should be reclaimed") };
        drop(a);
        let c = slot.try_recv().expect("a's slot passed on");
        let open = admission.open.lock().unwrap();
        assert_eq!(open.total, 2);
        assert_eq!((open.per_uid.get(&1), open.per_uid[&2], open.per_uid[&3]), (None, 1, 1));
        drop(open);
        drop((b, c));
    }

    #[test]
    fn a_newcomer_that_gave_up_leaves_the_slot_free() {
        let admission = admission(1, 1);
        let a = now(admission.admit(1));
        idle_since(&a, 0);
        let Ok(Admit::After(slot, _)) = admission.admit(1) else { panic!("a should be reclaimed") };
        drop(slot);
        drop(a);
        let open = admission.open.lock().unwrap();
        assert_eq!((open.total, open.per_uid.len(), open.live.len()), (0, 0, 0));
    }

    #[test]
    fn a_run_of_refusals_is_logged_once_and_counted_for_the_next_warning() {
        let admission = admission(1, 1);
        let _held = now(admission.admit(1));
        for _ in 0..4 {
            assert_eq!(admission.admit(1).unwrap_err(), Refused::PerUid);
        }
        let open = admission.open.lock().unwrap();
        // The first refusal was logged; the next three wait, counted, for the next warning.
        assert!(open.last_warned.is_some());
        assert_eq!(open.refused_since_warned, 3);
    }
}
