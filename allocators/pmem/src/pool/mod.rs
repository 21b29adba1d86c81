//! The pool format: header, root object, persistent pointers (on any [`Medium`](crate::Medium)).
