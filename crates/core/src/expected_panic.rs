//! Panics a caller expects and turns into an error, kept off the process's stderr.
//!
//! The Parquet and Arrow IPC crates assert some invariants of what they decode (a schema's float
//! precision, a page's level lengths) instead of returning errors, so the readers of files and
//! Flight messages run them under [`catch`] and refuse the input with an error naming it. The
//! standard panic hook would still print "thread … panicked at …" to stderr before the catch,
//! which in a server's log reads as a crash. [`quiet_hook`], installed by a program's `main`,
//! leaves such panics to a `debug` log line and prints every other panic as before: a panic
//! raised in this project's own code is a bug whatever the input, so it is printed even inside
//! [`catch`] (the input is still refused, and the process goes on).

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

/// Installs (once per process) a panic hook that logs at `debug` level a panic [`expected`] and
/// raised in a dependency's code, and hands every other panic to the hook that was installed
/// before, the standard one by default.
pub fn quiet_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let before = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if expected() {
                if info.location().is_none_or(|at| raised_in_dependency(at.file())) {
                    tracing::debug!("a decoder panicked on input that is refused: {info}");
                    return;
                }
                tracing::error!("shapfusion's own code panicked while decoding input, which is refused (a bug, please report it): {info}");
            }
            before(info);
        }));
    });
}

/// Whether a panic located in `file` was raised by a dependency (or the standard library) rather
/// than by this project's own code. Cargo compiles the workspace's crates from paths relative to
/// its root and every other crate (the registry's, git checkouts, the standard library's
/// `/rustc/…` sources) from absolute ones; a panic with no location counts as a dependency's.
/// Where shapfusion is itself compiled as another project's dependency, its panics count as a
/// dependency's too, and that project's own are the ones printed.
fn raised_in_dependency(file: &str) -> bool {
    std::path::Path::new(file).is_absolute()
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

    #[test]
    fn panics_of_our_own_code_are_told_from_a_dependencys() {
        // Where a panic in this crate is located (a `#[track_caller]` panic such as an index out
        // of bounds is located at its caller): the hook prints it even inside `catch`.
        let ours = std::panic::Location::caller().file();
        assert!(!raised_in_dependency(ours), "{ours}");
        for theirs in [
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/parquet-59.0.0/src/file/metadata/mod.rs",
            "/home/ci/.cargo/git/checkouts/ballista-0123456789abcdef/0123abc/ballista/core/src/serde/mod.rs",
            "/rustc/59807616e0f2ed2f1bbb1e1cd3afdc4a28e0a5d0/library/core/src/slice/index.rs",
        ] {
            assert!(raised_in_dependency(theirs), "{theirs}");
        }
    }
}
