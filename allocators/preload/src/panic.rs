//! What a preload library built without the standard library does on a panic: says where
//! on standard error, without allocating, and aborts.
//!
//! The exported functions are `extern "C"`, so a panic can never unwind into the program;
//! with the standard library a panic aborts there too, after its panic hook (which can
//! print a backtrace, and brings the symbolizer that prints it into the library). Built
//! without it (the `preload` profile, `panic = "abort"`),
//! [`export_malloc_api!`](crate::export_malloc_api) defines the panic handler as
//! [`abort_with_message`].

use core::fmt::{self, Write as _};
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
    // SAFETY: writes initialised bytes of a live buffer; `abort` has no preconditions.
    unsafe {
        libc::write(2, line.bytes.as_ptr().cast(), line.len);
        libc::abort()
    }
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

/// A message built on the stack: what does not fit is dropped, keeping the final newline's
/// place.
struct Line {
    bytes: [u8; 512],
    len: usize,
}

impl Default for Line {
    fn default() -> Self {
        Line {
            bytes: [0; 512],
            len: 0,
        }
    }
}

impl fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Keep one byte for the newline the message ends with.
        let room = self.bytes.len() - 1 - self.len;
        let take = if s == "\n" { 1 } else { s.len().min(room) };
        let end = self.len + take;
        if end > self.bytes.len() {
            return Err(fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(&s.as_bytes()[..take]);
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_is_cut_and_still_ends_its_line() {
        let mut line = Line::default();
        let long = "x".repeat(2000);
        let _ = write!(line, "{long}");
        line.write_str("\n").unwrap();
        assert_eq!(line.len, 512);
        assert_eq!(line.bytes[511], b'\n');
        assert!(line.bytes[..511].iter().all(|&b| b == b'x'));
    }

    #[test]
    fn a_short_message_is_kept_whole() {
        let mut line = Line::default();
        let (file, at) = ("a.rs", 7);
        write!(line, "panicked at {file}:{at}").unwrap();
        line.write_str("\n").unwrap();
        assert_eq!(&line.bytes[..line.len], b"panicked at a.rs:7\n");
    }
}
