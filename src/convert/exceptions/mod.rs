//! The hand-written conversion rules listed in `rules.rs`, one file per older version.

// The deprecated profile strings are exactly what these rules keep in step.
#![allow(deprecated)]

mod security_profile;
pub mod v1alpha1;
pub mod v1alpha2;
