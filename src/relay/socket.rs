//! A unix stream socket watched for reading only: the hot path's connections, to the client and
//! to the runtime.
//!
//! tokio's `UnixStream` asks epoll for both directions, edge-triggered. A unix socket signals
//! "writable" every time the peer reads what was written, so every write cri-bridge makes
//! (a request, an answer, a PING's ack) comes back later as an event, and with one call in
//! flight that event often arrives alone, while the daemon sleeps: a wake-up for nothing. Against
//! containerd that was about one wake-up in five (strace of the load benchmark: 249 of 1,333
//! `epoll_wait` returns held only `EPOLLOUT`). Here the socket is registered for reading alone;
//! a write is tried at once, and only a write that would block (the peer reads nothing) waits
//! for writability, on a second descriptor of the same socket registered for that wait alone.
//!
//! Off by default: measured quietly, it took one sleep a call away (3 to 2) but its calls per
//! second stayed within the spread of one build (docs/performance.md, issue 50).
//! `CRI_BRIDGE_READ_WATCHED=1` (read by `main`) turns it on; otherwise the sockets are tokio's.

use std::io::{self, IoSlice, Read, Write};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio_util::either::Either;

static READ_WATCHED: AtomicBool = AtomicBool::new(false);

/// Whether the hot path's sockets are [`ReadWatched`] from now on (`CRI_BRIDGE_READ_WATCHED`).
pub fn set_read_watched(on: bool) {
    READ_WATCHED.store(on, Ordering::Relaxed);
}

/// A connection's socket: tokio's, or watched for reading only.
pub type HotSocket = Either<tokio::net::UnixStream, ReadWatched>;

/// `stream` as the hot path uses it (see [`set_read_watched`]).
pub fn hot(stream: tokio::net::UnixStream) -> io::Result<HotSocket> {
    if READ_WATCHED.load(Ordering::Relaxed) {
        ReadWatched::new(stream).map(Either::Right)
    } else {
        Ok(Either::Left(stream))
    }
}

/// A socket registered for reading alone (see the module's doc).
pub struct ReadWatched {
    socket: AsyncFd<UnixStream>,
    /// While a write would block: the same socket, registered for writability.
    blocked: Option<AsyncFd<UnixStream>>,
    /// How much of the caller's buffer the next read offers. Safe code must zero what it offers
    /// the kernel, and a reader may offer its whole buffer (h2's grows to hundreds of KiB once a
    /// large answer has passed), which would be zeroed again on every read of a 100-byte answer.
    /// So a read offers [`FIRST_READ`]; only after a read that filled it (a large message is
    /// arriving) does the next offer all the room there is.
    offer: usize,
}

/// What a read offers first: more than a unary call's request or answer, little to zero.
const FIRST_READ: usize = 16 << 10;

impl ReadWatched {
    /// Takes over a connected tokio socket (from the accepting listener, or an async connect).
    pub fn new(stream: tokio::net::UnixStream) -> io::Result<ReadWatched> {
        let stream = stream.into_std()?;
        stream.set_nonblocking(true)?;
        Ok(ReadWatched { socket: watched(stream, Interest::READABLE)?, blocked: None, offer: FIRST_READ })
    }

    /// Runs `write` until it does not block, waiting for writability in between.
    fn poll_writing<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut write: impl FnMut(&UnixStream) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        loop {
            match write(self.socket.get_ref()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => {
                    // Writable again: the second registration goes (the next blocked write makes
                    // another; that is rare, and the peer is slow then anyway).
                    self.blocked = None;
                    return Poll::Ready(done);
                }
            }
            if self.blocked.is_none() {
                let second = self.socket.get_ref().try_clone()?;
                self.blocked = Some(watched(second, Interest::WRITABLE)?);
            }
            let blocked = self.blocked.as_ref().expect("registered above");
            let mut guard = ready!(blocked.poll_write_ready(cx))?;
            // Cleared: the next loop's write tells whether it still blocks (a readiness that
            // came before the write that blocked must not count).
            guard.clear_ready();
            match write(self.socket.get_ref()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                done => {
                    self.blocked = None;
                    return Poll::Ready(done);
                }
            }
        }
    }
}

/// `socket` registered with the runtime's reactor for `interest` alone. tokio 1.54 deprecates the
/// safe constructor (its soundness rests on a descriptor that stays the same while registered);
/// a `std` `UnixStream` owns its descriptor and never changes it, so the condition holds.
#[allow(deprecated)]
fn watched(socket: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
    AsyncFd::with_interest(socket, interest)
}

impl AsyncRead for ReadWatched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut guard = ready!(this.socket.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled_to(this.offer.min(buf.remaining()));
            let room = unfilled.len();
            match guard.try_io(|socket| socket.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    // Less than asked for: the socket is empty now (a stream socket gives all it
                    // holds). The next read waits for the next event instead of being tried
                    // only to fail (one `recvfrom` a message saved, as tokio's own sockets do).
                    if n > 0 && n < room {
                        guard.clear_ready();
                    }
                    this.offer = if n == room { usize::MAX } else { FIRST_READ };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // Would block: the readiness was cleared; wait for the next.
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for ReadWatched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_writing(cx, |mut socket| socket.write(data))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        slices: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_writing(cx, |mut socket| socket.write_vectored(slices))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.socket.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pair() -> (ReadWatched, tokio::net::UnixStream) {
        let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
        (ReadWatched::new(ours).unwrap(), theirs)
    }

    #[tokio::test]
    async fn bytes_go_both_ways_and_a_short_read_does_not_lose_what_comes_next() {
        let (mut ours, mut theirs) = pair();
        theirs.write_all(b"first").await.unwrap();
        let mut buf = [0u8; 64];
        let n = ours.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"first");
        // The short read cleared the readiness; what comes next is still read.
        theirs.write_all(b"second").await.unwrap();
        let n = ours.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"second");
        ours.write_all(b"answer").await.unwrap();
        let n = theirs.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"answer");
        drop(theirs);
        assert_eq!(ours.read(&mut buf).await.unwrap(), 0, "end of file once the peer is gone");
    }

    #[tokio::test]
    async fn a_large_message_is_read_whole_past_the_first_offer() {
        let (mut ours, mut theirs) = pair();
        // Larger than FIRST_READ many times over: reads that fill their offer are followed by
        // reads offered all the room, and nothing is lost or reordered between them.
        let sent: Vec<u8> = (0..(3 << 20) + 17).map(|i| (i % 253) as u8).collect();
        let expected = sent.clone();
        let writer = tokio::spawn(async move {
            theirs.write_all(&sent).await.unwrap();
        });
        let mut received = Vec::with_capacity(4 << 20);
        ours.read_to_end(&mut received).await.unwrap();
        writer.await.unwrap();
        assert!(received == expected, "{} bytes of {} arrived, in order", received.len(), expected.len());
    }

    #[tokio::test]
    async fn a_write_that_blocks_finishes_once_the_peer_reads() {
        let (mut ours, mut theirs) = pair();
        // Far more than a unix socket buffers: the write blocks until the peer reads.
        let sent: Vec<u8> = (0..8 << 20).map(|i| (i % 251) as u8).collect();
        let expected = sent.clone();
        let writer = tokio::spawn(async move {
            ours.write_all(&sent).await.unwrap();
            ours.shutdown().await.unwrap();
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!writer.is_finished(), "8 MiB cannot fit in the socket's buffer");
        let mut received = Vec::new();
        theirs.read_to_end(&mut received).await.unwrap();
        writer.await.unwrap();
        assert_eq!(received.len(), expected.len());
        assert!(received == expected, "the bytes arrive whole and in order");
    }
}
