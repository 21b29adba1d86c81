//! stub
use alloclab_core::HostAllocator;
use crate::workloads::{Measurement, Params};
pub(super) fn run<A: HostAllocator>(_a: &A, _p: &Params) -> Measurement { todo!() }
