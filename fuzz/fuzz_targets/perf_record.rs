//! Ring-buffer records as the sampler parses them (`jvmperf::sampler::parse_record`), with and
//! without the kernel callchain and wall mode's identifier in the sample layout, and as per-CPU
//! wall mode's switch ring: the whole input as one record, and the input cut into records by their
//! header sizes the way `RingBuffer::drain` hands them out.
#![no_main]

use jvmperf::sampler::{parse_record, ParsedRecord, RecordLayout};
use libfuzzer_sys::fuzz_target;

fn check(record: &[u8], layout: RecordLayout, ips: &mut Vec<u64>) {
    let kernel_callchain = layout.kernel_callchain;
    if let Some(ParsedRecord::Sample(s)) = parse_record(record, layout, ips) {
        // Everything a sample hands out lies within the record.
        assert!(s.stack.len() + 8 <= record.len());
        assert!(s.kernel_ips.len() * 8 <= record.len());
        assert!(kernel_callchain || s.kernel_ips.is_empty());
        let _ = s.stack.iter().map(|&b| u64::from(b)).sum::<u64>();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut ips = Vec::new();
    let per_thread = [false, true].into_iter().flat_map(|kernel_callchain| {
        [None, Some(7)].map(|switch_event| RecordLayout {
            kernel_callchain,
            switch_event,
            switch_ring: false,
        })
    });
    // Per-CPU wall-clock mode's switch ring.
    let switch_ring = RecordLayout {
        kernel_callchain: false,
        switch_event: None,
        switch_ring: true,
    };
    let layouts = per_thread.chain([switch_ring]);
    for layout in layouts {
        check(data, layout, &mut ips);
        let mut rest = data;
        while rest.len() >= 8 {
            let size = usize::from(u16::from_ne_bytes([rest[6], rest[7]]));
            if size < 8 || size > rest.len() {
                break;
            }
            check(&rest[..size], layout, &mut ips);
            rest = &rest[size..];
        }
    }
});
