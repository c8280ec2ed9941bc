//! Parsing the records our events write into the ring buffer. The layout follows from the
//! `sample_type` chosen in [`super::attr`]: [IDENTIFIER], TID, TIME, [CALLCHAIN], REGS_USER,
//! STACK_USER. Every length read from a record is checked against the record's own size.

use perf_event_open_sys::bindings as sys;

/// x86_64 user registers at the moment of the sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Regs {
    /// `PERF_SAMPLE_REGS_ABI_*`: 0 = no user registers (e.g. a kernel thread), 1 = 32-bit, 2 = 64-bit.
    pub abi: u64,
    pub ax: u64,
    pub bx: u64,
    pub cx: u64,
    pub dx: u64,
    pub si: u64,
    pub di: u64,
    pub bp: u64,
    pub sp: u64,
    pub ip: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
}

/// Number of registers in `sample_regs_user` (perf bits 0–8 and 16–23, see `attr::REGS_MASK`).
pub(super) const REG_COUNT: usize = 17;

impl Regs {
    /// `values` in perf register-bit order: AX BX CX DX SI DI BP SP IP R8..R15.
    fn from_values(abi: u64, v: [u64; REG_COUNT]) -> Regs {
        Regs {
            abi,
            ax: v[0],
            bx: v[1],
            cx: v[2],
            dx: v[3],
            si: v[4],
            di: v[5],
            bp: v[6],
            sp: v[7],
            ip: v[8],
            r8: v[9],
            r9: v[10],
            r10: v[11],
            r11: v[12],
            r12: v[13],
            r13: v[14],
            r14: v[15],
            r15: v[16],
        }
    }
}

/// What a ring buffer's records look like: which optional fields our `sample_type` has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordLayout {
    /// Samples carry the kernel callchain.
    pub kernel_callchain: bool,
    /// Wall-clock mode: the ring also receives the thread's context-switch samples and
    /// `PERF_RECORD_SWITCH` records, and every record carries `PERF_SAMPLE_IDENTIFIER`; samples
    /// with this id are the switch event's.
    pub switch_event: Option<u64>,
    /// Per-CPU wall-clock mode's switch ring: every sample is a thread leaving the CPU, with
    /// its registers only (no identifier, stack copy or callchain: the stack is read from
    /// outside while the thread is off), beside `PERF_RECORD_SWITCH_CPU_WIDE` records.
    pub switch_ring: bool,
}

/// Why a sample was taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SampleKind {
    /// The CPU clock: the thread was running.
    #[default]
    OnCpu,
    /// The thread left the CPU (blocked or preempted) with this stack; it stays off until its
    /// next [`SampleKind::SwitchIn`].
    SwitchOut,
    /// The thread left the CPU with these registers; its stack was not copied (per-CPU
    /// wall-clock mode) and is still there, unchanged, until its next [`SampleKind::SwitchIn`].
    LeftCpu,
    /// Not a sample: the thread went back on a CPU at `time` (no registers, no stack).
    SwitchIn,
    /// Not a sample: the thread exited at `time` (per-CPU wall-clock mode).
    Exited,
}

/// One sample, borrowing from the ring buffer (or from a scratch copy when it wrapped around).
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    pub kind: SampleKind,
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC nanoseconds (of the initial time namespace).
    pub time: u64,
    pub regs: Regs,
    /// The valid (`dyn_size`) bytes of the user stack, starting at `regs.sp`.
    pub stack: &'a [u8],
    /// Kernel return addresses, innermost first, without `PERF_CONTEXT_*` markers; empty if none.
    pub kernel_ips: &'a [u64],
    /// The thread was running kernel code (a system call, a page fault) when sampled.
    pub in_kernel: bool,
}

/// A sample copied out of its ring buffer, to be walked later ([`HeldSample::sample`]): by the
/// engine once its attach is done, or by the engine of its JVM when a host-wide ring was drained
/// by another.
#[derive(Debug, Clone)]
pub struct HeldSample {
    kind: SampleKind,
    pid: u32,
    tid: u32,
    time: u64,
    regs: Regs,
    stack: Vec<u8>,
    kernel_ips: Vec<u64>,
    in_kernel: bool,
}

impl Sample<'_> {
    pub fn hold(&self) -> HeldSample {
        HeldSample {
            kind: self.kind,
            pid: self.pid,
            tid: self.tid,
            time: self.time,
            regs: self.regs,
            stack: self.stack.to_vec(),
            kernel_ips: self.kernel_ips.to_vec(),
            in_kernel: self.in_kernel,
        }
    }
}

impl HeldSample {
    pub fn sample(&self) -> Sample<'_> {
        Sample {
            kind: self.kind,
            pid: self.pid,
            tid: self.tid,
            time: self.time,
            regs: self.regs,
            stack: &self.stack,
            kernel_ips: &self.kernel_ips,
            in_kernel: self.in_kernel,
        }
    }

    /// The memory it keeps, in bytes.
    pub fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.stack.len() + 8 * self.kernel_ips.len()
    }
}

/// A parsed ring-buffer record; only the kinds we act on are distinguished.
#[derive(Debug)]
// Short-lived on the stack, one per record: boxing the sample would allocate per sample.
#[allow(clippy::large_enum_variant)]
pub(super) enum Record<'a> {
    /// `kernel_ips` is left empty; the raw callchain is returned beside it for [`kernel_ips`].
    Sample {
        sample: Sample<'a>,
        callchain: &'a [u8],
    },
    /// The thread went back on a CPU (a `PERF_RECORD_SWITCH` without the OUT flag).
    SwitchIn {
        pid: u32,
        tid: u32,
        time: u64,
    },
    /// A thread was created (`exit` false) or exited (`PERF_RECORD_FORK`/`PERF_RECORD_EXIT`,
    /// per-CPU wall-clock mode's switch ring only).
    Task {
        exit: bool,
        pid: u32,
        tid: u32,
        time: u64,
    },
    /// A thread took a name: `name` without its NUL padding.
    Comm {
        pid: u32,
        tid: u32,
        name: &'a [u8],
    },
    Lost(u64),
    Throttle,
    Unthrottle,
    Other,
}

/// Parses one complete record (header included). `None` means it is malformed.
pub(super) fn parse(record: &[u8], layout: RecordLayout) -> Option<Record<'_>> {
    let mut cur = Cursor(record);
    let kind = cur.u32()?;
    let misc = cur.u16()?;
    let size = usize::from(cur.u16()?);
    if size != record.len() {
        return None;
    }
    match kind {
        sys::PERF_RECORD_SAMPLE => {
            let cpumode = u32::from(misc) & sys::PERF_RECORD_MISC_CPUMODE_MASK;
            parse_sample(cur, layout, cpumode == sys::PERF_RECORD_MISC_KERNEL)
        }
        sys::PERF_RECORD_SWITCH | sys::PERF_RECORD_SWITCH_CPU_WIDE
            if layout.switch_event.is_some() || layout.switch_ring =>
        {
            if u32::from(misc) & sys::PERF_RECORD_MISC_SWITCH_OUT != 0 {
                // The switch-out sample says the same, with the registers.
                return Some(Record::Other);
            }
            if kind == sys::PERF_RECORD_SWITCH_CPU_WIDE {
                // next_prev_pid, next_prev_tid: the task that left; the trailer is the one that
                // came (include/uapi/linux/perf_event.h).
                cur.u64()?;
            }
            // The sample_id trailer (sample_id_all): TID, TIME, [IDENTIFIER].
            let pid = cur.u32()?;
            let tid = cur.u32()?;
            let time = cur.u64()?;
            Some(Record::SwitchIn { pid, tid, time })
        }
        sys::PERF_RECORD_FORK | sys::PERF_RECORD_EXIT if layout.switch_ring => {
            // pid, ppid, tid, ptid, time (include/uapi/linux/perf_event.h).
            let pid = cur.u32()?;
            let _ppid = cur.u32()?;
            let tid = cur.u32()?;
            let _ptid = cur.u32()?;
            let time = cur.u64()?;
            Some(Record::Task {
                exit: kind == sys::PERF_RECORD_EXIT,
                pid,
                tid,
                time,
            })
        }
        sys::PERF_RECORD_COMM => {
            let pid = cur.u32()?;
            let tid = cur.u32()?;
            // The name is NUL-terminated and padded to 8 bytes; the sample_id trailer follows.
            let rest = cur.bytes(cur.0.len())?;
            let len = rest.iter().position(|&b| b == 0)?;
            Some(Record::Comm {
                pid,
                tid,
                name: &rest[..len],
            })
        }
        sys::PERF_RECORD_LOST => {
            let _id = cur.u64()?;
            Some(Record::Lost(cur.u64()?))
        }
        sys::PERF_RECORD_THROTTLE => Some(Record::Throttle),
        sys::PERF_RECORD_UNTHROTTLE => Some(Record::Unthrottle),
        _ => Some(Record::Other),
    }
}

fn parse_sample(mut cur: Cursor<'_>, layout: RecordLayout, in_kernel: bool) -> Option<Record<'_>> {
    let kind = match layout.switch_event {
        _ if layout.switch_ring => SampleKind::LeftCpu,
        Some(switch) if cur.u64()? == switch => SampleKind::SwitchOut,
        _ => SampleKind::OnCpu,
    };
    let regs_only = kind == SampleKind::LeftCpu;
    let pid = cur.u32()?;
    let tid = cur.u32()?;
    let time = cur.u64()?;
    let callchain = if layout.kernel_callchain && !regs_only {
        let n = usize::try_from(cur.u64()?).ok()?;
        cur.bytes(n.checked_mul(8)?)?
    } else {
        &[]
    };
    let abi = cur.u64()?;
    let regs = if abi == 0 {
        Regs::default()
    } else {
        let mut values = [0u64; REG_COUNT];
        for v in &mut values {
            *v = cur.u64()?;
        }
        Regs::from_values(abi, values)
    };
    // STACK_USER: u64 size, size bytes, then u64 dyn_size only when size != 0.
    let size = match regs_only {
        true => 0,
        false => usize::try_from(cur.u64()?).ok()?,
    };
    let stack = if size == 0 {
        &[]
    } else {
        let data = cur.bytes(size)?;
        let dyn_size = usize::try_from(cur.u64()?).ok()?;
        data.get(..dyn_size)?
    };
    Some(Record::Sample {
        sample: Sample {
            kind,
            pid,
            tid,
            time,
            regs,
            stack,
            kernel_ips: &[],
            in_kernel,
        },
        callchain,
    })
}

/// Decodes a raw callchain into `out`, keeping only the entries in kernel context.
pub(super) fn kernel_ips(callchain: &[u8], out: &mut Vec<u64>) {
    out.clear();
    let mut in_kernel = false;
    for chunk in callchain.chunks_exact(8) {
        let ip = u64::from_ne_bytes(chunk.try_into().expect("chunks_exact(8)"));
        if ip >= sys::PERF_CONTEXT_MAX {
            in_kernel = ip == sys::PERF_CONTEXT_KERNEL;
        } else if in_kernel {
            out.push(ip);
        }
    }
}

/// Native-endian reads that fail instead of panicking when the record is too short.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_ne_bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_ne_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_ne_bytes)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Builds records the way the kernel lays them out, for parser and ring-buffer tests.
    #[derive(Default)]
    pub struct RecordBuilder(Vec<u8>);

    impl RecordBuilder {
        pub fn u32(mut self, v: u32) -> Self {
            self.0.extend_from_slice(&v.to_ne_bytes());
            self
        }
        pub fn u64(mut self, v: u64) -> Self {
            self.0.extend_from_slice(&v.to_ne_bytes());
            self
        }
        pub fn bytes(mut self, b: &[u8]) -> Self {
            self.0.extend_from_slice(b);
            self
        }
        /// Prepends a header whose size covers the body.
        pub fn finish(self, kind: u32) -> Vec<u8> {
            let size = u16::try_from(self.0.len() + 8).unwrap();
            let mut out = kind.to_ne_bytes().to_vec();
            out.extend_from_slice(&0u16.to_ne_bytes());
            out.extend_from_slice(&size.to_ne_bytes());
            out.extend_from_slice(&self.0);
            out
        }
    }

    /// A sample with pid 7, tid 8, time 99, registers 1..=17 and the given stack dump.
    pub fn sample_record(callchain: &[u64], stack: &[u8], dyn_size: u64) -> Vec<u8> {
        let mut b = RecordBuilder::default().u32(7).u32(8).u64(99);
        if !callchain.is_empty() {
            b = b.u64(callchain.len() as u64);
            for ip in callchain {
                b = b.u64(*ip);
            }
        }
        b = b.u64(2);
        for r in 1..=REG_COUNT as u64 {
            b = b.u64(r);
        }
        b = b.u64(stack.len() as u64).bytes(stack);
        if !stack.is_empty() {
            b = b.u64(dyn_size);
        }
        b.finish(sys::PERF_RECORD_SAMPLE)
    }

    fn layout(kernel_callchain: bool) -> RecordLayout {
        RecordLayout {
            kernel_callchain,
            switch_event: None,
            switch_ring: false,
        }
    }

    fn expect_sample(record: &[u8], has_callchain: bool) -> (Sample<'_>, &[u8]) {
        match parse(record, layout(has_callchain)) {
            Some(Record::Sample { sample, callchain }) => (sample, callchain),
            other => panic!("expected a sample, got {other:?}"),
        }
    }

    #[test]
    fn parses_a_sample_with_registers_and_stack() {
        let stack: Vec<u8> = (0..32).collect();
        let rec = sample_record(&[], &stack, 24);
        let (s, cc) = expect_sample(&rec, false);
        assert_eq!((s.pid, s.tid, s.time), (7, 8, 99));
        assert_eq!((s.regs.abi, s.regs.ax, s.regs.sp, s.regs.ip), (2, 1, 8, 9));
        assert_eq!((s.regs.r8, s.regs.r15), (10, 17));
        assert_eq!(s.stack, &stack[..24]);
        assert!(cc.is_empty());
        assert!(!s.in_kernel);
    }

    #[test]
    fn the_header_says_whether_the_sample_hit_kernel_code() {
        let mut rec = sample_record(&[], &[0; 8], 8);
        let misc = sys::PERF_RECORD_MISC_KERNEL as u16;
        rec[4..6].copy_from_slice(&misc.to_ne_bytes());
        assert!(expect_sample(&rec, false).0.in_kernel);
    }

    #[test]
    fn kernel_ips_drop_context_markers_and_user_entries() {
        let chain = [
            sys::PERF_CONTEXT_KERNEL,
            0xffff_ffff_8100_0000,
            0xffff_ffff_8100_0010,
            sys::PERF_CONTEXT_USER,
            0x40_1000,
        ];
        let rec = sample_record(&chain, &[0; 8], 8);
        let (_, cc) = expect_sample(&rec, true);
        let mut ips = Vec::new();
        kernel_ips(cc, &mut ips);
        assert_eq!(ips, [0xffff_ffff_8100_0000, 0xffff_ffff_8100_0010]);
    }

    #[test]
    fn sample_without_user_regs_or_stack() {
        let rec = RecordBuilder::default()
            .u32(1)
            .u32(2)
            .u64(3)
            .u64(0) // abi none: no registers follow
            .u64(0) // stack size 0: no data, no dyn_size
            .finish(sys::PERF_RECORD_SAMPLE);
        let (s, _) = expect_sample(&rec, false);
        assert_eq!(s.regs, Regs::default());
        assert!(s.stack.is_empty());
    }

    #[test]
    fn lost_and_throttle_records() {
        let lost = RecordBuilder::default()
            .u64(1)
            .u64(42)
            .finish(sys::PERF_RECORD_LOST);
        assert!(matches!(
            parse(&lost, layout(false)),
            Some(Record::Lost(42))
        ));
        let thr = RecordBuilder::default()
            .u64(5)
            .u64(0)
            .u64(0)
            .finish(sys::PERF_RECORD_THROTTLE);
        assert!(matches!(parse(&thr, layout(false)), Some(Record::Throttle)));
        let unthr = RecordBuilder::default().finish(sys::PERF_RECORD_UNTHROTTLE);
        assert!(matches!(
            parse(&unthr, layout(false)),
            Some(Record::Unthrottle)
        ));
    }

    #[test]
    fn malformed_records_are_rejected_not_panicked_on() {
        let good = sample_record(&[], &[0; 16], 16);
        // dyn_size larger than the dumped size.
        assert!(parse(&sample_record(&[], &[0; 16], 24), layout(false)).is_none());
        // Header size disagreeing with the slice.
        assert!(parse(&good[..good.len() - 8], layout(false)).is_none());
        // Every truncation of a sample, with the header size patched to match.
        for len in 8..good.len() {
            let mut cut = good[..len].to_vec();
            cut[6..8].copy_from_slice(&(len as u16).to_ne_bytes());
            assert!(parse(&cut, layout(false)).is_none(), "truncated at {len}");
        }
        // A callchain length that overflows or runs past the end.
        let huge = RecordBuilder::default()
            .u32(1)
            .u32(1)
            .u64(1)
            .u64(u64::MAX / 4)
            .finish(sys::PERF_RECORD_SAMPLE);
        assert!(parse(&huge, layout(true)).is_none());
        assert!(parse(&[], layout(false)).is_none());
        assert!(parse(&[1, 2, 3], layout(false)).is_none());
    }

    /// `switch(misc)` is a switch record of thread 8 of process 7 at 123: the switch in reads as
    /// such, the switch out (said by its sample) as nothing.
    fn assert_switch_records(switch: &dyn Fn(u32) -> Vec<u8>, layout: RecordLayout) {
        assert!(matches!(
            parse(&switch(0), layout),
            Some(Record::SwitchIn {
                pid: 7,
                tid: 8,
                time: 123
            })
        ));
        let out = switch(sys::PERF_RECORD_MISC_SWITCH_OUT);
        assert!(matches!(parse(&out, layout), Some(Record::Other)));
    }

    #[test]
    fn wall_mode_tells_switch_samples_and_switch_ins_apart() {
        let wall = RecordLayout {
            kernel_callchain: false,
            switch_event: Some(77),
            switch_ring: false,
        };
        let with_id = |id: u64| {
            let mut rec = sample_record(&[], &[0; 8], 8);
            // PERF_SAMPLE_IDENTIFIER comes first in the body.
            rec.splice(8..8, id.to_ne_bytes());
            let size = rec.len() as u16;
            rec[6..8].copy_from_slice(&size.to_ne_bytes());
            rec
        };
        let kind = |rec: &[u8]| match parse(rec, wall) {
            Some(Record::Sample { sample, .. }) => {
                assert_eq!((sample.pid, sample.tid, sample.time), (7, 8, 99));
                sample.kind
            }
            other => panic!("expected a sample, got {other:?}"),
        };
        assert_eq!(kind(&with_id(77)), SampleKind::SwitchOut);
        assert_eq!(kind(&with_id(76)), SampleKind::OnCpu);
        let switch = |misc: u32| {
            let mut rec = RecordBuilder::default()
                .u32(7)
                .u32(8)
                .u64(123)
                .u64(77)
                .finish(sys::PERF_RECORD_SWITCH);
            rec[4..6].copy_from_slice(&(misc as u16).to_ne_bytes());
            rec
        };
        assert_switch_records(&switch, wall);
        // Cut short: malformed, not a panic.
        let mut short = switch(0)[..16].to_vec();
        short[6..8].copy_from_slice(&16u16.to_ne_bytes());
        assert!(parse(&short, wall).is_none());
        // Outside wall mode the switch records are not ours to read.
        assert!(matches!(
            parse(&switch(0), layout(false)),
            Some(Record::Other)
        ));
    }

    #[test]
    fn per_cpu_wall_mode_reads_register_only_switch_samples_and_cpu_wide_switches() {
        let wall = RecordLayout {
            kernel_callchain: true,
            switch_event: None,
            switch_ring: true,
        };
        // TID, TIME, REGS_USER: no identifier, callchain or stack.
        let mut b = RecordBuilder::default().u32(7).u32(8).u64(99).u64(2);
        for r in 1..=REG_COUNT as u64 {
            b = b.u64(r);
        }
        let left = b.finish(sys::PERF_RECORD_SAMPLE);
        match parse(&left, wall) {
            Some(Record::Sample { sample, callchain }) => {
                assert_eq!(sample.kind, SampleKind::LeftCpu);
                assert_eq!((sample.tid, sample.time, sample.regs.sp), (8, 99, 8));
                assert!(sample.stack.is_empty() && callchain.is_empty());
            }
            other => panic!("expected a sample, got {other:?}"),
        }
        // A record one field short is malformed.
        let mut short = left[..left.len() - 8].to_vec();
        short[6..8].copy_from_slice(&((left.len() - 8) as u16).to_ne_bytes());
        assert!(parse(&short, wall).is_none());
        // next_prev pid/tid (the task that left), then the trailer of the one that came.
        let switch = |misc: u32| {
            let mut rec = RecordBuilder::default()
                .u32(5)
                .u32(6)
                .u32(7)
                .u32(8)
                .u64(123)
                .finish(sys::PERF_RECORD_SWITCH_CPU_WIDE);
            rec[4..6].copy_from_slice(&(misc as u16).to_ne_bytes());
            rec
        };
        assert_switch_records(&switch, wall);
        let exit = RecordBuilder::default()
            .u32(7)
            .u32(1)
            .u32(8)
            .u32(7)
            .u64(456)
            .u32(7)
            .u32(8)
            .u64(456)
            .finish(sys::PERF_RECORD_EXIT);
        assert!(matches!(
            parse(&exit, wall),
            Some(Record::Task {
                exit: true,
                pid: 7,
                tid: 8,
                time: 456
            })
        ));
        assert!(parse(&exit[..exit.len() - 24], wall).is_none());
    }
}
