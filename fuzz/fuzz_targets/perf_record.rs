//! Ring-buffer records as the sampler parses them (`jvmperf::sampler::parse_record`), with and without
//! the kernel callchain in the sample layout: the whole input as one record, and the input cut into
//! records by their header sizes the way `RingBuffer::drain` hands them out.
#![no_main]

use jvmperf::sampler::{parse_record, ParsedRecord};
use libfuzzer_sys::fuzz_target;

fn check(record: &[u8], kernel_callchain: bool, ips: &mut Vec<u64>) {
    if let Some(ParsedRecord::Sample(s)) = parse_record(record, kernel_callchain, ips) {
        // Everything a sample hands out lies within the record.
        assert!(s.stack.len() + 8 <= record.len());
        assert!(s.kernel_ips.len() * 8 <= record.len());
        assert!(kernel_callchain || s.kernel_ips.is_empty());
        let _ = s.stack.iter().map(|&b| u64::from(b)).sum::<u64>();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut ips = Vec::new();
    for kernel_callchain in [false, true] {
        check(data, kernel_callchain, &mut ips);
        let mut rest = data;
        while rest.len() >= 8 {
            let size = usize::from(u16::from_ne_bytes([rest[6], rest[7]]));
            if size < 8 || size > rest.len() {
                break;
            }
            check(&rest[..size], kernel_callchain, &mut ips);
            rest = &rest[size..];
        }
    }
});
