//! Room in the buffers an open keeps from one shard to the next.

/// Makes room for `n` more items in `v`, a buffer kept from one use to the next (an open's
/// per-thread load buffers, [`crate::recovery::LoadBuffers`]).
///
/// An empty buffer that is too small is replaced by a new one with an eighth more room
/// than asked, not grown: growing an allocation copies its whole old room into the new
/// one (the allocator does not know that none of it is in use), which writes — and so
/// faults in and zeroes — fresh memory as large as the old room, and a shard only a
/// little larger than the last would grow the buffer again. With the eighth more, the
/// shards of an open, which are about the same size, fit the room the first one made.
/// A buffer that holds items grows as [`Vec::reserve`] grows it, keeping them.
pub(crate) fn make_room<T>(v: &mut Vec<T>, n: usize) {
    if v.capacity() - v.len() >= n {
        return;
    }
    if v.is_empty() {
        // The old room goes back to the allocator before the new one is taken.
        *v = Vec::new();
        *v = Vec::with_capacity(n.saturating_add(n / 8));
    } else {
        v.reserve(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_made_without_losing_items() {
        // An empty buffer too small: replaced, with an eighth more room.
        let mut v: Vec<u64> = Vec::with_capacity(10);
        make_room(&mut v, 800);
        assert!(v.is_empty() && v.capacity() >= 900, "{}", v.capacity());
        // Room enough: left as it is.
        v.extend(0..5);
        let (ptr, cap) = (v.as_ptr(), v.capacity());
        make_room(&mut v, 100);
        assert_eq!((v.as_ptr(), v.capacity()), (ptr, cap));
        // Items kept when it has to grow.
        make_room(&mut v, cap * 3);
        assert_eq!(v, [0, 1, 2, 3, 4]);
        assert!(v.capacity() >= 5 + cap * 3);
        // Nothing asked of an empty buffer: nothing allocated.
        let mut e: Vec<u8> = Vec::new();
        make_room(&mut e, 0);
        assert_eq!(e.capacity(), 0);
    }
}
