//! How many arenas a heap spreads its threads over: all [`ARENAS`] by default, fewer where
//! [`Randomized::ARENAS_ENV`](crate::Randomized::ARENAS_ENV) says so.
//!
//! Each arena a thread uses sets up a window of at least 256 slots for every slab class the
//! thread allocates from, and random draws bring every page of a window into memory,
//! whatever the class holds live: up to 1.0 MB per arena (256 times the 3,952 bytes of the
//! 15 slot sizes) with every class in use. A program whose threads all churn every class
//! pays that once per thread, up to the number of arenas. Fewer arenas trade that memory
//! for contention: threads beyond the limit share an arena's lock, windows and cache lines
//! (as glibc's `MALLOC_ARENA_MAX` trades its per-thread arenas).

use crate::root::ARENAS;

// The warning below names the count as a literal (it is written without formatting, inside
// `malloc`).
const _: () = assert!(ARENAS == 16);

/// The arena count `text` names: a decimal number from 1 to [`ARENAS`], surrounding
/// blanks allowed. Parsed by hand, without allocating, since it runs inside `malloc`.
pub(crate) fn parse(text: &str) -> Option<usize> {
    let digits = text.trim();
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = digits
        .bytes()
        .fold(0usize, |n, b| n * 10 + usize::from(b - b'0'));
    (1..=ARENAS).contains(&n).then_some(n)
}

/// The arena count the environment asks for, [`ARENAS`] if it asks for none (unset or
/// empty); a value that is not a number from 1 to [`ARENAS`] is reported on standard error
/// and ignored. Reads the variable with `getenv`, which does not allocate.
pub(crate) fn from_env() -> usize {
    // SAFETY: `getenv` with a NUL-terminated name; the result, if not null, is a
    // NUL-terminated string that stays valid while the environment is not changed, and it
    // is read at once.
    let value = unsafe { libc::getenv(c"ALLOCLAB_RANDOMIZED_ARENAS".as_ptr()) };
    if value.is_null() {
        return ARENAS;
    }
    // SAFETY: as above.
    let bytes = unsafe { core::ffi::CStr::from_ptr(value) }.to_bytes();
    if bytes.iter().all(u8::is_ascii_whitespace) {
        // Set but empty, as a shell's `VAR=` leaves it: as if unset.
        return ARENAS;
    }
    match core::str::from_utf8(bytes).ok().and_then(parse) {
        Some(n) => n,
        None => {
            crate::os::warn(
                "ALLOCLAB_RANDOMIZED_ARENAS is not a number from 1 to 16; threads use all 16 arenas",
            );
            ARENAS
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_one_to_the_arenas_are_read_and_anything_else_is_refused() {
        assert_eq!(parse("1"), Some(1));
        assert_eq!(parse(" 4\n"), Some(4));
        assert_eq!(parse("016"), Some(16));
        assert_eq!(parse(&ARENAS.to_string()), Some(ARENAS));
        for bad in [
            "",
            " ",
            "0",
            "17",
            "-1",
            "+2",
            "2.0",
            "two",
            "1 2",
            "99999999999999999999",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
