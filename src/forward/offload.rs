//! Large conversions run off the thread every call runs on (`relay`'s one thread), on
//! `limits.conversion_threads` threads of their own: a 15 MiB request of 2 million tiny `envs`
//! costs about half a second of CPU, which on the one thread would hold every other client's
//! calls for as long. Small messages (nearly every call) are converted in place: handing them
//! over would cost more than converting them.
//!
//! Requests and answers have thresholds of their own. A request's bytes are the caller's, and a
//! caller may pack them with tiny fields (about 40 ns of conversion a byte at worst), so any
//! request of some size goes off the thread. An answer's are the runtime's (a list: about 5 ns
//! a byte), and the large ones are the kubelet's hot path: converted off the thread, a
//! 1,000-container list (600 KiB) cost 2.4 ms more CPU (6.3 against 3.8 ms, `benches/load/`,
//! one run), because glibc's malloc gives a thread arena's memory back after each conversion and
//! the next one faults it in again; in place it holds the thread 3 to 5 ms.
//!
//! The queue is shared by every client, so it is held to the same bounds as the rest:
//! - **Fair.** Each client connection has a lane ([`Lane`]); the threads take one job from each
//!   lane in turn, so a client with a hundred jobs queued delays another's one by at most one
//!   job per thread.
//! - **Bounded.** A job holds its message's share of the connection's memory bound (a
//!   [`Charge`] moved into it) until it has run, so what is queued is within
//!   `limits.buffer_per_connection_mib` and `limits.buffer_mib`.
//! - **Dropped with its call.** A call that ends (its deadline, its caller gone) takes its job
//!   out of the queue, message and charge with it, before a thread reaches it. A job already
//!   running finishes, its charge held until then.
//!
//! The threads are made once and live as long as the daemon: a pool that made threads as it
//! needed them would leave a malloc arena, and the memory it keeps, with each.

use crate::budget::Charge;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Requests from this size on are converted off the one thread (about 1 ms of work at the worst
/// bytes-per-field ratio).
pub const REQUESTS_FROM: usize = 32 << 10;
/// Answers from this size on are converted off the one thread (5 to 8 ms of work).
pub const ANSWERS_FROM: usize = 1 << 20;

type Job = Box<dyn FnOnce() + Send>;

/// A queued job: taken by the thread that runs it, or by its call when the call ends first.
type Slot = Arc<Mutex<Option<Job>>>;

#[derive(Default)]
struct Queue {
    /// Lanes with jobs waiting, in the order they are served.
    lanes: VecDeque<(u64, VecDeque<Slot>)>,
    stopping: bool,
}

impl Queue {
    /// The next job: the first lane's first job still there; that lane then goes last.
    fn next(&mut self) -> Option<Job> {
        while let Some((lane, mut jobs)) = self.lanes.pop_front() {
            while let Some(slot) = jobs.pop_front() {
                let job = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(job) = job {
                    if !jobs.is_empty() {
                        self.lanes.push_back((lane, jobs));
                    }
                    return Some(job);
                }
            }
        }
        None
    }

    fn push(&mut self, lane: u64, slot: Slot) {
        match self.lanes.iter_mut().find(|(l, _)| *l == lane) {
            Some((_, jobs)) => jobs.push_back(slot),
            None => self.lanes.push_back((lane, VecDeque::from([slot]))),
        }
    }
}

struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
}

pub struct Offload {
    shared: Arc<Shared>,
    lanes: AtomicU64,
}

/// One client connection's place in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lane(u64);

impl Offload {
    /// Starts `threads` conversion threads (at least one); they end when this is dropped.
    pub fn new(threads: usize) -> Offload {
        let shared = Arc::new(Shared { queue: Mutex::new(Queue::default()), work: Condvar::new() });
        for n in 0..threads.max(1) {
            let shared = shared.clone();
            let started = std::thread::Builder::new().name(format!("convert-{n}")).spawn(move || loop {
                let job = {
                    let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
                    loop {
                        if let Some(job) = queue.next() {
                            break job;
                        }
                        if queue.stopping {
                            return;
                        }
                        queue = shared.work.wait(queue).unwrap_or_else(|e| e.into_inner());
                    }
                };
                job();
            });
            if let Err(error) = started {
                tracing::warn!(%error, "cannot start a conversion thread");
            }
        }
        Offload { shared, lanes: AtomicU64::new(0) }
    }

    /// A lane for a new client connection.
    pub fn lane(&self) -> Lane {
        Lane(self.lanes.fetch_add(1, Ordering::Relaxed))
    }

    /// Runs `work` on a conversion thread, in `lane`, holding `held` until it has run; gives
    /// `held` back with the result. `Err` says why the work gave no result. Dropping the future
    /// before a thread took the job drops the job, `work` and `held` with it.
    pub async fn run<T: Send + 'static>(
        &self,
        lane: Lane,
        held: Charge,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<(T, Charge), String> {
        let (result, done) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = result.send(outcome.map(|value| (value, held)).map_err(|_| "the conversion panicked".to_string()));
        });
        let slot: Slot = Arc::new(Mutex::new(Some(job)));
        {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.push(lane.0, slot.clone());
        }
        self.shared.work.notify_one();
        let _withdrawn = Withdraw(slot);
        done.await.map_err(|_| "the conversion thread ended".to_string())?
    }
}

/// Takes a job that no thread has taken out of its slot when its call's future is dropped (a
/// job that ran leaves the slot empty): its message and charge go at once.
struct Withdraw(Slot);

impl Drop for Withdraw {
    fn drop(&mut self) {
        let job = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(job);
    }
}

impl Drop for Offload {
    fn drop(&mut self) {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()).stopping = true;
        self.shared.work.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budget;
    use std::sync::mpsc;
    use std::time::Duration;

    /// One thread, held busy by a job that waits for `release`.
    async fn busy_offload(lane: Lane, offload: &Arc<Offload>, budget: &Budget) -> mpsc::Sender<()> {
        let (release, wait) = mpsc::channel::<()>();
        let (started, running) = tokio::sync::oneshot::channel();
        let held = budget.connection().charge();
        let offload2 = offload.clone();
        tokio::spawn(async move {
            let _ = offload2
                .run(lane, held, move || {
                    let _ = started.send(());
                    let _ = wait.recv();
                })
                .await;
        });
        running.await.unwrap();
        release
    }

    #[tokio::test]
    async fn lanes_are_served_in_turn() {
        let offload = Arc::new(Offload::new(1));
        let budget = Budget::new(1 << 20, 1 << 20);
        let (greedy, modest) = (offload.lane(), offload.lane());
        let release = busy_offload(greedy, &offload, &budget).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut calls = Vec::new();
        for (lane, name) in [(greedy, "g1"), (greedy, "g2"), (greedy, "g3"), (modest, "m1")] {
            let (offload, order, held) = (offload.clone(), order.clone(), budget.connection().charge());
            calls.push(tokio::spawn(async move {
                offload.run(lane, held, move || order.lock().unwrap().push(name)).await.map(|_| ())
            }));
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        release.send(()).unwrap();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        // The modest lane's one job runs second, not after the greedy lane's three.
        assert_eq!(*order.lock().unwrap(), ["g1", "m1", "g2", "g3"]);
    }

    #[tokio::test]
    async fn a_call_that_ends_takes_its_queued_job_and_charge_with_it() {
        let offload = Arc::new(Offload::new(1));
        let budget = Budget::new(1 << 20, 1 << 20);
        let lane = offload.lane();
        let release = busy_offload(lane, &offload, &budget).await;
        let connection = budget.connection();
        let mut held = connection.charge();
        held.grow(512 << 10).await;
        let message = vec![0u8; 512 << 10];
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ran2 = ran.clone();
        let call = offload.run(lane, held, move || {
            ran2.store(true, Ordering::SeqCst);
            message.len()
        });
        // The call's deadline passes while its job waits.
        assert!(tokio::time::timeout(Duration::from_millis(50), call).await.is_err());
        assert_eq!(connection.available(), 1 << 20, "the charge went with the job");
        release.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!ran.load(Ordering::SeqCst), "the job never ran");
    }

    #[tokio::test]
    async fn the_charge_comes_back_with_the_result() {
        let offload = Offload::new(1);
        let budget = Budget::new(1 << 20, 1 << 20);
        let mut held = budget.connection().charge();
        held.grow(4096).await;
        let (value, held) = offload.run(offload.lane(), held, || 7).await.unwrap();
        assert_eq!((value, held.held()), (7, 4096));
    }
}
