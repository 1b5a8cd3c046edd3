//! Cache prefetch hints: DPDK's `rte_prefetch0` (`rte_prefetch.h`), in Rust so that it inlines
//! into the caller's loop (the C one is a `static inline` bindgen cannot call).
//!
//! A prefetch tells the CPU a line will be read soon. Unlike a load, it does not hold up the
//! instructions after it: the packet loop goes on while the line is on its way.

/// Cache line size the prefetch steps by (x86-64 and most arm64 cores).
const LINE: usize = 64;

/// Asks the CPU to bring every cache line `*value` covers into all cache levels, for a read:
/// one line for a small value that sits inside one, two for an 80 B record that straddles a
/// boundary.
///
/// Only a hint: it never faults and changes no state a program can observe but timing. On
/// targets without a prefetch instruction it does nothing.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    let start = (value as *const T).cast::<i8>();
    let size = std::mem::size_of::<T>();
    prefetch_line(start);
    // A value no larger than its alignment lies in one line. Else every 64 B on, and its last
    // byte's line: a fixed count for a given T (the loop unrolls away), at most one more
    // prefetch than lines.
    if size > std::mem::align_of::<T>() {
        let mut at = LINE;
        while at < size {
            prefetch_line(start.wrapping_add(at));
            at += LINE;
        }
        prefetch_line(start.wrapping_add(size - 1));
    }
}

#[inline(always)]
fn prefetch_line(at: *const i8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` reads nothing the program can observe and cannot fault, whatever
    // the address (Intel SDM, PREFETCHh: "a prefetch does not generate exceptions").
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
