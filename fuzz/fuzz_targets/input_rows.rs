//! Fuzzes the readers of rows to explain (Parquet, CSV and Arrow IPC, told apart by their magic
//! bytes), from a file as `explain --input` and background sets read them, and from bytes as the
//! SQL engine's object-store tables do: every batch is read, and any error is fine, a panic, an
//! abort or a hang is not. `run.sh` seeds it with the committed Parquet files.
#![no_main]

mod common;

use bytes::Bytes;
use shapfusion_files::input::InputReader;

/// Rows a batch holds: small, so a seed's several batches each meet the decoder.
const BATCH_ROWS: usize = 256;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    common::allow_decoder_panics();
    // One file a process, rewritten for each input: the file path is what `explain` reads.
    let path = std::env::temp_dir().join(format!("shapfusion-fuzz-input-{}", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let Ok(reader) = InputReader::open_all(&path, BATCH_ROWS) else { return };
    let columns: Vec<String> = reader.schema().fields().iter().map(|f| f.name().clone()).collect();
    drain(reader);
    if let Ok(reader) = InputReader::from_bytes(Bytes::copy_from_slice(data), "fuzz", &columns, &columns, BATCH_ROWS) {
        drain(reader);
    }
    check_ranges(data);
});

/// The checks SQL tables get (`CheckedFooter`, before DataFusion's reader): the footer, then
/// ranges as a reader fetches them (the data before the footer, the whole file, a middle third
/// and a range from each of a few bytes), which may refuse anything and panic on nothing.
fn check_ranges(data: &[u8]) {
    let Ok(footer) = shapfusion_files::CheckedFooter::new(data, data.len() as u64) else { return };
    let bytes = Bytes::copy_from_slice(data);
    let len = data.len();
    let ranges = [(4, len.saturating_sub(8)), (0, len), (len / 3, 2 * len / 3), (len / 2, len / 2 + 1)];
    for (start, end) in ranges.into_iter().chain((0..len).step_by(len / 7 + 1).map(|s| (s, len.min(s + 4096)))) {
        if start <= end && end <= len {
            let _ = footer.check_range(start as u64, &bytes.slice(start..end));
        }
    }
}

/// Rows read of an input, at most: a file of a few hundred bytes can hold billions of rows of
/// nulls, which a reader gives as it should, a batch after the other, with nothing new to
/// decode after the first ones.
const MAX_ROWS: usize = 1 << 20;

/// Reads batches until the end, the first error (after which a reader may stop or repeat) or
/// [`MAX_ROWS`].
fn drain(reader: InputReader) {
    let mut rows = 0;
    for batch in reader {
        match batch {
            Ok(batch) if rows < MAX_ROWS => rows += batch.num_rows().max(1),
            _ => return,
        }
    }
}
