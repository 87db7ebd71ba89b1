//! The bound all connections share, served fairly: takers that find no room wait in turn (a
//! small take never passes a large one queued before it), except that a connection holding its
//! share (the bound divided among the connections holding or waiting) waits behind every
//! connection that holds less. When a connection below its share cannot be served, each
//! connection holding more than its share is asked to give back (`Reclaim`): what it holds
//! while waiting on its own client is ended, so one client's unfinished requests never keep
//! another's list waiting.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{oneshot, watch};

/// One connection's place at the shared bound.
#[derive(Debug)]
pub(super) struct Party {
    pub(super) id: u64,
    /// Bumped when the pool asks this connection to give back.
    reclaim: watch::Sender<u64>,
}

impl Party {
    pub(super) fn new(id: u64) -> Arc<Party> {
        Arc::new(Party { id, reclaim: watch::Sender::new(0) })
    }

    /// Resolves once the pool asks this connection to give back (asks made before this call
    /// do not count).
    pub(super) fn reclaim(&self) -> Reclaim {
        let mut asks = self.reclaim.subscribe();
        asks.borrow_and_update();
        Reclaim(asks)
    }
}

/// The pool's asks that a connection give back, as seen by one of its calls.
#[derive(Debug)]
pub struct Reclaim(watch::Receiver<u64>);

impl Reclaim {
    /// Resolves at the next ask (never, once the daemon drops the pool).
    pub async fn asked(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[derive(Debug)]
struct Waiter {
    ticket: u64,
    party: u64,
    bytes: usize,
    granted: oneshot::Sender<()>,
}

#[derive(Debug)]
struct Holding {
    bytes: usize,
    party: Arc<Party>,
}

#[derive(Debug, Default)]
struct State {
    available: usize,
    waiters: VecDeque<Waiter>,
    holdings: HashMap<u64, Holding>,
    next_ticket: u64,
}

#[derive(Debug)]
pub(super) struct FairPool {
    total: usize,
    state: Mutex<State>,
}

impl FairPool {
    pub(super) fn new(total: usize) -> FairPool {
        FairPool { total, state: Mutex::new(State { available: total, ..State::default() }) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn available(&self) -> usize {
        self.lock().available
    }

    /// Takes `bytes` now if there is room and no one with a better claim waits.
    pub(super) fn try_take(&self, party: &Arc<Party>, bytes: usize) -> bool {
        let mut state = self.lock();
        let share = state.share(self.total, Some(party.id));
        let below = state.held_by(party.id) < share;
        let ahead = state.waiters.iter().any(|w| !below || state.held_by(w.party) < share);
        if ahead || state.available < bytes {
            return false;
        }
        state.hold(party, bytes);
        true
    }

    /// Takes `bytes`, waiting in turn for room.
    pub(super) async fn take(&self, party: &Arc<Party>, bytes: usize) {
        if self.try_take(party, bytes) {
            return;
        }
        let (granted, receiver) = oneshot::channel();
        let ticket = {
            let mut state = self.lock();
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.holdings.entry(party.id).or_insert_with(|| Holding { bytes: 0, party: party.clone() });
            state.waiters.push_back(Waiter { ticket, party: party.id, bytes, granted });
            state.serve(self.total);
            ticket
        };
        let mut waiting = Waiting { pool: self, ticket, party: party.id, bytes, receiver: Some(receiver) };
        if let Some(receiver) = waiting.receiver.as_mut() {
            let _ = receiver.await;
        }
        waiting.receiver = None;
    }

    pub(super) fn give(&self, party: u64, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut state = self.lock();
        state.available += bytes;
        state.release(party, bytes);
        state.serve(self.total);
    }
}

/// A take waiting in the queue; dropped unserved (its call ended), it leaves the queue, and
/// what was granted meanwhile is given back.
struct Waiting<'a> {
    pool: &'a FairPool,
    ticket: u64,
    party: u64,
    bytes: usize,
    receiver: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let Some(mut receiver) = self.receiver.take() else { return };
        let mut state = self.pool.lock();
        if let Some(place) = state.waiters.iter().position(|w| w.ticket == self.ticket) {
            state.waiters.remove(place);
            state.release(self.party, 0);
        } else if receiver.try_recv().is_ok() {
            state.available += self.bytes;
            state.release(self.party, self.bytes);
        }
        state.serve(self.pool.total);
    }
}

impl State {
    fn held_by(&self, party: u64) -> usize {
        self.holdings.get(&party).map_or(0, |h| h.bytes)
    }

    /// The bound divided among the connections holding or waiting (and `newcomer`).
    fn share(&self, total: usize, newcomer: Option<u64>) -> usize {
        let extra = newcomer.is_some_and(|id| !self.holdings.contains_key(&id));
        total / (self.holdings.len() + usize::from(extra)).max(1)
    }

    fn hold(&mut self, party: &Arc<Party>, bytes: usize) {
        self.available -= bytes;
        self.holdings.entry(party.id).or_insert_with(|| Holding { bytes: 0, party: party.clone() }).bytes += bytes;
    }

    /// `bytes` of `party`'s holding given back; a party holding nothing and waiting for nothing
    /// leaves the count of shares.
    fn release(&mut self, party: u64, bytes: usize) {
        let Some(holding) = self.holdings.get_mut(&party) else { return };
        holding.bytes = holding.bytes.saturating_sub(bytes);
        if holding.bytes == 0 && !self.waiters.iter().any(|w| w.party == party) {
            self.holdings.remove(&party);
        }
    }

    /// Serves waiters in turn, those below their share first. The first that finds no room
    /// stops the turn (nothing behind it passes it), and those holding more than their share
    /// are asked to give back for it.
    fn serve(&mut self, total: usize) {
        loop {
            let share = self.share(total, None);
            let below = self.waiters.iter().position(|w| self.held_by(w.party) < share);
            let Some(place) = below.or(if self.waiters.is_empty() { None } else { Some(0) }) else { return };
            let bytes = self.waiters[place].bytes;
            if bytes > self.available {
                if below.is_some() {
                    let waiting = self.waiters[place].party;
                    for holding in self.holdings.values().filter(|h| h.party.id != waiting && h.bytes > share) {
                        holding.party.reclaim.send_modify(|asks| *asks += 1);
                    }
                }
                return;
            }
            let Some(waiter) = self.waiters.remove(place) else { return };
            self.available -= bytes;
            if let Some(holding) = self.holdings.get_mut(&waiter.party) {
                holding.bytes += bytes;
            }
            if waiter.granted.send(()).is_err() {
                // Its take was dropped between the grant and now: cannot happen under the lock,
                // but the bytes are given back rather than lost.
                self.available += bytes;
                self.release(waiter.party, bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn waiting(pool: &Arc<FairPool>, party: &Arc<Party>, bytes: usize) -> tokio::task::JoinHandle<()> {
        let (pool, party) = (pool.clone(), party.clone());
        tokio::spawn(async move { pool.take(&party, bytes).await })
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn waiters_are_served_in_turn_and_a_small_take_does_not_pass_a_large_one() {
        let pool = Arc::new(FairPool::new(100));
        let (a, b, c) = (Party::new(1), Party::new(2), Party::new(3));
        assert!(pool.try_take(&a, 90));
        let mut asked = a.reclaim();
        let large = waiting(&pool, &b, 50);
        settle().await;
        let small = waiting(&pool, &c, 5);
        settle().await;
        pool.give(a.id, 10);
        settle().await;
        assert!(!large.is_finished() && !small.is_finished(), "20 free: the large take first, and it waits");
        tokio::time::timeout(Duration::from_secs(5), asked.asked()).await.expect("the one over its share is asked");
        pool.give(a.id, 40);
        tokio::time::timeout(Duration::from_secs(5), large).await.unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(5), small).await.unwrap().unwrap();
        assert_eq!(pool.available(), 5);
    }

    #[tokio::test]
    async fn a_connection_over_its_share_waits_behind_one_below_it() {
        let pool = Arc::new(FairPool::new(100));
        let (a, b) = (Party::new(1), Party::new(2));
        assert!(pool.try_take(&a, 90));
        let greedy = waiting(&pool, &a, 20);
        settle().await;
        let fair = waiting(&pool, &b, 30);
        settle().await;
        assert!(!pool.try_take(&a, 1), "a over its share passes no one waiting");
        pool.give(a.id, 30);
        tokio::time::timeout(Duration::from_secs(5), fair).await.unwrap().unwrap();
        assert!(!greedy.is_finished(), "served after the one below its share, when there is room");
        pool.give(b.id, 30);
        tokio::time::timeout(Duration::from_secs(5), greedy).await.unwrap().unwrap();
        assert_eq!(pool.available(), 20);
    }

    #[tokio::test]
    async fn a_take_given_up_leaves_the_queue_and_the_count_of_shares() {
        let pool = Arc::new(FairPool::new(100));
        let (a, b) = (Party::new(1), Party::new(2));
        assert!(pool.try_take(&a, 100));
        let gone = waiting(&pool, &b, 10);
        settle().await;
        gone.abort();
        let _ = gone.await;
        assert_eq!(pool.lock().waiters.len(), 0);
        assert!(!pool.lock().holdings.contains_key(&b.id), "b holds nothing and waits for nothing");
        pool.give(a.id, 100);
        assert_eq!(pool.available(), 100);
        assert!(pool.lock().holdings.is_empty());
    }
}
