//! JFR recordings (`.jfr` files of the JDK, async-profiler or anyone): `input::parse`, which reads
//! them chunk by chunk into the profile model.
#![no_main]

use jvmperf::input;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    // The extension makes input that does not start with JFR's magic JFR too.
    let _ = input::parse(Path::new("fuzz.jfr"), data);
});
