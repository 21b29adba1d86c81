//! Missed mutants reviewed, each with the reason: those found equivalent to the original
//! ([`EQUIVALENT`]: no test can catch them, because no behaviour a caller can observe
//! changes — only which thread does some work, or a performance choice), counted as
//! equivalent, not missed; and those that do change behaviour but that no test of the kit
//! can drive there ([`OUT_OF_REACH`]), which stay missed, the reason beside them.
//!
//! Keys are cargo-mutants's names without the line (`file:column: replace ... in
//! function`), so that they survive edits elsewhere in the file; the column tells apart
//! the same change at two places of one function, unless both are in the same column.

/// `(mutant, why it is equivalent)`.
pub const EQUIVALENT: &[(&str, &str)] = &[
    (
        "allocators/pmem/src/pool/layout.rs:16: replace > with == in largest_heap_in",
        "the heap's size is `avail * 64 / 65` rounded down to a line, then corrected downwards while its footprint (heap and metadata) exceeds `avail` and upwards while one more line fits; `avail` is always a whole number of lines (the pool's usable end and the metadata's offset are), and for every such `avail` the estimate is already the largest heap that fits, footprint equal to `avail` (a unit test checks it for every multiple of 64 up to 4 MiB, and the upward bound follows from a heap of h needing at least h * 65 / 64): neither correction ever runs, so changing its condition or its step changes nothing",
    ),
    (
        "allocators/pmem/src/pool/layout.rs:16: replace > with < in largest_heap_in",
        "as `>` with `==` at column 16 (the bound on the downward correction): the corrections never run for a whole number of lines",
    ),
    (
        "allocators/pmem/src/pool/layout.rs:16: replace > with >= in largest_heap_in",
        "as `>` with `==` at column 16 (the bound on the downward correction): the corrections never run for a whole number of lines",
    ),
    (
        "allocators/pmem/src/pool/layout.rs:39: replace > with == in largest_heap_in",
        "as `>` with `==` at column 16 (the bound on the downward correction): the corrections never run for a whole number of lines",
    ),
    (
        "allocators/pmem/src/pool/layout.rs:39: replace > with < in largest_heap_in",
        "as `>` with `==` at column 16 (the bound on the downward correction): the corrections never run for a whole number of lines",
    ),
    (
        "allocators/pmem/src/pool/layout.rs:39: replace > with >= in largest_heap_in",
        "as `>` with `==` at column 16 (the bound on the downward correction): the corrections never run for a whole number of lines",
    ),
    (
        "allocators/pmem/src/pool/layout.rs:14: replace -= with += in largest_heap_in",
        "the step of a correction that never runs (see `>` with `==` at column 16)",
    ),
    (
        "allocators/pmem/src/pool/layout.rs:14: replace -= with /= in largest_heap_in",
        "the step of a correction that never runs (see `>` with `==` at column 16)",
    ),
    (
        "allocators/pmem/src/pool/layout.rs:14: replace += with -= in largest_heap_in",
        "the step of a correction that never runs (see `>` with `==` at column 16)",
    ),
    (
        "allocators/pmem/src/pool/layout.rs:14: replace += with *= in largest_heap_in",
        "the step of a correction that never runs (see `>` with `==` at column 16)",
    ),
    (
        "allocators/pmem/src/pool/mod.rs:62: replace - with + in Pool<M>::create",
        "the flush after writing a header copy but its magic covers 32 bytes more (the magic's length, twice): the next copy's first bytes or the root's, all written and flushed in the same step before the fence; flushing more leaves nothing unflushed",
    ),
    (
        "allocators/wfspan/src/os.rs:9: replace | with ^ in map",
        "the mapping flags `MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE` are distinct bits, so `^` sets the same ones",
    ),
    (
        "allocators/wfspan/src/os.rs:29: replace | with ^ in map",
        "`PROT_READ | PROT_WRITE`: distinct bits, as the flags",
    ),
    (
        "allocators/wfspan/src/os.rs:13: delete - in map",
        "the descriptor of an anonymous mapping: Linux ignores it with `MAP_ANONYMOUS` (-1 is what portable code passes), so 1 maps the same memory",
    ),
    (
        "allocators/wfspan/src/os.rs:17: replace > with >= in map_aligned_with",
        "`munmap` of zero bytes (no lead; the tail is never empty) fails with `EINVAL` and changes nothing (`unmap` keeps `errno`)",
    ),
    (
        "allocators/wfspan/src/os.rs:13: replace > with >= in page_bytes",
        "`sysconf(_SC_PAGESIZE)` never returns 0",
    ),
    (
        "allocators/wfspan/src/allocator/config.rs:70: replace < with == in Config::validate",
        "the 32-span floor of the region is at most 128 MiB (spans are at most 4 MiB, checked first), below the 1 GiB floor checked before it: it never decides",
    ),
    (
        "allocators/wfspan/src/allocator/config.rs:70: replace < with <= in Config::validate",
        "as `==`: the 32-span floor never decides",
    ),
    (
        "allocators/wfspan/src/allocator/config.rs:89: replace << with >> in Config::validate",
        "as `==`: the 32-span floor never decides, and a smaller one neither",
    ),
    (
        "allocators/wfspan/src/allocator/huge.rs:53: replace < with <= in WfSpan::take_cached_mapping",
        "ties of the hint (mappings of the same length in whole spans) go to the last such slot instead of the first: the smallest hint is chosen either way, and the hint cannot tell the two apart (the exact length, read once the slot is taken, decides whether it is used)",
    ),
    (
        "allocators/wfspan/src/allocator/huge.rs:20: replace > with >= in WfSpan::take_cached_mapping",
        "at a mapping of exactly twice the bytes needed, `>=` gives back the pages past twice the need: none (`madvise` of zero bytes)",
    ),
    (
        "allocators/wfspan/src/allocator/huge.rs:23: replace || with && in WfSpan::cache_mapping",
        "the early refusals are implied by the byte bound checked next: a huge mapping is longer than a span (blocks above the largest span run), so `spans == 0` never holds, and a mapping longer than `HUGE_CACHE_BYTES` (or of `span_bytes` spans, longer still) fails the bound; the mutant only adds and takes back its length from the cached-byte count before refusing it",
    ),
    (
        "allocators/wfspan/src/allocator/huge.rs:46: replace || with && in WfSpan::cache_mapping",
        "as the first `||`: a mapping of `span_bytes` spans or more, or over `HUGE_CACHE_BYTES`, fails the byte bound checked next",
    ),
    (
        "allocators/wfspan/src/allocator/huge.rs:47: replace | with ^ in WfSpan::cache_mapping",
        "`base | spans`: the base is span-aligned and `spans` is below `span_bytes` (checked just above), so no bit is set in both and `^` sets the same bits",
    ),
    (
        "allocators/wfspan/src/allocator/huge.rs:31: replace < with <= in WfSpan::allocate_huge",
        "every huge mapping is mapped at span alignment, so a cached one serves a block aligned to exactly a span as a fresh one would (the block at a span past its base, the same offset); only larger alignments need a fresh mapping",
    ),
    (
        "allocators/wfspan/src/span_list.rs:35: replace | with ^ in pack",
        "`(index + 1) << 32 | version`: the version is 32 bits, below the index, so no bit is set in both",
    ),
    (
        "allocators/wfspan/src/thread.rs:5: replace current_tid -> usize with 1",
        "a heap's `owner_tid` is only ever compared with 0 (free for adoption); any non-zero value marks a heap taken",
    ),
    (
        "allocators/wfspan/src/thread.rs:5: replace head -> *mut Heap with Default::default()",
        "`head` is the free fast path's shortcut to the thread's heap: with none, every free takes the general path, which finds the thread's heap by instance and frees the block the same way, more slowly",
    ),
    (
        "allocators/wfspan/src/heap.rs:22: replace % with + in next_entry",
        "the span table has 64 entries (`MAX_SPANS_PER_CLASS`), the mask's width: `rotate_right` takes its count modulo 64 and the entry found is reduced modulo 64 again, so `from + 64` finds what `from % 64` does (a table of another size would make this a bug, which the unit test of `next_entry` checks for every start)",
    ),
    (
        "allocators/wfspan/src/heap.rs:14: replace > with >= in raise",
        "storing a maximum equal to the one stored changes nothing",
    ),
    (
        "allocators/wfspan/src/heap.rs:18: replace > with >= in Heap::count_free_steps",
        "the free-step maximum starts at 1 (every heap is built with it), so raising it to 1 changes nothing",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:14: replace < with <= in adopt_at",
        "`if share < 2 { 2 } else { share }`: where `share` is 2 both branches give 2",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:62: replace - with / in WfSpan::fresh_run",
        "`zero_from = header end - span start` becomes `(header end) / start`, which is 1 (the header lies within a span of its start): the run then claims to read zero from its second byte, but no object lies below the header's end, so an allocation zeroes the same bytes (none, the run being fresh), and a fresh run has nothing to give back either way",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:9: replace WfSpan::ready -> bool with false",
        "`ready` spares `init` a failed compare-and-swap: `init` returns at once when it finds the state `READY`",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:9: replace WfSpan::allocate_fast -> Option<NonNull<u8>> with None",
        "the fast path is a shortcut: the slow path it falls back to takes the block from the same active span first, so every request is served as before, more slowly",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:41: replace > with >= in <impl Allocator for WfSpan>::stats",
        "the clamp differs only where live bytes are exactly 2^63 - 1, which no heap in a 47-bit address space reaches and no wrapped difference of its counters equals",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:69: replace - with + in WfSpan::with_config",
        "the C fast path's table limit one or two classes above the largest (with spans under 64 KiB; at 64 KiB and up the limit is the table's own 16 KiB either way): sizes there reach `pop_active` of a class no span of which is ever made active (the general path serves them as span runs), so it finds that slot's free list empty and sends them down the general path, as the limit would have",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:69: replace - with / in WfSpan::with_config",
        "as `+`: the table limit one class above the largest, whose slot never holds an active span (its free list stays empty), so those sizes go down the general path as before",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:57: replace << with >> in WfSpan::init",
        "the least region `init` accepts is `max(1 GiB, 32 spans)`; spans are at most 4 MiB (`Config::validate`), so 32 of them (128 MiB) and a 32nd of one are both below 1 GiB, and the least is 1 GiB either way",
    ),
    (
        "allocators/pmem/src/heap/recovery.rs:46: replace | with ^ in PersistentHeap<M>::recover",
        "`KIND_HEAD | n`: `KIND_HEAD` is bit 31 and a run's length is at most `MAX_SLABS`, below 2^30, so no bit is set in both and `^` sets the same bits as `|`",
    ),
    (
        "allocators/pmem/src/heap/recovery.rs:44: replace | with ^ in PersistentHeap<M>::recover",
        "`KIND_CONT | i`: `KIND_CONT` is bit 30 and a slab index is below `MAX_SLABS`, below 2^30, so no bit is set in both and `^` sets the same bits as `|`",
    ),
    (
        "allocators/pmem/src/heap/batch.rs:23: replace > with == in PersistentHeap<M>::release_cached",
        "the condition only decides whether the blocks' live-map lines are prefetched first; a prefetch is a hint that changes no value, so releasing one block with it or several without it gives back the same blocks, counted the same",
    ),
    (
        "allocators/pmem/src/heap/batch.rs:23: replace > with < in PersistentHeap<M>::release_cached",
        "as `==`: only whether the live-map lines are prefetched (never, for `len < 1`: there is nothing to release)",
    ),
    (
        "allocators/pmem/src/heap/batch.rs:23: replace > with >= in PersistentHeap<M>::release_cached",
        "as `==`: only whether the live-map lines are prefetched (for one block as well)",
    ),
    (
        "allocators/pmem/src/heap/batch.rs:9: replace PersistentHeap<M>::take_many_cached -> bool with false",
        "every batch then goes block by block (`take_many_slow`), whose `take_small` pops the same stacks of the same thread's cache (refilling them as `take_many_cached` does), counts the same allocations and marks the same blocks live: the same blocks in the same order, with one visit to the cache per block instead of one for the batch",
    ),
    (
        "allocators/randomized/src/root/mod.rs:5: replace thread_pointer -> usize with 0",
        "the portable `thread_pointer` (`pthread_self`), built only where the x86-64 Linux one (the `%fs:0` load) is not: on x86-64 Linux, where the campaigns run, the mutant changes no code that is built",
    ),
    (
        "allocators/randomized/src/root/mod.rs:5: replace thread_pointer -> usize with 1",
        "as for `0`: the portable `thread_pointer` is not built on x86-64 Linux",
    ),
    (
        "allocators/randomized/src/root/mod.rs:39: replace | with ^ in Root::create",
        "`base | KIND_BLOCKS`: the first chunk's base is aligned to the chunk size, so the low bits where the kind goes are zero and `^` gives the same entry",
    ),
    (
        "allocators/randomized/src/root/mod.rs:41: replace | with ^ in <impl ChunkSource for Root>::new_chunk",
        "as in `Root::create`: every chunk is mapped aligned to the chunk size, so `base | KIND_BLOCKS` and `base ^ KIND_BLOCKS` are the same entry",
    ),
    (
        "allocators/randomized/src/heap/alloc.rs:58: replace > with >= in Arena::alloc",
        "`blocks > 0 && bytes >= reserve`: the reserve is at least 16 KiB, and bytes on the candidates' lists mean a candidate block, so `bytes >= reserve` holds only where `blocks > 0` does, and `blocks >= 0 && bytes >= reserve` is the same condition",
    ),
    (
        "allocators/randomized/src/heap/free.rs:5: replace prescrubbed -> bool with false",
        "no remote free is zeroed by the thread that queues it: the owner zeroes every one when it drains the queue (`release` with `scrubbed` false); the same bytes are zeroed, by the other thread",
    ),
    (
        "allocators/randomized/src/heap/free.rs:10: replace - with + in prescrubbed",
        "a threshold 32 bytes lower: payloads from 64 KiB - 32 to 64 KiB - 16 are zeroed with stores by the owner when it drains the queue instead of by the queuing thread (`prescrubbed` decides both sides); the same bytes are zeroed, and pages are given back from 64 KiB as before",
    ),
    (
        "allocators/randomized/src/remote.rs:9: replace RemoteFrees::is_empty -> bool with false",
        "the check only spares the swap of an empty stack: `take_all` on an empty stack returns 0, which the drain walks as a list of no blocks",
    ),
    (
        "allocators/randomized/src/randomized.rs:68: replace || with && in <impl HostAllocator for Randomized>::allocate_zeroed",
        "no block is both a mapping of its own and at most `ZEROED_PAYLOAD_MAX` bytes, so the mutant never skips the memset: `calloc` zeroes every block itself, as it does without the zero-fill class, which costs time and changes no byte",
    ),
    (
        "allocators/wfspan/src/help.rs:28: replace | with ^ in HelpRecord::request",
        "`PENDING | kind`: the state sits in bits 62 and 63, a kind in the low 32, so no bit is set in both and `^` sets the same bits",
    ),
    (
        "allocators/wfspan/src/help.rs:25: replace | with ^ in HelpRecord::complete",
        "`PENDING | kind`, as in `request`: disjoint bits",
    ),
    (
        "allocators/wfspan/src/help.rs:27: replace | with ^ in HelpRecord::complete",
        "`COMPLETED | span`: the state in bits 62 and 63, a span index in the low 32: disjoint bits",
    ),
    (
        "allocators/wfspan/src/size_class.rs:26: replace - with + in class_bytes",
        "`(class - FINE_CLASSES) % 4` with `+`: `FINE_CLASSES` is 8, a multiple of 4, so both leave the same remainder",
    ),
    (
        "allocators/wfspan/src/size_class.rs:16: replace < with <= in table_limit",
        "at `largest == COARSE_TABLE_MAX` both branches return the same value",
    ),
    (
        "allocators/pmem/src/heap/live.rs:9: replace PersistentHeap<M>::with_cache -> Option<R> with None",
        "the thread cache is a fast path: with no cache every allocation and free takes the path of a thread whose locals are gone (the global lists and the run pool, under the heap's lock), which hands out and takes back the same kinds of blocks, counts the same and writes the same persistent bytes; only the lock traffic differs",
    ),
    (
        "allocators/pmem/src/heap/live.rs:9: replace PersistentHeap<M>::unmark_small -> Option<usize> with None",
        "a fast path that answers `None` falls to the slow path, which handles every case the same way (`unmark_slow`, `block_containing`, the checked release of the batch path)",
    ),
    (
        "allocators/pmem/src/heap/live.rs:9: replace PersistentHeap<M>::small_at -> Option<(usize, usize)> with None",
        "a fast path that answers `None` falls to the slow path, which handles every case the same way (`unmark_slow`, `block_containing`, the checked release of the batch path); `release_many_then_reuse` then frees its last block and allocates, and the thread's stack hands the same block back",
    ),
    (
        "allocators/pmem/src/heap/live.rs:27: replace % with + in PersistentHeap<M>::small_at",
        "the offset in the slab plus a slab's bytes gives an index past the slab's blocks, so the fast path answers `None` for every offset: a fast path that answers `None` falls to the slow path, which handles every case the same way (`unmark_slow`, `block_containing`, the checked release of the batch path)",
    ),
    (
        "allocators/pmem/src/heap/live.rs:16: replace * with / in PersistentHeap<M>::small_at",
        "`index / size == in_slab` holds only at a slab's first byte (index 0), which is a block start: the fast path takes only slab starts, and a fast path that answers `None` falls to the slow path, which handles every case the same way (`unmark_slow`, `block_containing`, the checked release of the batch path)",
    ),
    (
        "allocators/pmem/src/heap/live.rs:54: replace < with == in PersistentHeap<M>::small_at",
        "accepts only the slab's slack past its last block, whose live-map byte no block of the class uses and is never set, so the release is refused there as the slow path refuses it; every real start takes the slow path, which handles it the same way",
    ),
    (
        "allocators/pmem/src/heap/live.rs:54: replace < with <= in PersistentHeap<M>::small_at",
        "as `==`: the one offset it adds, a slab's slack start, has a live-map byte that is never set (the smallest class fills its slab exactly, so the slot stays in the slab's own range)",
    ),
    (
        "allocators/pmem/src/heap/live.rs:9: replace PersistentHeap<M>::prefetch_live with ()",
        "a prefetch is a hint: it changes no value",
    ),
    (
        "allocators/pmem/src/heap/live.rs:24: replace < with <= in PersistentHeap<M>::block_containing",
        "an offset in a slab's slack then names a block past the slab's last one, whose live-map byte is never set: `block_size`, `check_dest`, `free_from` and the release refuse it as they refuse `None`",
    ),
    (
        "allocators/pmem/src/heap/live.rs:28: replace + with - in PersistentHeap<M>::check_dest",
        "`block_containing(off)` returns the block that contains `off`, and `off` and every block end are 8-aligned, so `off + 8 <= end` always holds: the mutant's weaker check accepts the same words",
    ),
    (
        "allocators/pmem/src/heap/live.rs:44: replace + with * in PersistentHeap<M>::check_dest",
        "as `-`: the check always holds for the block containing `off`; a larger end accepts the same words",
    ),
    (
        "allocators/pmem/src/heap/slabs.rs:26: replace + with * in PersistentHeap<M>::assign_run",
        "two places, one column: either loop over a run's later slabs then starts at the head. The tag loop writes a continuation tag there that the head tag overwrites before the fence (recovery frees an unpublished run whichever tag a crash leaves); the kind loop stores a continuation kind that the head's kind overwrites before the run is handed out, when no thread holds a pointer into it yet",
    ),
    (
        "allocators/pmem/src/heap/slabs.rs:46: replace | with ^ in PersistentHeap<M>::assign_run",
        "`KIND_CONT | head`: the kind's flag bits are above any slab index, so no bit is set in both",
    ),
    (
        "allocators/pmem/src/heap/slabs.rs:42: replace | with ^ in PersistentHeap<M>::assign_run",
        "`KIND_HEAD | n`: the flag bits are above any run length: disjoint bits",
    ),
    (
        "allocators/pmem/src/heap/live.rs:54: replace < with > in PersistentHeap<M>::small_at",
        "no block start in a slab has an index past the slab's blocks, so the fast path answers `None` for every offset, and the slow path handles every case the same way",
    ),
    (
        "allocators/pmem/src/heap/slabs.rs:40: delete ! in PersistentHeap<M>::take_small",
        "a successful refill then reports an empty stack: the second attempt pops the refilled stack and hands out the same block, counted once, after a pass over the exited threads' caches that the heap may make at any time",
    ),
    (
        "allocators/pmem/src/heap/classes.rs:5: replace is_small -> bool with false",
        "`is_small` only chooses the fast paths (a pop from the thread's stack, the batch's cached loop); `take` and the slow batch path serve small requests too, from the same stacks, with the same checks and counts",
    ),
    (
        "allocators/pmem/src/heap/slabs.rs:25: replace + with * in find_free_slab",
        "the hint is only where the next search starts: left at the slab just found, which its caller marks in use under the same lock, it costs the next search one step and finds the same slab",
    ),
    (
        "allocators/randomized/src/heap/header.rs:23: replace | with ^ in with_prev",
        "the previous-size field is cleared before the new one is put in, and a block size over 16 (an arena block is at most 1 MiB) fits the field's 20 bits: no bit is set on both sides, so `^` sets the same bits",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:40: replace / with * in Arena::count",
        "the mask `CLASSES / GROUP - 1` only lets the compiler drop a bounds check: every class is below `CLASSES`, so `class / GROUP` is already below `CLASSES / GROUP`, and the wider mask `CLASSES * GROUP - 1` leaves it as it is",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:54: replace / with * in Arena::candidates",
        "the mask `CLASSES / GROUP - 1` only lets the compiler drop a bounds check: every group index here is already below `CLASSES / GROUP`, and the wider mask `CLASSES * GROUP - 1` leaves it as it is",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:50: replace / with * in Arena::candidates_below",
        "the mask `CLASSES / GROUP - 1` only lets the compiler drop a bounds check: every group index here is already below `CLASSES / GROUP`, and the wider mask `CLASSES * GROUP - 1` leaves it as it is",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:68: replace / with * in Arena::class_of_block",
        "the mask `CLASSES / GROUP - 1` only lets the compiler drop a bounds check: every group index here is already below `CLASSES / GROUP`, and the wider mask `CLASSES * GROUP - 1` leaves it as it is",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:36: replace / with * in Arena::class_of_block",
        "a later end of the first class-by-class loop only scans more classes one at a time before the group loop; it returns the same class, since every class it passes is counted off `target` exactly as the group loop would",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:21: replace < with == in Arena::class_of_block",
        "the group loop only skips ahead over whole groups; the class loop after it reaches the same class one class at a time, because `target` is below the blocks of `lo..=hi` (the caller's contract) and so below the tally of `hi`'s whole group",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:21: replace < with > in Arena::class_of_block",
        "the group loop only skips ahead over whole groups; the class loop after it reaches the same class one class at a time, because `target` is below the blocks of `lo..=hi` (the caller's contract) and so below the tally of `hi`'s whole group",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:21: replace < with <= in Arena::class_of_block",
        "the group loop's extra round (at `hi`'s group) and the last class loop's extra round (at `hi`) both end at once: `target` is below the blocks of `lo..=hi`, so below that group's tally, and at `hi` below its class's; the group loop only skips ahead over what the class loop would count one class at a time",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:26: replace / with % in Arena::class_of_block",
        "the group loop only skips ahead over whole groups; the class loop after it reaches the same class one class at a time, because `target` is below the blocks of `lo..=hi` (the caller's contract) and so below the tally of `hi`'s whole group; a smaller bound skips less, and the class loop counts the rest",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:21: replace < with <= in Arena::class_of_nth",
        "the loops of `class_of_nth` leave out the last group, and the last class of the group found, because `target` is below the blocks of all the lists (the caller's contract): a bound that lets either loop reach them ends it there, since `target` is then below that group's, or that class's, count",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:39: replace - with + in Arena::class_of_nth",
        "the loops of `class_of_nth` leave out the last group, and the last class of the group found, because `target` is below the blocks of all the lists (the caller's contract): a bound that lets either loop reach them ends it there, since `target` is then below that group's, or that class's, count",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:39: replace - with / in Arena::class_of_nth",
        "the loops of `class_of_nth` leave out the last group, and the last class of the group found, because `target` is below the blocks of all the lists (the caller's contract): a bound that lets either loop reach them ends it there, since `target` is then below that group's, or that class's, count",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:31: replace / with * in Arena::class_of_nth",
        "the loops of `class_of_nth` leave out the last group, and the last class of the group found, because `target` is below the blocks of all the lists (the caller's contract): a bound that lets either loop reach them ends it there, since `target` is then below that group's, or that class's, count",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:45: replace - with + in Arena::class_of_nth",
        "the loops of `class_of_nth` leave out the last group, and the last class of the group found, because `target` is below the blocks of all the lists (the caller's contract): a bound that lets either loop reach them ends it there, since `target` is then below that group's, or that class's, count",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:45: replace - with / in Arena::class_of_nth",
        "the loops of `class_of_nth` leave out the last group, and the last class of the group found, because `target` is below the blocks of all the lists (the caller's contract): a bound that lets either loop reach them ends it there, since `target` is then below that group's, or that class's, count",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:27: replace && with || in Arena::next_nonempty_above",
        "the loop then scans the classes above one at a time to the last instead of stopping at the group's end; it returns the same (smallest) non-empty class, or, with none, reaches `CLASSES`, where the group search finds nothing",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:17: replace < with <= in Arena::next_nonempty_above",
        "`c` reaches `CLASSES` only as a multiple of `GROUP`, where the loop's second condition already ends it",
    ),
    (
        "allocators/randomized/src/heap/arena.rs:26: replace / with * in Arena::class_of_block",
        "the group loop only skips ahead over whole groups; the class loop after it reaches the same class one class at a time, because `target` is below the blocks of `lo..=hi` (the caller's contract) and so below the tally of `hi`'s whole group; a larger bound lets it reach `hi`'s group, where it stops, since `target` is below that group's tally",
    ),
    (
        "allocators/randomized/src/root/table.rs:20: replace > with >= in Root::table_remove",
        "`if cleared > 0` guards the store of `used - cleared` (under the table lock): with nothing cleared the store writes back the value just read",
    ),
    (
        "allocators/randomized/src/root/huge.rs:31: replace > with >= in Root::allocate_huge",
        "`if guard > 0` picks where the payload goes in its mapping: without guard pages (`guard` 0) the mutant places it at the end of the mapping rounded down to its alignment instead of at `least`; both leave the descriptor and the header before it inside the mapping, and everything after reads the offset back from the descriptor (free, usable size, realloc): another place in the same mapping, not another outcome",
    ),
    (
        "allocators/randomized/src/root/huge.rs:18: replace > with >= in Root::allocate_huge",
        "with `guard` 0 the mutant calls `protect_none(base + len, 0)`: an `mprotect` of no bytes, which succeeds and changes nothing",
    ),
    (
        "allocators/randomized/src/root/huge.rs:55: replace | with ^ in Root::allocate_huge",
        "`len | BUSY | HUGE`: `len` is a multiple of the page size, so its flag bits are zero, and BUSY and HUGE are distinct bits: `^` gives the same word",
    ),
    (
        "allocators/randomized/src/root/huge.rs:62: replace | with ^ in Root::allocate_huge",
        "as at column 55: `len`, BUSY and HUGE have no bit in common",
    ),
    (
        "allocators/randomized/src/root/huge.rs:41: replace | with ^ in Root::allocate_huge",
        "`base | KIND_HUGE`: the mapping is aligned to the chunk size, so the low bits where the kind goes are zero",
    ),
    (
        "allocators/randomized/src/root/blocks.rs:58: replace + with - in Root::locate",
        "the bound below which a pointer into a chunk of blocks is refused before its header is read falls by 32 bytes: a pointer in those 32 bytes (past the first 16, which a test frees) has its header inside the control block or the chunk's header, whose words fail the keyed tag, and is refused with the same `BadHeader`",
    ),
    (
        "allocators/randomized/src/root/blocks.rs:17: replace == with != in Root::locate",
        "the early refusal of a huge mapping's first 32 bytes: `validate_huge` refuses every payload but the one its descriptor names (at least 32 bytes in) with the same `BadHeader`, reading only the descriptor; applied to chunks of blocks instead, the check is weaker than theirs, which comes first",
    ),
    (
        "allocators/randomized/src/root/blocks.rs:41: replace - with + in Root::locate",
        "as `==` with `!=` at column 17: `validate_huge`'s descriptor check refuses the same pointers with the same error",
    ),
    (
        "allocators/randomized/src/root/blocks.rs:48: replace < with == in Root::locate",
        "as at column 17: `validate_huge`'s descriptor check refuses the same pointers with the same error",
    ),
    (
        "allocators/randomized/src/root/blocks.rs:52: replace * with + in Root::locate",
        "as at column 17: `validate_huge`'s descriptor check refuses the same pointers with the same error",
    ),
    (
        "allocators/randomized/src/root/blocks.rs:52: replace * with / in Root::locate",
        "as at column 17: `validate_huge`'s descriptor check refuses the same pointers with the same error",
    ),
    (
        "allocators/randomized/src/root/blocks.rs:44: replace - with + in Root::arena_of",
        "the clamp of a chunk's arena index: the first word of a chunk of blocks is its arena's index (below 16), written before the chunk is registered and never changed, so `min(ARENAS - 1)` never acts, nor `min(ARENAS + 1)`",
    ),
    (
        "allocators/randomized/src/root/blocks.rs:44: replace - with / in Root::arena_of",
        "as `+`: `min(ARENAS / 1)` never acts on an index below 16 either",
    ),
];

/// `(mutant, why no test reaches it)`: not equivalent, and not caught.
pub const OUT_OF_REACH: &[(&str, &str)] = &[
    (
        "allocators/wfspan/src/os.rs:9: replace <impl Drop for KeepErrno>::drop with ()",
        "`errno` changes only when `munmap` or `madvise` fails, and the callers pass only page-aligned ranges of their own mappings, which never fail",
    ),
    (
        "allocators/wfspan/src/os.rs:13: replace > with == in page_bytes",
        "the fallback page size is 4 KiB, what `sysconf` returns on the machines the campaigns run on: only a system with larger pages tells the two apart",
    ),
    (
        "allocators/wfspan/src/os.rs:13: replace > with < in page_bytes",
        "as `==`: the 4 KiB fallback is this machine's page size",
    ),
    (
        "allocators/wfspan/src/span_list.rs:9: replace SpanList::push -> u64 with 1",
        "the attempts of a multi-producer push: more than one only when another thread pops between its load and its compare-and-swap, a race no test can schedule (the callers ignore the count; the unit test checks the uncontended push's one attempt)",
    ),
    (
        "allocators/wfspan/src/thread.rs:26: replace - with + in exit_key",
        "the key another thread created first, taken when two threads create the process's exit key at once: a race of the first registrations that no test can schedule (the key exists once any test has run)",
    ),
    (
        "allocators/wfspan/src/thread.rs:26: replace - with / in exit_key",
        "as `+`: only the thread that loses the race to create the exit key reads the winner's",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:19: replace + with * in step_bound",
        "`36 * 5 * n` steps for an allocation instead of `36 + 5 * n`: a larger bound, still a bound for every n >= 1 (0 for n = 0, an allocator no thread has used); a test could only tell by restating the formula",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:23: replace * with + in step_bound",
        "`41 + n` steps instead of `36 + 5 * n`: smaller from n = 2 on, but only an allocation that takes every longest branch at once (a discard, a take-back ending in a second discard, every list of every heap, helping) passes it; the tests' contended runs stay far below both (four threads, every free remote: at most 17 steps, against 56 and the mutant's 45)",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:23: replace * with / in step_bound",
        "`36 + 5 / n` steps: as `41 + n`, smaller only where an allocation takes every longest branch at once (37 at four threads, where the tests' runs take at most 17; and a division by zero for n = 0, an allocator no thread has used)",
    ),
    (
        "allocators/wfspan/src/allocator/mod.rs:41: replace > with == in <impl Allocator for WfSpan>::stats",
        "without the clamp, a snapshot that catches a free counted before its allocation (in another thread's heap) reports a wrapped live-byte count; only a race between a statistics read and two threads' counters gets there, which no test can schedule",
    ),
    (
        "allocators/wfspan/src/tls.rs:9: replace word::get -> *mut Heap with Default::default()",
        "the `thread_local!` word of targets other than x86_64 Linux (and Miri): not compiled on the machine the campaign runs on, so no test here runs it; the same tests run it where it is compiled",
    ),
    (
        "allocators/wfspan/src/tls.rs:9: replace word::set with ()",
        "as `word::get`: the fallback word of other targets, not compiled here",
    ),
    (
        "allocators/randomized/src/root/huge.rs:82: replace + with - in Root::allocate_huge",
        "the length unmapped when a fresh huge mapping cannot be finished: `mprotect` of its guard page failing, or the chunk table full (12 288 mappings); neither happens in a test without injecting the failure",
    ),
    (
        "allocators/randomized/src/root/huge.rs:82: replace + with * in Root::allocate_huge",
        "as `-`: the unmap of a failed huge allocation, on failure paths no test reaches",
    ),
];

/// The key of a cargo-mutants name: the name without the `:line` after the file.
pub fn key(name: &str) -> String {
    let mut parts = name.splitn(4, ':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(file), Some(line), Some(col), Some(rest))
            if line.chars().all(|c| c.is_ascii_digit())
                && col.chars().all(|c| c.is_ascii_digit()) =>
        {
            format!("{file}:{col}:{rest}")
        }
        _ => name.to_owned(),
    }
}

/// Why the mutant `name` is equivalent, if it was found to be.
pub fn reason(name: &str) -> Option<&'static str> {
    find(EQUIVALENT, name)
}

/// Why no test reaches the mutant `name`, if it was reviewed as out of reach.
pub fn out_of_reach(name: &str) -> Option<&'static str> {
    find(OUT_OF_REACH, name)
}

fn find(list: &[(&str, &'static str)], name: &str) -> Option<&'static str> {
    let k = key(name);
    list.iter().find(|(m, _)| *m == k).map(|(_, why)| *why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_drop_the_line_and_column_only() {
        assert_eq!(
            key("allocators/randomized/src/heap/free.rs:199:19: replace < with == in prescrubbed"),
            "allocators/randomized/src/heap/free.rs:19: replace < with == in prescrubbed"
        );
        assert_eq!(key("no position here"), "no position here");
        assert!(reason("allocators/randomized/src/heap/free.rs:12:5: replace prescrubbed -> bool with false").is_some());
        assert!(
            reason(
                "allocators/randomized/src/heap/free.rs:12:5: replace prescrubbed -> bool with true"
            )
            .is_none()
        );
    }

    #[test]
    fn every_entry_is_a_key_and_unique() {
        let mut keys: Vec<_> = EQUIVALENT
            .iter()
            .chain(OUT_OF_REACH)
            .map(|(m, _)| *m)
            .collect();
        for k in &keys {
            // `file:column: replace ...`: one number after the file, not two.
            let (file, rest) = k.split_once(':').unwrap();
            let (col, change) = rest.split_once(':').unwrap();
            assert!(file.ends_with(".rs") && col.parse::<u32>().is_ok(), "{k}");
            assert!(
                change.starts_with(" replace ") || change.starts_with(" delete "),
                "{k}"
            );
        }
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), EQUIVALENT.len() + OUT_OF_REACH.len());
    }
}
