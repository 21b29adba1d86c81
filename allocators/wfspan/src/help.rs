//! Help records: how a thread that failed to get a span asks the others for one.
//!
//! Each heap has one record, a single word:
//!
//! ```text
//!   EMPTY ──request(class)──▶ PENDING(class) ──helper CAS──▶ COMPLETED(span) ──collect──▶ EMPTY
//!                                  └───────────────collect (cancel)───────────────────────▶ EMPTY
//! ```
//!
//! A thread whose one-shot pops all failed publishes a request, goes on with its own
//! bounded search, and finally collects: it takes the span a helper left, or cancels. Every
//! thread, during its own span acquisition, looks at **H = 1** other record (round robin) and,
//! if it is pending and the helper has a spare span of that kind, completes it with one CAS.
//! A helper that loses the CAS (another helper won, or the requester cancelled) keeps its
//! span. A requester may thus end with two spans (its own and a helper's): it keeps the
//! extra one for its next acquisition. No step retries: wait-free.
//!
//! A request is re-published with the same class after a cancel, a slow helper's CAS may
//! complete the new request with a span read for the old one: harmless, since the kind is
//! the same.

use alloclab_core::sync::atomic::{AtomicU64, Ordering};

const STATE_SHIFT: u32 = 62;
const EMPTY: u64 = 0;
const PENDING: u64 = 1 << STATE_SHIFT;
const COMPLETED: u64 = 2 << STATE_SHIFT;
const PAYLOAD: u64 = (1 << STATE_SHIFT) - 1;

/// One heap's help record.
pub struct HelpRecord {
    word: AtomicU64,
}

/// What a requester finds when it collects its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collected {
    /// Nobody helped; the request is withdrawn.
    Cancelled,
    /// A helper left this span.
    Span(u32),
}

impl HelpRecord {
    /// An empty record.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            word: AtomicU64::new(EMPTY),
        }
    }

    /// An empty record.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            word: AtomicU64::new(EMPTY),
        }
    }

    /// Publishes a request for a span of kind `kind`. Only the record's owner calls this,
    /// and only when its record is empty (after a collect).
    #[inline]
    pub fn request(&self, kind: u32) {
        self.word
            .store(PENDING | u64::from(kind), Ordering::Release);
    }

    /// The kind of span requested, if a request is pending.
    #[inline]
    pub fn pending(&self) -> Option<u32> {
        let word = self.word.load(Ordering::Acquire);
        (word & !PAYLOAD == PENDING).then_some((word & PAYLOAD) as u32)
    }

    /// Completes a pending request for `kind` with span `span` (one CAS). `false` if the
    /// request was no longer pending: the helper keeps its span.
    #[inline]
    pub fn complete(&self, kind: u32, span: u32) -> bool {
        // `Release` hands the span's contents to the requester's `Acquire` collect.
        self.word
            .compare_exchange(
                PENDING | u64::from(kind),
                COMPLETED | u64::from(span),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Withdraws the request, or takes what a helper left. Only the owner calls this.
    #[inline]
    pub fn collect(&self) -> Collected {
        let word = self.word.swap(EMPTY, Ordering::AcqRel);
        if word & !PAYLOAD == COMPLETED {
            Collected::Span((word & PAYLOAD) as u32)
        } else {
            Collected::Cancelled
        }
    }
}

impl Default for HelpRecord {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The record's whole cycle: a request is seen as pending with its kind, completed once
    /// by a helper with a span of that kind only, and collected as that span; the record is
    /// empty again after each collect.
    #[test]
    fn a_request_is_completed_once_and_collected_as_the_helpers_span() {
        let record = HelpRecord::new();
        assert_eq!(record.pending(), None);
        assert!(!record.complete(0, 9), "completed a request never made");
        for (kind, span) in [(0, 0), (7, 1234), (u32::MAX, u32::MAX), (1 << 31, 5)] {
            record.request(kind);
            assert_eq!(record.pending(), Some(kind));
            assert!(
                !record.complete(kind ^ 1, span),
                "completed a request for {kind} with a span of another kind"
            );
            assert_eq!(record.pending(), Some(kind));
            assert!(record.complete(kind, span));
            assert_eq!(record.pending(), None, "still pending once completed");
            assert!(!record.complete(kind, span ^ 1), "completed twice");
            assert_eq!(record.collect(), Collected::Span(span));
            assert_eq!(record.pending(), None);
            assert_eq!(record.collect(), Collected::Cancelled);
        }
    }

    /// A request collected before any helper comes is withdrawn: a helper arriving after
    /// finds nothing to complete and keeps its span.
    #[test]
    fn a_cancelled_request_cannot_be_completed() {
        let record = HelpRecord::default();
        record.request(3);
        assert_eq!(record.collect(), Collected::Cancelled);
        assert_eq!(record.pending(), None);
        assert!(!record.complete(3, 8));
        assert_eq!(record.collect(), Collected::Cancelled);
    }
}
