//! The mmap'd perf ring buffer of one event: a header page, then 2^n data pages that the kernel
//! fills between our `data_tail` and its `data_head`.

use memmap2::{MmapOptions, MmapRaw};
use perf_event_open_sys::bindings::perf_event_mmap_page;
use std::io;
use std::mem::offset_of;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

const HEADER_SIZE: usize = 8;

pub(super) struct RingBuffer {
    map: MmapRaw,
    data_offset: usize,
    /// A power of two.
    data_size: usize,
}

/// What one [`RingBuffer::drain`] consumed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Drained {
    pub records: u64,
    pub bytes: u64,
    /// Bytes in the buffer when the drain began.
    pub fill: u64,
    /// The buffer held something no valid record stream could (a bad size or head); the rest
    /// of it was skipped.
    pub resynced: bool,
}

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

impl RingBuffer {
    /// Maps the buffer of a perf event fd: one header page plus `data_pages` (a power of two).
    pub fn map(fd: &impl AsRawFd, data_pages: usize) -> io::Result<RingBuffer> {
        let page = page_size();
        let map = MmapOptions::new()
            .len((data_pages + 1) * page)
            .map_raw(fd.as_raw_fd())?;
        Ok(RingBuffer::from_map(map, page))
    }

    /// Takes the data area's place from the header page (Linux ≥ 4.1), else right after it.
    fn from_map(map: MmapRaw, page: usize) -> RingBuffer {
        let default_size = map.len() - page;
        let header = map.as_ptr() as *const perf_event_mmap_page;
        // SAFETY: the mapping starts with the header page; these fields are plain u64s the kernel
        // writes once at mmap time.
        let (offset, size) = unsafe {
            (
                std::ptr::addr_of!((*header).data_offset).read_volatile(),
                std::ptr::addr_of!((*header).data_size).read_volatile(),
            )
        };
        let (data_offset, data_size) = match (usize::try_from(offset), usize::try_from(size)) {
            (Ok(o), Ok(s))
                if s.is_power_of_two()
                    && o >= page
                    && o.checked_add(s).is_some_and(|end| end <= map.len()) =>
            {
                (o, s)
            }
            _ => (page, default_size),
        };
        RingBuffer {
            map,
            data_offset,
            data_size,
        }
    }

    pub fn data_size(&self) -> usize {
        self.data_size
    }

    fn header_u64(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is the offset of a u64 field of the header page, which is 8-aligned
        // and shared with the kernel for as long as the mapping lives.
        unsafe { &*(self.map.as_ptr().add(offset) as *const AtomicU64) }
    }

    fn head(&self) -> &AtomicU64 {
        self.header_u64(offset_of!(perf_event_mmap_page, data_head))
    }

    fn tail(&self) -> &AtomicU64 {
        self.header_u64(offset_of!(perf_event_mmap_page, data_tail))
    }

    /// `len` bytes of the data area at `offset`, without wrapping.
    ///
    /// Callers only ask for bytes between our tail and the head read with Acquire: the kernel
    /// does not write there until we move the tail past them.
    fn data(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset + len <= self.data_size);
        // SAFETY: in bounds of the mapping (checked above); see the doc comment for why nothing
        // writes these bytes while the slice lives.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.data_offset + offset), len) }
    }

    /// `len` bytes at ring position `pos`: borrowed when contiguous, else copied into `scratch`.
    fn bytes_at<'a>(&'a self, pos: u64, len: usize, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        let offset = (pos as usize) & (self.data_size - 1);
        let first = len.min(self.data_size - offset);
        if first == len {
            return self.data(offset, len);
        }
        scratch.clear();
        scratch.extend_from_slice(self.data(offset, first));
        scratch.extend_from_slice(self.data(0, len - first));
        scratch
    }

    /// Hands each complete record that is in the buffer now to `on_record`, then frees its space.
    /// A record that wraps around the end of the buffer is copied into `scratch` first.
    pub fn drain(&self, scratch: &mut Vec<u8>, mut on_record: impl FnMut(&[u8])) -> Drained {
        let head = self.head().load(Ordering::Acquire);
        // Only we write the tail.
        let mut tail = self.tail().load(Ordering::Relaxed);
        let mut out = Drained {
            fill: head.wrapping_sub(tail),
            ..Drained::default()
        };
        if head.wrapping_sub(tail) > self.data_size as u64 {
            out.resynced = true;
            self.tail().store(head, Ordering::Release);
            return out;
        }
        while tail != head {
            let available = head.wrapping_sub(tail);
            let mut header = [0u8; HEADER_SIZE];
            if available < HEADER_SIZE as u64 {
                out.resynced = true;
                break;
            }
            header.copy_from_slice(self.bytes_at(tail, HEADER_SIZE, scratch));
            let size = u16::from_ne_bytes([header[6], header[7]]);
            if usize::from(size) < HEADER_SIZE || u64::from(size) > available {
                out.resynced = true;
                break;
            }
            on_record(self.bytes_at(tail, usize::from(size), scratch));
            tail = tail.wrapping_add(u64::from(size));
            self.tail().store(tail, Ordering::Release);
            out.records += 1;
            out.bytes += u64::from(size);
        }
        if out.resynced {
            self.tail().store(head, Ordering::Release);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::RecordBuilder;
    use super::*;

    const PAGE: usize = 4096;

    /// An anonymous mapping laid out like a perf buffer with one data page, whose header holds
    /// no data_offset/data_size (as before Linux 4.1).
    fn fake_ring() -> RingBuffer {
        let map = MmapOptions::new().len(2 * PAGE).map_anon().unwrap();
        RingBuffer::from_map(MmapRaw::from(map), PAGE)
    }

    /// Writes `bytes` at ring position `pos` (wrapping) and moves the head past them.
    fn produce(ring: &RingBuffer, pos: u64, bytes: &[u8]) -> u64 {
        for (i, b) in bytes.iter().enumerate() {
            let at = ring.data_offset + ((pos as usize + i) % ring.data_size);
            // SAFETY: `at` is inside the test mapping and no slice of it is alive.
            unsafe { *ring.map.as_mut_ptr().add(at) = *b };
        }
        let end = pos + bytes.len() as u64;
        ring.head().store(end, Ordering::Release);
        end
    }

    fn record(fill: u8, len: usize) -> Vec<u8> {
        RecordBuilder::default()
            .bytes(&vec![fill; len - 8])
            .finish(99)
    }

    fn drain_all(ring: &RingBuffer) -> (Drained, Vec<Vec<u8>>) {
        let mut scratch = Vec::new();
        let mut seen = Vec::new();
        let d = ring.drain(&mut scratch, |r| seen.push(r.to_vec()));
        (d, seen)
    }

    #[test]
    fn records_that_wrap_around_are_reassembled() {
        let ring = fake_ring();
        assert_eq!(ring.data_size(), PAGE);
        // Start 24 bytes before the end so the second record straddles the wrap.
        let start = (PAGE - 24) as u64;
        ring.tail().store(start, Ordering::Relaxed);
        let (a, b, c) = (record(1, 16), record(2, 64), record(3, 32));
        let mut pos = produce(&ring, start, &a);
        pos = produce(&ring, pos, &b);
        produce(&ring, pos, &c);
        let (d, seen) = drain_all(&ring);
        assert_eq!(seen, [a, b, c]);
        assert_eq!((d.records, d.bytes, d.resynced), (3, 112, false));
        assert_eq!(
            ring.tail().load(Ordering::Relaxed),
            ring.head().load(Ordering::Relaxed)
        );
    }

    #[test]
    fn a_header_split_by_the_wrap_is_read() {
        let ring = fake_ring();
        let start = (PAGE - 4) as u64;
        ring.tail().store(start, Ordering::Relaxed);
        let r = record(7, 24);
        produce(&ring, start, &r);
        assert_eq!(drain_all(&ring).1, [r]);
    }

    #[test]
    fn a_header_whose_data_area_overflows_is_not_trusted() {
        let map = MmapOptions::new().len(2 * PAGE).map_anon().unwrap();
        let header = map.as_ptr() as *mut perf_event_mmap_page;
        // SAFETY: the anonymous mapping is two pages, larger than the header struct.
        unsafe {
            (*header).data_offset = u64::MAX - 100;
            (*header).data_size = 4096;
        }
        let ring = RingBuffer::from_map(MmapRaw::from(map), PAGE);
        assert_eq!((ring.data_offset, ring.data_size), (PAGE, PAGE));
    }

    #[test]
    fn bad_sizes_skip_to_the_head_instead_of_looping_or_panicking() {
        for size in [0u16, 4, 4000] {
            let ring = fake_ring();
            let mut bad = record(0, 16);
            bad[6..8].copy_from_slice(&size.to_ne_bytes());
            let head = produce(&ring, 0, &bad);
            let (d, seen) = drain_all(&ring);
            assert!(d.resynced && seen.is_empty(), "size {size}");
            assert_eq!(ring.tail().load(Ordering::Relaxed), head);
        }
        // A head further ahead than the buffer is large.
        let ring = fake_ring();
        ring.head().store(10 * PAGE as u64, Ordering::Relaxed);
        assert!(drain_all(&ring).0.resynced);
        // An empty buffer.
        let ring = fake_ring();
        assert_eq!(drain_all(&ring).0, Drained::default());
    }
}
