//! Large conversions run off the thread every call runs on (`relay`'s one thread), on at most
//! `limits.conversion_threads` threads at once: a 15 MiB request of 2 million tiny `envs` costs
//! about half a second of CPU, which on the one thread would hold every other client's calls for
//! as long. Small messages (nearly every call) are converted in place: handing them over would
//! cost more than converting them.

use std::sync::Arc;
use tokio::sync::Semaphore;

/// Messages from this size on are converted off the one thread (a few hundred µs of work at the
/// worst bytes-per-field ratio; a 1,000-container list, 650 KiB, takes a few ms).
pub const OFFLOAD_FROM: usize = 32 << 10;

pub struct Offload {
    threads: Arc<Semaphore>,
}

impl Offload {
    pub fn new(threads: usize) -> Offload {
        Offload { threads: Arc::new(Semaphore::new(threads.max(1))) }
    }

    /// Runs `work` here when `size` is small, else on a blocking thread once one of the
    /// conversion threads is free. `Err` says why the work gave no result.
    pub async fn run<T: Send + 'static>(
        &self,
        size: usize,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        if size < OFFLOAD_FROM {
            return Ok(work());
        }
        let permit = self.threads.clone().acquire_owned().await.map_err(|e| e.to_string())?;
        let handle = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        });
        handle.await.map_err(|error| error.to_string())
    }
}
