//! The kernel's signal frame on x86_64 Linux: a signal handler returns into the sigreturn
//! trampoline, and the interrupted code's registers are in the `ucontext` the kernel saved on the
//! stack. Unwinding goes on from those registers, so code interrupted by a signal handler
//! (HotSpot's for implicit null checks and other traps, another profiler's timer signal) keeps
//! its callers.

use super::modules::Module;
use object::{Object, ObjectSegment};
use std::mem::offset_of;

/// The trampoline every x86_64 libc registers as `sa_restorer`, `__restore_rt`:
/// `mov $15 (__NR_rt_sigreturn), %rax; syscall` (glibc
/// `sysdeps/unix/sysv/linux/x86_64/libc_sigaction.c`, musl `src/signal/x86_64/restore.s`; gdb's
/// `amd64_linux_sigtramp_code` recognises it by the same bytes).
pub const SIGRETURN_CODE: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Whether `module` may hold the trampoline: the C library (glibc's `libc.so.6`, musl's
/// `ld-musl-*.so.1` or `libc.musl-*.so.1`) or the vDSO.
fn may_hold_trampoline(module: &Module) -> bool {
    let name = module.name.as_str();
    name.starts_with("libc.so")
        || name.starts_with("libc-")
        || name.contains("musl")
        || name == "[vdso]"
}

/// Addresses in the target of every sigreturn trampoline in `module`, found by their code in
/// the module's executable segments.
pub fn trampolines(module: &Module) -> Vec<u64> {
    if !may_hold_trampoline(module) {
        return Vec::new();
    }
    let Ok(elf) = object::File::parse(module.data()) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for seg in elf.segments() {
        let executable = matches!(seg.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0);
        let Ok(bytes) = seg.data() else { continue };
        if !executable {
            continue;
        }
        found.extend(
            bytes
                .windows(SIGRETURN_CODE.len())
                .enumerate()
                .filter(|(_, w)| *w == SIGRETURN_CODE)
                .map(|(i, _)| {
                    seg.address()
                        .wrapping_add(i as u64)
                        .wrapping_add(module.bias)
                }),
        );
    }
    found
}

/// The registers of the interrupted code that unwinding needs, including what HotSpot's
/// interpreter keeps in registers (rbx: `Method*` at entry, r13: bcp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted {
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
    pub bx: u64,
    pub r13: u64,
}

/// The registers saved in the signal frame whose trampoline is about to run with stack pointer
/// `sp`. The kernel's `struct rt_sigframe` (Linux `arch/x86/include/asm/sigframe.h`) starts
/// with the handler's return address, which the handler's `ret` popped: `sp` is the address of
/// its `struct ucontext`, laid out as glibc's `ucontext_t` (`uc_mcontext.gregs`, indexed by
/// `REG_*`).
pub fn interrupted(
    sp: u64,
    read_stack: &mut dyn FnMut(u64) -> Result<u64, ()>,
) -> Option<Interrupted> {
    let gregs = sp.checked_add(
        (offset_of!(libc::ucontext_t, uc_mcontext) + offset_of!(libc::mcontext_t, gregs)) as u64,
    )?;
    let mut reg = |index: libc::c_int| read_stack(gregs.checked_add(8 * index as u64)?).ok();
    Some(Interrupted {
        pc: reg(libc::REG_RIP)?,
        sp: reg(libc::REG_RSP)?,
        bp: reg(libc::REG_RBP)?,
        bx: reg(libc::REG_RBX)?,
        r13: reg(libc::REG_R13)?,
    })
}
