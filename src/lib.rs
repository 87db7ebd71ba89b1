//! cri-bridge: lets a kubelet and a container runtime that speak different versions of the
//! Container Runtime Interface (v1alpha1, v1alpha2, v1) work together.
//!
//! # Layout
//!
//! - [`api`]: the generated types, clients and servers of the three versions, and each version's
//!   schema as a static table.
//! - [`version`]: the `CriVersion` enum.
//! - [`convert`]: generated field-by-field conversions with v1 as the hub, the hand-written
//!   exceptions, loss reports, the loss policy and the unknown-field scan.
//!
//! `build.rs` compiles `proto/` with protox and generates both the types and the conversions.
#![forbid(unsafe_code)]

pub mod api;
pub mod convert;
pub mod version;

pub use version::CriVersion;
