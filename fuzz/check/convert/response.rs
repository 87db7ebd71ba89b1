//! `convert_response`: the runtime's answer as the forwarder takes it back to the caller, with
//! the counting and the recording conversions agreeing.

use super::super::decode;
use super::super::wire_gen::schema;
use super::super::Choices;
use super::step::{check_route, indent, render};
use super::{check_record, counted, describe, read_case};
use cri_bridge::convert::scan;
use cri_bridge::convert::{Cx, Route};

/// From this revision `ContainerEventResponse` #4 is a `PodSandboxStatus` (`forward/mod.rs`).
const EVENT_STATUS_SINCE: u8 = 26;

pub fn response(data: &[u8]) {
    let mut input = Choices::new(data);
    let case = read_case(&mut input);
    let mut body = input.rest().to_vec();
    let info = case.rpc.info;
    if case.rpc.in_version(case.backend).is_none() {
        return;
    }
    let fail = |why: String| -> ! { panic!("{}: {why}", describe(&case, info.response)) };
    let route = Route::new(info.response, case.backend, case.frontend)
        .unwrap_or_else(|| fail("no route for a shared RPC".into()));

    if info.method == "GetContainerEvents" && case.profile.minor < EVENT_STATUS_SINCE {
        // `Forwarder::convert_old_event`: #4 (a 1.25 PodSandboxMetadata) is left out.
        let Ok((kept, dropped)) = scan::without_field(&body, 4) else { return };
        check_without(&body, &kept, dropped, 4).unwrap_or_else(|e| fail(e));
        body = kept;
    }
    if route.is_identity() {
        let passed = route.run(&body, &mut Cx::counting()).unwrap_or_else(|e| fail(format!("passthrough: {e}")));
        if passed != body {
            fail("passthrough changed the bytes".into());
        }
        return;
    }

    let mut counting = Cx::counting();
    let counted_run = route.run(&body, &mut counting);
    let mut cx = Cx::new();
    let converted = route.run(&body, &mut cx);
    let from = schema(case.backend);
    let decoded = decode::decode(from, from.index(info.response), &body);
    let decoded = match (decoded, &converted, &counted_run) {
        (Ok(d), Ok(_), Ok(_)) => d,
        (Err(_), Err(_), Err(_)) => return,
        (d, c, n) => fail(format!(
            "prost decodes: {}, the conversion: {}, the counting conversion: {}",
            d.is_ok(),
            c.is_ok(),
            n.is_ok()
        )),
    };
    let converted = converted.expect("checked above");
    if counting.loss_count() != cx.loss_count() || cx.loss_count() != counted(cx.losses()) {
        fail(format!(
            "the counting context counted {}, the recording one {} and its record holds {}",
            counting.loss_count(),
            cx.loss_count(),
            counted(cx.losses())
        ));
    }
    let to = schema(case.frontend);
    let idx = to.index(info.response);
    let same = to.decode(idx, &counted_run.expect("checked above")).ok() == to.decode(idx, &converted).ok();
    if !same {
        fail("the counting and the recording conversions give different answers".into());
    }
    let losses = cx.into_losses();
    check_record(&losses).unwrap_or_else(|e| fail(e));
    check_route(case.backend, case.frontend, info.response, &decoded, &body, &converted, &losses).unwrap_or_else(|e| {
        fail(format!("{e}\n  input:\n{}", indent(&render(case.backend, info.response, &decoded.msg))))
    });
}

/// `scan::without_field`: the top-level fields but `number`, as they came.
fn check_without(body: &[u8], kept: &[u8], dropped: bool, number: u32) -> Result<(), String> {
    let mut rest = body;
    let mut expected = Vec::new();
    let mut found = false;
    while !rest.is_empty() {
        let before = rest;
        // (The scan steps over a few encodings prost refuses, such as a 10-byte varint past 64
        // bits; the conversion then refuses them. Only what prost reads is compared.)
        let Ok((n, wire)) = prost::encoding::decode_key(&mut rest) else { return Ok(()) };
        if prost::encoding::skip_field(wire, n, &mut rest, Default::default()).is_err() {
            return Ok(());
        }
        if n == number {
            found = true;
        } else {
            expected.extend_from_slice(&before[..before.len() - rest.len()]);
        }
    }
    if kept != expected || dropped != found {
        return Err(format!(
            "without_field({number}) kept {kept:?} (dropped {dropped}), expected {expected:?} ({found})"
        ));
    }
    Ok(())
}
