//! The parameters of the model, and their validation.
//!
//! An [`OnChipConfig`] describes the on-chip memory of one FPGA design: `heaps` BRAM heaps of
//! `heap_words` words of `word_bits` bits each, the baseline allocator's bitmap (one bit per
//! byte or per word), the allocation unit, the cycle costs, and the defragmenter (absent in
//! the baseline). [`OnChipConfig::validate`] refuses every combination the model cannot
//! represent with a [`ConfigError`] that names the parameter.
//!
//! Every block covers whole *allocation units* of `unit_bytes = lcm(align_bytes, granule)`,
//! where the granule is what one bitmap bit covers (a byte, or a word). With the defaults
//! (32-bit words, a bit per byte, 4-byte alignment) a unit is 4 bytes and takes 4 bitmap bits.

use core::fmt;

/// What one bit of the free map covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BitmapGranularity {
    /// One bit per byte (Memluv's default): fine placement, `W` bytes per bitmap word read.
    Byte,
    /// One bit per heap word: a bitmap `W / 8` times smaller and faster to scan; blocks are
    /// rounded up to whole words.
    Word,
}

/// Cycle costs of the allocator's finite-state machine and memories.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CycleCosts {
    /// Cycles per bitmap word read.
    pub bitmap_word_read: u64,
    /// Cycles per bitmap word written.
    pub bitmap_word_write: u64,
    /// Cycles per FSM step (request decode, size rounding, response, ...).
    pub fsm_step: u64,
    /// FSM steps of every allocation, besides its bitmap accesses.
    pub alloc_fsm_steps: u64,
    /// FSM steps of every free, besides its bitmap accesses.
    pub free_fsm_steps: u64,
    /// FSM steps of every defragmentation call, besides its memory accesses.
    pub defrag_fsm_steps: u64,
    /// Cycles per heap-word access (one read or one write) through one BRAM port.
    pub heap_word_access: u64,
    /// Cycles per handle-table entry read or written.
    pub handle_table_access: u64,
}

impl Default for CycleCosts {
    /// One cycle per BRAM access and per FSM step; 3 steps per allocation (accept, round,
    /// respond), 2 per free (accept, respond), 4 per defragmentation call.
    fn default() -> Self {
        Self {
            bitmap_word_read: 1,
            bitmap_word_write: 1,
            fsm_step: 1,
            alloc_fsm_steps: 3,
            free_fsm_steps: 2,
            defrag_fsm_steps: 4,
            heap_word_access: 1,
            handle_table_access: 1,
        }
    }
}

/// Which blocks a triggered defragmentation call slides down. Every policy moves blocks
/// toward the base only, whole, in order, within the budget; they differ in latency per
/// call and in how often calls come (measured in the crate's README).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CompactWindow {
    /// Slide blocks from the heap base up until the run above them reaches the goal (the
    /// failed request's size, or the threshold).
    #[default]
    FromBase,
    /// First walk the handle table (one read per live block) to find the run of consecutive
    /// blocks whose slide down to the hole below them opens the goal with the fewest units
    /// moved, then slide only those (the lowest such run on a tie). Fewer words per call.
    Cheapest,
    /// Ignore the goal: compact the whole heap (as far as the budget allows), leaving one
    /// free run at the top. Longer calls, fewer of them.
    Whole,
}

/// The defragmenter: when it runs, and how much one call may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DefragConfig {
    /// Compact when an allocation fails for fragmentation (enough free bytes, no run long
    /// enough), then retry the allocation once.
    pub on_fragmentation_failure: bool,
    /// Compact after a free when the largest free run is shorter than this many bytes (and
    /// more than that many bytes are free, so that compaction can help). `None`: never.
    /// Checking costs a scan of the whole bitmap after every free.
    pub free_run_threshold_bytes: Option<u32>,
    /// The most heap words one call may move: its latency bound.
    pub budget_words: u32,
    /// BRAM ports used for moving (2: one read and one write per cycle).
    pub ports: u32,
    /// Which blocks a call with a goal moves (a call without one compacts from the base).
    pub window: CompactWindow,
}

impl Default for DefragConfig {
    /// On failure, no threshold, 2 ports, and a budget of 4096 words (two default heaps'
    /// worth: a call may compact a whole default heap).
    fn default() -> Self {
        Self {
            on_fragmentation_failure: true,
            free_run_threshold_bytes: None,
            budget_words: 4096,
            ports: 2,
            window: CompactWindow::FromBase,
        }
    }
}

/// The on-chip memory of one design.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OnChipConfig {
    /// Number of heaps `H`; accelerator `i` allocates from heap `i mod H`.
    pub heaps: usize,
    /// Words per heap.
    pub heap_words: u32,
    /// Bits per BRAM word `W` (a multiple of 8).
    pub word_bits: u32,
    /// What one bitmap bit covers.
    pub granularity: BitmapGranularity,
    /// Alignment of every block, in bytes (a power of two); also the largest alignment a
    /// request may ask for.
    pub align_bytes: u32,
    /// Start each first-fit scan after the end of the last allocation (wrapping), instead of
    /// at the heap base.
    pub cached_start: bool,
    /// Cycle costs.
    pub costs: CycleCosts,
    /// The defragmenter; `None` is the baseline (Memluv without defragmentation).
    pub defrag: Option<DefragConfig>,
}

impl Default for OnChipConfig {
    /// Memluv's defaults: one heap of 2048 x 32-bit words (8 KiB), a bit per byte, 4-byte
    /// alignment, scans from the heap base, no defragmenter.
    fn default() -> Self {
        Self {
            heaps: 1,
            heap_words: 2048,
            word_bits: 32,
            granularity: BitmapGranularity::Byte,
            align_bytes: 4,
            cached_start: false,
            costs: CycleCosts::default(),
            defrag: None,
        }
    }
}

/// The largest heap the model represents (handle addresses give each block a 1 MiB window).
pub const MAX_HEAP_BYTES: u64 = 1 << 20;
/// The most heaps the model represents.
pub const MAX_HEAPS: usize = 256;
/// The widest BRAM word the model represents.
pub const MAX_WORD_BITS: u32 = 1024;

/// A parameter the model cannot work with.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `heaps` is zero or above [`MAX_HEAPS`].
    HeapCount {
        /// The value given.
        heaps: usize,
    },
    /// `heap_words` is zero.
    ZeroHeapSize,
    /// `word_bits` is zero, not a multiple of 8, or above [`MAX_WORD_BITS`].
    WordBits {
        /// The value given.
        bits: u32,
    },
    /// `align_bytes` is zero or not a power of two.
    Alignment {
        /// The value given.
        align_bytes: u32,
    },
    /// The heap is larger than [`MAX_HEAP_BYTES`].
    HeapTooLarge {
        /// Bytes per heap asked for.
        bytes: u64,
    },
    /// The heap is not a whole number of allocation units.
    HeapNotWholeUnits {
        /// Bytes per heap.
        bytes: u64,
        /// Bytes per allocation unit.
        unit_bytes: u32,
    },
    /// A defragmenter with a zero budget or zero ports, or one that is never triggered.
    Defrag {
        /// What is wrong.
        problem: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HeapCount { heaps } => {
                write!(f, "heap count {heaps} is out of range (1 to {MAX_HEAPS})")
            }
            Self::ZeroHeapSize => f.write_str("heap size is zero words"),
            Self::WordBits { bits } => write!(
                f,
                "word width {bits} bits is not a multiple of 8 between 8 and {MAX_WORD_BITS}"
            ),
            Self::Alignment { align_bytes } => {
                write!(f, "alignment {align_bytes} bytes is not a power of two")
            }
            Self::HeapTooLarge { bytes } => write!(
                f,
                "heap of {bytes} bytes is larger than the model's {MAX_HEAP_BYTES}-byte limit"
            ),
            Self::HeapNotWholeUnits { bytes, unit_bytes } => write!(
                f,
                "heap of {bytes} bytes is not a whole number of {unit_bytes}-byte allocation units"
            ),
            Self::Defrag { problem } => write!(f, "defragmenter: {problem}"),
        }
    }
}

impl std::error::Error for ConfigError {}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl OnChipConfig {
    /// This configuration with a defragmenter (see [`DefragConfig::default`]).
    pub fn with_defrag(self, defrag: DefragConfig) -> Self {
        Self {
            defrag: Some(defrag),
            ..self
        }
    }

    /// Bytes per BRAM word.
    pub fn word_bytes(&self) -> u32 {
        self.word_bits / 8
    }

    /// Bytes per heap.
    pub fn heap_bytes(&self) -> u64 {
        u64::from(self.heap_words) * u64::from(self.word_bytes())
    }

    /// Bytes one bitmap bit covers.
    pub fn granule_bytes(&self) -> u32 {
        match self.granularity {
            BitmapGranularity::Byte => 1,
            BitmapGranularity::Word => self.word_bytes(),
        }
    }

    /// Bytes per allocation unit: the least common multiple of the alignment and the granule.
    pub fn unit_bytes(&self) -> u32 {
        let (a, g) = (u64::from(self.align_bytes), u64::from(self.granule_bytes()));
        // Both are at most 128 after validation, so the product fits.
        (a / gcd(a, g) * g) as u32
    }

    /// Bitmap bits per allocation unit.
    pub fn bits_per_unit(&self) -> u32 {
        self.unit_bytes() / self.granule_bytes()
    }

    /// Allocation units per heap.
    pub fn heap_units(&self) -> u32 {
        (self.heap_bytes() / u64::from(self.unit_bytes())) as u32
    }

    /// Bitmap words per heap (the bitmap is stored in words of `word_bits` bits).
    pub fn bitmap_words(&self) -> u64 {
        let bits = u64::from(self.heap_units()) * u64::from(self.bits_per_unit());
        bits.div_ceil(u64::from(self.word_bits))
    }

    /// Checks every parameter.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.heaps == 0 || self.heaps > MAX_HEAPS {
            return Err(ConfigError::HeapCount { heaps: self.heaps });
        }
        if self.heap_words == 0 {
            return Err(ConfigError::ZeroHeapSize);
        }
        if self.word_bits == 0
            || !self.word_bits.is_multiple_of(8)
            || self.word_bits > MAX_WORD_BITS
        {
            return Err(ConfigError::WordBits {
                bits: self.word_bits,
            });
        }
        if !self.align_bytes.is_power_of_two() || self.align_bytes > 128 {
            return Err(ConfigError::Alignment {
                align_bytes: self.align_bytes,
            });
        }
        let bytes = self.heap_bytes();
        if bytes > MAX_HEAP_BYTES {
            return Err(ConfigError::HeapTooLarge { bytes });
        }
        let unit_bytes = self.unit_bytes();
        if !bytes.is_multiple_of(u64::from(unit_bytes)) {
            return Err(ConfigError::HeapNotWholeUnits { bytes, unit_bytes });
        }
        if let Some(d) = &self.defrag {
            if d.budget_words == 0 {
                return Err(ConfigError::Defrag {
                    problem: "the budget is zero words, so no call could move anything",
                });
            }
            if d.ports == 0 {
                return Err(ConfigError::Defrag {
                    problem: "zero BRAM ports",
                });
            }
            if !d.on_fragmentation_failure && d.free_run_threshold_bytes.is_none() {
                return Err(ConfigError::Defrag {
                    problem: "no trigger (neither on fragmentation failure nor a free-run threshold)",
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_memluvs_8_kib_heap_of_4_byte_units() {
        let c = OnChipConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.heap_bytes(), 8192);
        assert_eq!(
            (c.unit_bytes(), c.bits_per_unit(), c.heap_units()),
            (4, 4, 2048)
        );
        assert_eq!(c.bitmap_words(), 256);
        let w = OnChipConfig {
            granularity: BitmapGranularity::Word,
            word_bits: 64,
            heap_words: 1024,
            ..c
        };
        assert_eq!(
            (w.unit_bytes(), w.bits_per_unit(), w.bitmap_words()),
            (8, 1, 16)
        );
    }

    #[test]
    fn bad_parameters_are_refused_with_the_parameter_named() {
        let ok = OnChipConfig::default();
        let cases = [
            (OnChipConfig { heaps: 0, ..ok }, "heap count 0"),
            (
                OnChipConfig {
                    heap_words: 0,
                    ..ok
                },
                "zero words",
            ),
            (
                OnChipConfig {
                    word_bits: 12,
                    ..ok
                },
                "not a multiple of 8",
            ),
            (OnChipConfig { word_bits: 0, ..ok }, "not a multiple of 8"),
            (
                OnChipConfig {
                    align_bytes: 3,
                    ..ok
                },
                "not a power of two",
            ),
            (
                OnChipConfig {
                    heap_words: 1 << 20,
                    ..ok
                },
                "larger than",
            ),
            (
                OnChipConfig {
                    word_bits: 8,
                    heap_words: 10,
                    ..ok
                },
                "whole number of 4-byte",
            ),
            (
                ok.with_defrag(DefragConfig {
                    budget_words: 0,
                    ..DefragConfig::default()
                }),
                "budget is zero",
            ),
            (
                ok.with_defrag(DefragConfig {
                    ports: 0,
                    ..DefragConfig::default()
                }),
                "zero BRAM ports",
            ),
            (
                ok.with_defrag(DefragConfig {
                    on_fragmentation_failure: false,
                    free_run_threshold_bytes: None,
                    ..DefragConfig::default()
                }),
                "no trigger",
            ),
        ];
        for (config, needle) in cases {
            let err = config.validate().expect_err(needle).to_string();
            assert!(err.contains(needle), "{err:?} lacks {needle:?}");
        }
    }
}
