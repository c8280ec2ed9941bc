//! The one profile model every output reads: interned frames and stacks, and samples with their
//! thread and CLOCK_MONOTONIC time.

use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// Compiled Java code (the nmethod's own method).
    Jit,
    /// A Java method inlined into compiled code.
    Inlined,
    Interpreted,
    Native,
    Kernel,
    /// HotSpot stubs, adapters, the interpreter's own code.
    Stub,
    /// The synthetic root frame naming a thread (`--threads`).
    Thread,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// `package.Class.method` for Java, the symbol for native code.
    pub name: String,
    pub kind: FrameKind,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Bytecode index for Java frames (−1 when unknown).
    pub bci: Option<i32>,
    /// JVM method descriptor for Java frames, e.g. `(IJ)V`.
    pub signature: Option<String>,
    /// Native module (file name) for native frames.
    pub module: Option<String>,
}

pub type FrameId = u32;
pub type StackId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub time: u64,
    pub tid: u32,
    pub stack: StackId,
}

#[derive(Debug, Default, Clone)]
pub struct Profile {
    pub frames: Vec<Frame>,
    frame_ids: HashMap<Frame, FrameId>,
    /// Each stack root first, leaf last.
    pub stacks: Vec<Vec<FrameId>>,
    stack_ids: HashMap<Vec<FrameId>, StackId>,
    pub samples: Vec<Sample>,
    pub thread_names: HashMap<u32, String>,
    /// Sampling period in ns (1e9 / frequency).
    pub period_ns: u64,
}

impl Profile {
    pub fn intern_frame(&mut self, frame: Frame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(&frame) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.frames.push(frame.clone());
        self.frame_ids.insert(frame, id);
        id
    }

    pub fn intern_stack(&mut self, root_to_leaf: Vec<FrameId>) -> StackId {
        if let Some(&id) = self.stack_ids.get(&root_to_leaf) {
            return id;
        }
        let id = self.stacks.len() as StackId;
        self.stacks.push(root_to_leaf.clone());
        self.stack_ids.insert(root_to_leaf, id);
        id
    }

    pub fn thread_name(&self, tid: u32) -> String {
        self.thread_names
            .get(&tid)
            .cloned()
            .unwrap_or_else(|| format!("tid-{tid}"))
    }
}
