//! The binary's global allocator: the system's malloc, except for small
//! over-aligned blocks, which come from free lists of their own.
//!
//! Why: every tokio task and every socket's I/O registration is a 128-byte
//! aligned allocation. glibc carves each one with `memalign` from a larger
//! chunk and, once freed, never hands that chunk to the next `memalign`
//! (which asks for more than it); a long-lived allocation placed beside it
//! (a held key's name or state) pins the hole. The built-in server takes a
//! hold on a connection of its own, so a million held keys left 224 to 238
//! bytes of such holes each (409 to 423 bytes per held key, 185 of them in
//! use; 179 with these lists: BENCHMARKS.md). Here a freed block goes back to its size's free list and
//! the next task of that size takes it: the holes never reach the heap.
//!
//! The lists only grow, to the most blocks of each size alive at once (for
//! a server, its most connections at once), and never give memory back.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;
use std::sync::Mutex;

/// The alignment malloc gives anyway (x86_64 and aarch64 glibc: 16), below
/// which nothing is pooled.
const MALLOC_ALIGN: usize = 16;
/// The blocks are this far apart and aligned: tokio's tasks and I/O
/// registrations ask for 128 (its cache-line padding on x86_64 and aarch64).
const BLOCK_ALIGN: usize = 128;
/// Sizes 128, 256, 384 and 512 (a task of a server's connection is 256).
const CLASSES: usize = 4;
/// Each list grows by one system allocation of this many bytes.
const CHUNK: usize = 16 * 1024;

/// The global allocator (`#[global_allocator]` in `main.rs`).
pub struct Allocator;

/// A free list: the first free block, whose first word points to the next.
struct FreeList(*mut u8);

// SAFETY: the blocks it links are owned by the list alone, and only touched
// under its mutex.
unsafe impl Send for FreeList {}

static LISTS: [Mutex<FreeList>; CLASSES] =
    [const { Mutex::new(FreeList(ptr::null_mut())) }; CLASSES];

/// The size class of `layout`, if it is pooled.
fn class(layout: Layout) -> Option<usize> {
    let pooled = layout.align() > MALLOC_ALIGN
        && layout.align() <= BLOCK_ALIGN
        && layout.size() <= CLASSES * BLOCK_ALIGN;
    pooled.then(|| layout.size().max(1).div_ceil(BLOCK_ALIGN) - 1)
}

fn list(class: usize) -> std::sync::MutexGuard<'static, FreeList> {
    // Nothing panics while a list is locked; a poisoned one is still sound.
    LISTS[class].lock().unwrap_or_else(|e| e.into_inner())
}

/// A free block of `class`, from its list or a new chunk (null if the
/// system has no memory).
unsafe fn take(class: usize) -> *mut u8 {
    let mut free = list(class);
    if free.0.is_null() {
        let size = (class + 1) * BLOCK_ALIGN;
        // SAFETY: CHUNK and BLOCK_ALIGN are non-zero, BLOCK_ALIGN a power of two.
        let chunk = unsafe { System.alloc(Layout::from_size_align_unchecked(CHUNK, BLOCK_ALIGN)) };
        if chunk.is_null() {
            return chunk;
        }
        // Link the chunk's blocks, the first at the head.
        let count = CHUNK / size;
        for i in 0..count {
            // SAFETY: every block lies inside the chunk and is aligned for a pointer.
            unsafe {
                let block = chunk.add(i * size);
                let next = if i + 1 < count {
                    chunk.add((i + 1) * size)
                } else {
                    ptr::null_mut()
                };
                block.cast::<*mut u8>().write(next);
            }
        }
        free.0 = chunk;
    }
    let block = free.0;
    // SAFETY: a free block's first word is the next free block.
    free.0 = unsafe { block.cast::<*mut u8>().read() };
    block
}

unsafe fn give_back(class: usize, block: *mut u8) {
    let mut free = list(class);
    // SAFETY: the block is ours again and at least a pointer long.
    unsafe { block.cast::<*mut u8>().write(free.0) };
    free.0 = block;
}

// SAFETY: a pooled block is BLOCK_ALIGN-aligned and at least the layout's
// size, and is handed out once until it is given back; the rest is System's.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class(layout) {
            Some(c) => unsafe { take(c) },
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match class(layout) {
            Some(c) => unsafe { give_back(c, ptr) },
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match class(layout) {
            // A reused block holds its last owner's bytes.
            Some(c) => unsafe {
                let block = take(c);
                if !block.is_null() {
                    ptr::write_bytes(block, 0, layout.size());
                }
                block
            },
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller promises new_size, rounded to the alignment, fits.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class(layout), class(new)) {
            (None, None) => unsafe { System.realloc(ptr, layout, new_size) },
            (Some(a), Some(b)) if a == b => ptr,
            _ => unsafe {
                let moved = self.alloc(new);
                if !moved.is_null() {
                    ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                moved
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_small_over_aligned_blocks_are_pooled() {
        let l = |size, align| Layout::from_size_align(size, align).unwrap();
        assert_eq!(class(l(256, 8)), None);
        assert_eq!(class(l(256, 16)), None);
        assert_eq!(class(l(1, 128)), Some(0));
        assert_eq!(class(l(128, 128)), Some(0));
        assert_eq!(class(l(256, 128)), Some(1));
        assert_eq!(class(l(512, 64)), Some(3));
        assert_eq!(class(l(513, 128)), None);
        assert_eq!(class(l(256, 256)), None);
    }

    #[test]
    fn a_freed_block_is_the_next_one_given_and_blocks_do_not_overlap() {
        let a = Allocator;
        let layout = Layout::from_size_align(384, 128).unwrap();
        unsafe {
            let blocks: Vec<*mut u8> = (0..100).map(|_| a.alloc(layout)).collect();
            for (i, &b) in blocks.iter().enumerate() {
                assert!(!b.is_null());
                assert_eq!(b as usize % 128, 0);
                ptr::write_bytes(b, i as u8, layout.size());
            }
            for (i, &b) in blocks.iter().enumerate() {
                assert!(
                    (0..layout.size()).all(|o| *b.add(o) == i as u8),
                    "block {i} was overwritten"
                );
            }
            a.dealloc(blocks[7], layout);
            assert_eq!(a.alloc(layout), blocks[7]);
            for &b in &blocks {
                a.dealloc(b, layout);
            }
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_across_pool_and_system() {
        let a = Allocator;
        unsafe {
            let small = Layout::from_size_align(100, 128).unwrap();
            let p = a.alloc(small);
            ptr::write_bytes(p, 0xab, 100);
            let q = a.realloc(p, small, 4000);
            assert_eq!(q as usize % 128, 0);
            assert!((0..100).all(|o| *q.add(o) == 0xab));
            let r = a.realloc(q, Layout::from_size_align(4000, 128).unwrap(), 200);
            assert!((0..100).all(|o| *r.add(o) == 0xab));
            a.dealloc(r, Layout::from_size_align(200, 128).unwrap());
            let z = a.alloc_zeroed(small);
            assert!((0..100).all(|o| *z.add(o) == 0));
            a.dealloc(z, small);
        }
    }

    #[test]
    fn threads_share_the_lists_without_losing_a_block() {
        let layout = Layout::from_size_align(256, 128).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u8 {
                s.spawn(move || unsafe {
                    for _ in 0..2000 {
                        let p = Allocator.alloc(layout);
                        ptr::write_bytes(p, t, 256);
                        std::thread::yield_now();
                        assert!((0..256).all(|o| *p.add(o) == t), "a block given twice");
                        Allocator.dealloc(p, layout);
                    }
                });
            }
        });
    }
}
