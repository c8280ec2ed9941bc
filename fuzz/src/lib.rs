//! Input encodings shared by the fuzz targets and the seed generator (`src/bin/gen_seeds.rs`).

use jvmperf::hotspot::libjvm::VMSTRUCTS_SYMBOLS;
use jvmperf::process::SnapshotMemory;
use std::collections::HashMap;

/// The `vmstructs` target's input, decoded:
///
/// ```text
/// 24 × u64   the VMStructs symbols' addresses, in `VMSTRUCTS_SYMBOLS` order (0: not exported)
/// u8         n, the number of probes (taken modulo 9)
/// n × u64    probe addresses: pcs for `CodeCache::find_blob`, blobs, `Method*`s
/// then       memory regions, each `u64 addr, u32 len, len bytes` (the last one may be cut short)
/// ```
///
/// Everything is little-endian; missing bytes read as zero, so every input decodes.
pub struct VmInput {
    pub symbols: HashMap<String, u64>,
    pub probes: Vec<u64>,
    pub mem: SnapshotMemory,
}

pub const MAX_PROBES: usize = 8;

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let head = self.take(8);
        b[..head.len()].copy_from_slice(head);
        u64::from_le_bytes(b)
    }
    fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        let head = self.take(4);
        b[..head.len()].copy_from_slice(head);
        u32::from_le_bytes(b)
    }
}

impl VmInput {
    pub fn decode(data: &[u8]) -> VmInput {
        let mut b = Bytes(data);
        let mut symbols = HashMap::new();
        for name in VMSTRUCTS_SYMBOLS {
            let addr = b.u64();
            if addr != 0 {
                symbols.insert(name.to_string(), addr);
            }
        }
        let n = usize::from(b.take(1).first().copied().unwrap_or(0)) % (MAX_PROBES + 1);
        let probes = (0..n).map(|_| b.u64()).collect();
        let mut mem = SnapshotMemory::new();
        while !b.0.is_empty() {
            let addr = b.u64();
            let len = b.u32() as usize;
            mem.add(addr, b.take(len).to_vec());
        }
        VmInput {
            symbols,
            probes,
            mem,
        }
    }

    /// The inverse of [`VmInput::decode`], for seeds. `regions`: (address, bytes).
    pub fn encode(
        symbols: &HashMap<String, u64>,
        probes: &[u64],
        regions: &[(u64, &[u8])],
    ) -> Vec<u8> {
        assert!(probes.len() <= MAX_PROBES);
        let mut out = Vec::new();
        for name in VMSTRUCTS_SYMBOLS {
            let addr = symbols.get(*name).copied().unwrap_or(0);
            out.extend_from_slice(&addr.to_le_bytes());
        }
        out.push(probes.len() as u8);
        for p in probes {
            out.extend_from_slice(&p.to_le_bytes());
        }
        for (addr, bytes) in regions {
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        out
    }
}
