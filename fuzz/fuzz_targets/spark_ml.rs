//! Fuzzes the Spark ML model directory reader (and the engines on what it accepts). An input is
//! a directory flattened: the metadata JSON line, a line with the byte length `L` of the node
//! data, `L` bytes of node data (Parquet), then the tree weights (Parquet) to the end; `run.sh`
//! builds the seeds that way from the committed Spark ML fixtures.
#![no_main]

mod common;

use bytes::Bytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    allow_parquet_panics();
    let Some(files) = split(data) else { return };
    if let Ok(model) = shapfusion_files::spark::from_files(&files, "fuzz") {
        common::explain(model);
    }
});

/// The Parquet crate asserts some invariants of a file instead of returning errors; the reader
/// turns those panics into errors (`catch_unwind` around the decoding, in `read_parquet`).
/// libFuzzer's panic hook aborts on every panic, before that boundary is reached, so a panic
/// raised while the reader's guarded closure is on the stack is let through to it here, wherever
/// it was raised (the Parquet crate's own asserts, or a crate it calls, such as `bytes` slicing a
/// page by the file's level lengths); any other panic still aborts and is reported.
fn allow_parquet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let stack = std::backtrace::Backtrace::force_capture().to_string();
            if !stack.contains("read_parquet::{{closure}}") {
                fuzzer_hook(info);
            }
        }));
    });
}

fn split(data: &[u8]) -> Option<Vec<(String, Bytes)>> {
    let meta_end = data.iter().position(|&b| b == b'\n')?;
    let rest = &data[meta_end + 1..];
    let len_end = rest.iter().position(|&b| b == b'\n')?;
    let len: usize = std::str::from_utf8(&rest[..len_end]).ok()?.trim().parse().ok()?;
    let body = &rest[len_end + 1..];
    let (nodes, weights) = body.split_at(len.min(body.len()));
    Some(vec![
        ("metadata/part-00000".into(), Bytes::copy_from_slice(&data[..meta_end])),
        ("data/part-00000.parquet".into(), Bytes::copy_from_slice(nodes)),
        ("treesMetadata/part-00000.parquet".into(), Bytes::copy_from_slice(weights)),
    ])
}
