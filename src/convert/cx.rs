//! The conversion context: where in the message the conversion is, and what it has lost so far;
//! and the two traits the generated conversions are written in, which carry it.

use super::{Loss, LossReason};
use std::borrow::Cow;
use std::collections::HashMap;

/// Carried through one conversion. Paths are kept as a stack of static names and only rendered
/// into a string when a loss is recorded, so the common case (nothing lost) allocates nothing.
#[derive(Default, Debug)]
pub struct Cx {
    path: Vec<Segment>,
    losses: Vec<Loss>,
    /// Only count losses, without recording them (responses: their losses are expected).
    count_only: bool,
    count: usize,
}

#[derive(Debug, Clone, Copy)]
enum Segment {
    /// A field, as `Message.field`.
    Field(&'static str),
    Index(usize),
}

impl Cx {
    /// A context that records every loss with its path.
    pub fn new() -> Cx {
        Cx::default()
    }

    /// A context that only counts losses: for answers, whose losses are expected (a newer
    /// runtime telling an older client more than it can hear) and are not judged field by field.
    pub fn counting() -> Cx {
        Cx { count_only: true, ..Cx::default() }
    }

    /// How many losses occurred (recorded or only counted).
    pub fn loss_count(&self) -> usize {
        self.count
    }

    /// The losses recorded so far.
    pub fn losses(&self) -> &[Loss] {
        &self.losses
    }

    pub fn into_losses(self) -> Vec<Loss> {
        self.losses
    }

    /// Converts a singular message field.
    #[inline]
    pub fn message<S: Convert<T>, T>(&mut self, field: &'static str, value: Option<S>) -> Option<T> {
        let value = value?;
        self.path.push(Segment::Field(field));
        let converted = value.convert(self);
        self.path.pop();
        Some(converted)
    }

    /// Converts a repeated message field.
    #[inline]
    pub fn messages<S: Convert<T>, T>(&mut self, field: &'static str, values: Vec<S>) -> Vec<T> {
        if values.is_empty() {
            return Vec::new();
        }
        self.path.push(Segment::Field(field));
        let mut out = Vec::with_capacity(values.len());
        for (i, value) in values.into_iter().enumerate() {
            self.path.push(Segment::Index(i));
            out.push(value.convert(self));
            self.path.pop();
        }
        self.path.pop();
        out
    }

    /// Converts an enum value by name; a value with no counterpart is a loss, and becomes the
    /// target's UNKNOWN / NOTREADY value (or keeps its number): never another valid state.
    #[inline]
    pub fn enum_value(&mut self, field: &'static str, value: i32, map: fn(i32) -> Result<i32, i32>) -> i32 {
        map(value).unwrap_or_else(|fallback| {
            self.lost(field, LossReason::EnumValue(value));
            fallback
        })
    }

    /// Records that `field` (as `Message.field`) was set and could not be carried.
    pub fn lost(&mut self, field: &'static str, reason: LossReason) {
        self.count += 1;
        if self.count_only {
            return;
        }
        let stack = &self.path;
        super::loss::record(
            &mut self.losses,
            |kept| kept.iter().position(|l| l.field == field),
            || Loss { path: render(stack, field_name(field)), field: Cow::Borrowed(field), reason, more: 0 },
        );
    }
}

/// `config.linux.security_context` + `run_as_group` → `config.linux.security_context.run_as_group`.
fn render(stack: &[Segment], last: &str) -> String {
    use std::fmt::Write;
    let mut path = String::with_capacity(64);
    for segment in stack {
        match segment {
            Segment::Field(f) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(field_name(f));
            }
            Segment::Index(i) => {
                let _ = write!(path, "[{i}]");
            }
        }
    }
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(last);
    path
}

/// `Message.field` → `field`.
fn field_name(qualified: &str) -> &str {
    qualified.rsplit('.').next().unwrap_or(qualified)
}

/// Converts one message into its counterpart in another version, recording losses in `cx`.
pub trait Convert<T> {
    fn convert(self, cx: &mut Cx) -> T;
}

/// Whether a field holds something other than its proto3 default (i.e. would be encoded).
pub trait IsSet {
    fn is_set(&self) -> bool;
}

macro_rules! is_set_by_default {
    ($($t:ty),*) => { $(impl IsSet for $t { #[inline] fn is_set(&self) -> bool { *self != <$t>::default() } })* };
}
is_set_by_default!(bool, i32, i64, u32, u64, f32, f64, String);

impl<T> IsSet for Vec<T> {
    #[inline]
    fn is_set(&self) -> bool {
        !self.is_empty()
    }
}

impl<T> IsSet for Option<T> {
    #[inline]
    fn is_set(&self) -> bool {
        self.is_some()
    }
}

impl<K, V> IsSet for HashMap<K, V> {
    #[inline]
    fn is_set(&self) -> bool {
        !self.is_empty()
    }
}
