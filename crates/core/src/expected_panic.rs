//! Panics a caller expects and turns into an error, kept off the process's stderr.
//!
//! The Parquet and Arrow IPC crates assert some invariants of what they decode (a schema's float
//! precision, a page's level lengths) instead of returning errors, so the readers of files and
//! Flight messages run them under [`catch`] and refuse the input with an error naming it. The
//! standard panic hook would still print "thread … panicked at …" to stderr before the catch,
//! which in a server's log reads as a crash. [`quiet_hook`], installed by a program's `main`,
//! leaves such panics to a `debug` log line and prints every other panic as before.

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// How many [`catch`] calls are running on this thread.
    static CATCHING: Cell<usize> = const { Cell::new(0) };
}

/// Runs `run`, `None` when it panicked: for third-party decoders fed input from outside, whose
/// panic the caller turns into an error naming that input. Nothing `run` touched may be used
/// after a panic, as with any `catch_unwind`.
pub fn catch<T>(run: impl FnOnce() -> T) -> Option<T> {
    CATCHING.with(|c| c.set(c.get() + 1));
    let outcome = panic::catch_unwind(AssertUnwindSafe(run));
    CATCHING.with(|c| c.set(c.get() - 1));
    outcome.ok()
}

/// Whether a panic raised now, on this thread, would be caught by [`catch`].
pub fn expected() -> bool {
    CATCHING.with(Cell::get) > 0
}

/// Installs (once per process) a panic hook that logs a panic [`expected`] at `debug` level and
/// hands every other panic to the hook that was installed before, the standard one by default.
pub fn quiet_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let before = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if expected() {
                tracing::debug!("a decoder panicked on input that is refused: {info}");
            } else {
                before(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_panic_is_expected_only_while_it_is_caught() {
        assert!(!expected());
        let during = catch(expected);
        assert_eq!(during, Some(true));
        assert!(!expected());
        assert_eq!(catch(|| -> u8 { panic!("a decoder's assert") }), None);
        // The count is restored after a panic, and nested catches keep the outer one.
        assert!(!expected());
        assert_eq!(catch(|| (catch(|| ()), expected())), Some((Some(()), true)));
        assert!(!expected());
    }
}
