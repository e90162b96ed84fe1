//! What the Parquet and Arrow IPC decoders need around them to read a file nobody vouches for
//! (a model's node data, rows to explain, a background set) without hanging or aborting the
//! process.
//!
//! The crate trusts a file's metadata in five places, each found by fuzzing:
//! - it skips an unknown field of a page header by copying its bytes to a sink, and copying at
//!   the end of its input succeeds with nothing copied, so a header listing two billion 8-byte
//!   elements was "skipped" one element at a time past the end of the file (9 s of CPU for a
//!   160 KiB file): [`EofIsAnError`] makes a read at the end an error, which no good file meets;
//! - it allocates a column chunk's stated size before reading it (a `Vec` of that capacity for a
//!   file), so a chunk that claims terabytes aborts on allocation: [`check_column_chunks`];
//! - it asserts some invariants of the pages instead of returning errors (the Arrow IPC crate
//!   does too, of a file's schema): [`catch_decoder_panic`] turns such a panic into an error;
//! - it skips a list of booleans in an unknown field of the footer or a page header without
//!   reading anything (each boolean takes no byte to it), so a list that claims two billion
//!   of them loops for seconds however short the file: [`check_thrift`] walks the footer and
//!   every page header first (as far as the crate reads it, past its column chunk too), in time
//!   linear in their bytes, and refuses a list or map of booleans longer than the bytes left, or
//!   collections of more booleans in all than the struct's bytes (a writer that follows Thrift's
//!   compact protocol spends a byte on each);
//! - it sizes a dictionary by its page header's count of values, filling that many entries
//!   before decoding one, so a header of a few bytes that claims four hundred million values
//!   of a 30-row file allocates gigabytes: [`check_thrift`] refuses a dictionary page whose
//!   count its own bytes cannot hold, or whose entries would pass [`MAX_DICTIONARY_BYTES`]
//!   (reading each varint as the crate does, whatever its length).
//!
//! [`open`] puts these in front of the crate's synchronous reader. Readers that fetch a file's
//! byte ranges themselves (DataFusion's, for SQL tables) get them from [`CheckedFooter`]: the
//! footer's checks once, then the page headers of each range as it is fetched.

use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};

/// Why [`open`] refused a file.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The Parquet crate's own error.
    Parquet(ParquetError),
    /// One of the checks here, and what it found.
    Checked(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Parquet(e) => e.fmt(f),
            Refused::Checked(detail) => f.write_str(detail),
        }
    }
}

/// A reader builder over `source` with every guard here in place: the footer walked before the
/// crate parses it, the column chunks and page headers checked after, reads past the end errors.
/// Decoding the pages still wants [`catch_decoder_panic`] around it.
pub(crate) fn open<R: ChunkReader + 'static>(source: R) -> Result<ParquetRecordBatchReaderBuilder<EofIsAnError<R>>, Refused> {
    check_thrift(&source, None).map_err(Refused::Checked)?;
    let source = Arc::new(source);
    let builder = ParquetRecordBatchReaderBuilder::try_new(EofIsAnError(source.clone())).map_err(Refused::Parquet)?;
    check_column_chunks(builder.metadata(), source.len()).map_err(Refused::Checked)?;
    check_thrift(&*source, Some(builder.metadata())).map_err(Refused::Checked)?;
    Ok(builder)
}

/// A Parquet source whose readers fail a read at the end of the file instead of reading nothing.
pub(crate) struct EofIsAnError<R>(Arc<R>);

impl<R: Length> Length for EofIsAnError<R> {
    fn len(&self) -> u64 {
        self.0.len()
    }
}

impl<R: ChunkReader> ChunkReader for EofIsAnError<R> {
    type T = EofIsAnErrorRead<R::T>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(EofIsAnErrorRead(self.0.get_read(start)?))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.0.get_bytes(start, length)
    }
}

/// A reader of [`EofIsAnError`]: a read at the end of the file is an error.
pub(crate) struct EofIsAnErrorRead<T>(T);

impl<T: Read> Read for EofIsAnErrorRead<T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf)? {
            0 if !buf.is_empty() => Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the end of the Parquet file")),
            n => Ok(n),
        }
    }
}

/// Checks what the Parquet reader asserts or allocates rather than checks: every column chunk's
/// byte range (dictionary or first data page, compressed size) lies within the file.
fn check_column_chunks(metadata: &ParquetMetaData, file_len: u64) -> Result<(), String> {
    for (g, group) in metadata.row_groups().iter().enumerate() {
        for (c, column) in group.columns().iter().enumerate() {
            let start = column.dictionary_page_offset().unwrap_or_else(|| column.data_page_offset());
            let len = column.compressed_size();
            let fits = start >= 0 && len >= 0 && start.checked_add(len).is_some_and(|end| end as u64 <= file_len);
            if !fits {
                return Err(format!("row group {g}, column {c}: byte range {start}+{len} lies outside the file ({file_len} bytes)"));
            }
        }
    }
    Ok(())
}

/// A Parquet file's footer, checked as this crate's readers check a file's, for a reader that
/// fetches the file's byte ranges itself (DataFusion's tables): it knows where each column
/// chunk lies, so that [`check_range`](Self::check_range) can check the pages of a range
/// fetched from one before the Parquet crate decodes them.
#[derive(Debug)]
pub struct CheckedFooter {
    /// The column chunks, by their first byte.
    chunks: Vec<ChunkSpan>,
    /// Where the footer starts: no column chunk's page lies past it.
    footer_start: u64,
}

/// Where one column chunk lies in its file.
#[derive(Debug)]
struct ChunkSpan {
    start: u64,
    end: u64,
    row_group: usize,
    column: usize,
    descr: parquet::schema::types::ColumnDescPtr,
}

impl CheckedFooter {
    /// How many bytes at the end of a file hold its footer, its length and its magic, from its
    /// last 8 bytes (`tail` may hold more before them); `None` where they are not a plain
    /// Parquet footer's end (an encrypted footer, or not Parquet: nothing to check).
    pub fn tail_len(tail: &[u8]) -> Option<u64> {
        let end = tail.len().checked_sub(8).map(|at| &tail[at..])?;
        (&end[4..] == b"PAR1").then(|| u64::from(u32::from_le_bytes([end[0], end[1], end[2], end[3]])) + 8)
    }

    /// Checks the footer of a file of `file_len` bytes whose last bytes are `tail`, which holds
    /// at least [`tail_len`](Self::tail_len) of them: refuses, naming what it found, a footer
    /// that would make the Parquet crate loop or panic (also in turning its schema into Arrow's),
    /// and a column chunk that lies outside the file. A footer the crate cannot parse is left
    /// to the crate, which says why (the result then checks no pages).
    pub fn new(tail: &[u8], file_len: u64) -> Result<CheckedFooter, String> {
        let unchecked = CheckedFooter { chunks: Vec::new(), footer_start: 0 };
        let Some(needed) = Self::tail_len(tail) else { return Ok(unchecked) };
        let (Ok(needed_usize), true) = (usize::try_from(needed), needed <= file_len) else { return Ok(unchecked) };
        let Some(footer) = tail.len().checked_sub(needed_usize).map(|at| &tail[at..tail.len() - 8]) else {
            return Err(format!("the footer needs the last {needed} bytes of the file, {} given", tail.len()));
        };
        walk_struct(footer).map_err(|e| format!("footer: {e}"))?;
        let metadata = match catch_decoder_panic(|| parquet::file::metadata::ParquetMetaDataReader::decode_metadata(footer)) {
            Some(Ok(metadata)) => metadata,
            Some(Err(_)) => return Ok(unchecked),
            None => return Err(corrupt("Parquet")),
        };
        let file = metadata.file_metadata();
        if catch_decoder_panic(|| parquet::arrow::parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata())).is_none() {
            return Err("the footer's Arrow schema (ARROW:schema) is corrupt: the Parquet reader failed on it".into());
        }
        check_column_chunks(&metadata, file_len)?;
        let mut chunks = Vec::new();
        for (row_group, group) in metadata.row_groups().iter().enumerate() {
            for (column, chunk) in group.columns().iter().enumerate() {
                // Within the file, as `check_column_chunks` found above.
                let (start, len) = chunk.byte_range();
                chunks.push(ChunkSpan { start, end: start + len, row_group, column, descr: chunk.column_descr_ptr() });
            }
        }
        chunks.sort_by_key(|c| c.start);
        Ok(CheckedFooter { chunks, footer_start: file_len - needed })
    }

    /// Checks `bytes`, fetched from byte `start` of the file, before the crate decodes them:
    /// the page headers of every column chunk the range holds are walked as the crate reads
    /// them (from the range's start where it starts inside a chunk: a reader fetches pages
    /// from a chunk's start, or from where the file's offset index puts a page), refusing what
    /// the module docs list (a dictionary count past its bytes, a list of booleans past its
    /// header's bytes) and a header that runs past its chunk. A read that reaches the footer is
    /// of the metadata (a reader's first read of a file, from any byte before its end; its
    /// pages are read again, and checked then) and passes.
    pub fn check_range(&self, start: u64, bytes: &Bytes) -> Result<(), String> {
        let fetched_end = start.saturating_add(bytes.len() as u64);
        if fetched_end > self.footer_start {
            return Ok(()); // a read of the metadata
        }
        // The chunks that start before the range ends, from the last that starts at or before it.
        let first = self.chunks.partition_point(|c| c.start <= start).saturating_sub(1);
        let last = self.chunks.partition_point(|c| c.start < fetched_end);
        for chunk in self.chunks.get(first..last).unwrap_or_default() {
            let from = match chunk.start >= start {
                true => chunk.start,
                false if start < chunk.end => start,
                false => continue,
            };
            let end = fetched_end.min(chunk.end);
            let read = |at: u64, len: u64| {
                let to = at.saturating_add(len).min(end);
                (at < to).then(|| bytes.slice((at - start) as usize..(to - start) as usize))
            };
            walk_pages(read, from, end - from, fetched_end >= chunk.end, &chunk.descr)
                .map_err(|e| format!("row group {}, column {}, {e}", chunk.row_group, chunk.column))?;
        }
        Ok(())
    }
}

/// Checks what the Arrow IPC file reader allocates rather than checks: the footer's length,
/// and that every block of the footer (a dictionary or a record batch) lies within the file.
/// The reader allocates a block's stated metadata and body, zeroed, before it reads a byte of
/// it, so a 482-byte file whose footer claims a 100 GB body aborted the process. What this
/// cannot parse it leaves to the reader, which reports it; `source` is left at its start.
pub fn check_ipc_blocks<R: Read + std::io::Seek>(source: &mut R) -> Result<(), String> {
    use std::io::SeekFrom;
    let checked = check_ipc_footer(source);
    source.seek(SeekFrom::Start(0)).map_err(|e| format!("seeking back to the start: {e}"))?;
    checked
}

fn check_ipc_footer<R: Read + std::io::Seek>(source: &mut R) -> Result<(), String> {
    use std::io::SeekFrom;
    let Ok(len) = source.seek(SeekFrom::End(0)) else { return Ok(()) };
    let mut trailer = [0u8; 10];
    if len < 16 || source.seek(SeekFrom::End(-10)).is_err() || source.read_exact(&mut trailer).is_err() {
        return Ok(());
    }
    // Not an Arrow IPC file's end, or a negative length: the reader says what it is.
    let Ok(footer_len) = arrow::ipc::reader::read_footer_length(trailer) else { return Ok(()) };
    let footer_len = footer_len as u64;
    if footer_len + 10 > len {
        return Err(format!("its footer of {footer_len} bytes is longer than the file ({len} bytes)"));
    }
    let mut footer = vec![0u8; footer_len as usize];
    if source.seek(SeekFrom::End(-10 - footer_len as i64)).is_err() || source.read_exact(&mut footer).is_err() {
        return Ok(());
    }
    let Ok(footer) = arrow::ipc::root_as_footer(&footer) else { return Ok(()) };
    for (kind, blocks) in [("dictionary", footer.dictionaries()), ("record batch", footer.recordBatches())] {
        for (i, block) in blocks.iter().flatten().enumerate() {
            let (offset, metadata, body) = (block.offset(), i64::from(block.metaDataLength()), block.bodyLength());
            let end = i128::from(offset) + i128::from(metadata) + i128::from(body);
            if offset < 0 || metadata < 0 || body < 0 || end > i128::from(len) {
                return Err(format!("its {kind} {i} claims {metadata} + {body} bytes at byte {offset}, past the end of the file ({len} bytes)"));
            }
        }
    }
    Ok(())
}

/// Runs `decode` (reading a file's metadata or pages), turning a panic of the decoder (the
/// Parquet or Arrow IPC crate) on a corrupt file into `None`. The fuzz targets recognise a panic
/// inside this function's closure by its name, `catch_decoder_panic`, and let it through to
/// here rather than report it.
// The closure is what the fuzz targets' hook looks for on the stack, so it stays.
#[allow(clippy::redundant_closure)]
pub(crate) fn catch_decoder_panic<T>(decode: impl FnOnce() -> T) -> Option<T> {
    shapfusion_core::expected_panic::catch(|| decode())
}

/// What a caller says when [`catch_decoder_panic`] caught a panic of the `format` reader.
pub(crate) fn corrupt(format: &str) -> String {
    format!("the {format} reader failed on a corrupt file (its metadata contradicts its contents)")
}

/// Walks, ahead of the Parquet crate, the Thrift structures it decodes: the footer
/// (`FileMetaData`, with `metadata: None`, before `try_new`), or the header of every page of
/// every column chunk in `metadata` (after [`check_column_chunks`]), one page after the other as
/// the crate reads them; refuses what would make the crate loop without reading (see the module
/// docs). Every column's pages are walked, read or not: a file is refused whole or not at all.
/// What this walk cannot parse it leaves to the crate, which reports it.
fn check_thrift<R: ChunkReader>(source: &R, metadata: Option<&ParquetMetaData>) -> Result<(), String> {
    let Some(metadata) = metadata else {
        let len = source.len();
        if len < 12 {
            return Ok(());
        }
        let Ok(tail) = source.get_bytes(len - 8, 8) else { return Ok(()) };
        let Some(needed) = CheckedFooter::tail_len(&tail).filter(|&n| n <= len) else {
            return Ok(()); // not a plain footer: the crate says what it is
        };
        let Ok(footer) = source.get_bytes(len - needed, (needed - 8) as usize) else { return Ok(()) };
        return walk_struct(&footer).map(|_| ()).map_err(|e| format!("footer: {e}"));
    };
    for (g, group) in metadata.row_groups().iter().enumerate() {
        for (c, column) in group.columns().iter().enumerate() {
            // Within the file, as `check_column_chunks` found before this walk.
            let (start, len) = column.byte_range();
            // At most to the end of the file (a read past it is an error, not fewer bytes).
            let read = |at: u64, len: u64| source.get_bytes(at, len.min(source.len().saturating_sub(at)) as usize).ok();
            // A header that runs past its chunk is walked on as the crate reads it, up to the end
            // of the file, where the crate's reads fail (`EofIsAnError`).
            walk_pages(read, start, len, false, column.column_descr()).map_err(|e| format!("row group {g}, column {c}, {e}"))?;
        }
    }
    Ok(())
}

/// Walks the page headers of `left` bytes of a column chunk of `column` from byte `at`, one page
/// after the other as the crate reads them, reading each header through `read(at, len)` (which
/// may return fewer bytes; `None`: nothing more to read), and checks each dictionary page. A
/// header that runs past the `left` bytes is refused where `past_end_refused` says so, else
/// walked on through `read` past them, as far as `read` gives bytes. What the walk cannot parse
/// it leaves to the crate.
fn walk_pages(
    mut read: impl FnMut(u64, u64) -> Option<Bytes>,
    mut at: u64,
    mut left: u64,
    past_end_refused: bool,
    column: &parquet::schema::types::ColumnDescriptor,
) -> Result<(), String> {
    // A header is read through a window that grows while the header runs past it.
    let mut window = PAGE_HEADER_WINDOW;
    while left > 0 {
        // Where a header may run past its chunk, the crate goes on reading it from the bytes
        // after the chunk (it fails only at the end of the file), so the walk reads them too:
        // a header walked only to its chunk's end let lists of booleans after it through
        // (a fuzzed 7 KiB Spark ML node file held the crate in its skip for 8 s that way).
        let Some(bytes) = read(at, if past_end_refused { window.min(left) } else { window }) else { break };
        match walk_struct(&bytes) {
            Ok(Walked::Whole { len, header: PageHeader { compressed_page_size: Some(data), uncompressed_page_size, dictionary_values } })
                if data >= 0 =>
            {
                if let Some(values) = dictionary_values {
                    check_dictionary(values, uncompressed_page_size, column).map_err(|e| format!("dictionary page at byte {at}: {e}"))?;
                }
                let page = len as u64 + data as u64;
                if page > left {
                    break; // the crate refuses the page's size
                }
                (at, left, window) = (at + page, left - page, PAGE_HEADER_WINDOW);
            }
            Ok(Walked::Truncated) if (window < left || !past_end_refused) && (bytes.len() as u64) >= window => window = window.saturating_mul(4),
            Ok(Walked::Truncated) if past_end_refused && (bytes.len() as u64) >= left => {
                return Err(format!("page header at byte {at}: runs past the end of its column chunk"));
            }
            Ok(_) => break,
            Err(e) => return Err(format!("page header at byte {at}: {e}")),
        }
    }
    Ok(())
}

/// Most bytes a dictionary's decoded entries may take: a writer falls back from dictionary
/// encoding long before (Parquet's writers at a 1 MiB dictionary page by default).
const MAX_DICTIONARY_BYTES: u64 = 1 << 30;

/// Refuses a dictionary page of `values` values (its header's count) of `column`'s type whose
/// `uncompressed` bytes (the PLAIN values it decodes) cannot hold that many, or whose decoded
/// entries would take more than [`MAX_DICTIONARY_BYTES`]: the crate fills that many entries
/// before it decodes any.
fn check_dictionary(values: i32, uncompressed: Option<i32>, column: &parquet::schema::types::ColumnDescriptor) -> Result<(), String> {
    use parquet::basic::Type;
    // A negative count: the crate refuses it.
    let Ok(values) = u64::try_from(values) else { return Ok(()) };
    // The fewest bits a PLAIN value of the type takes, and the bytes of a decoded entry.
    let (bits, entry) = match column.physical_type() {
        Type::BOOLEAN => (1, 1),
        Type::INT32 | Type::FLOAT => (32, 4),
        Type::INT64 | Type::DOUBLE => (64, 8),
        Type::INT96 => (96, 12),
        Type::BYTE_ARRAY => (32, std::mem::size_of::<parquet::data_type::ByteArray>() as u64),
        Type::FIXED_LEN_BYTE_ARRAY => (8 * column.type_length().max(1) as u64, std::mem::size_of::<parquet::data_type::FixedLenByteArray>() as u64),
    };
    let bytes = uncompressed.and_then(|u| u64::try_from(u).ok()).unwrap_or(0);
    if values.saturating_mul(bits) > bytes.saturating_mul(8) {
        return Err(format!("{values} values of type {} cannot fit in its {bytes} bytes", column.physical_type()));
    }
    if values.saturating_mul(entry) > MAX_DICTIONARY_BYTES {
        return Err(format!("{values} dictionary values would take more than {} MiB", MAX_DICTIONARY_BYTES >> 20));
    }
    Ok(())
}

/// The bytes first read of a page header (it grows fourfold while a header is longer: a page's
/// statistics can hold long values).
const PAGE_HEADER_WINDOW: u64 = 4 << 10;

/// Deepest nesting [`walk_struct`] follows: the crate skips at most 64 levels of an unknown
/// field, below the few of the structures it knows.
const MAX_THRIFT_DEPTH: usize = 128;

/// What [`walk_struct`] found.
#[derive(Debug, PartialEq)]
enum Walked {
    /// A whole struct of `len` bytes, with what it holds of a page header's fields.
    Whole { len: usize, header: PageHeader },
    /// The bytes end inside the struct.
    Truncated,
    /// Something the crate will refuse on its own (a type code no Thrift type has).
    Unparsed,
}

/// The fields of a page header that [`check_thrift`] checks, as [`walk_struct`] found them (a
/// struct that is not a page header may hold fields with the same ids; `None` where absent or of
/// another type).
#[derive(Debug, Default, PartialEq)]
struct PageHeader {
    /// Field 2, `uncompressed_page_size`.
    uncompressed_page_size: Option<i32>,
    /// Field 3, `compressed_page_size`.
    compressed_page_size: Option<i32>,
    /// Field 1 of field 7 (`dictionary_page_header.num_values`).
    dictionary_values: Option<i32>,
}

/// What a value of a list, set or map still to walk repeats: its types (one for a list, key and
/// value for a map) and how many values are left.
enum Frame {
    Struct { last_id: i16 },
    Repeat { types: [u8; 2], arity: usize, left: u64 },
}

/// Walks one Thrift compact-protocol struct from the start of `buf`, with an explicit stack,
/// as the crate parses or skips it (a boolean in a list or map takes no byte, as the crate
/// reads it); refuses a collection of booleans longer than the bytes left, and collections whose
/// booleans together outnumber `buf`'s bytes. Every step reads a byte or ends a value, and the
/// booleans of all collections together are bounded by the bytes, so the walk is linear in
/// `buf`.
fn walk_struct(buf: &[u8]) -> Result<Walked, String> {
    let mut pos = 0usize;
    // The booleans of every collection walked so far. Bounding each collection alone by the
    // bytes left is not enough: a list of lists (a byte a header) whose every list claims as
    // many booleans as bytes are left makes the square of the bytes (seen reading this walk,
    // not yet by a fuzzer). A writer spends a byte on each boolean, so all of them together fit
    // the bytes.
    let mut booleans = 0u64;
    let mut count_booleans = |count: u64| -> Result<(), String> {
        booleans = booleans.saturating_add(count);
        if booleans > buf.len() as u64 {
            return Err(format!("collections of {booleans} booleans in all in {} bytes", buf.len()));
        }
        Ok(())
    };
    let mut stack = vec![Frame::Struct { last_id: 0 }];
    let mut page = PageHeader::default();
    macro_rules! byte {
        () => {{
            let Some(&b) = buf.get(pos) else { return Ok(Walked::Truncated) };
            pos += 1;
            b
        }};
    }
    // A varint as the crate reads it: of any length, its bits past the 64th wrapping around
    // onto the first (a longer one is not refused there, so it is not left to the crate here:
    // a page header's count of eleven bytes read as a billion values took gigabytes).
    macro_rules! varint {
        () => {{
            let mut value = 0u64;
            let mut shift = 0u32;
            loop {
                let b = byte!();
                value |= u64::from(b & 0x7f).wrapping_shl(shift);
                shift = shift.wrapping_add(7);
                if b & 0x80 == 0 {
                    break value;
                }
            }
        }};
    }
    loop {
        let depth = stack.len();
        // The top-level field whose struct the walk is in (at depth 2).
        let top_field = match stack.first() {
            Some(Frame::Struct { last_id }) => *last_id,
            _ => 0,
        };
        if depth > MAX_THRIFT_DEPTH {
            return Err(format!("Thrift structures nested deeper than {MAX_THRIFT_DEPTH}"));
        }
        // The type of the next value, or the end of the innermost struct or collection.
        let ty = match stack.last_mut() {
            None => return Ok(Walked::Whole { len: pos, header: page }),
            Some(Frame::Struct { last_id }) => {
                let header = byte!();
                if header & 0x0f == 0 {
                    stack.pop();
                    continue;
                }
                let delta = i16::from(header >> 4);
                let id = if delta != 0 {
                    last_id.saturating_add(delta)
                } else {
                    let zigzag = varint!();
                    ((zigzag >> 1) as i16) ^ -((zigzag & 1) as i16)
                };
                *last_id = id;
                let ty = header & 0x0f;
                let i32_field = match (depth, top_field, id, ty) {
                    (1, _, 2, 5) => Some(&mut page.uncompressed_page_size),
                    (1, _, 3, 5) => Some(&mut page.compressed_page_size),
                    (2, 7, 1, 5) => Some(&mut page.dictionary_values),
                    _ => None,
                };
                if let Some(field) = i32_field {
                    let zigzag = varint!();
                    *field = Some(((zigzag >> 1) as i32) ^ -((zigzag & 1) as i32));
                    continue;
                }
                ty
            }
            Some(Frame::Repeat { left: 0, .. }) => {
                stack.pop();
                continue;
            }
            Some(Frame::Repeat { types, arity, left }) => {
                *left -= 1;
                types[(*left % *arity as u64) as usize]
            }
        };
        match ty {
            1 | 2 => {}    // a boolean: in a struct its value is its type; in a list, nothing to the crate
            3 => pos += 1, // checked when the next byte is read
            4..=6 => {
                varint!();
            }
            7 => pos += 8,
            13 => pos += 16,
            8 => {
                let len = varint!();
                pos = pos.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
            }
            9 | 10 => {
                let header = byte!();
                if header == 0 {
                    continue; // an empty list, as some writers mark one
                }
                let element = header & 0x0f;
                let count = match header >> 4 {
                    15 => varint!(),
                    n => u64::from(n),
                };
                let remaining = (buf.len() - pos) as u64;
                if matches!(element, 1 | 2) {
                    if count > remaining {
                        return Err(format!("a list of {count} booleans in {remaining} bytes"));
                    }
                    count_booleans(count)?;
                }
                stack.push(Frame::Repeat { types: [element, element], arity: 1, left: count });
            }
            11 => {
                let count = varint!();
                if count > 0 {
                    let kv = byte!();
                    let (key, value) = (kv >> 4, kv & 0x0f);
                    let remaining = (buf.len() - pos) as u64;
                    if matches!(key, 1 | 2) && matches!(value, 1 | 2) {
                        if count > remaining {
                            return Err(format!("a map of {count} booleans in {remaining} bytes"));
                        }
                        count_booleans(count)?;
                    }
                    stack.push(Frame::Repeat { types: [value, key], arity: 2, left: count.saturating_mul(2) });
                }
            }
            12 => stack.push(Frame::Struct { last_id: 0 }),
            _ => return Ok(Walked::Unparsed),
        }
        if pos > buf.len() {
            return Ok(Walked::Truncated);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compact-protocol field header: the id's delta from the last field and the type.
    fn field(delta: u8, ty: u8) -> u8 {
        (delta << 4) | ty
    }

    #[test]
    fn a_page_header_walks_whole_with_its_compressed_size() {
        // type = 0 (i32 1), uncompressed 100 (i32 2), compressed 42 (i32 3, zigzag 84), an unknown
        // binary field 9 of 3 bytes, a struct field 10 holding a bool and a list of two i64s, stop.
        let mut header = vec![field(1, 5), 0, field(1, 5), 200, 1, field(1, 5), 84, field(6, 8), 3, b'a', b'b', b'c'];
        header.extend([field(1, 12), field(1, 1), field(1, 9), 0x26, 2, 4, 0, 0]);
        let len = header.len();
        header.extend([0xff; 5]); // the page's data: not walked
        let sizes = PageHeader { uncompressed_page_size: Some(100), compressed_page_size: Some(42), dictionary_values: None };
        assert_eq!(walk_struct(&header), Ok(Walked::Whole { len, header: sizes }));
        assert_eq!(walk_struct(&header[..len - 1]), Ok(Walked::Truncated));
        assert_eq!(walk_struct(&header[..4]), Ok(Walked::Truncated));
    }

    #[test]
    fn a_dictionary_page_header_gives_its_count_of_values() {
        // type 2 (i32 1), uncompressed 240, compressed 244, dictionary_page_header (struct 7):
        // num_values 30 (i32 1), encoding 0 (i32 2), is_sorted (bool 3); stop, stop.
        let header = [field(1, 5), 4, field(1, 5), 0xe0, 3, field(1, 5), 0xe8, 3, field(4, 12), field(1, 5), 60, field(1, 5), 0, field(1, 1), 0, 0];
        let sizes = PageHeader { uncompressed_page_size: Some(240), compressed_page_size: Some(244), dictionary_values: Some(30) };
        assert_eq!(walk_struct(&header), Ok(Walked::Whole { len: header.len(), header: sizes }));
        // A field 1 nested under another field is not the count.
        let other = [field(1, 5), 4, field(7, 12), field(1, 5), 60, 0, 0];
        assert_eq!(walk_struct(&other), Ok(Walked::Whole { len: other.len(), header: PageHeader::default() }));
    }

    #[test]
    fn booleans_that_take_no_bytes_are_bounded_by_the_bytes_left() {
        // An unknown field 5: a list of booleans whose count (a varint) is 2^31 − 1.
        let list = [field(5, 9), 0xf1, 0xff, 0xff, 0xff, 0xff, 0x07, 0];
        let e = walk_struct(&list).unwrap_err();
        assert!(e.contains("a list of 2147483647 booleans in 1 bytes"), "{e}");
        // Three booleans where three bytes follow: the crate's reading (no byte each) goes on.
        assert_eq!(walk_struct(&[field(5, 9), 0x31, 0, 0, 0]), Ok(Walked::Whole { len: 3, header: PageHeader::default() }));
        // A map of booleans to booleans, 2^20 entries in a few bytes.
        let map = [field(2, 11), 0x80, 0x80, 0x40, 0x11, 0];
        assert!(walk_struct(&map).unwrap_err().contains("a map of 1048576 booleans"));
        // A map of booleans to i32s reads a byte an entry: walked, to the end of its bytes.
        assert_eq!(walk_struct(&[field(2, 11), 0x80, 0x80, 0x40, 0x15, 0]), Ok(Walked::Truncated));
        // A list of 100 lists (a byte a header), each of 14 booleans, fewer than the bytes left
        // after it: 1,400 booleans in all in 104 bytes (the square of the bytes, at scale).
        let mut nested = vec![field(5, 9), 0xf9, 100];
        nested.extend([0xe1; 100]);
        nested.push(0);
        let e = walk_struct(&nested).unwrap_err();
        assert!(e.contains("booleans in all in 104 bytes"), "{e}");
        // As many booleans in all as the bytes hold: walked.
        let mut fits = vec![field(5, 9), 0x29, 0x11, 0x11, 0];
        fits.extend([0; 2]);
        assert_eq!(walk_struct(&fits), Ok(Walked::Whole { len: 5, header: PageHeader::default() }));
    }

    #[test]
    fn a_varint_is_read_as_the_crate_reads_it_whatever_its_length() {
        // uncompressed_page_size (i32 2) as eleven bytes: seven bits each, the last ones past
        // the 64th wrapping onto the first, as the crate's `read_vlq` has it; then a stop.
        let mut header = vec![field(2, 5)];
        header.extend([0xe7; 10]);
        header.extend([0x07, 0]);
        let mut wide = 0u64;
        for (i, b) in header[1..12].iter().enumerate() {
            wide |= u64::from(b & 0x7f).wrapping_shl(7 * i as u32);
        }
        let expected = ((wide >> 1) as i64 ^ -((wide & 1) as i64)) as i32;
        let sizes = PageHeader { uncompressed_page_size: Some(expected), ..PageHeader::default() };
        assert_eq!(walk_struct(&header), Ok(Walked::Whole { len: header.len(), header: sizes }));
    }

    #[test]
    fn nesting_is_bounded_without_recursion() {
        // A struct field inside a struct field, thousands deep: refused at the bound, no stack.
        let deep = vec![field(1, 12); 100_000];
        assert!(walk_struct(&deep).unwrap_err().contains("nested deeper than 128"));
        // A type code no Thrift type has is the crate's to report.
        assert_eq!(walk_struct(&[field(1, 14)]), Ok(Walked::Unparsed));
    }

    /// The bytes of a committed regression input of the `input_rows` fuzz target.
    fn regression(name: &str) -> Bytes {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/input_rows").join(name);
        Bytes::from(std::fs::read(path).unwrap())
    }

    /// What a reader that fetches ranges (DataFusion's) asks of [`CheckedFooter`]: every column
    /// chunk whole, in the file's order; the first refusal.
    fn check_every_chunk(file: &Bytes) -> Result<CheckedFooter, String> {
        let footer = CheckedFooter::new(file, file.len() as u64)?;
        for chunk in &footer.chunks {
            footer.check_range(chunk.start, &file.slice(chunk.start as usize..chunk.end as usize))?;
        }
        Ok(footer)
    }

    #[test]
    fn a_checked_footer_refuses_what_open_refuses_from_the_ranges_a_reader_fetches() {
        let e = check_every_chunk(&regression("dictionary_count_past_its_bytes.parquet")).unwrap_err();
        assert!(e.contains("row group 0, column 0, dictionary page at byte 4") && e.contains("values of type DOUBLE cannot fit"), "{e}");
        let file = regression("page_header_list_past_the_end.parquet");
        let e = check_every_chunk(&file).unwrap_err();
        assert!(e.contains("runs past the end of its column chunk"), "{e}");
        // Read as DataFusion reads it: the whole file at once with the footer (the metadata),
        // then the chunks in one range (adjacent ranges coalesced).
        let footer = CheckedFooter::new(&file, file.len() as u64).unwrap();
        footer.check_range(0, &file).unwrap();
        let (data, end) = (footer.chunks[0].start as usize, footer.footer_start as usize);
        let e = footer.check_range(data as u64, &file.slice(data..end)).unwrap_err();
        assert!(e.contains("row group 0, column 2, page header at byte 26903: runs past the end of its column chunk"), "{e}");
        // The footer itself: its Arrow schema names a float precision Arrow has not (the crate
        // panics turning it into Arrow's).
        let e = check_every_chunk(&regression("arrow_schema_unknown_float_precision.parquet")).unwrap_err();
        assert!(e.contains("Arrow schema (ARROW:schema) is corrupt"), "{e}");
    }

    /// A good file passes whatever a reader fetches: each chunk whole, pages from inside a
    /// chunk, every chunk in one range, and its end from the middle of a page (a first read of
    /// the metadata).
    #[test]
    fn a_checked_footer_passes_every_read_of_a_good_file() {
        use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray};
        let values = Float64Array::from_iter_values((0..20_000).map(|i| f64::from(i % 300)));
        let names = StringArray::from_iter_values((0..20_000).map(|i| format!("name {}", i % 50)));
        let batch = RecordBatch::try_from_iter([("x", Arc::new(values) as ArrayRef), ("name", Arc::new(names) as ArrayRef)]).unwrap();
        let properties = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(6_000))
            .set_data_page_row_count_limit(1_000)
            .build();
        let mut file = Vec::new();
        let mut writer = parquet::arrow::ArrowWriter::try_new(&mut file, batch.schema(), Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let file = Bytes::from(file);
        let footer = check_every_chunk(&file).unwrap();
        assert_eq!(footer.chunks.len(), 8, "four row groups of two columns");
        // Each page where the offset index puts it, as a reader with a row selection fetches it.
        let metadata = parquet::file::metadata::ParquetMetaDataReader::new()
            .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Required)
            .parse_and_finish(&file)
            .unwrap();
        let pages: Vec<_> = metadata.offset_index().unwrap().iter().flatten().flat_map(|c| c.page_locations().iter()).collect();
        assert!(pages.len() > 16, "several pages a chunk: {}", pages.len());
        for page in pages {
            let (at, len) = (page.offset as usize, page.compressed_page_size as usize);
            footer.check_range(at as u64, &file.slice(at..at + len)).unwrap();
        }
        let (first, end) = (footer.chunks[0].start, footer.footer_start);
        footer.check_range(first, &file.slice(first as usize..end as usize)).unwrap();
        footer.check_range(0, &file).unwrap();
        for chunk in &footer.chunks {
            // From the middle of a chunk to the end of the file: a read of the metadata.
            let middle = (chunk.start + chunk.end) / 2;
            footer.check_range(middle, &file.slice(middle as usize..)).unwrap();
        }
    }
}
