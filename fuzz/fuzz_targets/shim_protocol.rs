//! The shim → daemon stream: frames cut with `first_frame`, decoded with `decode_frame`, folded into
//! the code map by `JitState::apply` (hostile pcs counts, overlapping and huge ranges, unloads of
//! unknown code), then looked up the way symbolization does.
#![no_main]

use jvmperf::java_names;
use jvmperf::jit::state::JitState;
use jvmperf::shim::protocol::{decode_frame, first_frame, Record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut state = JitState::default();
    // (address, time) pairs worth looking up afterwards.
    let mut probes: Vec<(u64, u64)> = Vec::new();
    let mut rest = data;
    // Like `ShimSession::next`, but a record that does not decode is skipped rather than ending the
    // session, so the rest of the input is still exercised.
    while let Ok(Some(body)) = first_frame(rest) {
        assert!(body.len() + 4 <= rest.len());
        rest = &rest[4 + body.len()..];
        let Ok(frame) = decode_frame(body) else {
            continue;
        };
        match &frame.record {
            Record::NmethodLoad(nm) => {
                probes.push((nm.code_addr, frame.time));
                probes.extend(nm.pcs.iter().take(4).map(|p| (p.pc, frame.time)));
            }
            Record::CodeBlob { addr, size, .. } => {
                probes.push((*addr, frame.time));
                probes.push((addr.wrapping_add(u64::from(*size)), frame.time));
            }
            Record::NmethodUnload { code_addr, .. } => probes.push((*code_addr, frame.time)),
            Record::Method(m) => {
                let _ = java_names::readable_params(&m.signature);
                let _ = m.line_of(-1);
            }
            _ => {}
        }
        state.apply(frame);
    }

    let code = &state.code;
    for &(addr, time) in probes.iter().take(64) {
        for a in [
            addr.wrapping_sub(1),
            addr,
            addr.wrapping_add(1),
            addr.wrapping_add(0x1000),
        ] {
            for t in [
                0,
                time.wrapping_sub(1),
                time,
                time.wrapping_add(1),
                u64::MAX,
            ] {
                if let Some(e) = code.lookup(a, t) {
                    assert!(e.start <= a && a < e.end);
                    if let Some(frames) = e.frames_at(a) {
                        for &(method, bci) in frames.iter().take(8) {
                            if let Some(m) = code.method(method) {
                                let _ = m.line_of(bci);
                                let _ = m.qualified_name();
                            }
                        }
                    }
                }
            }
            if let Some(e) = code.lookup_latest(a) {
                assert!(e.start <= a && a < e.end && e.unload_time.is_none());
            }
        }
    }
    let live = code.live_entries();
    assert!(live.windows(2).all(|w| w[0].start <= w[1].start));
    let _ = code.nmethod_count();
});
