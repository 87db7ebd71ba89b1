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
//! The threads are made once and live as long as the daemon: a pool that made threads as it
//! needed them would leave a malloc arena, and the memory it keeps, with each.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Requests from this size on are converted off the one thread (about 1 ms of work at the worst
/// bytes-per-field ratio).
pub const REQUESTS_FROM: usize = 32 << 10;
/// Answers from this size on are converted off the one thread (5 to 8 ms of work).
pub const ANSWERS_FROM: usize = 1 << 20;

type Job = Box<dyn FnOnce() + Send>;

pub struct Offload {
    jobs: mpsc::Sender<Job>,
}

impl Offload {
    /// Starts `threads` conversion threads (at least one); they end when this is dropped.
    pub fn new(threads: usize) -> Offload {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for n in 0..threads.max(1) {
            let queue = queue.clone();
            let started = std::thread::Builder::new().name(format!("convert-{n}")).spawn(move || loop {
                // One thread waits on the queue at a time; the others wait for the lock.
                let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                match job {
                    Ok(job) => job(),
                    Err(_) => return,
                }
            });
            if let Err(error) = started {
                tracing::warn!(%error, "cannot start a conversion thread");
            }
        }
        Offload { jobs }
    }

    /// Runs `work` on a conversion thread. `Err` says why the work gave no result.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
        let (result, done) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = result.send(outcome.map_err(|_| "the conversion panicked".to_string()));
        });
        self.jobs.send(job).map_err(|_| "no conversion thread is running".to_string())?;
        done.await.map_err(|_| "the conversion thread ended".to_string())?
    }
}
