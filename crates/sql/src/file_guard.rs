//! The files of SQL tables (`shapfusion serve --table`, `CREATE EXTERNAL TABLE`) and of URL
//! tables (`SELECT * FROM 'rows.parquet'` in `shapfusion sql`) are read by DataFusion's own
//! readers, not through `shapfusion-files`. Those trust a file's metadata where the Parquet and
//! Arrow IPC crates do (found by fuzzing `shapfusion-files`): a 3 KB Parquet file whose
//! dictionary page claims 400 million values made a query allocate 3 GB, one whose page header
//! claims a list longer than the file spun for half a minute, one whose embedded Arrow schema
//! names an unknown float precision panicked while DataFusion inferred the table's schema, and
//! a 482-byte Arrow IPC file whose footer claims a 100 GB record batch aborted the process.
//!
//! Everything DataFusion reads goes through the session's object stores, so the checks sit
//! there: [`GuardedStores`] puts a [`FileGuard`] in front of every store it holds. The guard
//! recognises a Parquet reader by its first read, the end of a file ending in `PAR1`, checks
//! the footer ([`CheckedFooter`]) before handing it over, and then checks the page headers of
//! every range read from a column chunk of that file before the crate decodes them. An Arrow IPC
//! file read whole has its footer's blocks checked against its size, and any read of more than
//! 64 MiB must lie within its file. A refused file fails its query with an error naming the file
//! and what is wrong; nothing else about a read changes (other files, and reads that are not a
//! Parquet file's pages, stream through untouched).

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use datafusion::execution::object_store::ObjectStoreRegistry;
use futures::stream::{BoxStream, StreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use shapfusion_core::Error;
use shapfusion_files::CheckedFooter;
use url::Url;

/// The most bytes at the end of a file the guard buffers to look for a Parquet footer: a
/// Parquet reader's first read of a file (DataFusion reads 512 KiB, or 8 bytes without a size
/// hint). A longer read of a file's end (a CSV partition) streams through unchecked.
const MAX_TAIL_READ: u64 = 16 << 20;

/// Reads larger than this are checked to lie within their file before the store is asked
/// (`FileGuard::check_within`).
const LARGE_READ: u64 = 64 << 20;

/// The bytes at the end of a file the guard reads itself to check a footer it has not seen
/// (more where the footer is longer).
const TAIL_READ: u64 = 64 << 10;

/// Files whose footers a guard keeps (a new file past this forgets them all: they are read
/// again on the next query of each).
const MAX_FILES: usize = 65_536;

/// An object store registry whose stores are each behind a [`FileGuard`]: the default local
/// file system, and every store registered later (DataFusion's dynamic catalog registers one per
/// bucket a query names).
#[derive(Debug)]
pub struct GuardedStores {
    inner: Arc<dyn ObjectStoreRegistry>,
}

impl GuardedStores {
    /// Guards `inner`'s stores from now on, replacing its `file://` store with a guarded local
    /// file system.
    pub fn new(inner: Arc<dyn ObjectStoreRegistry>) -> Self {
        let local = Url::parse("file://").expect("file:// is a URL");
        inner.register_store(&local, FileGuard::wrap(&local, Arc::new(LocalFileSystem::new())));
        GuardedStores { inner }
    }
}

impl Default for GuardedStores {
    /// DataFusion's default registry (the local file system), guarded.
    fn default() -> Self {
        GuardedStores::new(Arc::new(datafusion::execution::object_store::DefaultObjectStoreRegistry::new()))
    }
}

impl ObjectStoreRegistry for GuardedStores {
    fn register_store(&self, url: &Url, store: Arc<dyn ObjectStore>) -> Option<Arc<dyn ObjectStore>> {
        self.inner.register_store(url, FileGuard::wrap(url, store))
    }

    fn deregister_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        self.inner.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        self.inner.get_store(url)
    }
}

/// An object store that checks the Parquet and Arrow IPC files read through it (see the module
/// docs).
pub struct FileGuard {
    inner: Arc<dyn ObjectStore>,
    /// The store's URL, to name a refused file by its whole URL.
    base: String,
    /// Per file read as Parquet: the version whose footer was checked, and what the check found.
    footers: Mutex<HashMap<Path, (Version, Arc<Verdict>)>>,
}

/// What identifies one content of a file (from its `ObjectMeta`): a rewritten file is checked
/// again.
#[derive(Debug)]
struct Version(ObjectMeta);

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&self.0, &other.0);
        a.size == b.size && a.e_tag == b.e_tag && a.last_modified == b.last_modified && a.version == b.version
    }
}

/// A checked footer, or why the file is refused.
type Verdict = std::result::Result<CheckedFooter, String>;

impl FileGuard {
    /// `store` behind a guard, as a store; a store already guarded is returned as it is.
    pub fn wrap(url: &Url, store: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        if store.to_string().starts_with(&format!("{GUARD_NAME}(")) {
            return store;
        }
        // `file:///` for the local file system, `s3://bucket/` for a bucket: then the path.
        let base = format!("{}/", url.as_str().trim_end_matches('/'));
        let base = if base == "file:/" { "file:///".to_string() } else { base };
        Arc::new(FileGuard { inner: store, base, footers: Mutex::new(HashMap::new()) })
    }

    /// The file's name in errors: its URL.
    fn name(&self, location: &Path) -> String {
        format!("{}{location}", self.base)
    }

    fn refused(&self, location: &Path, why: &str) -> object_store::Error {
        let e = Error::BadData(format!("{}: {why}", self.name(location)));
        object_store::Error::Generic { store: GUARD_NAME, source: Box::new(e) }
    }

    /// The verdict on `location` as last checked, whatever its version (a read of its pages
    /// follows a read of its footer).
    fn verdict(&self, location: &Path) -> Option<Arc<Verdict>> {
        self.footers.lock().expect("footers").get(location).map(|(_, v)| v.clone())
    }

    /// The verdict on `location` for a read of its pages: as last checked, or, for a file never
    /// read through this guard whose name says Parquet, checked now from its end (DataFusion
    /// keeps files' metadata in a cache of its own, so a file's footer may have been read
    /// before this guard forgot it, or through another store).
    async fn verdict_for_pages(&self, location: &Path) -> object_store::Result<Option<Arc<Verdict>>> {
        if let Some(verdict) = self.verdict(location) {
            return Ok(Some(verdict));
        }
        if !named(location, &["parquet"]) {
            return Ok(None);
        }
        let meta = self.inner.head(location).await?;
        let tail = self.inner.get_range(location, meta.size.saturating_sub(TAIL_READ)..meta.size).await?;
        self.check_footer(&meta, &tail).await
    }

    /// Checks the footer of the file `meta` describes, whose last bytes `tail` were just read
    /// (read more of them from the store if the footer is longer), unless that version was
    /// checked already; `None` where the file does not end as Parquet does.
    async fn check_footer(&self, meta: &ObjectMeta, tail: &Bytes) -> object_store::Result<Option<Arc<Verdict>>> {
        let version = Version(meta.clone());
        if let Some((checked, verdict)) = self.footers.lock().expect("footers").get(&meta.location) {
            if *checked == version {
                return Ok(Some(verdict.clone()));
            }
        }
        let needed = CheckedFooter::tail_len(tail).filter(|&n| n <= meta.size);
        if needed.is_none() && !named(&meta.location, &["parquet"]) {
            return Ok(None); // not Parquet (a CSV file's last part): streamed through from now on
        }
        // A file named Parquet that does not end as one is the crate's to refuse; its verdict
        // (nothing checked) is kept, so that its reads do not look for a footer every time.
        let needed = needed.unwrap_or(0);
        let verdict = if needed <= tail.len() as u64 {
            CheckedFooter::new(tail, meta.size)
        } else {
            let footer = self.inner.get_range(&meta.location, meta.size - needed..meta.size).await?;
            CheckedFooter::new(&footer, meta.size)
        };
        if let Err(why) = &verdict {
            // Also logged (once a version): DataFusion takes a URL table (`FROM 'x.parquet'`)
            // whose schema it cannot read for no table at all, dropping this error.
            tracing::warn!("Parquet file {} refused: {why}", self.name(&meta.location));
        }
        let verdict = Arc::new(verdict);
        let mut footers = self.footers.lock().expect("footers");
        if footers.len() >= MAX_FILES {
            footers.clear();
        }
        footers.insert(meta.location.clone(), (version, verdict.clone()));
        Ok(Some(verdict))
    }

    /// Refuses a read of more than [`LARGE_READ`] bytes that goes past the end of the file, before
    /// the store allocates for it (the local file system fills a buffer of the size asked for
    /// before it reads: an Arrow IPC footer claiming a 100 GB record batch in a 482-byte file
    /// aborted the process). Smaller reads are the store's to answer.
    async fn check_within(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<()> {
        if !ranges.iter().any(|r| r.end.saturating_sub(r.start) > LARGE_READ) {
            return Ok(());
        }
        let size = self.inner.head(location).await?.size;
        match ranges.iter().find(|r| r.end > size || r.start > r.end) {
            Some(r) => Err(self.refused(location, &format!("a read of bytes {}..{} lies past the end of the file ({size} bytes)", r.start, r.end))),
            None => Ok(()),
        }
    }

    /// Checks the blocks of an Arrow IPC file read whole (see
    /// [`check_ipc_blocks`](shapfusion_files::check_ipc_blocks)) before DataFusion's reader
    /// allocates them: a local file by its footer (any file: the check reads its last 10 bytes
    /// and passes what is not Arrow IPC), another store's file when its name says Arrow IPC.
    async fn check_whole_arrow_ipc(&self, location: &Path, result: GetResult) -> object_store::Result<GetResult> {
        let refused = |why: String| self.refused(location, &why);
        match &result.payload {
            GetResultPayload::File(file, _) => {
                // A second handle to the same open file: the check leaves it at its start.
                let mut file = file.try_clone().map_err(|e| object_store::Error::Generic { store: GUARD_NAME, source: Box::new(e) })?;
                shapfusion_files::check_ipc_blocks(&mut file).map_err(refused)?;
                Ok(result)
            }
            GetResultPayload::Stream(_) => {
                if !named(location, &["arrow", "feather", "ipc"]) {
                    return Ok(result);
                }
                let (result, bytes) = buffered(result).await?;
                shapfusion_files::check_ipc_blocks(&mut std::io::Cursor::new(&bytes)).map_err(refused)?;
                Ok(result)
            }
        }
    }

    /// Checks `bytes`, read from byte `start` of `location`, against the file's verdict.
    fn check_range(&self, location: &Path, verdict: &Verdict, start: u64, bytes: &Bytes) -> object_store::Result<()> {
        match verdict {
            Ok(footer) => footer.check_range(start, bytes).map_err(|why| self.refused(location, &why)),
            Err(why) => Err(self.refused(location, why)),
        }
    }
}

/// Whether `location`'s extension is one of `extensions` (in any case).
fn named(location: &Path, extensions: &[&str]) -> bool {
    location.extension().is_some_and(|e| extensions.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

/// `result`'s bytes, read whole to be checked, and the same result again to hand on.
async fn buffered(result: GetResult) -> object_store::Result<(GetResult, Bytes)> {
    let (meta, range, attributes) = (result.meta.clone(), result.range.clone(), result.attributes.clone());
    let bytes = result.bytes().await?;
    let again = bytes.clone();
    let payload = GetResultPayload::Stream(futures::stream::once(async move { Ok(again) }).boxed());
    Ok((GetResult { payload, meta, range, attributes }, bytes))
}

/// How a guard shows itself (`Display`, and in its errors: "Generic file check error: ..."),
/// also how [`FileGuard::wrap`] recognises one (a store has no `Any` to downcast).
const GUARD_NAME: &str = "file check";

impl fmt::Display for FileGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{GUARD_NAME}({})", self.inner)
    }
}

impl fmt::Debug for FileGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileGuard").field("inner", &self.inner).field("base", &self.base).finish_non_exhaustive()
    }
}

#[async_trait]
impl ObjectStore for FileGuard {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        if options.range.is_none() {
            // A whole file (a model, a background, a CSV file): not how a Parquet reader reads,
            // but how DataFusion reads an Arrow IPC file.
            let result = self.inner.get_opts(location, options).await?;
            return self.check_whole_arrow_ipc(location, result).await;
        }
        if let Some(GetRange::Bounded(range)) = &options.range {
            self.check_within(location, std::slice::from_ref(range)).await?;
        }
        let result = self.inner.get_opts(location, options).await?;
        let range = result.range.clone();
        let reads_the_end = range.end == result.meta.size && range.end - range.start <= MAX_TAIL_READ;
        let known = if reads_the_end { None } else { self.verdict_for_pages(location).await? };
        if !reads_the_end && known.is_none() {
            return Ok(result); // not a Parquet file: streamed through
        }
        let (result, bytes) = buffered(result).await?;
        let verdict = if reads_the_end { self.check_footer(&result.meta, &bytes).await? } else { known };
        if let Some(verdict) = verdict {
            self.check_range(location, &verdict, range.start, &bytes)?;
        }
        Ok(result)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        self.check_within(location, ranges).await?;
        let fetched = self.inner.get_ranges(location, ranges).await?;
        if let Some(verdict) = self.verdict_for_pages(location).await? {
            for (range, bytes) in ranges.iter().zip(&fetched) {
                self.check_range(location, &verdict, range.start, bytes)?;
            }
        }
        Ok(fetched)
    }

    fn delete_stream(&self, locations: BoxStream<'static, object_store::Result<Path>>) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray};
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
    use object_store::memory::InMemory;

    /// 20,000 rows in four row groups of pages of 1,000 rows, a page index and dictionaries.
    fn good_parquet() -> Bytes {
        let x = Float64Array::from_iter_values((0..20_000).map(|i| f64::from(i % 300)));
        let name = StringArray::from_iter_values((0..20_000).map(|i| format!("name {}", i % 50)));
        let batch = RecordBatch::try_from_iter([("x", Arc::new(x) as ArrayRef), ("name", Arc::new(name) as ArrayRef)]).unwrap();
        let properties = datafusion::parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(6_000))
            .set_data_page_row_count_limit(1_000)
            .build();
        let mut file = Vec::new();
        let mut writer = datafusion::parquet::arrow::ArrowWriter::try_new(&mut file, batch.schema(), Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        Bytes::from(file)
    }

    fn corrupt_parquet() -> Bytes {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/input_rows/dictionary_count_past_its_bytes.parquet");
        Bytes::from(std::fs::read(path).unwrap())
    }

    /// What DataFusion reads through a guarded store is what it reads without one: whole
    /// columns, and pages picked by the page index under a filter pushed into the scan.
    #[tokio::test]
    async fn datafusion_reads_a_good_file_through_the_guard_as_without_it() {
        let store = Arc::new(InMemory::new());
        store.put(&Path::from("t/good.parquet"), good_parquet().into()).await.unwrap();
        let url = Url::parse("memory://bucket").unwrap();
        let mut answers = Vec::new();
        for guarded in [false, true] {
            let registry: Arc<dyn ObjectStoreRegistry> = match guarded {
                true => Arc::new(GuardedStores::default()),
                false => Arc::new(datafusion::execution::object_store::DefaultObjectStoreRegistry::new()),
            };
            let runtime = RuntimeEnvBuilder::new().with_object_store_registry(registry).build_arc().unwrap();
            let mut config = SessionConfig::new();
            config.options_mut().execution.parquet.pushdown_filters = true;
            let ctx = SessionContext::new_with_config_rt(config, runtime);
            ctx.register_object_store(&url, store.clone());
            ctx.register_parquet("t", "memory://bucket/t/good.parquet", ParquetReadOptions::default()).await.unwrap();
            for query in ["SELECT sum(x), count(DISTINCT name) FROM t", "SELECT sum(x), min(name) FROM t WHERE x > 250 AND name = 'name 7'"] {
                let batches = ctx.sql(query).await.unwrap().collect().await.unwrap();
                answers.push((guarded, query, arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string()));
            }
        }
        assert_eq!(answers[0].2, answers[2].2);
        assert_eq!(answers[1].2, answers[3].2);
        assert!(answers[0].2.contains("2980000.0"), "{}", answers[0].2);
    }

    /// A corrupt file is refused, naming it, whether its first read is its footer or its pages
    /// (its footer then read by the guard); a CSV file's reads pass untouched and leave nothing.
    #[tokio::test]
    async fn a_corrupt_file_is_refused_however_it_is_first_read() {
        let inner = Arc::new(InMemory::new());
        let url = Url::parse("memory://bucket").unwrap();
        let guard = FileGuard::wrap(&url, inner.clone());
        let (file, bad) = (corrupt_parquet(), Path::from("bad.parquet"));
        inner.put(&bad, file.clone().into()).await.unwrap();
        // Its pages first (its first chunk, a dictionary page at byte 4).
        let e = guard.get_range(&bad, 4..94).await.unwrap_err().to_string();
        assert!(e.contains("memory://bucket/bad.parquet") && e.contains("402653184 values of type DOUBLE cannot fit"), "{e}");
        // Its footer first, then its pages, through `get_ranges`.
        let guard = FileGuard::wrap(&url, inner.clone());
        let size = file.len() as u64;
        assert_eq!(guard.get_range(&bad, size - 1000..size).await.unwrap(), file.slice(file.len() - 1000..));
        let e = guard.get_ranges(&bad, &[0..4, 4..94]).await.unwrap_err().to_string();
        assert!(e.contains("cannot fit"), "{e}");
        // A guarded store is not guarded twice.
        assert!(Arc::ptr_eq(&guard, &FileGuard::wrap(&url, guard.clone())));

        let csv = Path::from("rows.csv");
        let text = Bytes::from("a,b\n1,2\n3,4\n".repeat(1000));
        inner.put(&csv, text.clone().into()).await.unwrap();
        let len = text.len() as u64;
        assert_eq!(guard.get_range(&csv, len - 100..len).await.unwrap(), text.slice(text.len() - 100..));
        assert_eq!(guard.get_range(&csv, 0..100).await.unwrap(), text.slice(..100));
    }
}
