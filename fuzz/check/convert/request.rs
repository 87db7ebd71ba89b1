//! `convert_request`: a caller's request as the forwarder takes it, scanned, converted (or
//! passed through), and scanned again as the runtime will read it.

use super::super::decode::{self, Decoded};
use super::super::wire_gen::schema;
use super::super::Choices;
use super::step::{check_route, indent, render};
use super::{check_record, complete, counted, describe, read_case};
use cri_bridge::convert::policy::{Action, LossPolicy, Side};
use cri_bridge::convert::scan::{self, Limits};
use cri_bridge::convert::{Cx, Loss, LossReason, Route};
use std::collections::HashMap;

pub fn request(data: &[u8]) {
    let mut input = Choices::new(data);
    let case = read_case(&mut input);
    let body = input.rest();
    let info = case.rpc.info;
    // `forward::plan`: an RPC the backend's version lacks is answered UNIMPLEMENTED.
    if case.rpc.in_version(case.backend).is_none() {
        return;
    }
    let route = Route::new(info.request, case.frontend, case.backend)
        .unwrap_or_else(|| panic!("{}: no route for a shared RPC", describe(&case, info.request)));
    let request_index = case.frontend.schema().message_index(info.request).expect("request in its schema");
    let backend_schema = case.backend.schema();
    let backend_index = backend_schema.message_index(info.request).unwrap_or(request_index);
    let scan_passthrough = scan::worth_scanning(case.backend, backend_index);
    let blocked = case.profile.blocked(backend_schema);
    let runtime = Limits {
        unknown: !case.profile.is_newer_than_schema(),
        blocked: Some(&blocked),
        minor: case.profile.minor,
        without_swap: false,
    };
    let policy = LossPolicy::new(HashMap::new());
    let fail = |why: String| -> ! { panic!("{}: {why}", describe(&case, info.request)) };

    if route.is_identity() {
        if case.frontend != case.backend {
            fail("an identity route between two versions".into());
        }
        let passed = route.run(body, &mut Cx::new()).unwrap_or_else(|e| fail(format!("passthrough failed: {e}")));
        if passed != body {
            fail("passthrough changed the bytes".into());
        }
        let mut losses = Vec::new();
        let scanned = scan::scan(backend_schema, backend_index, body, runtime, &mut losses);
        if scanned.is_ok() {
            check_record(&losses).unwrap_or_else(|e| fail(e));
            if !scan_passthrough {
                // The plan skips the scan: it must not skip a field the policy would refuse. (Past
                // the bound the record counts the rest in one entry, which is refused whole; the
                // fields it stands for are judged like the named ones.)
                let refused = losses
                    .iter()
                    .filter(|l| l.reason != LossReason::TooMany)
                    .find(|l| policy.action(Side::Request, l) == Action::Reject);
                if let Some(l) = refused {
                    fail(format!(
                        "an unscanned passthrough request carries a refused loss: {} ({:?})",
                        l.path, l.reason
                    ));
                }
            }
            let _ = policy.apply(Side::Request, &case.rpc.name(), &case.profile, losses).map_err(|r| r.to_string());
        }
        return;
    }

    let mut losses = Vec::new();
    let source = scan::scan(case.frontend.schema(), request_index, body, Limits::UNKNOWN_ONLY, &mut losses);
    let decoded = decode::decode(schema(case.frontend), schema(case.frontend).index(info.request), body);
    let mut cx = Cx::new();
    let converted = route.run(body, &mut cx);
    let decoded = match (decoded, &converted) {
        (Ok(d), Ok(_)) => d,
        (Err(_), Err(_)) => return,
        (Ok(_), Err(e)) => fail(format!("the conversion refuses bytes prost decodes: {e}")),
        (Err(e), Ok(_)) => fail(format!("the conversion accepts bytes that do not decode: {e}")),
    };
    if let Err(e) = &source {
        // The forwarder refuses the request here; prost would skip an unknown group, which
        // the scan does not read.
        if !decoded.groups {
            fail(format!("the scan refuses bytes prost decodes: {e}"));
        }
        return;
    }
    check_record(&losses).unwrap_or_else(|e| fail(format!("caller's scan: {e}")));
    check_notes(&losses, &decoded).unwrap_or_else(|e| fail(e));

    let converted = converted.expect("checked above");
    if cx.loss_count() != counted(cx.losses()) {
        fail(format!("{} losses counted, the record holds {}", cx.loss_count(), counted(cx.losses())));
    }
    let conversion = cx.into_losses();
    check_record(&conversion).unwrap_or_else(|e| fail(format!("conversion: {e}")));
    check_route(case.frontend, case.backend, info.request, &decoded, body, &converted, &conversion).unwrap_or_else(
        |e| fail(format!("{e}\n  input:\n{}", indent(&render(case.frontend, info.request, &decoded.msg)))),
    );

    // What the runtime would not act on, in what it receives.
    losses.extend(conversion);
    let after = Limits { unknown: false, ..runtime };
    let start = losses.len();
    if let Err(e) = scan::scan(backend_schema, backend_index, &converted, after, &mut losses) {
        fail(format!("the converted request does not scan: {e}"));
    }
    if let Some(l) = losses[start..].iter().find(|l| !matches!(l.reason, LossReason::Blocked(_) | LossReason::TooMany))
    {
        fail(format!("the runtime's scan of converted bytes reported {} {:?}", l.path, l.reason));
    }
    let _ = policy.apply(Side::Request, &case.rpc.name(), &case.profile, losses).map_err(|r| r.to_string());
}

/// The caller's scan (`UNKNOWN_ONLY`) reports what the independent decoder noted, in order.
fn check_notes(losses: &[Loss], decoded: &Decoded) -> Result<(), String> {
    if !complete(losses) {
        return Ok(());
    }
    let reported: Vec<String> = losses
        .iter()
        .map(|l| match l.reason {
            LossReason::UnknownField => format!("{} [{}] unknown", l.path, l.field),
            LossReason::EnumValue(n) => format!("{} [{}] enum {n}", l.path, l.field),
            ref other => format!("{} [{}] {other:?}", l.path, l.field),
        })
        .collect();
    let noted: Vec<String> = decoded
        .notes
        .iter()
        .map(|n| match n.enum_value {
            None => format!("{} [{}] unknown", n.path, n.field),
            Some(v) => format!("{} [{}] enum {v}", n.path, n.field),
        })
        .collect();
    if reported != noted {
        return Err(format!("the scan reported {reported:?}\n  but the bytes hold {noted:?}"));
    }
    Ok(())
}
