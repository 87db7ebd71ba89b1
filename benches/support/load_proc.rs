//! The processes of `benches/load/` and what /proc says about them: child processes that go
//! away with the benchmark however it ends, CPU time of a process tree, memory, the machine.
//!
//! Every child is the bench binary itself, re-executed in a role chosen by [`ROLE`]: an
//! in-memory runtime (see `load/memory_runtime.rs`), or a guard that runs a program (cri-bridge,
//! socat), prints its pid and kills it once the guard's stdin, a pipe from the benchmark, reaches
//! end of file.
//! So a benchmark that is killed outright still takes its processes with it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The environment variable that selects a child's role.
pub const ROLE: &str = "CRI_BRIDGE_LOAD_ROLE";

/// A child of the benchmark, told to go (its stdin closed) and reaped when dropped.
pub struct Child {
    pub name: String,
    /// The process that does the work: the child itself, or the program its guard runs.
    pub pid: u32,
    process: std::process::Child,
    log: Option<PathBuf>,
}

impl Child {
    /// Starts the bench binary in `role`, with `envs`, and waits for the first line it prints
    /// (its readiness), which is returned.
    fn start(name: &str, role: &str, command: &mut Command, log: Option<&Path>) -> (Child, String) {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("create a log file")),
            None => Stdio::inherit(),
        };
        let mut process = command
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let pid = process.id();
        let stdout = process.stdout.take().expect("a piped stdout");
        let mut child = Child { name: name.to_string(), pid, process, log: log.map(Path::to_path_buf) };
        match first_line(stdout, Duration::from_secs(60)) {
            Some(line) => (child, line),
            None => {
                child.stop();
                panic!("{} did not start{}", child.name, child.log_tail());
            }
        }
    }

    /// An in-memory runtime: the bench binary in its runtime role, with `envs` saying what to
    /// serve; it prints a line once it is populated.
    pub fn runtime(name: &str, envs: &[(&str, String)]) -> Child {
        let mut command = Command::new(std::env::current_exe().expect("the bench binary"));
        command.envs(envs.iter().map(|(k, v)| (k, v)));
        Child::start(name, "runtime", &mut command, None).0
    }

    /// `program args…` under a guard, its stderr (and the guard's) to `log`, without RUST_LOG.
    pub fn guarded(name: &str, program: &str, args: &[String], log: &Path) -> Child {
        let mut command = Command::new(std::env::current_exe().expect("the bench binary"));
        command.arg(program).args(args).env_remove("RUST_LOG");
        let (mut child, line) = Child::start(name, "guard", &mut command, Some(log));
        match line.trim().parse() {
            Ok(pid) => child.pid = pid,
            Err(_) => panic!("{}: the guard printed {line:?}, not a pid{}", child.name, child.log_tail()),
        }
        child
    }

    /// Waits until `socket` accepts connections.
    pub fn wait_for_socket(&mut self, socket: &Path) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            if let Ok(Some(status)) = self.process.try_wait() {
                panic!("{} exited ({status}) before listening on {}{}", self.name, socket.display(), self.log_tail());
            }
            if Instant::now() > deadline {
                panic!("{} did not listen on {} within 20 s{}", self.name, socket.display(), self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_tail(&self) -> String {
        let Some(log) = &self.log else { return String::new() };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("; the end of {}:\n{}", log.display(), tail.join("\n"))
    }

    /// Closes its stdin and waits up to 5 s for it to go, then kills it.
    fn stop(&mut self) {
        drop(self.process.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.process.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The first line `from` prints, if it prints one within `timeout`.
fn first_line(from: impl Read + Send + 'static, timeout: Duration) -> Option<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let mut reader = BufReader::new(from);
        if reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            let _ = sender.send(line);
        }
        // Keep reading so that the child never blocks on a full pipe.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    receiver.recv_timeout(timeout).ok()
}

/// Returns once stdin reaches end of file: the benchmark has closed it, or has died.
pub fn wait_for_stdin_eof() {
    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
}

/// The guard role: runs the program named by its arguments, prints its pid, and kills it when
/// stdin reaches end of file; exits with the program if the program exits first.
pub fn guard_role() -> ! {
    let mut args = std::env::args_os().skip(1);
    let program = args.next().expect("the guard's program");
    let mut child = Command::new(&program)
        .args(args)
        .env_remove(ROLE)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.to_string_lossy()));
    println!("{}", child.id());
    let _ = std::io::stdout().flush();
    let (sender, eof) = mpsc::channel();
    std::thread::spawn(move || {
        wait_for_stdin_eof();
        let _ = sender.send(());
    });
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            std::process::exit(status.code().unwrap_or(1));
        }
        if eof.recv_timeout(Duration::from_millis(100)) != Err(mpsc::RecvTimeoutError::Timeout) {
            let _ = child.kill();
            let _ = child.wait();
            std::process::exit(0);
        }
    }
}

/// Clock ticks per second, the unit of /proc/<pid>/stat's CPU times.
pub fn clock_ticks_per_second() -> f64 {
    let output = Command::new("getconf").arg("CLK_TCK").output();
    output.ok().and_then(|o| String::from_utf8(o.stdout).ok()).and_then(|s| s.trim().parse().ok()).unwrap_or(100.0)
}

/// CPU time, in clock ticks, of `pid` and all its descendants, living and reaped: its own
/// utime + stime, its reaped children's cutime + cstime, and the same for each live child
/// (socat forks one per connection). None once `pid` is gone.
pub fn tree_cpu_ticks(pid: u32) -> Option<u64> {
    let own = cpu_ticks_with_reaped_children(pid)?;
    Some(own + live_children(pid).into_iter().filter_map(tree_cpu_ticks).sum::<u64>())
}

/// utime + stime + cutime + cstime: fields 14 to 17 of /proc/<pid>/stat.
fn cpu_ticks_with_reaped_children(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, field 2, is in parentheses and may hold spaces; field 3 follows the last ')'.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    fields.get(11..15)?.iter().map(|f| f.parse::<u64>().ok()).sum()
}

/// The live children of `pid`, from the `children` file of each of its threads.
pub fn live_children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(text.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
    }
    children
}

/// A `/proc/<pid>/status` size field such as VmRSS or VmHWM, in KiB.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
    line[field.len() + 1..].split_whitespace().next()?.parse().ok()
}

/// "<n> cores, <model name>".
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".to_string());
    format!("{cores} cores, {model}")
}

/// A fresh directory under the system temp dir, removed with everything in it when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
