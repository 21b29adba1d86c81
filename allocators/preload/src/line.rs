//! A line of text built on the stack, for what the library prints without allocating (a
//! panic's message, `malloc_stats`).

use core::fmt;

/// A message built on the stack: what does not fit is dropped, keeping the final newline's
/// place.
pub(crate) struct Line {
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

impl Line {
    /// The text so far (what `write!` put in: whole characters, unless a cut fell inside
    /// one, which the tests do not do).
    #[cfg(test)]
    pub(crate) fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }

    /// Writes the text to file descriptor `fd` (standard error is 2), whole or as much as
    /// the descriptor takes; errors are ignored, as there is nowhere to report them.
    pub(crate) fn write_to(&self, fd: libc::c_int) {
        let mut at = 0;
        while at < self.len {
            // SAFETY: writes initialised bytes of a live buffer.
            let wrote =
                unsafe { libc::write(fd, self.bytes[at..self.len].as_ptr().cast(), self.len - at) };
            if wrote <= 0 {
                return;
            }
            at += wrote as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write as _;

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
