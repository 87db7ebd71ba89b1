//! Child processes in tests: killed when the test ends, waited for without blocking the async
//! runtime, and systemd's notifications read as a notify socket would.

use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A child process killed, if it still runs, when the test ends, passing or failing.
pub struct Reaped(pub Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to `timeout` for `child` to exit.
pub async fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits up to 10 s for something to listen on `path`, failing early if `child` exits.
pub async fn wait_for_listener(child: &mut Child, path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("cri-bridge exited with {status} before listening");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    panic!("nothing listens on {} after 10 s", path.display());
}

/// Datagrams received on a notify socket until `until` matches one, or 5 s pass.
pub async fn notifications_until(socket: &tokio::net::UnixDatagram, until: impl Fn(&str) -> bool) -> Vec<String> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
        let message = String::from_utf8_lossy(&buf[..n]).into_owned();
        let done = until(&message);
        seen.push(message);
        if done {
            break;
        }
    }
    seen
}
