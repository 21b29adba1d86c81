//! [`Config`]: how a [`WfSpan`](super::WfSpan) is set up, and its checks.

/// How a [`WfSpan`](super::WfSpan) is set up. [`Config::DEFAULT`] is the paper's evaluation setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Span size: a power of two from 16 KiB to 4 MiB (default 64 KiB).
    pub span_bytes: usize,
    /// `K`: the most spans one heap keeps per size class (default 40, as in the paper; at
    /// most [`MAX_SPANS_PER_CLASS`]).
    pub spans_per_class: u32,
    /// Free span runs (and empty spans) a heap keeps privately per run class before
    /// publishing them for other threads (default 4).
    pub cached_runs: u32,
    /// Address space reserved for spans (default 64 GiB; halved until the OS agrees, down
    /// to 1 GiB). Memory is committed only as spans are used.
    pub region_bytes: usize,
    /// Whether a free span run that a shrinking heap publishes for other threads (its
    /// private cache of that run class full, and more than
    /// [`PURGE_AFTER_SPANS`](crate::PURGE_AFTER_SPANS) spans of
    /// the class published since it last needed one) first gives its pages back to the OS
    /// (`madvise(MADV_DONTNEED)`, all but the page of its header), so that memory a thread
    /// no longer needs does not stay resident. Off by default: that is a system call on a
    /// free path (the free that empties a span, or frees a run), outside the step bound
    /// and not wait-free (the kernel takes the address space's lock). The preload library
    /// turns it on.
    pub purge_published: bool,
}

impl Config {
    /// 64 KiB spans, K = 40, 4 cached runs per class, 64 GiB of address space, no pages
    /// given back on the free paths.
    pub const DEFAULT: Config = Config {
        span_bytes: 64 << 10,
        spans_per_class: 40,
        cached_runs: 4,
        region_bytes: 64 << 30,
        purge_published: false,
    };

    /// The bytes at the start of a region of `region_bytes` that hold the span headers
    /// (a table of one header a span, rounded up to a span): the spans follow it. Address
    /// space, touched as far as spans are used: 512 bytes a span.
    pub const fn header_table_bytes(&self) -> usize {
        crate::span::table_bytes(self.region_bytes, self.span_bytes)
    }

    /// Checks the configuration; the message says what is wrong.
    ///
    /// # Errors
    ///
    /// A span size that is not a power of two in 16 KiB..=4 MiB, `spans_per_class` of zero
    /// or above [`MAX_SPANS_PER_CLASS`], `cached_runs` of zero, or a region smaller than
    /// 1 GiB or 32 spans.
    pub const fn validate(&self) -> Result<(), &'static str> {
        if !self.span_bytes.is_power_of_two()
            || self.span_bytes < (16 << 10)
            || self.span_bytes > (4 << 20)
        {
            return Err("span_bytes must be a power of two from 16 KiB to 4 MiB");
        }
        if self.spans_per_class == 0 || self.spans_per_class > MAX_SPANS_PER_CLASS {
            return Err("spans_per_class must be from 1 to 64");
        }
        if self.cached_runs == 0 {
            return Err("cached_runs must be at least 1");
        }
        if self.region_bytes < MIN_REGION_BYTES || self.region_bytes < (self.span_bytes << 5) {
            return Err("region_bytes must be at least 1 GiB and 32 spans");
        }
        Ok(())
    }
}

/// The most spans a heap can keep per size class (`Config::spans_per_class`): a heap's
/// spans of a class sit in a table of this many entries, marked by 64-bit masks.
pub const MAX_SPANS_PER_CLASS: u32 = 64;
// One bit per entry in a `u64` mask; `Config::validate`'s message names the number.
const _: () = assert!(MAX_SPANS_PER_CLASS == u64::BITS);

impl Default for Config {
    fn default() -> Self {
        Self::DEFAULT
    }
}

pub(super) const MIN_REGION_BYTES: usize = 1 << 30;
