//! Who is calling: each client connection's peer (`SO_PEERCRED`, then `/proc/<pid>`: its
//! executable and cgroup, so its pod and container when it runs in one), and how many calls each
//! caller made in each CRI version. This is the migration report (`cri-bridge callers`): what on
//! the node still speaks v1alpha2 before the runtime becomes v1-only.
//!
//! Callers are grouped by executable, uid, pod and container rather than by process: crictl in
//! a shell loop is one caller, not a thousand. The record is bounded ([`MAX_CALLERS`]).

pub use crate::forward::Identity;
use crate::version::CriVersion;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// Callers remembered at most; beyond, the one seen least recently is forgotten.
pub const MAX_CALLERS: usize = 1024;

/// What the kernel and `/proc` say about the process at the other end of a connection: who it
/// is (`forward::Identity`, what access decisions and the audit log use), and whether it is
/// cri-bridge itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Peer {
    pub who: Identity,
    /// The peer runs this very executable file (the same device and inode as
    /// `/proc/self/exe`): `cri-bridge probe` of this installation. Not its name, which any
    /// program can be given.
    pub is_own_executable: bool,
}

impl Peer {
    /// True when the peer runs cri-bridge's own executable file (`cri-bridge probe`).
    pub fn is_cri_bridge(&self) -> bool {
        self.is_own_executable
    }

    /// The peer of a client connection.
    pub fn of(stream: &tokio::net::UnixStream) -> Peer {
        let unknown = Identity { exe: "?".into(), ..Identity::default() };
        let Ok(credentials) = stream.peer_cred() else {
            return Peer { who: unknown, ..Peer::default() };
        };
        let pid = credentials.pid().and_then(|pid| u32::try_from(pid).ok()).filter(|pid| *pid > 0);
        let who = Identity { pid, uid: credentials.uid(), gid: credentials.gid(), ..unknown };
        let mut peer = Peer { who, ..Peer::default() };
        if let Some(pid) = pid {
            if let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) {
                // A binary replaced since the process started reads as `… (deleted)`.
                let exe = exe.to_string_lossy();
                peer.who.exe = one_line(exe.strip_suffix(" (deleted)").unwrap_or(&exe));
            }
            peer.is_own_executable = file_id(&format!("/proc/{pid}/exe")).is_some_and(|id| Some(id) == own_file_id());
            if let Ok(cgroup) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) {
                (peer.who.pod_uid, peer.who.container_id) = pod_and_container(&cgroup);
            }
        }
        peer
    }

    /// The executable's file name: `kubelet`, `crictl`.
    pub fn client(&self) -> &str {
        self.who.exe.rsplit('/').next().unwrap_or(&self.who.exe)
    }
}

/// The device and inode of the file at `path` (symlinks followed: `/proc/<pid>/exe` is the
/// executable the process runs, even once it is deleted).
fn file_id(path: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// cri-bridge's own executable file, read once.
fn own_file_id() -> Option<(u64, u64)> {
    static OWN: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| file_id("/proc/self/exe"))
}

/// The longest name kept, in bytes once escaped.
pub const MAX_NAME: usize = 256;

/// `name` as it may be shown anywhere (the callers table, the log, a metrics label): every
/// control character (C0, DEL, C1), Unicode bidi control and line or paragraph separator
/// escaped visibly (`\r`, `\x1b`, `\u{202e}`), a backslash doubled so that an escape cannot be
/// forged, and at most [`MAX_NAME`] bytes. A caller names its own executable: raw, such a name
/// could move the cursor, erase its row or pose as another client. A longer name keeps its end
/// (the file name, which `client` shows), after `…`.
pub fn one_line(name: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(name.len());
    // Where each character's escaped form begins, so a cut never splits one.
    let mut starts = Vec::with_capacity(name.len());
    for c in name.chars() {
        starts.push(out.len());
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            c if c.is_ascii_control() => write!(out, "\\x{:02x}", c as u32).expect("writing to a String"),
            c if c.is_control() || is_bidi_or_separator(c) => {
                write!(out, "\\u{{{:x}}}", c as u32).expect("writing to a String")
            }
            c => out.push(c),
        }
    }
    if out.len() <= MAX_NAME {
        return out;
    }
    let budget = MAX_NAME - '…'.len_utf8();
    let cut = starts.into_iter().find(|&at| out.len() - at <= budget).unwrap_or(out.len());
    format!("…{}", &out[cut..])
}

/// Characters that reorder or break the text around them: the bidi embeddings, overrides,
/// isolates and marks, and the line and paragraph separators.
fn is_bidi_or_separator(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        || matches!(c, '\u{2028}' | '\u{2029}')
}

/// The pod UID and container ID in a `/proc/<pid>/cgroup`, for the kubelet's cgroup layouts:
/// systemd (`kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope`, `_` for `-` in the
/// UID) and cgroupfs (`/kubepods/besteffort/pod<uid>/<id>`), cgroup v1 or v2. Only under the
/// kubelet's cgroup root (`/kubepods` or `/kubepods.slice`, which only root may write): a
/// process may make a cgroup named after any pod where it is delegated a subtree of its own
/// (a user's systemd manager, say), and that is not the pod.
pub fn pod_and_container(cgroup: &str) -> (Option<String>, Option<String>) {
    let mut found = (None, None);
    for line in cgroup.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else { continue };
        if !matches!(path.split('/').nth(1), Some("kubepods" | "kubepods.slice")) {
            continue;
        }
        for segment in path.split('/') {
            if found.0.is_none() {
                found.0 = pod_uid_in(segment);
            }
        }
        if found.0.is_some() && found.1.is_none() {
            found.1 = path.rsplit('/').next().and_then(container_id_in);
        }
        if found.0.is_some() && found.1.is_some() {
            break;
        }
    }
    found
}

/// `pod<uid>` anywhere in a segment (`kubepods-…` itself contains `pod`, so every one is tried).
fn pod_uid_in(segment: &str) -> Option<String> {
    segment.match_indices("pod").find_map(|(at, _)| {
        let uid: String = segment[at + 3..].chars().take(36).collect();
        let well_formed = uid.len() == 36
            && uid.chars().enumerate().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => c == '-' || c == '_',
                _ => c.is_ascii_hexdigit(),
            });
        well_formed.then(|| uid.replace('_', "-"))
    })
}

fn container_id_in(segment: &str) -> Option<String> {
    let name = segment.strip_suffix(".scope").unwrap_or(segment);
    let id = name.rsplit('-').next().unwrap_or(name);
    (id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit())).then(|| id.to_string())
}

/// One caller and what it called.
#[derive(Debug)]
pub struct Caller {
    pub peer: Peer,
    /// The process that called last (a caller groups every process of one executable).
    last_pid: AtomicU32,
    /// Calls per CRI version, and the last one's time (seconds since the epoch), in
    /// [`CriVersion::NEWEST_FIRST`] order.
    calls: [AtomicU64; 3],
    last_call: [AtomicU64; 3],
    first_seen: u64,
    /// Seconds since the epoch.
    last_seen: AtomicU64,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn slot(version: CriVersion) -> usize {
    CriVersion::NEWEST_FIRST.iter().position(|v| *v == version).expect("a CRI version")
}

impl Caller {
    /// Counts one call in `version`; the first in each version is logged.
    pub fn called(&self, version: CriVersion) {
        let now = now();
        self.last_seen.store(now, Ordering::Relaxed);
        self.last_call[slot(version)].store(now, Ordering::Relaxed);
        if self.calls[slot(version)].fetch_add(1, Ordering::Relaxed) == 0 {
            let peer = &self.peer;
            tracing::info!(
                client = %peer.client(),
                exe = %peer.who.exe,
                pid = self.last_pid.load(Ordering::Relaxed),
                uid = peer.who.uid,
                pod_uid = peer.who.pod_uid.as_deref().unwrap_or(""),
                container_id = peer.who.container_id.as_deref().unwrap_or(""),
                %version,
                "first call of a caller in CRI {version}"
            );
        }
    }

    pub fn calls(&self, version: CriVersion) -> u64 {
        self.calls[slot(version)].load(Ordering::Relaxed)
    }
}

/// The callers seen since start.
#[derive(Debug, Default)]
pub struct Callers {
    /// Keyed by the peer without its pid.
    known: Mutex<HashMap<Peer, Arc<Caller>>>,
}

impl Callers {
    /// The record of a newly connected peer (an existing one when the same client calls again).
    pub fn connected(&self, mut peer: Peer) -> Arc<Caller> {
        let pid = peer.who.pid.take().unwrap_or(0);
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(caller) = known.get(&peer) {
            caller.last_pid.store(pid, Ordering::Relaxed);
            return caller.clone();
        }
        if known.len() >= MAX_CALLERS {
            let oldest = known.iter().min_by_key(|(_, c)| c.last_seen.load(Ordering::Relaxed)).map(|(p, _)| p.clone());
            if let Some(oldest) = oldest {
                known.remove(&oldest);
            }
        }
        let caller = Arc::new(Caller {
            peer: peer.clone(),
            last_pid: AtomicU32::new(pid),
            calls: Default::default(),
            last_call: Default::default(),
            first_seen: now(),
            last_seen: AtomicU64::new(now()),
        });
        known.insert(peer, caller.clone());
        caller
    }

    /// Every caller that made a call, most recently seen first.
    pub fn report(&self) -> Vec<CallerReport> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let mut report: Vec<CallerReport> = known
            .values()
            .map(|caller| CallerReport {
                client: caller.peer.client().to_string(),
                exe: caller.peer.who.exe.clone(),
                pid: caller.last_pid.load(Ordering::Relaxed),
                uid: caller.peer.who.uid,
                gid: caller.peer.who.gid,
                pod_uid: caller.peer.who.pod_uid.clone(),
                container_id: caller.peer.who.container_id.clone(),
                calls: CriVersion::NEWEST_FIRST
                    .iter()
                    .map(|&v| (v.as_str().to_string(), caller.calls(v)))
                    .filter(|(_, n)| *n > 0)
                    .collect(),
                last_calls: CriVersion::NEWEST_FIRST
                    .iter()
                    .map(|&v| (v.as_str().to_string(), caller.last_call[slot(v)].load(Ordering::Relaxed)))
                    .filter(|(_, at)| *at > 0)
                    .collect(),
                first_seen: caller.first_seen,
                last_seen: caller.last_seen.load(Ordering::Relaxed),
            })
            .filter(|c| !c.calls.is_empty())
            .collect();
        report.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then_with(|| a.client.cmp(&b.client)));
        report
    }
}

/// One row of the migration report, as `cri-bridge callers` receives it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CallerReport {
    pub client: String,
    pub exe: String,
    /// The process that called last.
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    /// Calls per CRI version used (newest first).
    pub calls: Vec<(String, u64)>,
    /// When the last call in each version used was made (seconds since the epoch).
    #[serde(default)]
    pub last_calls: Vec<(String, u64)>,
    /// Seconds since the epoch.
    pub first_seen: u64,
    pub last_seen: u64,
}

/// The report as a table, for `cri-bridge callers`.
pub fn table(callers: &[CallerReport]) -> String {
    let now = now();
    let mut rows = vec![[
        "CLIENT".to_string(),
        "PID".to_string(),
        "UID".to_string(),
        "POD UID".to_string(),
        "CONTAINER".to_string(),
        "CRI VERSIONS (CALLS)".to_string(),
        "CALLS".to_string(),
        "LAST SEEN".to_string(),
    ]];
    for caller in callers {
        let versions: Vec<String> = caller.calls.iter().map(|(v, n)| format!("{v} ({n})")).collect();
        rows.push([
            caller.client.clone(),
            caller.pid.to_string(),
            caller.uid.to_string(),
            caller.pod_uid.clone().unwrap_or_else(|| "-".into()),
            // As crictl shows container IDs.
            caller.container_id.as_deref().map_or("-".into(), |id| id.chars().take(13).collect()),
            versions.join(", "),
            caller.calls.iter().map(|(_, n)| n).sum::<u64>().to_string(),
            ago_text(now.saturating_sub(caller.last_seen)),
        ]);
    }
    let widths: Vec<usize> = (0..8).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    if callers.is_empty() {
        text.push_str("(no calls since cri-bridge started)\n");
    }
    text
}

/// `12s ago`, `5m ago`, `3h ago`, `2d ago`.
pub fn ago_text(seconds: u64) -> String {
    match seconds {
        0..=119 => format!("{seconds}s ago"),
        120..=7199 => format!("{}m ago", seconds / 60),
        7200..=172_799 => format!("{}h ago", seconds / 3600),
        _ => format!("{}d ago", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4b2c3d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c";

    #[test]
    fn systemd_driver_cgroups_name_the_pod_and_container() {
        let cgroup = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1f2e3d4c_5b6a_4978_8695_a4b3c2d1e0f9.slice/cri-containerd-{ID}.scope\n"
        );
        let (pod, container) = pod_and_container(&cgroup);
        assert_eq!(pod.as_deref(), Some("1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9"));
        assert_eq!(container.as_deref(), Some(ID));
    }

    #[test]
    fn cgroupfs_driver_cgroups_v1_name_the_pod_and_container() {
        let cgroup = format!(
            "12:pids:/kubepods/burstable/pod1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9/{ID}\n1:name=systemd:/kubepods/burstable/pod1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9/{ID}\n"
        );
        let (pod, container) = pod_and_container(&cgroup);
        assert_eq!(pod.as_deref(), Some("1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9"));
        assert_eq!(container.as_deref(), Some(ID));
    }

    #[test]
    fn a_process_outside_pods_has_neither() {
        assert_eq!(pod_and_container("0::/system.slice/kubelet.service\n"), (None, None));
        // A slice that only looks like a pod's.
        assert_eq!(pod_and_container("0::/user.slice/podcast-player.scope\n"), (None, None));
        // A pod's cgroup made where a user is delegated a subtree: not under the kubelet's root.
        let delegated = "0::/user.slice/user-1000.slice/user@1000.service/kubepods/besteffort/\
                         pod1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9/x\n";
        assert_eq!(pod_and_container(delegated), (None, None));
    }

    #[test]
    fn names_are_escaped_onto_one_line() {
        assert_eq!(one_line("/usr/bin/kubelet"), "/usr/bin/kubelet");
        assert_eq!(one_line("a\rb\nc\td"), "a\\rb\\nc\\td");
        assert_eq!(one_line("\x1b[2K\x7f\u{9b}"), "\\x1b[2K\\x7f\\u{9b}");
        assert_eq!(one_line("x\u{202e}y\u{2066}z\u{2028}"), "x\\u{202e}y\\u{2066}z\\u{2028}");
        // A name that spells an escape is told apart from one that holds the character.
        assert_eq!(one_line("a\\rb"), "a\\\\rb");
        assert_eq!(one_line("crictl-ü"), "crictl-ü");
    }

    #[test]
    fn a_long_name_keeps_its_end_and_never_a_split_escape() {
        let long = format!("/{}/crictl", "d".repeat(300));
        let kept = one_line(&long);
        assert_eq!(kept.len(), MAX_NAME);
        assert!(kept.starts_with('…') && kept.ends_with("/crictl"), "{kept}");
        let escapes = "\u{202e}".repeat(100);
        let kept = one_line(&escapes);
        assert!(kept.len() <= MAX_NAME, "{}", kept.len());
        assert!(kept.strip_prefix('…').is_some_and(|rest| rest.starts_with("\\u{202e}")), "{kept}");
        // 2 bytes each: 126 of them and the `…` fit in 256 bytes.
        assert_eq!(one_line(&"é".repeat(200)), format!("…{}", "é".repeat(126)));
    }

    #[test]
    fn one_client_is_one_caller_whatever_its_pid() {
        let callers = Callers::default();
        let who = |pid| Identity { pid: Some(pid), exe: "/usr/bin/crictl".into(), ..Identity::default() };
        let peer = |pid| Peer { who: who(pid), ..Peer::default() };
        callers.connected(peer(10)).called(CriVersion::V1alpha2);
        callers.connected(peer(11)).called(CriVersion::V1alpha2);
        callers.connected(peer(12)).called(CriVersion::V1);
        let report = callers.report();
        assert_eq!(report.len(), 1);
        assert_eq!(report[0].pid, 12);
        assert_eq!(report[0].calls, vec![("v1".to_string(), 1), ("v1alpha2".to_string(), 2)]);
    }
}
