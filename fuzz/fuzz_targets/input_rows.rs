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
});

/// Reads batches until the end or the first error (after which a reader may stop or repeat).
fn drain(reader: InputReader) {
    for batch in reader {
        if batch.is_err() {
            return;
        }
    }
}
