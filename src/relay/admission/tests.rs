//! The admission alone: pools, per-uid counts per pool, the main socket's share, slots passed on,
//! and which idle connection is reclaimed first.

use super::*;
use Pool::{Main, Scoped};

fn now(admit: Result<Admit, Refused>) -> Admitted {
    match admit {
        Ok(Admit::Now(admitted)) => admitted,
        other => panic!("expected a free slot, got {other:?}"),
    }
}

/// The slot an idle connection gives up, and the limit the newcomer met.
fn after(admit: Result<Admit, Refused>) -> (oneshot::Receiver<Admitted>, Refused) {
    match admit {
        Ok(Admit::After(slot, limit)) => (slot, limit),
        other => panic!("expected an idle connection to be reclaimed, got {other:?}"),
    }
}

/// An admission whose clock started a minute ago, so that connections can be made to look
/// idle for up to a minute.
fn admission(total: usize, scoped: usize, per_uid: usize) -> Admission {
    let epoch = Instant::now().checked_sub(Duration::from_secs(60)).expect("a minute back");
    Admission { epoch, ..Admission::new(total, scoped, per_uid) }
}

/// Makes `admitted` look idle since `at_ms` of the minute (0: a minute).
fn idle_since(admitted: &Admitted, at_ms: u64) {
    admitted.activity.idle_since.store(at_ms, Ordering::Relaxed);
}

/// A call whose request has arrived, open on `admitted` until dropped.
fn call(admitted: &Admitted) -> Arrival {
    let mut arrival = admitted.activity.stream_accepted();
    arrival.arrived();
    arrival
}

/// A stream on `admitted` that has waited for its request since `at_ms` of the minute.
fn silent_stream(admitted: &Admitted, at_ms: u64) -> Arrival {
    let arrival = admitted.activity.stream_accepted();
    admitted.activity.waiting_since.store(at_ms, Ordering::SeqCst);
    arrival
}

fn reclaimed(admitted: &Admitted) -> bool {
    admitted.activity.reclaimed.load(Ordering::Acquire)
}

/// (total, scoped, per-uid count of `peer`, live) now.
fn counts(admission: &Admission, pool: Pool, uid: u32) -> (usize, usize, usize, usize) {
    let open = admission.open.lock().unwrap();
    let of_uid = open.per_uid.get(&Peer { pool, uid }).copied().unwrap_or(0);
    (open.total, open.scoped, of_uid, open.live.len())
}

#[test]
fn slots_are_counted_per_uid_and_in_all_and_given_back() {
    let admission = admission(3, 1, 2);
    let a = now(admission.admit(Main, 1));
    let b = now(admission.admit(Main, 1));
    // Both are busy (just admitted, within RECLAIMABLE_AFTER): refused.
    assert_eq!(admission.admit(Main, 1).unwrap_err(), Refused::PerUid);
    let c = now(admission.admit(Main, 2));
    assert_eq!(admission.admit(Main, 3).unwrap_err(), Refused::Total);
    drop(a);
    let _d = now(admission.admit(Main, 1));
    drop((b, c));
}

#[test]
fn the_scoped_sockets_share_a_pool_and_leave_the_main_socket_its_share() {
    let admission = admission(8, 4, 8);
    // Busy scoped connections of several uids: the pool, not the uid, is full.
    let scoped: Vec<_> = (0..4).map(|uid| now(admission.admit(Scoped, uid % 2))).collect();
    assert_eq!(admission.admit(Scoped, 0).unwrap_err(), Refused::Scoped);
    assert_eq!(admission.admit(Scoped, 7).unwrap_err(), Refused::Scoped);
    // The main socket still reaches connections - scoped_connections.
    let main: Vec<_> = (0..4).map(|_| now(admission.admit(Main, 0))).collect();
    assert_eq!(counts(&admission, Main, 0), (8, 4, 4, 8));
    assert_eq!(admission.admit(Main, 0).unwrap_err(), Refused::Total);
    drop(main);
    drop(scoped);
    assert_eq!(counts(&admission, Scoped, 0), (0, 0, 0, 0));
}

#[test]
fn a_uid_is_counted_in_each_pool_apart() {
    let admission = admission(10, 4, 2);
    let scoped = [now(admission.admit(Scoped, 0)), now(admission.admit(Scoped, 0))];
    assert_eq!(admission.admit(Scoped, 0).unwrap_err(), Refused::PerUid);
    // uid 0 on the scoped sockets took none of uid 0's slots on the main socket.
    let main = [now(admission.admit(Main, 0)), now(admission.admit(Main, 0))];
    assert_eq!(admission.admit(Main, 0).unwrap_err(), Refused::PerUid);
    assert_eq!(counts(&admission, Main, 0), (4, 2, 2, 4));
    assert_eq!(counts(&admission, Scoped, 0).2, 2);
    drop((scoped, main));
}

#[test]
fn a_scoped_newcomer_never_reclaims_the_main_sockets_connections() {
    let admission = admission(4, 3, 4);
    let main = [now(admission.admit(Main, 0)), now(admission.admit(Main, 0))];
    main.iter().for_each(|m| idle_since(m, 0));
    let scoped = [now(admission.admit(Scoped, 0)), now(admission.admit(Scoped, 0))];
    let calls: Vec<_> = scoped.iter().map(call).collect();
    // At the total, below its pool's limit: only the (busy) scoped connections could make room.
    assert_eq!(admission.admit(Scoped, 0).unwrap_err(), Refused::Total);
    assert!(!main.iter().any(reclaimed));
    // Idle, a scoped one makes room for it, and the slot stays in the pool.
    drop(calls);
    idle_since(&scoped[0], 5_000);
    idle_since(&scoped[1], 0);
    let (mut slot, limit) = after(admission.admit(Scoped, 1));
    assert_eq!(limit, Refused::Total);
    assert!(reclaimed(&scoped[1]) && !reclaimed(&scoped[0]) && !main.iter().any(reclaimed));
    let [kept, gone] = scoped;
    drop(gone);
    let heir = slot.try_recv().expect("the scoped slot passed on");
    assert_eq!(heir.peer, Peer { pool: Scoped, uid: 1 });
    assert_eq!(counts(&admission, Scoped, 1), (4, 2, 1, 4));
    drop((kept, heir, main));
}

#[test]
fn a_main_newcomer_at_the_total_reclaims_a_scoped_connection_first() {
    let admission = admission(4, 2, 4);
    let main = [now(admission.admit(Main, 0)), now(admission.admit(Main, 0))];
    let scoped = [now(admission.admit(Scoped, 0)), now(admission.admit(Scoped, 0))];
    // The main ones idle longest, yet a scoped one goes.
    main.iter().for_each(|m| idle_since(m, 0));
    idle_since(&scoped[0], 10_000);
    idle_since(&scoped[1], 20_000);
    let (mut slot, limit) = after(admission.admit(Main, 0));
    assert_eq!(limit, Refused::Total);
    assert!(reclaimed(&scoped[0]) && !reclaimed(&scoped[1]) && !main.iter().any(reclaimed));
    let [gone, kept] = scoped;
    drop(gone);
    let heir = slot.try_recv().expect("the scoped slot passed to the main socket");
    // The total stays; the slot moved from the scoped pool to the main one.
    assert_eq!(counts(&admission, Main, 0), (4, 1, 3, 4));
    drop((kept, heir, main));
    assert_eq!(counts(&admission, Main, 0), (0, 0, 0, 0));
}

#[test]
fn a_stream_is_busy_only_once_its_request_has_arrived() {
    let admission = admission(1, 0, 1);
    let a = now(admission.admit(Main, 1));
    let activity = a.activity.clone();
    idle_since(&a, 0);
    let mut stream = activity.stream_accepted();
    assert_eq!((activity.open_calls(), activity.waiting_streams()), (0, 1));
    // Waiting for less than RECLAIMABLE_AFTER: its request is on its way, not reclaimable.
    assert_eq!(activity.reclaimable(), None);
    stream.arrived();
    stream.arrived();
    assert_eq!((activity.open_calls(), activity.waiting_streams()), (1, 0));
    assert_eq!(activity.idle_for(), Duration::ZERO);
    drop(stream);
    assert_eq!((activity.open_calls(), activity.waiting_streams()), (0, 0));
    assert!(activity.idle_for() < RECLAIMABLE_AFTER, "a call just ended");
    // A stream that ends without its request leaves the connection as it was.
    idle_since(&a, 0);
    drop(activity.stream_accepted());
    assert_eq!((activity.open_calls(), activity.waiting_streams()), (0, 0));
    assert!(activity.idle_for() >= Duration::from_secs(59));
}

#[test]
fn a_connection_holding_streams_that_never_sent_is_reclaimed_before_an_idle_one() {
    let admission = admission(10, 2, 4);
    let [idle, silent, fresh, busy] = [(); 4].map(|_| now(admission.admit(Main, 1)));
    // The longest idle, with no stream.
    idle_since(&idle, 0);
    // Streams waiting 30 s for a request that never came.
    idle_since(&silent, 10_000);
    let _silent: Vec<_> = (0..3).map(|_| silent_stream(&silent, 30_000)).collect();
    // Idle long, but a stream just accepted: its request is on its way.
    idle_since(&fresh, 0);
    let _fresh = fresh.activity.stream_accepted();
    let _call = call(&busy);
    let (_slot, limit) = after(admission.admit(Main, 1));
    assert_eq!(limit, Refused::PerUid);
    assert!(reclaimed(&silent), "the silent connection goes first");
    assert!(!reclaimed(&idle) && !reclaimed(&fresh) && !reclaimed(&busy));
    // Then the longest idle; the fresh one and the busy one are never taken.
    let _second = after(admission.admit(Main, 1));
    assert!(reclaimed(&idle));
    assert_eq!(admission.admit(Main, 1).unwrap_err(), Refused::PerUid);
    assert!(!reclaimed(&fresh) && !reclaimed(&busy));
}

#[test]
fn a_new_connection_takes_the_slot_of_the_longest_idle_one_of_its_uid() {
    let admission = admission(10, 2, 2);
    let (a, b) = (now(admission.admit(Main, 1)), now(admission.admit(Main, 1)));
    idle_since(&a, 0);
    idle_since(&b, 10_000);
    let a_call = call(&a);
    // a is busy now; b is the one reclaimed.
    let (mut slot, limit) = after(admission.admit(Main, 1));
    assert_eq!(limit, Refused::PerUid);
    assert!(reclaimed(&b) && !reclaimed(&a));
    assert!(slot.try_recv().is_err(), "the slot passes only once b has closed");
    // b is being reclaimed and a is busy: a fourth waits for nothing, it is refused.
    assert_eq!(admission.admit(Main, 1).unwrap_err(), Refused::PerUid);
    drop(b);
    let c = slot.try_recv().expect("b's slot passed on");
    assert_eq!(c.peer, Peer { pool: Main, uid: 1 });
    assert_eq!(counts(&admission, Main, 1), (2, 0, 2, 2));
    drop((a_call, a, c));
    assert_eq!(counts(&admission, Main, 1), (0, 0, 0, 0));
    assert!(admission.open.lock().unwrap().per_uid.is_empty());
}

#[test]
fn at_the_total_any_uids_idle_connection_makes_room_and_the_counts_move() {
    let admission = admission(2, 1, 2);
    let a = now(admission.admit(Main, 1));
    let b = now(admission.admit(Main, 2));
    let b_call = call(&b);
    idle_since(&a, 0);
    let (mut slot, limit) = after(admission.admit(Main, 3));
    assert_eq!(limit, Refused::Total);
    drop(a);
    let c = slot.try_recv().expect("a's slot passed on");
    let open = admission.open.lock().unwrap();
    assert_eq!(open.total, 2);
    let of = |uid| open.per_uid.get(&Peer { pool: Main, uid }).copied();
    assert_eq!((of(1), of(2), of(3)), (None, Some(1), Some(1)));
    drop(open);
    drop((b_call, b, c));
}

#[test]
fn a_slot_passes_to_a_heir_only_within_its_limits() {
    let admission = admission(3, 1, 3);
    let main = now(admission.admit(Main, 1));
    let scoped = now(admission.admit(Scoped, 1));
    let other = now(admission.admit(Main, 2));
    let scoped_call = call(&scoped);
    idle_since(&main, 0);
    // A main newcomer at the total takes the idle main connection's slot...
    let (mut slot, _) = after(admission.admit(Main, 3));
    // ... but is refused if it has meanwhile no room: pretend its uid filled up.
    admission.open.lock().unwrap().per_uid.insert(Peer { pool: Main, uid: 3 }, 3);
    drop(main);
    assert!(slot.try_recv().is_err(), "no room: the slot is given back, not passed on");
    let mut open = admission.open.lock().unwrap();
    open.per_uid.remove(&Peer { pool: Main, uid: 3 });
    assert_eq!((open.total, open.scoped, open.live.len()), (2, 1, 2));
    drop(open);
    drop((scoped_call, scoped, other));
}

#[test]
fn a_newcomer_that_gave_up_leaves_the_slot_free() {
    let admission = admission(2, 1, 1);
    let a = now(admission.admit(Main, 1));
    idle_since(&a, 0);
    let (slot, _) = after(admission.admit(Main, 1));
    drop(slot);
    drop(a);
    assert_eq!(counts(&admission, Main, 1), (0, 0, 0, 0));
}

#[test]
fn the_scoped_share_stays_below_the_total_whatever_it_is_given() {
    let admission = admission(2, 5, 2);
    let _scoped = now(admission.admit(Scoped, 0));
    assert_eq!(admission.admit(Scoped, 1).unwrap_err(), Refused::Scoped);
    let _main = now(admission.admit(Main, 0));
}

#[test]
fn a_run_of_refusals_is_logged_once_and_counted_for_the_next_warning() {
    let admission = admission(2, 1, 1);
    let _held = now(admission.admit(Main, 1));
    for _ in 0..4 {
        assert_eq!(admission.admit(Main, 1).unwrap_err(), Refused::PerUid);
    }
    let open = admission.open.lock().unwrap();
    // The first refusal was logged; the next three wait, counted, for the next warning.
    assert!(open.last_warned.is_some());
    assert_eq!(open.refused_since_warned, 3);
}
