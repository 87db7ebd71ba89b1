//! The memory cri-bridge holds for its clients: bytes gathered (a request's message, an answer's
//! message being translated) and made (a converted message), bounded per client connection
//! (`limits.buffer_per_connection_mib`) and in all (`limits.buffer_mib`).
//!
//! A client waits for room rather than failing: cri-bridge gives a stream's flow-control window
//! back only once what it has received is charged here, so a client at its bound is pushed back
//! by HTTP/2 itself, and only that client. So that a client holding the shared bound cannot stall
//! another's small calls, each connection's first [`FLOOR`] bytes are its own and not taken from
//! the shared bound: a well-behaved client's calls (a few KiB each) never wait on another's.
//!
//! Beyond the floors, the shared bound is served fairly ([`fair`]): in turn, connections below
//! their share first, and a connection holding more than its share while another waits is asked
//! to give back ([`Reclaim`]).
//!
//! Header blocks being gathered (`front_door`) are charged too, without waiting: a block that
//! finds no room ends its connection.
//!
//! Not charged here, because HTTP/2 bounds them per connection already: what a client may send
//! before cri-bridge gives any window back (64 KiB, `h2`'s default), and what the runtime may
//! send on the client's runtime connection before its caller takes it
//! ([`crate::relay::upstream::CONNECTION_WINDOW`]).

mod fair;

pub use fair::Reclaim;
use fair::{FairPool, Party};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// What each connection may hold without taking from the shared bound.
pub const FLOOR: usize = 64 << 10;

/// A number of bytes that may be taken and given back; takers wait for room.
#[derive(Debug)]
struct Pool {
    available: Mutex<usize>,
    room: Notify,
}

impl Pool {
    fn new(bytes: usize) -> Pool {
        Pool { available: Mutex::new(bytes), room: Notify::new() }
    }

    fn try_take(&self, bytes: usize) -> bool {
        let mut available = self.available.lock().unwrap_or_else(|e| e.into_inner());
        if *available >= bytes {
            *available -= bytes;
            true
        } else {
            false
        }
    }

    async fn take(&self, bytes: usize) {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before the check, so a give between the two is not missed.
            room.as_mut().enable();
            if self.try_take(bytes) {
                return;
            }
            room.await;
        }
    }

    fn give(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        *self.available.lock().unwrap_or_else(|e| e.into_inner()) += bytes;
        self.room.notify_waiters();
    }

    fn available(&self) -> usize {
        *self.available.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The bound shared by every connection.
#[derive(Debug, Clone)]
pub struct Budget {
    shared: Arc<FairPool>,
    total: usize,
    per_connection: usize,
    connections: Arc<AtomicU64>,
}

impl Budget {
    pub fn new(total: usize, per_connection: usize) -> Budget {
        let connections = Arc::new(AtomicU64::new(0));
        Budget { shared: Arc::new(FairPool::new(total)), total, per_connection, connections }
    }

    /// A new connection's own bound.
    pub fn connection(&self) -> ConnectionBudget {
        let (own, floor) = (Pool::new(self.per_connection), Pool::new(FLOOR));
        let party = Party::new(self.connections.fetch_add(1, Ordering::Relaxed));
        ConnectionBudget(Arc::new(Shares { own, floor, shared: self.shared.clone(), party }))
    }

    /// Bytes held now beyond the connections' floors, in all.
    pub fn held(&self) -> usize {
        self.total.saturating_sub(self.shared.available())
    }

    pub fn total(&self) -> usize {
        self.total
    }
}

#[derive(Debug)]
struct Shares {
    own: Pool,
    /// Taken first: what this connection holds without touching `shared`.
    floor: Pool,
    shared: Arc<FairPool>,
    party: Arc<Party>,
}

/// One connection's bound (cloned by each of its calls).
#[derive(Debug, Clone)]
pub struct ConnectionBudget(Arc<Shares>);

impl ConnectionBudget {
    /// An empty charge, grown as bytes are held.
    pub fn charge(&self) -> Charge {
        Charge { shares: self.0.clone(), own: 0, floor: 0, shared: 0 }
    }

    /// Bytes this connection may still take before it waits.
    pub fn available(&self) -> usize {
        self.0.own.available()
    }
}

/// Bytes held for one purpose; given back when shrunk or dropped.
#[derive(Debug)]
pub struct Charge {
    shares: Arc<Shares>,
    own: usize,
    floor: usize,
    shared: usize,
}

impl Charge {
    /// Holds `bytes` more, waiting for room: first the connection's own bound, then its floor,
    /// then the shared bound for what the floor cannot hold.
    pub async fn grow(&mut self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.shares.own.take(bytes).await;
        self.own += bytes;
        let from_floor = self.take_floor(bytes);
        let rest = bytes - from_floor;
        if rest > 0 {
            self.shares.shared.take(&self.shares.party, rest).await;
            self.shared += rest;
        }
    }

    /// Holds `bytes` more if there is room now; else holds nothing more and says so.
    pub fn try_grow(&mut self, bytes: usize) -> bool {
        if bytes == 0 {
            return true;
        }
        if !self.shares.own.try_take(bytes) {
            return false;
        }
        let from_floor = self.take_floor(bytes);
        let rest = bytes - from_floor;
        if rest > 0 && !self.shares.shared.try_take(&self.shares.party, rest) {
            self.shares.own.give(bytes);
            self.floor -= from_floor;
            self.shares.floor.give(from_floor);
            return false;
        }
        self.own += bytes;
        self.shared += rest;
        true
    }

    /// As much of `bytes` as the floor has room for, taken now.
    fn take_floor(&mut self, bytes: usize) -> usize {
        let mut available = self.shares.floor.available.lock().unwrap_or_else(|e| e.into_inner());
        let taken = (*available).min(bytes);
        *available -= taken;
        self.floor += taken;
        taken
    }

    /// What this charge holds.
    pub fn held(&self) -> usize {
        self.own
    }

    /// Whether this charge holds any of the shared bound (what giving it back frees for others).
    pub fn holds_shared(&self) -> bool {
        self.shared > 0
    }

    /// The shared bound's asks that this charge's connection give back, from now on.
    pub fn reclaim(&self) -> Reclaim {
        self.shares.party.reclaim()
    }

    /// Moves `bytes` of what this charge holds (at most all of it) into a charge of its own,
    /// for something that may outlive this one (a conversion job holding the message).
    pub fn split_off(&mut self, bytes: usize) -> Charge {
        let bytes = bytes.min(self.own);
        let shared = bytes.min(self.shared);
        let floor = bytes - shared;
        self.own -= bytes;
        self.shared -= shared;
        self.floor -= floor;
        Charge { shares: self.shares.clone(), own: bytes, floor, shared }
    }

    /// Takes back what `other` holds (split off this connection's bound before); a charge of
    /// another connection is given back instead.
    pub fn absorb(&mut self, mut other: Charge) {
        if !Arc::ptr_eq(&self.shares, &other.shares) {
            return;
        }
        self.own += std::mem::take(&mut other.own);
        self.floor += std::mem::take(&mut other.floor);
        self.shared += std::mem::take(&mut other.shared);
    }

    /// Gives back all but `bytes`: the shared bound first, then the floor.
    pub fn shrink_to(&mut self, bytes: usize) {
        let mut excess = self.own.saturating_sub(bytes);
        self.shares.own.give(excess);
        self.own -= excess;
        let from_shared = excess.min(self.shared);
        self.shares.shared.give(self.shares.party.id, from_shared);
        self.shared -= from_shared;
        excess -= from_shared;
        let from_floor = excess.min(self.floor);
        self.shares.floor.give(from_floor);
        self.floor -= from_floor;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_floor_is_taken_first_and_the_shared_bound_for_the_rest() {
        let budget = Budget::new(FLOOR, 4 * FLOOR);
        let connection = budget.connection();
        let mut charge = connection.charge();
        charge.grow(FLOOR).await;
        assert_eq!(budget.held(), 0, "the floor is the connection's own");
        charge.grow(FLOOR / 2).await;
        assert_eq!(budget.held(), FLOOR / 2);
        charge.shrink_to(FLOOR);
        assert_eq!(budget.held(), 0, "the shared bound is given back first");
        drop(charge);
        assert_eq!(connection.available(), 4 * FLOOR);
    }

    #[tokio::test]
    async fn a_connection_past_the_shared_bound_waits_and_another_connections_floor_does_not() {
        let budget = Budget::new(FLOOR, 8 * FLOOR);
        let (greedy, other) = (budget.connection(), budget.connection());
        let mut held = greedy.charge();
        held.grow(2 * FLOOR).await;
        let mut more = greedy.charge();
        let waiting = tokio::time::timeout(Duration::from_millis(50), more.grow(1)).await;
        assert!(waiting.is_err(), "the shared bound is spent: the greedy connection waits");
        let mut small = other.charge();
        tokio::time::timeout(Duration::from_millis(50), small.grow(FLOOR))
            .await
            .expect("another connection's floor is its own");
        drop(held);
        let mut more = greedy.charge();
        tokio::time::timeout(Duration::from_secs(5), more.grow(FLOOR + 1)).await.expect("room given back");
    }

    #[test]
    fn try_grow_takes_all_or_nothing() {
        let budget = Budget::new(FLOOR, 4 * FLOOR);
        let (first, second) = (budget.connection(), budget.connection());
        let mut held = first.charge();
        assert!(held.try_grow(2 * FLOOR), "the floor and the whole shared bound");
        assert!(!held.try_grow(1), "nothing is left in the shared bound");
        assert_eq!((held.held(), budget.held()), (2 * FLOOR, FLOOR), "a failed try holds nothing more");
        let mut other = second.charge();
        assert!(other.try_grow(FLOOR), "another connection's floor");
        assert!(!other.try_grow(1));
        drop(held);
        assert!(other.try_grow(FLOOR), "room given back");
    }

    #[tokio::test]
    async fn a_charge_split_off_holds_its_bytes_until_dropped_or_taken_back() {
        let budget = Budget::new(4 * FLOOR, 8 * FLOOR);
        let connection = budget.connection();
        let mut charge = connection.charge();
        charge.grow(2 * FLOOR).await;
        let part = charge.split_off(FLOOR + 10);
        assert_eq!((charge.held(), part.held()), (FLOOR - 10, FLOOR + 10));
        assert_eq!(budget.held(), FLOOR, "the shared part moved first, none given back");
        charge.absorb(part);
        assert_eq!(charge.held(), 2 * FLOOR);
        let part = charge.split_off(3 * FLOOR);
        assert_eq!(part.held(), 2 * FLOOR, "at most what it holds");
        drop(part);
        assert_eq!((budget.held(), connection.available()), (0, 8 * FLOOR));
        drop(charge);
        assert_eq!(connection.available(), 8 * FLOOR);
    }

    #[tokio::test]
    async fn a_connection_is_held_to_its_own_bound() {
        let budget = Budget::new(64 * FLOOR, 2 * FLOOR);
        let connection = budget.connection();
        let mut charge = connection.charge();
        charge.grow(2 * FLOOR).await;
        let mut more = connection.charge();
        assert!(tokio::time::timeout(Duration::from_millis(50), more.grow(1)).await.is_err());
        charge.shrink_to(FLOOR);
        tokio::time::timeout(Duration::from_secs(5), more.grow(FLOOR)).await.expect("room given back");
    }
}
