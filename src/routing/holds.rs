//! Whether a runtime's answer to "do you hold this id?" (its `PodSandboxStatus` or
//! `ContainerStatus` of the id) says yes, no, or nothing (issue 47).
//!
//! Only a runtime's own answer for an id it does not hold may mean "not here". Any other error
//! (a runtime restoring its state, stuck on a lock, whose CRI service is not registered yet, or
//! cri-bridge's own lookup timer) means "cannot know": a Stop or Remove sent elsewhere on that
//! guess would be answered "not found" by a runtime that never held the id, which the kubelet
//! takes for done while the pod runs on. How each runtime says "not here" is read from its source:
//!
//! | runtime (`Version.runtime_name`) | answer for an id it does not hold | source |
//! | --- | --- | --- |
//! | `containerd` 1.4–2.x | `NOT_FOUND` | the CRI plugin's sandbox and container stores return `errdefs.ErrNotFound`, turned into the code by `errgrpc`/`errdefs.ToGRPC` |
//! | `cri-o` | `NOT_FOUND` | `server/sandbox_status.go`, `server/container_status.go`: `status.Errorf(codes.NotFound, …)` (CRI-O is not served by the Go module proxy here: read from its published source, not checked against a build) |
//! | `docker` (cri-dockerd 0.4.3) | `UNKNOWN`, `… No such container: <id>` | `core/sandbox_status.go`, `core/container_status.go` return Docker's inspect error as it came (the pattern is `libdocker.IsContainerNotFoundError`'s) |
//! | `cri-bridge-memory` | `NOT_FOUND` | `src/memory` |
//! | any other | `NOT_FOUND` | the CRI's own convention; nothing else is taken for "not here" |

use tonic::Code;

/// What a runtime's answer to the ownership question says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holding {
    /// It holds the id (it answered the status).
    Holds,
    /// It says it does not hold the id, in its own words for that.
    NotHere,
    /// It said something else: it may hold the id.
    CannotKnow,
}

/// How one runtime says it does not hold an id: the code, and where the code is as general as
/// `UNKNOWN`, what the message must say (`{id}` stands for the id asked).
struct NotHere {
    runtime: &'static str,
    code: Code,
    message: Option<&'static str>,
}

/// The table above, as the code reads it; a runtime not named here is held to `NOT_FOUND`.
const NOT_HERE: &[NotHere] = &[
    NotHere { runtime: "containerd", code: Code::NotFound, message: None },
    NotHere { runtime: "cri-o", code: Code::NotFound, message: None },
    NotHere { runtime: crate::revision::DOCKER, code: Code::Unknown, message: Some("No such container: {id}") },
    NotHere { runtime: crate::revision::MEMORY_RUNTIME_NAME, code: Code::NotFound, message: None },
];

/// What `runtime` (its `Version.runtime_name`) said of `id`: `Ok(())` (it answered the status),
/// or its error's code and message.
pub fn holding(runtime: &str, id: &str, answer: Result<(), (Code, &str)>) -> Holding {
    let Err((code, message)) = answer else { return Holding::Holds };
    let says = |rule: &NotHere| {
        rule.code == code && rule.message.is_none_or(|pattern| message.contains(&pattern.replace("{id}", id)))
    };
    let known = NOT_HERE.iter().filter(|rule| rule.runtime == runtime);
    let not_here = match known.clone().next() {
        Some(_) => known.into_iter().any(says),
        None => code == Code::NotFound,
    };
    match not_here {
        true => Holding::NotHere,
        false => Holding::CannotKnow,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f3c2a";

    #[test]
    fn containerd_and_cri_o_say_not_here_with_not_found_only() {
        for runtime in ["containerd", "cri-o"] {
            let not_found = Err((Code::NotFound, "an error occurred when try to find sandbox: not found"));
            assert_eq!(holding(runtime, ID, not_found), Holding::NotHere, "{runtime}");
            // containerd restoring its state after a restart.
            let initializing = Err((Code::Unknown, "server is not initialized yet"));
            assert_eq!(holding(runtime, ID, initializing), Holding::CannotKnow, "{runtime}");
            for code in [Code::DeadlineExceeded, Code::Unimplemented, Code::Unavailable, Code::Internal] {
                assert_eq!(holding(runtime, ID, Err((code, "x"))), Holding::CannotKnow, "{runtime} {code:?}");
            }
            assert_eq!(holding(runtime, ID, Ok(())), Holding::Holds);
        }
    }

    #[test]
    fn cri_dockerd_says_not_here_with_dockers_no_such_container_for_the_id_asked() {
        let docker = crate::revision::DOCKER;
        let said = format!("Error response from daemon: No such container: {ID}");
        assert_eq!(holding(docker, ID, Err((Code::Unknown, &said))), Holding::NotHere);
        // Another id's, another code, or Docker's other errors: it may hold it.
        let other = "Error response from daemon: No such container: 999";
        assert_eq!(holding(docker, ID, Err((Code::Unknown, other))), Holding::CannotKnow);
        assert_eq!(holding(docker, ID, Err((Code::DeadlineExceeded, &said))), Holding::CannotKnow);
        let daemon_down = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock";
        assert_eq!(holding(docker, ID, Err((Code::Unknown, daemon_down))), Holding::CannotKnow);
        assert_eq!(holding(docker, ID, Err((Code::NotFound, "not found"))), Holding::CannotKnow);
    }

    #[test]
    fn an_unknown_runtime_is_held_to_not_found() {
        assert_eq!(holding("kata-shim", ID, Err((Code::NotFound, ""))), Holding::NotHere);
        assert_eq!(holding("kata-shim", ID, Err((Code::Unknown, "No such container: 4f3c2a"))), Holding::CannotKnow);
    }
}
