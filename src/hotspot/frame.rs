//! HotSpot's x86_64 frame layout facts that VMStructs does not export: interpreter frame slots,
//! the instructions of a compiled frame's epilogue, and where the call stub returns to.

use super::vmstructs::VmStructs;
use crate::process::TargetMemory;

/// Interpreter frame slots in words from rbp, x86_64, JDK 9+ (`frame_x86.hpp`; VMStructs exports
/// only the sender-sp and last-sp slots).
pub const INTERP_SENDER_SP: i64 = -1;
pub const INTERP_METHOD: i64 = -3;
pub const INTERP_BCP: i64 = -8;

/// Code bytes at a top frame's pc that tell where in its epilogue a compiled frame is.
pub const EPILOGUE_BYTES: usize = 3;

/// Where in its epilogue a compiled frame's top pc is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// At `ret`, or at the return poll after the frame was popped (`cmp rsp,[r15+d]` / `ja`,
    /// `mov r10,[r15+d]`: `MacroAssembler::safepoint_poll` in `macroAssembler_x86.cpp`): the
    /// return address is at sp.
    FramePopped,
    /// At `pop rbp`: the frame is gone but the saved rbp is still at sp.
    PopRbp,
    /// Anywhere else.
    Body,
}

pub fn epilogue_at(code: [u8; EPILOGUE_BYTES]) -> Epilogue {
    match code {
        [0xc3, ..] | [0x49, 0x3b, 0xa7] | [0x0f, 0x87, _] | [0x4d, 0x8b, 0x97] => {
            Epilogue::FramePopped
        }
        [0x5d, ..] => Epilogue::PopRbp,
        _ => Epilogue::Body,
    }
}

/// Where a top frame in a stub without a fixed frame size is, by the code at its pc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StubFrame {
    /// At `push rbp` (the entry of an rbp-framed stub) or at `ret`: the return address is at sp.
    None,
    /// At `mov rbp,rsp` right after `push rbp`: the saved rbp is at sp, the return address
    /// above it.
    RbpPushed,
    /// Anywhere else: rbp-framed, or a leaf stub without a frame.
    Body,
}

pub fn stub_frame_at(code: [u8; EPILOGUE_BYTES]) -> StubFrame {
    match code {
        [0x55, ..] | [0xc3, ..] => StubFrame::None,
        // `mov rbp,rsp` in both encodings (8b /r as HotSpot's assembler emits it, 89 /r).
        [0x48, 0x8b, 0xec] | [0x48, 0x89, 0xe5] => StubFrame::RbpPushed,
        _ => StubFrame::Body,
    }
}

/// The return address inside the call stub (`StubRoutines::_call_stub_return_address`): Java
/// frames called from native code return there.
pub fn call_stub_return_address(vs: &VmStructs, mem: &(impl TargetMemory + ?Sized)) -> Option<u64> {
    let slot = vs.address("StubRoutines", "_call_stub_return_address")?;
    mem.read_u64(slot).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epilogue_instructions() {
        assert_eq!(epilogue_at([0xc3, 0, 0]), Epilogue::FramePopped);
        assert_eq!(epilogue_at([0x49, 0x3b, 0xa7]), Epilogue::FramePopped);
        assert_eq!(epilogue_at([0x0f, 0x87, 0x12]), Epilogue::FramePopped);
        assert_eq!(epilogue_at([0x5d, 0xc3, 0]), Epilogue::PopRbp);
        assert_eq!(epilogue_at([0x48, 0x89, 0xe5]), Epilogue::Body);
    }

    #[test]
    fn stub_prologue_instructions() {
        assert_eq!(stub_frame_at([0x55, 0x48, 0x8b]), StubFrame::None);
        assert_eq!(stub_frame_at([0xc3, 0, 0]), StubFrame::None);
        assert_eq!(stub_frame_at([0x48, 0x8b, 0xec]), StubFrame::RbpPushed);
        assert_eq!(stub_frame_at([0x48, 0x89, 0xe5]), StubFrame::RbpPushed);
        assert_eq!(stub_frame_at([0xc9, 0xc3, 0]), StubFrame::Body);
    }
}
