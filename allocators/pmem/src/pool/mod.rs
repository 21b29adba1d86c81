//! The pool format: header, root object, persistent pointers (on any [`Medium`](crate::Medium)).

pub mod error;
pub mod header;
pub mod layout;

pub use error::PoolError;
pub use header::Header;
pub use layout::{Region, min_pool_size};
