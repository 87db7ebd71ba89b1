//! Records real CRI clients' connections, and turns the recordings into the fuzz targets' seed
//! corpora (`fuzz/corpus/<target>/`). See fuzz/README.md for the session that made them.
//!
//! ```text
//! cri-bridge-fuzz-recorder record LISTEN UPSTREAM DIR
//!     a unix-socket man in the middle: every connection to LISTEN is relayed to UPSTREAM, and
//!     its bytes saved as DIR/<n>.c2s (client to server) and DIR/<n>.s2c (server to client)
//! cri-bridge-fuzz-recorder seeds CORPUS LABEL=DIR...
//!     reads the recordings (the HTTP/2 frames, the client's header blocks with HPACK, each
//!     stream's gRPC messages with its RPC path) and writes the seeds, named after the RPCs
//! ```

#[path = "../../check/mod.rs"]
mod check;

use cri_bridge::grpc::Rpc;
use cri_bridge::CriVersion;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Every seed is smaller than this.
const MAX_SEED: usize = 4000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["record", listen, upstream, dir] => record(Path::new(listen), Path::new(upstream), Path::new(dir)),
        ["seeds", corpus, recordings @ ..] if !recordings.is_empty() => seeds(Path::new(corpus), recordings),
        _ => {
            eprintln!("usage: cri-bridge-fuzz-recorder record LISTEN UPSTREAM DIR | seeds CORPUS LABEL=DIR...");
            std::process::exit(2);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Recording
// ---------------------------------------------------------------------------------------------

fn record(listen: &Path, upstream: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).expect("the recording directory");
    let _ = std::fs::remove_file(listen);
    let listener = UnixListener::bind(listen).expect("bind the listening socket");
    eprintln!("recording connections to {} (relayed to {})", listen.display(), upstream.display());
    for (n, client) in listener.incoming().enumerate() {
        let client = client.expect("accept");
        let server = UnixStream::connect(upstream).expect("connect upstream");
        let save = |suffix: &str| std::fs::File::create(dir.join(format!("{n}.{suffix}"))).expect("a recording file");
        let (c2s, s2c) = (save("c2s"), save("s2c"));
        let (client2, server2) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
        std::thread::spawn(move || pump(client, server, c2s));
        std::thread::spawn(move || pump(server2, client2, s2c));
    }
}

/// Copies `from` to `to` and to `file` until `from` ends, then closes `to` for writing.
fn pump(mut from: UnixStream, mut to: UnixStream, mut file: std::fs::File) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if file.write_all(&buf[..n]).is_err() || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

// ---------------------------------------------------------------------------------------------
// Reading a recording
// ---------------------------------------------------------------------------------------------

struct Frame<'a> {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: &'a [u8],
    /// Where the frame ends in the connection's bytes.
    end: usize,
}

fn frames(bytes: &[u8], start: usize) -> Vec<Frame<'_>> {
    let mut out = Vec::new();
    let mut at = start;
    while bytes.len() >= at + 9 {
        let h = &bytes[at..at + 9];
        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        if bytes.len() < at + 9 + len {
            break;
        }
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        out.push(Frame { kind: h[3], flags: h[4], stream, payload: &bytes[at + 9..at + 9 + len], end: at + 9 + len });
        at += 9 + len;
    }
    out
}

/// A frame's payload without padding (and a HEADERS frame's priority).
fn content<'a>(frame: &Frame<'a>) -> &'a [u8] {
    let p = frame.payload;
    let (mut start, mut end) = (0, p.len());
    if frame.flags & 0x8 != 0 && !p.is_empty() {
        start = 1;
        end = end.saturating_sub(usize::from(p[0]));
    }
    if frame.kind == 0x1 && frame.flags & 0x20 != 0 {
        start += 5;
    }
    &p[start.min(end)..end]
}

/// One call: its RPC, the request's and the answer's gRPC bodies as they came.
struct Call {
    rpc: Rpc,
    request: Vec<u8>,
    response: Vec<u8>,
    /// Where in the client's bytes its last frame ends.
    end: usize,
}

struct Connection {
    label: String,
    c2s: Vec<u8>,
    /// The client's header blocks, in order.
    blocks: Vec<Vec<u8>>,
    calls: Vec<Call>,
}

fn read_connection(label: String, c2s: Vec<u8>, s2c: &[u8]) -> Option<Connection> {
    if !c2s.starts_with(PREFACE) {
        return None;
    }
    let mut decoder = check::header_block::Decoder::default();
    let mut blocks = Vec::new();
    let mut calls: BTreeMap<u32, Call> = BTreeMap::new();
    let mut block: Option<(u32, Vec<u8>)> = None;
    for frame in frames(&c2s, PREFACE.len()) {
        match frame.kind {
            0x1 | 0x9 => {
                let fragment = content(&frame);
                let (stream, gathered) = block.get_or_insert_with(|| (frame.stream, Vec::new()));
                gathered.extend_from_slice(fragment);
                if frame.flags & 0x4 != 0 {
                    let stream = *stream;
                    let (_, whole) = block.take().expect("a block");
                    let headers = decoder.decode(&whole).expect("a real client's header block decodes");
                    blocks.push(whole);
                    let path = headers
                        .iter()
                        .find(|h| h.name == b":path")
                        .map(|h| String::from_utf8_lossy(&h.value).into_owned());
                    if let Some(rpc) = path.as_deref().and_then(Rpc::from_path) {
                        calls.insert(stream, Call { rpc, request: Vec::new(), response: Vec::new(), end: frame.end });
                    }
                }
            }
            0x0 => {
                if let Some(call) = calls.get_mut(&frame.stream) {
                    call.request.extend_from_slice(content(&frame));
                    call.end = frame.end;
                }
            }
            _ => {}
        }
    }
    for frame in frames(s2c, 0) {
        if frame.kind == 0x0 {
            if let Some(call) = calls.get_mut(&frame.stream) {
                call.response.extend_from_slice(content(&frame));
            }
        }
    }
    Some(Connection { label, c2s, blocks, calls: calls.into_values().collect() })
}

/// The messages of a gRPC body.
fn messages(mut body: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if body.len() < 5 + len {
            break;
        }
        out.push(&body[5..5 + len]);
        body = &body[5 + len..];
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------------------------

struct Corpus {
    root: PathBuf,
    written: BTreeMap<&'static str, usize>,
}

impl Corpus {
    fn write(&mut self, target: &'static str, name: &str, bytes: &[u8]) {
        if bytes.len() >= MAX_SEED {
            return;
        }
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir).expect("a corpus directory");
        std::fs::write(dir.join(name), bytes).expect("a seed");
        *self.written.entry(target).or_default() += 1;
    }
}

fn seeds(root: &Path, recordings: &[&str]) {
    let mut connections = Vec::new();
    for spec in recordings {
        let (label, dir) = spec.split_once('=').expect("LABEL=DIR");
        let mut n = 0;
        while let (Ok(c2s), Ok(s2c)) = (
            std::fs::read(Path::new(dir).join(format!("{n}.c2s"))),
            std::fs::read(Path::new(dir).join(format!("{n}.s2c"))),
        ) {
            if let Some(c) = read_connection(format!("{label}-{n}"), c2s, &s2c) {
                if !c.calls.is_empty() {
                    connections.push(c);
                }
            }
            n += 1;
        }
    }
    let mut corpus = Corpus { root: root.to_path_buf(), written: BTreeMap::new() };
    let versions = [CriVersion::V1, CriVersion::V1alpha2, CriVersion::V1alpha1];
    let mut seen = std::collections::BTreeSet::new();
    let mut turn = 0usize;
    let mut positions = BTreeMap::new();
    for connection in &connections {
        for call in &connection.calls {
            let (version, method) = (call.rpc.version, call.rpc.info.method);
            if !seen.insert((version, method)) {
                continue;
            }
            turn += 1;
            let position = positions.entry(version).or_insert(0usize);
            *position += 1;
            let runtime = [(turn * 3) as u8 & 0x7f, if turn.is_multiple_of(2) { 0x80 | (turn * 7) as u8 } else { 0 }];
            let others: Vec<CriVersion> =
                versions.iter().copied().filter(|v| call.rpc.in_version(*v).is_some()).collect();
            let other = others[(*position + usize::from(check::version_choice(version))) % others.len()];
            if let Some(request) = messages(&call.request).first() {
                let mut seed = check::convert::header(version, other, method, runtime).expect("a header").to_vec();
                seed.extend_from_slice(request);
                corpus.write("convert_request", &format!("{version}-{method}-to-{other}"), &seed);

                let name = call.rpc.info.request;
                let index = version.schema().message_index(name).expect("the request message") as u16;
                let mut seed = vec![check::version_choice(version)];
                seed.extend_from_slice(&index.to_be_bytes());
                seed.extend_from_slice(&[(turn % 8) as u8, 20 + (turn % 20) as u8, 0, (turn % 6) as u8]);
                seed.extend_from_slice(request);
                corpus.write("scan", &format!("{version}-{name}"), &seed);
            }
            if let Some(response) = messages(&call.response).first() {
                // The answer as the runtime of `version` gave it, for a caller of `other`.
                let mut seed = check::convert::header(other, version, method, runtime).expect("a header").to_vec();
                seed.extend_from_slice(response);
                corpus.write("convert_response", &format!("{version}-{method}-for-{other}"), &seed);
            }
            for (side, body) in [("request", &call.request), ("response", &call.response)] {
                if turn.is_multiple_of(3) && !body.is_empty() {
                    // A 16 KiB limit, read in chunks of 1, 7 and whole.
                    let mut seed = vec![1, 0x40, 0x00, 2, 1, 7, 0];
                    seed.extend_from_slice(body);
                    corpus.write("framing", &format!("{version}-{method}-{side}"), &seed);
                }
            }
        }
    }
    for connection in &connections {
        // The connection's opening, up to the end of each of its first calls.
        for call in connection.calls.iter().take(6) {
            let end = call.end;
            let name = format!("{}-through-{}", connection.label, call.rpc.info.method);
            corpus.write("front_door", &name, &check::front_door::seed(&connection.c2s[..end]));
        }
        // Its header blocks from the first, in runs.
        for count in [1, 2, 4, 8, 16, 32] {
            let mut seed = Vec::new();
            for block in connection.blocks.iter().take(count) {
                if block.len() < 255 {
                    seed.push(block.len() as u8);
                } else {
                    seed.push(255);
                    seed.extend_from_slice(&(block.len() as u16).to_be_bytes());
                }
                seed.extend_from_slice(block);
            }
            if count <= connection.blocks.len() {
                corpus.write("header_block", &format!("{}-blocks-1-to-{count}", connection.label), &seed);
            }
        }
    }
    for (target, count) in &corpus.written {
        eprintln!("{target}: {count} seeds");
    }
}
