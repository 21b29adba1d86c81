//! What can go wrong when building a trace or a plan.

use core::fmt;

/// An error from this crate: bad input, named with what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrainingError {
    /// The model name is not one of the five this crate describes.
    UnknownModel {
        /// The name that was given.
        name: String,
    },
    /// The precision name is not `fp32`, `fp16` or `mixed`.
    UnknownPrecision {
        /// The name that was given.
        name: String,
    },
    /// A batch size of zero (a trace needs at least one sample).
    ZeroBatch,
    /// A sequence length of zero, or above the model's position table.
    BadSequenceLength {
        /// The length that was given.
        seq_len: u32,
        /// The longest the model accepts.
        max: u32,
    },
    /// A list of batch sizes for a multi-iteration run was empty.
    NoIterations,
    /// A cost-model parameter is zero, negative or not finite.
    BadCostParameter {
        /// Which parameter.
        name: &'static str,
    },
    /// The caching-allocator model ran out of device memory.
    OutOfMemory {
        /// The request, rounded as the allocator rounds it.
        requested_bytes: u64,
        /// Bytes reserved when the request failed (after releasing cached segments).
        reserved_bytes: u64,
        /// The device capacity.
        capacity_bytes: u64,
    },
}

impl fmt::Display for TrainingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownModel { name } => write!(
                f,
                "unknown model {name:?}: use resnet50, resnet101, bert-large, gpt2-large or gpt2-xl"
            ),
            Self::UnknownPrecision { name } => {
                write!(f, "unknown precision {name:?}: use fp32, fp16 or mixed")
            }
            Self::ZeroBatch => write!(f, "batch size must be at least 1"),
            Self::BadSequenceLength { seq_len, max } => {
                write!(
                    f,
                    "sequence length {seq_len} is outside 1..={max} for this model"
                )
            }
            Self::NoIterations => write!(f, "a run needs at least one iteration (batch size)"),
            Self::BadCostParameter { name } => {
                write!(f, "cost-model parameter {name} must be positive and finite")
            }
            Self::OutOfMemory {
                requested_bytes,
                reserved_bytes,
                capacity_bytes,
            } => write!(
                f,
                "out of device memory: {requested_bytes} B requested with {reserved_bytes} B reserved of {capacity_bytes} B"
            ),
        }
    }
}

impl std::error::Error for TrainingError {}
