//! What a preload library built without the standard library does on a panic: says where
//! on standard error, without allocating, and aborts.
//!
//! The exported functions are `extern "C"`, so a panic can never unwind into the program;
//! with the standard library a panic aborts there too, after its panic hook (which can
//! print a backtrace, and brings the symbolizer that prints it into the library). Built
//! without it (the `preload` profile, `panic = "abort"`),
//! [`export_malloc_api!`](crate::export_malloc_api) defines the panic handler as
//! [`abort_with_message`].

use core::fmt::Write as _;

use crate::line::Line;
use core::panic::PanicInfo;

/// Writes `alloclab preload: panicked at FILE:LINE:COLUMN: MESSAGE` to standard error
/// (cut at 512 bytes) and aborts the process.
pub fn abort_with_message(info: &PanicInfo<'_>) -> ! {
    let mut line = Line::default();
    let _ = write!(line, "alloclab preload: panicked");
    if let Some(at) = info.location() {
        let _ = write!(line, " at {}:{}:{}", at.file(), at.line(), at.column());
    }
    let _ = write!(line, ": {}", info.message());
    let _ = line.write_str("\n");
    line.write_to(2);
    // SAFETY: `abort` has no preconditions.
    unsafe { libc::abort() }
}

/// What the library's `rust_eh_personality` does, if an unwind ever reaches a Rust frame
/// of a library built without the standard library: says so and aborts.
pub fn abort_unexpected_unwind() -> ! {
    let message = b"alloclab preload: an exception unwound into a Rust frame; aborting\n";
    // SAFETY: writes a static buffer; `abort` has no preconditions.
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
        libc::abort()
    }
}
