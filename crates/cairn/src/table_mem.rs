//! Memory of the in-memory hash tables' parts ([`crate::hash_index`]): zero-filled arrays
//! that, when large, live in a mapping of their own advised for transparent huge pages.
//!
//! A lookup in a table of gigabytes (100 million files: two tables of ~2 GB) lands on a
//! random cache line; with 4 KiB pages it also misses the TLB, and the page walk that
//! follows (two-dimensional under a hypervisor) costs about as much as the miss itself.
//! Measured on the 2-core VM the benchmarks run on, a chain of dependent random reads over
//! 2.3 GB took 216 ns a read in 4 KiB pages and 172 ns in 2 MiB pages (over 7 GB: 370 ns
//! and 222 ns). So an array of at least [`MIN_MAPPED`] bytes gets an anonymous mapping
//! aligned to 2 MiB and advised `MADV_HUGEPAGE`; under the kernel's default THP mode
//! (`madvise`) it is then backed by huge pages, while the rest of the process keeps
//! whatever its program chose. Smaller arrays, and every array where the mapping fails or
//! the advice is refused, are plain heap memory or plain pages: only slower, never wrong.
//!
//! The mapping's length is rounded up to whole huge pages when that adds at most a quarter
//! to the array (the rounding is memory the array pays for, untouched but counted), and to
//! whole 4 KiB pages otherwise (the tail past the last 2 MiB boundary then stays in small
//! pages).

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use zerocopy::FromZeros;

/// Size of a transparent huge page on x86-64 and most aarch64 kernels.
const HUGE: usize = 2 << 20;
/// Small page size the lengths are rounded to (the mapping's own rounding).
const PAGE: usize = 4 << 10;
/// Arrays from this size up get a mapping of their own: the smallest that a whole huge
/// page holds with at most a quarter added.
pub const MIN_MAPPED: usize = (HUGE * 4 / 5).next_multiple_of(PAGE);

/// Types whose all-zero bytes are a valid value (the empty state of a table's slot):
/// `zerocopy::FromZeros`, derived and checked by the compiler.
pub trait Zeroable: FromZeros + Copy {}

impl<T: FromZeros + Copy> Zeroable for T {}

/// A fixed-length array of `T`, all zero when made (see the module documentation).
pub struct ZeroedArray<T: Zeroable> {
    /// The first element (dangling while empty): reads go straight through it, with no
    /// branch on where the memory came from.
    ptr: NonNull<T>,
    len: usize,
    /// What owns the memory `ptr` points into (its heap block or mapping does not move
    /// when the array does).
    owner: Owner<T>,
}

enum Owner<T> {
    Heap(Vec<T>),
    /// The mapping; the advised range that holds the array is [`mapped_len`] of its
    /// bytes from the first 2 MiB boundary.
    Mapped {
        _map: memmap2::MmapMut,
    },
}

// SAFETY: the array owns its memory exclusively, as a `Vec<T>` does, and hands it out
// only through `&self` / `&mut self` borrows.
unsafe impl<T: Zeroable + Send> Send for ZeroedArray<T> {}
// SAFETY: as above; `&ZeroedArray` gives only shared access to the elements.
unsafe impl<T: Zeroable + Sync> Sync for ZeroedArray<T> {}

impl<T: Zeroable> ZeroedArray<T> {
    /// An array of `len` zero values.
    pub fn new(len: usize) -> ZeroedArray<T> {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        // A mapping is aligned to its pages: a type aligned to more stays on the heap.
        if bytes >= MIN_MAPPED && std::mem::align_of::<T>() <= PAGE {
            if let Some((mut m, at)) = map_huge(bytes) {
                // `at` is within the mapping (it has 2 MiB - 4 KiB of slack in front of
                // `mapped` bytes); the pointer stays valid when the mapping moves into
                // `owner` (its memory does not move).
                if let Some(from) = m.get_mut(at..) {
                    let ptr = NonNull::from(from).cast::<T>();
                    return ZeroedArray {
                        ptr,
                        len,
                        owner: Owner::Mapped { _map: m },
                    };
                }
            }
        }
        let mut v = zeroed_vec(len);
        ZeroedArray {
            // The Vec's block (dangling when it holds nothing), which does not move when
            // the Vec moves into `owner`.
            ptr: NonNull::from(v.as_mut_slice()).cast::<T>(),
            len,
            owner: Owner::Heap(v),
        }
    }

    /// Bytes of memory the array holds (its advised range, or its heap block's
    /// capacity).
    pub fn bytes(&self) -> usize {
        match &self.owner {
            Owner::Heap(v) => v.capacity() * std::mem::size_of::<T>(),
            Owner::Mapped { .. } => mapped_len(self.len * std::mem::size_of::<T>()),
        }
    }

    /// Whether the array lives in a mapping advised for huge pages.
    #[cfg(test)]
    pub fn is_mapped(&self) -> bool {
        matches!(self.owner, Owner::Mapped { .. })
    }
}

impl<T: Zeroable> Default for ZeroedArray<T> {
    fn default() -> Self {
        ZeroedArray::new(0)
    }
}

impl<T: Zeroable> Deref for ZeroedArray<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialized `T`s (zero, a valid `T` by
        // `FromZeros`, then written only as `T`s), aligned (a Vec's block, or a 2 MiB
        // boundary), owned by `owner` for as long as `self` lives; the shared borrow of
        // `self` excludes a mutable one.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> DerefMut for ZeroedArray<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, with the exclusive borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

fn zeroed_vec<T: Zeroable>(len: usize) -> Vec<T> {
    vec![T::new_zeroed(); len]
}

/// The mapping's length for an array of `bytes` (see the module documentation).
fn mapped_len(bytes: usize) -> usize {
    let whole = bytes.div_ceil(HUGE) * HUGE;
    if whole - bytes <= bytes / 4 {
        whole
    } else {
        bytes.div_ceil(PAGE) * PAGE
    }
}

/// An anonymous mapping holding `bytes` from a 2 MiB boundary, advised for huge pages;
/// `None` if it cannot be mapped. The mapping reserves up to 2 MiB more address space, to
/// find the boundary in; only the advised range from the boundary is ever touched.
fn map_huge(bytes: usize) -> Option<(memmap2::MmapMut, usize)> {
    let len = mapped_len(bytes);
    let m = memmap2::MmapOptions::new()
        .len(len.checked_add(HUGE - PAGE)?)
        .map_anon()
        .ok()?;
    let at = (m.as_ptr() as usize).next_multiple_of(HUGE) - m.as_ptr() as usize;
    // Refused advice (a kernel without THP, or THP off) leaves small pages: only slower.
    #[cfg(target_os = "linux")]
    let _ = m.advise_range(memmap2::Advice::HugePage, at, len);
    Some((m, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, zerocopy::FromZeros)]
    #[repr(C, align(64))]
    struct Line([u32; 16]);

    #[test]
    fn small_arrays_are_heap_and_large_ones_mapped_and_aligned() {
        let small = ZeroedArray::<Line>::new(100);
        assert!(!small.is_mapped());
        assert_eq!(small.len(), 100);
        assert!(small.iter().all(|l| *l == Line([0; 16])));
        let n = MIN_MAPPED / 64 + 1_000;
        let mut big = ZeroedArray::<Line>::new(n);
        assert!(big.is_mapped());
        assert_eq!(big.len(), n);
        assert_eq!(big.as_ptr() as usize % HUGE, 0);
        assert!(big.iter().all(|l| *l == Line([0; 16])));
        big[n - 1] = Line([7; 16]);
        big[0].0[3] = 9;
        assert_eq!(big[n - 1], Line([7; 16]));
        assert_eq!(big[0].0[3], 9);
        assert!(big.bytes() >= n * 64);
        assert!(ZeroedArray::<Line>::default().is_empty());
    }

    /// The kernel records the advice on the array's own mapping (`hg` in its `VmFlags`);
    /// whether huge pages then back it is the kernel's choice (its THP mode, free memory).
    /// A kernel built without transparent huge pages refuses the advice (no
    /// `/sys/kernel/mm/transparent_hugepage`): then only the mapping is checked.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_arrays_are_advised_for_huge_pages() {
        let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
        let big = ZeroedArray::<Line>::new(2 * HUGE / 64);
        assert!(big.is_mapped());
        assert_eq!(big.bytes(), 2 * HUGE);
        let at = big.as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        let mut flags = None;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = lo <= at && at < hi;
                        continue;
                    }
                }
            }
            if inside {
                if let Some(f) = line.strip_prefix("VmFlags:") {
                    flags = Some(f.to_string());
                }
            }
        }
        let flags = flags.expect("the array's mapping is listed in smaps");
        assert_eq!(flags.split_whitespace().any(|f| f == "hg"), thp, "{flags}");
    }

    #[test]
    fn lengths_round_to_huge_pages_only_when_cheap() {
        assert_eq!(mapped_len(HUGE), HUGE);
        assert_eq!(mapped_len(MIN_MAPPED), HUGE);
        assert_eq!(
            mapped_len(HUGE * 3 / 4),
            (HUGE * 3 / 4).div_ceil(PAGE) * PAGE
        );
        assert_eq!(mapped_len(HUGE - 1), HUGE);
        // 2.1 MiB: a second huge page would add 90%, so the tail stays in small pages.
        let b = HUGE + HUGE / 20;
        assert_eq!(mapped_len(b), b.div_ceil(PAGE) * PAGE);
        // 3.5 MiB: 4 MiB adds 14%.
        assert_eq!(mapped_len(HUGE * 7 / 4), 2 * HUGE);
    }
}
