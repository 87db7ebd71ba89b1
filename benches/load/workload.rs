//! The workloads: which call, and how many in flight, each is made of.

use crate::load_client::Call;
use cri_bridge::api::v1;

#[derive(Clone, Copy, PartialEq)]
pub enum Workload {
    Version1,
    Version64,
    List1,
    List8,
}

impl Workload {
    pub const ALL: [Workload; 4] = [Workload::Version1, Workload::Version64, Workload::List1, Workload::List8];
    pub const VERSION_ONLY: &'static [Workload] = &[Workload::Version1, Workload::Version64];
    pub const LIST_ONLY: &'static [Workload] = &[Workload::List1, Workload::List8];

    /// `LOAD_WORKLOADS`: `all` (the default), `version` or `list`.
    pub fn selected() -> &'static [Workload] {
        match std::env::var("LOAD_WORKLOADS").as_deref() {
            Err(_) | Ok("all") => &Workload::ALL,
            Ok("version") => Workload::VERSION_ONLY,
            Ok("list") => Workload::LIST_ONLY,
            Ok(other) => panic!("LOAD_WORKLOADS={other:?}: expected all, version or list"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::Version1 => "Version, 1 in flight",
            Workload::Version64 => "Version, 64 in flight",
            Workload::List1 => "ListContainers, 1 in flight",
            Workload::List8 => "ListContainers, 8 in flight",
        }
    }

    pub fn in_flight(self) -> usize {
        match self {
            Workload::Version1 | Workload::List1 => 1,
            Workload::Version64 => 64,
            Workload::List8 => 8,
        }
    }

    /// The call, for a client speaking `package` (`runtime.v1` or `runtime.v1alpha2`; the
    /// requests encode the same in both).
    pub fn call(self, package: &str) -> Call {
        match self {
            Workload::Version1 | Workload::Version64 => {
                Call::new(package, "Version", &v1::VersionRequest { version: "v1".into() })
            }
            Workload::List1 | Workload::List8 => {
                Call::new(package, "ListContainers", &v1::ListContainersRequest::default())
            }
        }
    }
}
