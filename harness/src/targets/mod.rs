//! The targets a report opens with: claims about alloclab's allocators — what is claimed, by
//! whom (a paper, or alloclab itself), the figure — each checked against a run's records and
//! shown as a ✓ / ✗ / · line that names the figure it was decided by.
//!
//! A target is decided only where the run measured everything it covers; otherwise it is `·`
//! and says what is missing (a suite not run, an allocator not asked for). Every figure is a
//! median over the run's runs, and every ratio compares medians of the same run.

mod hosts;

pub use hosts::*;
