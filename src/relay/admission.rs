//! Which connections are served: at most `limits.connections` at once, and at most
//! `limits.connections_per_uid` from one uid (the peer's `SO_PEERCRED`), so that one client,
//! or one compromised pod with the socket mounted, cannot take every slot. A connection over a
//! limit is closed at once, before anything is read from it, and counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a refusal is logged at most (each is counted in the metrics).
const WARN_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Open {
    total: usize,
    per_uid: HashMap<u32, usize>,
    last_warned: Option<Instant>,
    refused_since_warned: u64,
}

/// The connections open now, by uid.
#[derive(Debug, Clone)]
pub struct Admission {
    open: Arc<Mutex<Open>>,
    total: usize,
    per_uid: usize,
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    Total,
    PerUid,
}

impl Refused {
    pub fn label(self) -> &'static str {
        match self {
            Refused::Total => "limits.connections",
            Refused::PerUid => "limits.connections_per_uid",
        }
    }
}

/// One admitted connection; its slot is given back when this is dropped.
#[derive(Debug)]
pub struct Admitted {
    open: Arc<Mutex<Open>>,
    uid: u32,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.total -= 1;
        if let Some(count) = open.per_uid.get_mut(&self.uid) {
            *count -= 1;
            if *count == 0 {
                open.per_uid.remove(&self.uid);
            }
        }
    }
}

impl Admission {
    pub fn new(total: usize, per_uid: usize) -> Admission {
        let open = Open { total: 0, per_uid: HashMap::new(), last_warned: None, refused_since_warned: 0 };
        Admission { open: Arc::new(Mutex::new(open)), total, per_uid }
    }

    /// Admits a connection from `uid`, or says which limit it is over (logging now and then).
    pub fn admit(&self, uid: u32) -> Result<Admitted, Refused> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let of_uid = open.per_uid.get(&uid).copied().unwrap_or(0);
        let refused = if open.total >= self.total {
            Some(Refused::Total)
        } else if of_uid >= self.per_uid {
            Some(Refused::PerUid)
        } else {
            None
        };
        if let Some(refused) = refused {
            open.refused_since_warned += 1;
            if open.last_warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                let (limit, count) = match refused {
                    Refused::Total => (self.total, open.total),
                    Refused::PerUid => (self.per_uid, of_uid),
                };
                tracing::warn!(
                    uid,
                    open = count,
                    refused = open.refused_since_warned,
                    "closing new connections: {} ({limit}) reached",
                    refused.label()
                );
                open.last_warned = Some(Instant::now());
                open.refused_since_warned = 0;
            }
            return Err(refused);
        }
        open.total += 1;
        *open.per_uid.entry(uid).or_default() += 1;
        Ok(Admitted { open: self.open.clone(), uid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_per_uid_and_in_all_and_given_back() {
        let admission = Admission::new(3, 2);
        let a = admission.admit(1).unwrap();
        let _b = admission.admit(1).unwrap();
        assert_eq!(admission.admit(1).unwrap_err(), Refused::PerUid);
        let _c = admission.admit(2).unwrap();
        assert_eq!(admission.admit(3).unwrap_err(), Refused::Total);
        drop(a);
        let _d = admission.admit(1).expect("a slot given back");
    }

    #[test]
    fn a_run_of_refusals_is_logged_once_and_counted_for_the_next_warning() {
        let admission = Admission::new(1, 1);
        let _held = admission.admit(1).unwrap();
        for _ in 0..4 {
            assert_eq!(admission.admit(1).unwrap_err(), Refused::Total);
        }
        let open = admission.open.lock().unwrap();
        // The first refusal was logged; the next three wait, counted, for the next warning.
        assert!(open.last_warned.is_some());
        assert_eq!(open.refused_since_warned, 3);
    }
}
