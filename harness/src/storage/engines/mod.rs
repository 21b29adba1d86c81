//! The three engines: in-place update, log-structured merge, copy-on-write.

pub mod cow;
