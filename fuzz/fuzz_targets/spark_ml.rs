//! Fuzzes the Spark ML model directory reader (and the engines on what it accepts). An input is
//! a directory flattened: the metadata JSON line, a line with the byte length `L` of the node
//! data, `L` bytes of node data (Parquet), then the tree weights (Parquet) to the end; `run.sh`
//! builds the seeds that way from the committed Spark ML fixtures.
#![no_main]

mod common;

use bytes::Bytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    common::allow_decoder_panics();
    let Some(files) = split(data) else { return };
    if let Ok(model) = shapfusion_files::spark::from_files(&files, "fuzz") {
        common::explain(model);
    }
});

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
