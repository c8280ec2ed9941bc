//! Reading (and, rarely, writing) the target's memory. Everything above this layer goes through
//! [`TargetMemory`], so the HotSpot readers can be tested on memory snapshots.

use std::collections::BTreeMap;
use std::io::IoSliceMut;

/// A failed read: the address range was not readable in the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemError {
    pub addr: u64,
    pub len: usize,
    pub cause: MemFault,
}

/// Why a read failed, from `process_vm_readv`'s errno (see its man page): only `Denied` is a
/// matter of rights; a bad address in a readable process is `Unmapped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemFault {
    /// Nothing readable there (EFAULT, a short read, or outside a snapshot).
    Unmapped,
    /// We may not read the process's memory at all (EPERM: ptrace access mode check).
    Denied,
    /// The process is gone (ESRCH).
    NoProcess,
}

impl MemError {
    pub fn unmapped(addr: u64, len: usize) -> Self {
        MemError {
            addr,
            len,
            cause: MemFault::Unmapped,
        }
    }
}

impl std::fmt::Display for MemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.cause {
            MemFault::Unmapped => "not mapped in the target",
            MemFault::Denied => "permission denied",
            MemFault::NoProcess => "the process exited",
        };
        write!(
            f,
            "cannot read {} bytes at {:#x}: {why}",
            self.len, self.addr
        )
    }
}

impl std::error::Error for MemError {}

/// Longest C string we ever read from the target (HotSpot names are far shorter).
pub const MAX_CSTR: usize = 4096;

pub trait TargetMemory {
    /// Fill `buf` from `addr`, entirely or not at all.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError>;

    fn read_u8(&self, addr: u64) -> Result<u8, MemError> {
        let mut b = [0u8; 1];
        self.read(addr, &mut b)?;
        Ok(b[0])
    }
    fn read_u16(&self, addr: u64) -> Result<u16, MemError> {
        let mut b = [0u8; 2];
        self.read(addr, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }
    fn read_u32(&self, addr: u64) -> Result<u32, MemError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn read_u64(&self, addr: u64) -> Result<u64, MemError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// A NUL-terminated string of at most `MAX_CSTR` bytes, read page by page so a string that ends
    /// just before an unmapped page is still readable.
    fn read_cstr(&self, addr: u64) -> Result<String, MemError> {
        let mut out = Vec::new();
        let mut at = addr;
        let mut buf = [0u8; 256];
        while out.len() < MAX_CSTR {
            let to_page_end = (0x1000 - (at & 0xfff)) as usize;
            let mut n = to_page_end.min(buf.len()).min(MAX_CSTR - out.len());
            // A shorter read may still succeed where a readable region ends mid-chunk.
            while self.read(at, &mut buf[..n]).is_err() {
                if n == 1 {
                    return Err(MemError::unmapped(at, 1));
                }
                n = (n / 16).max(1);
            }
            let chunk = &buf[..n];
            if let Some(nul) = chunk.iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..nul]);
                return Ok(String::from_utf8_lossy(&out).into_owned());
            }
            out.extend_from_slice(chunk);
            // A string running into the end of the address space has no terminator.
            at = at
                .checked_add(n as u64)
                .ok_or(MemError::unmapped(addr, MAX_CSTR))?;
        }
        Err(MemError::unmapped(addr, MAX_CSTR))
    }
}

impl<M: TargetMemory + ?Sized> TargetMemory for &M {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        (**self).read(addr, buf)
    }
}

/// The memory of a live process, through `process_vm_readv` (needs PTRACE_MODE_ATTACH rights).
#[derive(Debug, Clone, Copy)]
pub struct ProcessMemory {
    pub pid: u32,
}

impl TargetMemory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let fail = MemError::unmapped(addr, buf.len());
        if buf.is_empty() {
            return Ok(());
        }
        if addr == 0 || addr.checked_add(buf.len() as u64).is_none() {
            return Err(fail);
        }
        let len = buf.len();
        let remote = [nix::sys::uio::RemoteIoVec {
            base: addr as usize,
            len,
        }];
        let mut local = [IoSliceMut::new(buf)];
        match nix::sys::uio::process_vm_readv(
            nix::unistd::Pid::from_raw(self.pid as i32),
            &mut local,
            &remote,
        ) {
            Ok(n) if n == len => Ok(()),
            Ok(_) => Err(fail),
            Err(e) => Err(MemError {
                cause: fault_of(e),
                ..fail
            }),
        }
    }
}

fn fault_of(e: nix::errno::Errno) -> MemFault {
    match e {
        nix::errno::Errno::EPERM | nix::errno::Errno::EACCES => MemFault::Denied,
        nix::errno::Errno::ESRCH => MemFault::NoProcess,
        _ => MemFault::Unmapped,
    }
}

impl ProcessMemory {
    /// Write into the target. Used only to switch HotSpot flags that are read at compile time.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let fail = MemError::unmapped(addr, data.len());
        let remote = [nix::sys::uio::RemoteIoVec {
            base: addr as usize,
            len: data.len(),
        }];
        let local = [std::io::IoSlice::new(data)];
        match nix::sys::uio::process_vm_writev(
            nix::unistd::Pid::from_raw(self.pid as i32),
            &local,
            &remote,
        ) {
            Ok(n) if n == data.len() => Ok(()),
            Ok(_) => Err(fail),
            Err(e) => Err(MemError {
                cause: fault_of(e),
                ..fail
            }),
        }
    }
}

/// A set of memory regions captured from a real process, for tests and fuzzing.
///
/// File format (all little-endian): repeated `u64 addr, u64 len, len bytes`.
#[derive(Debug, Default, Clone)]
pub struct SnapshotMemory {
    regions: BTreeMap<u64, Vec<u8>>,
}

impl SnapshotMemory {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, addr: u64, bytes: Vec<u8>) {
        self.regions.insert(addr, bytes);
    }

    /// Parse the snapshot format; trailing garbage or a truncated region is an error.
    pub fn from_bytes(mut data: &[u8]) -> Option<Self> {
        let mut snap = SnapshotMemory::new();
        while !data.is_empty() {
            let addr = u64::from_le_bytes(data.get(0..8)?.try_into().ok()?);
            let len =
                usize::try_from(u64::from_le_bytes(data.get(8..16)?.try_into().ok()?)).ok()?;
            let bytes = data.get(16..16usize.checked_add(len)?)?.to_vec();
            snap.add(addr, bytes);
            data = &data[16 + len..];
        }
        Some(snap)
    }

    /// Take out the region that starts at `addr`.
    pub fn remove(&mut self, addr: u64) -> Option<Vec<u8>> {
        self.regions.remove(&addr)
    }

    /// The regions, by address.
    pub fn regions(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.regions.iter().map(|(&a, b)| (a, b.as_slice()))
    }

    /// The same bytes in as few regions as possible: overlapping and adjacent regions joined, so
    /// that every read inside what was recorded succeeds (a lookup finds only the region starting
    /// at or before the address). Where regions overlap, the bytes of the lower one are kept.
    pub fn merged(&self) -> SnapshotMemory {
        let mut out = SnapshotMemory::new();
        let mut current: Option<(u64, Vec<u8>)> = None;
        for (&addr, bytes) in &self.regions {
            match &mut current {
                Some((start, joined)) if addr <= *start + joined.len() as u64 => {
                    let end = *start + joined.len() as u64;
                    let skip = (end - addr) as usize;
                    if let Some(rest) = bytes.get(skip..) {
                        joined.extend_from_slice(rest);
                    }
                }
                _ => {
                    if let Some((start, joined)) = current.take() {
                        out.add(start, joined);
                    }
                    current = Some((addr, bytes.clone()));
                }
            }
        }
        if let Some((start, joined)) = current {
            out.add(start, joined);
        }
        out
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (addr, bytes) in &self.regions {
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        out
    }
}

impl TargetMemory for SnapshotMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let fail = MemError::unmapped(addr, buf.len());
        let (start, bytes) = self.regions.range(..=addr).next_back().ok_or(fail)?;
        let off = usize::try_from(addr - start).map_err(|_| fail)?;
        let src = bytes
            .get(off..off.checked_add(buf.len()).ok_or(fail)?)
            .ok_or(fail)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Reads whole pages once and serves later reads from them: for data that does not change while we
/// look at it (VMStructs tables and their strings), this turns thousands of syscalls into dozens.
pub struct PageCachedMemory<M> {
    inner: M,
    pages: std::cell::RefCell<std::collections::HashMap<u64, Option<Box<[u8]>>>>,
}

const PAGE: u64 = 4096;

impl<M: TargetMemory> PageCachedMemory<M> {
    pub fn new(inner: M) -> Self {
        PageCachedMemory {
            inner,
            pages: Default::default(),
        }
    }

    fn with_page<T>(&self, page: u64, f: impl FnOnce(&[u8]) -> T) -> Option<T> {
        let mut pages = self.pages.borrow_mut();
        let entry = pages.entry(page).or_insert_with(|| {
            let mut buf = vec![0u8; PAGE as usize].into_boxed_slice();
            self.inner.read(page, &mut buf).ok().map(|_| buf)
        });
        entry.as_deref().map(f)
    }
}

impl<M: TargetMemory> TargetMemory for PageCachedMemory<M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let fail = MemError::unmapped(addr, buf.len());
        let mut done = 0usize;
        while done < buf.len() {
            let at = addr.checked_add(done as u64).ok_or(fail)?;
            let page = at & !(PAGE - 1);
            let off = (at - page) as usize;
            let n = (PAGE as usize - off).min(buf.len() - done);
            let dst = &mut buf[done..done + n];
            self.with_page(page, |p| dst.copy_from_slice(&p[off..off + n]))
                .ok_or(fail)?;
            done += n;
        }
        Ok(())
    }
}

/// Records every successful read of an inner memory, to capture test fixtures from a live JVM.
pub struct RecordingMemory<M> {
    pub inner: M,
    pub seen: std::cell::RefCell<SnapshotMemory>,
}

impl<M: TargetMemory> RecordingMemory<M> {
    pub fn new(inner: M) -> Self {
        RecordingMemory {
            inner,
            seen: Default::default(),
        }
    }

    /// What was read so far, in as few regions as possible.
    pub fn snapshot(&self) -> SnapshotMemory {
        self.seen.borrow().merged()
    }
}

impl<M: TargetMemory> TargetMemory for RecordingMemory<M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.inner.read(addr, buf)?;
        self.seen.borrow_mut().add(addr, buf.to_vec());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_inside_regions_only() {
        let mut s = SnapshotMemory::new();
        s.add(0x1000, b"hello\0world\0".to_vec());
        s.add(0x2000, b"unterminated".to_vec());
        assert_eq!(s.read_cstr(0x1000).unwrap(), "hello");
        assert_eq!(s.read_u8(0x1006).unwrap(), b'w');
        assert!(s.read_u64(0x1008).is_err(), "crosses the region end");
        assert!(s.read_cstr(0x2000).is_err(), "no terminator");
        assert!(s.read_u8(0xfff).is_err());
        let round = SnapshotMemory::from_bytes(&s.to_bytes()).unwrap();
        assert_eq!(round.read_cstr(0x1006).unwrap(), "world");
        assert!(SnapshotMemory::from_bytes(&[1, 2, 3]).is_none());
    }

    /// Reads recorded one by one become few regions, and everything recorded stays readable.
    #[test]
    fn recorded_reads_are_merged_into_regions() {
        let mut live = SnapshotMemory::new();
        live.add(0x1000, (0..64u8).collect());
        live.add(0x2000, vec![0xaa; 16]);
        let rec = RecordingMemory::new(&live);
        let mut b8 = [0u8; 8];
        let mut b4 = [0u8; 4];
        rec.read(0x1000, &mut b8).unwrap();
        rec.read(0x1004, &mut b8).unwrap(); // overlaps the first
        rec.read(0x100c, &mut b4).unwrap(); // adjacent
        rec.read(0x1020, &mut b4).unwrap(); // a gap before it
        rec.read(0x2000, &mut b4).unwrap();
        assert!(rec.read(0x3000, &mut b4).is_err());
        let snap = rec.snapshot();
        let regions: Vec<(u64, usize)> = snap.regions().map(|(a, b)| (a, b.len())).collect();
        assert_eq!(regions, [(0x1000, 16), (0x1020, 4), (0x2000, 4)]);
        assert_eq!(
            snap.read_u64(0x1006).unwrap(),
            live.read_u64(0x1006).unwrap()
        );
        assert!(snap.read_u8(0x1010).is_err(), "never read");
        let mut round = SnapshotMemory::from_bytes(&snap.to_bytes()).unwrap();
        assert_eq!(round.remove(0x1020), Some(vec![32, 33, 34, 35]));
        assert!(round.read_u8(0x1020).is_err());
    }

    #[test]
    fn page_cache_serves_reads_across_pages() {
        let mut s = SnapshotMemory::new();
        s.add(0x1000, (0..8192u32).map(|i| i as u8).collect());
        let c = PageCachedMemory::new(s);
        let mut buf = [0u8; 16];
        c.read(0x1ff8, &mut buf).unwrap();
        assert_eq!(buf[0], 0xf8);
        assert_eq!(buf[8], 0x00);
        assert!(
            c.read(0x2ff8, &mut buf).is_err(),
            "second page is beyond the snapshot"
        );
    }

    #[test]
    fn own_memory_through_process_vm_readv() {
        let data = *b"jvmperf\0";
        let m = ProcessMemory {
            pid: std::process::id(),
        };
        assert_eq!(m.read_cstr(data.as_ptr() as u64).unwrap(), "jvmperf");
        assert_eq!(m.read_u64(8).unwrap_err().cause, MemFault::Unmapped);
    }

    /// A bad address is not a lack of rights: only EPERM says "permission".
    #[test]
    fn read_failures_name_their_cause() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = ProcessMemory { pid };
        let e = gone.read_u64(0x1000).unwrap_err();
        assert_eq!(e.cause, MemFault::NoProcess);
        assert!(e.to_string().contains("exited"), "{e}");
        let unmapped = ProcessMemory {
            pid: std::process::id(),
        }
        .read_u64(0x170)
        .unwrap_err();
        assert!(unmapped.to_string().contains("not mapped"), "{unmapped}");
        assert_eq!(fault_of(nix::errno::Errno::EPERM), MemFault::Denied);
        assert_eq!(fault_of(nix::errno::Errno::EFAULT), MemFault::Unmapped);
    }
}
