//! Recovery: rebuilds the volatile slab kinds, live map and free lists of a heap from
//! its slab tags and a conservative mark pass from the root (see the parent module).

use crate::sync::raw::{AtomicU8, AtomicU32};
use std::time::Instant;

use super::{
    KIND_CONT, KIND_HEAD, Kind, LIVE_PER_SLAB, META_PER_SLAB, PersistentHeap, RecoveryReport,
    SIZE_CLASSES, SLAB_BYTES, TAG_RUN_CONT, TAG_RUN_HEAD, blocks_per_slab, decode,
};
use crate::Medium;
use crate::persist::CACHE_LINE;

impl<M: Medium> PersistentHeap<M> {
    /// Runs recovery on a freshly built heap (all slabs volatile-free, nothing live).
    /// Writes nothing to the medium.
    pub(super) fn recover(&mut self) {
        let start = Instant::now();
        let g = self.geo;
        let base = self.base();
        let read_tag = |slab: usize| -> (u8, u32) {
            let off = g.meta_off + slab * META_PER_SLAB;
            // SAFETY: the tag line lies in the metadata area, inside the mapping; nothing
            // else uses the heap during `open_on`.
            unsafe {
                let line = base.add(off);
                let len = u32::from_le(line.add(4).cast::<u32>().read());
                (line.read(), len)
            }
        };

        // 1. Slab kinds from the tags (rules in the module docs).
        let nslabs = g.nslabs;
        let mut kinds = vec![0u32; nslabs];
        let mut i = 0;
        while i < nslabs {
            let (tag, len) = read_tag(i);
            match tag {
                1..=12 => {
                    kinds[i] = tag as u32;
                    i += 1;
                }
                TAG_RUN_HEAD => {
                    let n = len as usize;
                    if n >= 1
                        && n <= nslabs - i
                        && (i + 1..i + n).all(|s| read_tag(s).0 == TAG_RUN_CONT)
                    {
                        kinds[i] = KIND_HEAD | n as u32;
                        for k in &mut kinds[i + 1..i + n] {
                            *k = KIND_CONT | i as u32;
                        }
                        i += n;
                    } else {
                        i += 1;
                    }
                }
                _ => i += 1,
            }
        }

        // 2. Mark from the root.
        let heap_off = g.heap_off;
        let classify = |word: u64| -> Option<(usize, usize)> {
            if !word.is_multiple_of(CACHE_LINE as u64) || word < heap_off as u64 {
                return None;
            }
            let rel = usize::try_from(word).ok()? - heap_off;
            let slab = rel / SLAB_BYTES;
            if slab >= nslabs {
                return None;
            }
            let in_slab = rel % SLAB_BYTES;
            match decode(kinds[slab]) {
                Kind::Small(c) => {
                    let size = SIZE_CLASSES[c];
                    (in_slab.is_multiple_of(size) && in_slab / size < blocks_per_slab(c))
                        .then_some((rel, size))
                }
                Kind::Head(n) if in_slab == 0 => Some((rel, n * SLAB_BYTES)),
                _ => None,
            }
        };
        let lines = nslabs * META_PER_SLAB;
        let mut marks = vec![0u64; lines.div_ceil(64)];
        let mut stack: Vec<(usize, usize)> = Vec::new();
        let mut scan = |off: usize, len: usize, stack: &mut Vec<(usize, usize)>| {
            // SAFETY: `off..off + len` is the root or a block, inside the mapping, 8-aligned
            // (the root and blocks start on cache lines); no one else uses it during open.
            let words = unsafe {
                std::slice::from_raw_parts(base.add(off).cast::<u64>().cast_const(), len / 8)
            };
            for &word in words {
                if let Some((rel, size)) = classify(word) {
                    let line = rel / CACHE_LINE;
                    let bit = 1u64 << (line % 64);
                    if marks[line / 64] & bit == 0 {
                        marks[line / 64] |= bit;
                        stack.push((heap_off + rel, size));
                    }
                }
            }
        };
        scan(g.root_off, g.root_len, &mut stack);
        while let Some((off, size)) = stack.pop() {
            scan(off, size, &mut stack);
        }
        let marked = |rel: usize| {
            let line = rel / CACHE_LINE;
            marks[line / 64] & (1 << (line % 64)) != 0
        };

        // 3. Sweep: free lists, the slab pool, the live map and the report.
        let mut report = RecoveryReport::default();
        let mut live_map = vec![0u8; nslabs * LIVE_PER_SLAB];
        let global = self.global.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut slab = 0;
        while slab < nslabs {
            let rel = slab * SLAB_BYTES;
            match decode(kinds[slab]) {
                Kind::Small(c) => {
                    let size = SIZE_CLASSES[c];
                    let count = blocks_per_slab(c);
                    let live = (0..count).filter(|&b| marked(rel + b * size)).count();
                    if live == 0 {
                        kinds[slab] = 0;
                        global.slab_free[slab] = true;
                    } else {
                        report.live_blocks += live as u64;
                        report.live_bytes += (live * size) as u64;
                        for (b, byte) in live_map[slab * LIVE_PER_SLAB..][..count]
                            .iter_mut()
                            .enumerate()
                        {
                            *byte = u8::from(marked(rel + b * size));
                        }
                        global.free[c].extend(
                            (0..count)
                                .rev()
                                .filter(|&b| !marked(rel + b * size))
                                .map(|b| (heap_off + rel + b * size) as u64),
                        );
                    }
                    slab += 1;
                }
                Kind::Head(n) => {
                    if marked(rel) {
                        live_map[slab * LIVE_PER_SLAB] = 1;
                        report.live_blocks += 1;
                        report.live_bytes += (n * SLAB_BYTES) as u64;
                    } else {
                        kinds[slab..slab + n].fill(0);
                        global.slab_free[slab..slab + n].fill(true);
                    }
                    slab += n;
                }
                Kind::Cont(_) | Kind::Free => {
                    global.slab_free[slab] = true;
                    slab += 1;
                }
            }
        }
        global.hint = 0;
        self.kinds = kinds.into_iter().map(AtomicU32::new).collect();
        self.live = live_map.into_iter().map(AtomicU8::new).collect();
        report.duration = start.elapsed();
        self.recovery = report;
    }
}
