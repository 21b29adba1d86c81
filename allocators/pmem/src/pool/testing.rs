//! A medium for the pool's tests: DRAM, counters, and a durable image for crashes.
//!
//! The durable image is what a crash would keep if nothing but fenced flushes reached
//! the persistence domain. `flush` snapshots the lines it covers; `fence` copies those
//! snapshots into the durable image. While recording, every fence first produces crash
//! images: the durable image with each line that differs from the working bytes taken
//! old or new at random (a line not yet fenced may or may not have been written back),
//! plus the two extremes (nothing since the last fence, everything).

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::persist::CACHE_LINE;
use crate::{Medium, MediumKind, PersistStats};

/// Page alignment, like a mapping.
const ALIGN: usize = 4096;

struct CrashRecorder {
    rng: StdRng,
    random_choices: usize,
    images: Vec<Vec<u8>>,
}

#[derive(Default)]
struct Durability {
    durable: Vec<u8>,
    flushed: BTreeMap<usize, Vec<u8>>,
    recorder: Option<CrashRecorder>,
}

/// DRAM bytes behind the [`Medium`] interface (see the module documentation).
pub(crate) struct TestMedium {
    allocation: *mut u8,
    layout: Layout,
    base: *mut u8,
    len: usize,
    state: Mutex<Durability>,
    lines_flushed: AtomicU64,
    flushes: AtomicU64,
    fences: AtomicU64,
    bytes_flushed: AtomicU64,
}

// SAFETY: the bytes are owned by the medium and only reached through raw pointers, as any
// mapping is; the bookkeeping is behind a mutex and atomics.
unsafe impl Send for TestMedium {}
// SAFETY: as for `Send`.
unsafe impl Sync for TestMedium {}

impl TestMedium {
    /// `len` zero bytes, durable.
    pub(crate) fn new(len: usize) -> Self {
        Self::shifted(len, 0)
    }

    /// A copy of `bytes`, durable, at a new address.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Self {
        let medium = Self::new(bytes.len());
        medium.write(0, bytes);
        medium.state.lock().unwrap().durable = bytes.to_vec();
        medium
    }

    /// `len` zero bytes whose first byte is `shift` bytes past a page boundary.
    pub(crate) fn shifted(len: usize, shift: usize) -> Self {
        let layout = Layout::from_size_align((len + shift).max(1), ALIGN).unwrap();
        // SAFETY: the layout's size is at least 1.
        let allocation = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!allocation.is_null());
        Self {
            allocation,
            layout,
            // SAFETY: `shift <= layout.size()`, inside the allocation.
            base: unsafe { allocation.add(shift) },
            len,
            state: Mutex::new(Durability {
                durable: vec![0; len],
                ..Durability::default()
            }),
            lines_flushed: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            fences: AtomicU64::new(0),
            bytes_flushed: AtomicU64::new(0),
        }
    }

    /// The working bytes now.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        // SAFETY: `base..base + len` is our allocation; tests are not writing concurrently.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }.to_vec()
    }

    /// Overwrites working bytes (not durable until flushed and fenced).
    pub(crate) fn write(&self, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= self.len);
        // SAFETY: inside our allocation (asserted); `bytes` is not part of it.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(offset), bytes.len())
        };
    }

    /// What a crash now would keep if only fenced flushes count.
    pub(crate) fn durable_image(&self) -> Vec<u8> {
        self.state.lock().unwrap().durable.clone()
    }

    /// From now on, each fence first records `random_choices` random crash images and the
    /// two extremes.
    pub(crate) fn record_crash_images(&self, random_choices: usize, seed: u64) {
        self.state.lock().unwrap().recorder = Some(CrashRecorder {
            rng: StdRng::seed_from_u64(seed),
            random_choices,
            images: Vec::new(),
        });
    }

    /// Records the crash images of "now" too (after the last fence), and returns them all.
    pub(crate) fn take_crash_images(&self) -> Vec<Vec<u8>> {
        let working = self.bytes();
        let mut state = self.state.lock().unwrap();
        let state = &mut *state;
        let recorder = state.recorder.as_mut().expect("not recording");
        record(recorder, &state.durable, &working);
        std::mem::take(&mut recorder.images)
    }
}

fn record(recorder: &mut CrashRecorder, durable: &[u8], working: &[u8]) {
    let dirty: Vec<usize> = (0..durable.len().div_ceil(CACHE_LINE))
        .filter(|&line| {
            let range = line * CACHE_LINE..((line + 1) * CACHE_LINE).min(durable.len());
            durable[range.clone()] != working[range]
        })
        .collect();
    recorder.images.push(durable.to_vec());
    recorder.images.push(working.to_vec());
    for _ in 0..recorder.random_choices {
        let mut image = durable.to_vec();
        for &line in &dirty {
            if recorder.rng.random_bool(0.5) {
                let range = line * CACHE_LINE..((line + 1) * CACHE_LINE).min(durable.len());
                image[range.clone()].copy_from_slice(&working[range]);
            }
        }
        recorder.images.push(image);
    }
}

impl Drop for TestMedium {
    fn drop(&mut self) {
        // SAFETY: allocated in `shifted` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.allocation, self.layout) };
    }
}

// SAFETY: `base..base + len` lies in an allocation this medium owns until it drops.
unsafe impl Medium for TestMedium {
    fn base(&self) -> *mut u8 {
        self.base
    }

    fn len(&self) -> usize {
        self.len
    }

    fn flush(&self, offset: usize, len: usize) {
        assert!(offset + len <= self.len, "flush past the end");
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.bytes_flushed.fetch_add(len as u64, Ordering::Relaxed);
        if len == 0 {
            return;
        }
        let working = self.bytes();
        let mut state = self.state.lock().unwrap();
        for line in offset / CACHE_LINE..=(offset + len - 1) / CACHE_LINE {
            self.lines_flushed.fetch_add(1, Ordering::Relaxed);
            let range = line * CACHE_LINE..((line + 1) * CACHE_LINE).min(self.len);
            state.flushed.insert(line, working[range].to_vec());
        }
    }

    fn fence(&self) {
        self.fences.fetch_add(1, Ordering::Relaxed);
        let working = self.bytes();
        let mut state = self.state.lock().unwrap();
        let state = &mut *state;
        if let Some(recorder) = state.recorder.as_mut() {
            record(recorder, &state.durable, &working);
        }
        for (line, bytes) in std::mem::take(&mut state.flushed) {
            let at = line * CACHE_LINE;
            state.durable[at..at + bytes.len()].copy_from_slice(&bytes);
        }
    }

    fn stats(&self) -> PersistStats {
        PersistStats {
            lines_flushed: self.lines_flushed.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            fences: self.fences.load(Ordering::Relaxed),
            bytes_flushed: self.bytes_flushed.load(Ordering::Relaxed),
        }
    }

    fn kind(&self) -> MediumKind {
        MediumKind::Simulated
    }
}

// SAFETY: forwards to `TestMedium`, whose contract holds for as long as the borrow.
unsafe impl Medium for &TestMedium {
    fn base(&self) -> *mut u8 {
        (**self).base()
    }
    fn len(&self) -> usize {
        (**self).len()
    }
    fn flush(&self, offset: usize, len: usize) {
        (**self).flush(offset, len)
    }
    fn fence(&self) {
        (**self).fence()
    }
    fn stats(&self) -> PersistStats {
        (**self).stats()
    }
    fn kind(&self) -> MediumKind {
        (**self).kind()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_flushed_then_fenced_lines_are_durable() {
        let medium = TestMedium::new(4 * CACHE_LINE);
        medium.write(0, &[1; 8]);
        medium.write(CACHE_LINE, &[2; 8]);
        medium.write(2 * CACHE_LINE, &[3; 8]);
        medium.flush(0, 8);
        medium.flush(CACHE_LINE, 8);
        medium.fence();
        medium.flush(2 * CACHE_LINE, 8); // never fenced
        let durable = medium.durable_image();
        assert_eq!(durable[0], 1);
        assert_eq!(durable[CACHE_LINE], 2);
        assert_eq!(durable[2 * CACHE_LINE], 0);
        assert_eq!(medium.stats().fences, 1);
        assert_eq!(medium.stats().lines_flushed, 3);
    }

    #[test]
    fn crash_images_mix_old_and_new_lines() {
        let medium = TestMedium::new(8 * CACHE_LINE);
        medium.record_crash_images(64, 7);
        for line in 0..8 {
            medium.write(line * CACHE_LINE, &[0xee]);
        }
        let images = medium.take_crash_images();
        let new_lines: Vec<usize> = images
            .iter()
            .map(|image| (0..8).filter(|l| image[l * CACHE_LINE] == 0xee).count())
            .collect();
        assert!(new_lines.contains(&0) && new_lines.contains(&8));
        assert!(new_lines.iter().any(|&n| n > 0 && n < 8), "{new_lines:?}");
    }
}
