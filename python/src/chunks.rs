//! Long calls in chunks of rows with the GIL released, so other Python threads run meanwhile
//! and Ctrl-C (a `KeyboardInterrupt`) stops a call within about a chunk's time. The first
//! chunk's size comes from a rough cost model ([`first_chunk_rows`]); later chunks aim at
//! [`CHUNK_SECONDS`] of work at the measured rate. A serving call is one chunk, and a
//! million-row call pauses every half second, which costs nothing measurable.

use std::ops::Range;
use std::time::Instant;

use pyo3::prelude::*;

use crate::errors::to_py;

/// Work per chunk once the rate is known: how long Ctrl-C may wait.
const CHUNK_SECONDS: f64 = 0.5;
/// Work the first chunk aims at, by the cost model.
const FIRST_CHUNK_SECONDS: f64 = 0.1;
/// The cost model: seconds per leaf of the ensemble, per row and output value, on one thread
/// (measured 4–8 ns with `linear` on the benchmark models; rounded up, so a first chunk errs
/// short).
const SECONDS_PER_LEAF: f64 = 1e-8;
/// Most growth from one chunk to the next (a fast first chunk may be mostly set-up).
const MAX_GROWTH: usize = 16;

/// Calls `work` on consecutive ranges covering `0..rows`, without the GIL, checking for signals
/// between ranges. Stops at the first error, or with the `KeyboardInterrupt` a signal handler
/// raised.
pub fn for_each_chunk<F>(py: Python<'_>, rows: usize, first_chunk: usize, mut work: F) -> PyResult<()>
where
    F: FnMut(Range<usize>) -> shapfusion_core::Result<()> + Send,
{
    let mut start = 0;
    let mut chunk = first_chunk.max(1);
    while start < rows {
        let end = rows.min(start.saturating_add(chunk));
        let began = Instant::now();
        py.detach(|| work(start..end)).map_err(to_py)?;
        py.check_signals()?;
        let seconds_per_row = began.elapsed().as_secs_f64() / (end - start) as f64;
        chunk = next_chunk(chunk, seconds_per_row);
        start = end;
    }
    Ok(())
}

/// The next chunk's rows: [`CHUNK_SECONDS`] at the measured rate, at most [`MAX_GROWTH`] times
/// the last chunk, at least one row.
fn next_chunk(last: usize, seconds_per_row: f64) -> usize {
    let target = if seconds_per_row > 0.0 { CHUNK_SECONDS / seconds_per_row } else { f64::INFINITY };
    let grown = last.saturating_mul(MAX_GROWTH);
    (target.min(grown as f64) as usize).max(1)
}

/// Rows for a first chunk of about [`FIRST_CHUNK_SECONDS`], for a model of `leaves` leaves in
/// all, `factor` times the cost of SHAP values per row (F + 1 for interactions), on `threads`
/// threads. A wrong guess costs one chunk: the next one uses the measured rate.
pub fn first_chunk_rows(leaves: usize, factor: usize, threads: usize) -> usize {
    let seconds_per_row = SECONDS_PER_LEAF * leaves.max(1) as f64 * factor.max(1) as f64 / threads.max(1) as f64;
    ((FIRST_CHUNK_SECONDS / seconds_per_row) as usize).clamp(8, 1 << 20)
}
