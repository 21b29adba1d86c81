//! stub
use alloclab_core::HostAllocator;
use crate::workloads::{Measurement, Params};
pub(super) fn run_scratch<A: HostAllocator>(_a: &A, _p: &Params) -> Measurement { todo!() }
pub(super) fn run_thrash<A: HostAllocator>(_a: &A, _p: &Params) -> Measurement { todo!() }
