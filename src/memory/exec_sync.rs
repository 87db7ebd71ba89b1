//! ExecSync: the fake's tiny shell, and `sleep` held against the caller's deadline.

use super::codec::decode_request;
use super::state::MemoryRuntime;
use super::support::missing;
use crate::api::v1;
use crate::grpc::Rpc;
use bytes::Bytes;
use std::time::Duration;
use tonic::{Request, Status};

impl MemoryRuntime {
    /// Runs `cmd` through a tiny interpreter (see the module documentation).
    pub fn exec_sync(&self, req: v1::ExecSyncRequest) -> Result<v1::ExecSyncResponse, Status> {
        self.state().container(&req.container_id)?.require_running()?;
        if req.cmd.is_empty() {
            return Err(missing("cmd"));
        }
        let (exit_code, stdout, stderr) = interpret(&req.cmd);
        Ok(v1::ExecSyncResponse { stdout: stdout.into_bytes(), stderr: stderr.into_bytes(), exit_code })
    }
}

/// The whole shell of the fake: `(exit code, stdout, stderr)` of `cmd`.
/// `ExecSync` of `sleep N` takes N seconds, and like a real runtime it gives up when the
/// caller's deadline (`grpc-timeout`) passes first, answering DEADLINE_EXCEEDED.
pub(super) async fn exec_sync_sleep(rpc: Rpc, request: &Request<Bytes>) -> Result<(), Status> {
    if rpc.info.method != "ExecSync" {
        return Ok(());
    }
    let Ok(exec) = decode_request::<v1::ExecSyncRequest>(rpc, request.get_ref()) else {
        return Ok(()); // the typed call reports the decode error
    };
    let seconds = match exec.cmd.as_slice() {
        [program, n] if program.rsplit('/').next() == Some("sleep") => n.parse::<f64>().ok(),
        _ => None,
    };
    // Beyond what a Duration holds (`sleep 1e300`) is forever, as far as any caller can tell.
    let Some(wait) = seconds.filter(|s| *s >= 0.0).map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX))
    else {
        return Ok(());
    };
    match request.metadata().get("grpc-timeout").and_then(|v| parse_grpc_timeout(v.to_str().ok()?)) {
        Some(deadline) if deadline < wait => {
            tokio::time::sleep(deadline).await;
            Err(Status::deadline_exceeded("context deadline exceeded"))
        }
        _ => {
            tokio::time::sleep(wait).await;
            Ok(())
        }
    }
}

/// `grpc-timeout` as sent on the wire: digits and a unit (H, M, S, m, u, n).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn interpret(cmd: &[String]) -> (i32, String, String) {
    let Some((program, args)) = cmd.split_first() else {
        return (0, String::new(), String::new());
    };
    let ok = |stdout: String| (0, stdout, String::new());
    match program.rsplit('/').next().unwrap_or(program) {
        "echo" => ok(format!("{}\n", args.join(" "))),
        "true" | "sleep" => ok(String::new()),
        "false" => (1, String::new(), String::new()),
        "exit" => match args.first().map(|n| n.parse::<i64>()) {
            None => ok(String::new()),
            // A shell's exit status is taken modulo 256.
            Some(Ok(n)) => (n.rem_euclid(256) as i32, String::new(), String::new()),
            Some(Err(_)) => (2, String::new(), format!("exit: Illegal number: {}\n", args[0])),
        },
        "sh" | "bash" => match args {
            [flag, script, ..] if flag == "-c" => {
                interpret(&script.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            }
            [] => ok(String::new()),
            _ => (2, String::new(), format!("{program}: only -c SCRIPT is supported\n")),
        },
        _ => (127, String::new(), format!("{program}: not found\n")),
    }
}
