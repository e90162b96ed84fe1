//! Models by name or URL, loaded through `object_store` and cached by URL and version.
//!
//! A model reference is resolved in this order:
//! 1. a name registered with [`ModelRegistry::register`] (`--model name=URL`);
//! 2. a URL (`s3://bucket/key`, `gs://…`, `az://…`, `file:///…`, `memory:///…`) or a path
//!    (`/abs/path`, `./rel/path`, anything ending in a model file extension,
//!    [`MODEL_EXTENSIONS`]);
//! 3. `<model_dir>/<name>.<ext>` for each of [`MODEL_EXTENSIONS`] in order, then the Spark ML
//!    model directory `<model_dir>/<name>/`, when a model directory is set.
//!
//! A URL or path that is no object but a prefix holding `metadata/part-*` is read as a Spark ML
//! model directory: all its files are read, and its version is that of all of them together.
//!
//! Each resolution asks the store for the object's version (ETag, or last-modified and size), so
//! a model changed in place is reloaded by the next query; unchanged models come from the cache.
//! Object stores registered on the DataFusion runtime for a URL's scheme and host are used first
//! (so tests can put an in-memory store behind `s3://`); otherwise one is built from the URL with
//! credentials from the environment, as `object_store` reads them (`AWS_*`, `GOOGLE_*`,
//! `AZURE_*`).
//!
//! Background sets for interventional SHAP are registered by name only
//! ([`ModelRegistry::register_background`]), loaded the same way and cached by URL and version.
//!
//! This module is only the store: what is loaded, from where, at which version. Explainers
//! built over its models are cached apart from it (`crate::explainer_cache`), and its object-store
//! I/O runs on the process's I/O runtime (`crate::io_runtime`), so resolution can be called
//! from sync code (DataFusion planning) inside or outside a tokio runtime.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use url::Url;

use crate::errors::from_datafusion;
use crate::io_runtime::run_io;
use shapfusion_core::error::{Error, ErrorKind, Result};
use shapfusion_core::model::{Model, MODEL_EXTENSIONS};
use shapfusion_files::spark;

/// A loaded model: where it came from, its versions, and the model.
pub struct LoadedModel {
    /// Where it was loaded from.
    pub url: String,
    /// The store's version of the object when it was loaded.
    pub version: String,
    /// [`content_hash`] of the file: equal on every machine that has the same model.
    pub content_hash: String,
    /// The model.
    pub model: Arc<Model>,
}

/// A background set loaded from its registered URL: the file's bytes, read per model (each
/// model takes its own feature columns from it).
pub struct LoadedBackground {
    /// The name it is registered under.
    pub name: String,
    /// Where it was loaded from.
    pub url: String,
    /// The store's version of the object when it was loaded.
    pub version: String,
    /// [`content_hash`] of the file: equal on every machine that has the same rows.
    pub content_hash: String,
    bytes: bytes::Bytes,
}

impl LoadedBackground {
    /// The file's bytes (Parquet or CSV).
    pub(crate) fn bytes(&self) -> &bytes::Bytes {
        &self.bytes
    }
}

impl std::fmt::Debug for LoadedBackground {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedBackground").field("name", &self.name).field("url", &self.url).field("version", &self.version).finish()
    }
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel").field("url", &self.url).field("version", &self.version).finish()
    }
}

/// Named models, a model directory, and the cache of loaded models.
#[derive(Default)]
pub struct ModelRegistry {
    names: RwLock<HashMap<String, String>>,
    cache: Mutex<HashMap<String, Vec<Arc<LoadedModel>>>>,
    backgrounds: RwLock<HashMap<String, String>>,
    background_cache: Mutex<HashMap<String, Vec<Arc<LoadedBackground>>>>,
    stores: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
    runtime_env: Option<Arc<RuntimeEnv>>,
    /// Servers resolve registered names (and names under their model directory) only, never a
    /// path or URL a client sends.
    names_only: bool,
}

impl std::fmt::Debug for ModelRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRegistry").field("names", &self.names).finish()
    }
}

/// Versions of one URL kept in the cache (a query planned against the previous version can
/// still finish while the next query loads the new one).
const VERSIONS_KEPT: usize = 2;

impl ModelRegistry {
    /// An empty registry that looks up object stores on `runtime_env` first.
    pub fn new(runtime_env: Option<Arc<RuntimeEnv>>) -> Self {
        ModelRegistry { runtime_env, ..Default::default() }
    }

    /// A registry for a server: model references are registered names or names under the
    /// model directory; a path or URL from a client is refused with the names it may use.
    pub fn names_only(runtime_env: Option<Arc<RuntimeEnv>>) -> Self {
        ModelRegistry { runtime_env, names_only: true, ..Default::default() }
    }

    /// Registers `name` for the model at `url` (a URL or a local path).
    pub fn register(&self, name: &str, url: &str) -> Result<()> {
        insert_named(&self.names, "model", name, url)
    }

    /// Parses `name=URL` (what `--model` takes) and registers it.
    pub fn register_arg(&self, arg: &str) -> Result<()> {
        let (name, url) = split_named("model", arg, "fraud=s3://models/fraud.json")?;
        self.register(name, url)
    }

    /// Registers every model and background given as `NAME=URL`.
    pub fn register_args(&self, models: &[String], backgrounds: &[String]) -> Result<()> {
        for m in models {
            self.register_arg(m)?;
        }
        for b in backgrounds {
            self.register_background_arg(b)?;
        }
        Ok(())
    }

    /// Registers background set `name` (interventional SHAP's reference rows) at `url` (a URL
    /// or a local path to Parquet or CSV with the models' feature columns).
    pub fn register_background(&self, name: &str, url: &str) -> Result<()> {
        insert_named(&self.backgrounds, "background", name, url)
    }

    /// Parses `name=URL` (what `--background` of `sql`, `serve` and `worker` takes) and registers it.
    pub fn register_background_arg(&self, arg: &str) -> Result<()> {
        let (name, url) = split_named("background", arg, "recent=s3://data/background.parquet")?;
        self.register_background(name, url)
    }

    /// Registered background names, sorted.
    pub fn background_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.backgrounds.read().expect("backgrounds").keys().cloned().collect();
        v.sort();
        v
    }

    /// The background set registered as `reference`, reloaded if the stored object changed.
    /// Only registered backgrounds resolve: by name, or by the URL (or path) they were
    /// registered with (what `explain --workers --background FILE` sends); never another path
    /// or URL from a query or request.
    pub fn background(&self, reference: &str) -> Result<Arc<LoadedBackground>> {
        let (name, url) = self.registered_background(reference).ok_or_else(|| {
            let names = self.background_names();
            let registered = if names.is_empty() { "none (the server registers them by NAME=URL)".to_string() } else { names.join(", ") };
            Error::InvalidArgument(if looks_like_location(reference) {
                format!("background {reference:?} is a path or URL that no registered background has; registered backgrounds: {registered}")
            } else {
                format!("unknown background {reference:?}; registered backgrounds: {registered}")
            })
        })?;
        let name = name.as_str();
        let url = Url::parse(&url).map_err(|e| Error::external(ErrorKind::InvalidArgument, format!("bad background URL {url:?}"), e))?;
        let version = self.head(&url).map_err(|e| e.context(format!("background {name:?}")))?;
        if let Some(b) = self.get_background_version(url.as_str(), &version) {
            return Ok(b);
        }
        let (store, path) = self.store_for(&url)?;
        let bytes = run_io(async move { store.get(&path).await?.bytes().await })
            .map_err(|e| store_error(format!("cannot read background {name:?} at {url}"), e))?;
        let loaded = Arc::new(LoadedBackground { name: name.to_string(), url: url.to_string(), version, content_hash: content_hash(&bytes), bytes });
        tracing::info!(name, url = loaded.url, version = loaded.version, "loaded background");
        let mut cache = self.background_cache.lock().expect("background cache");
        let versions = cache.entry(loaded.url.clone()).or_default();
        versions.insert(0, loaded.clone());
        versions.truncate(VERSIONS_KEPT);
        Ok(loaded)
    }

    /// The registered name and URL of the background `reference` names: a registered name, or
    /// a path or URL equal to one registered background's URL.
    fn registered_background(&self, reference: &str) -> Option<(String, String)> {
        let backgrounds = self.backgrounds.read().expect("backgrounds");
        if let Some(url) = backgrounds.get(reference) {
            return Some((reference.to_string(), url.clone()));
        }
        let url = looks_like_location(reference).then(|| to_url(reference).ok()).flatten()?;
        // The first name in order, so the same URL registered twice resolves alike everywhere.
        let mut named: Vec<_> = backgrounds.iter().filter(|(_, u)| u.as_str() == url.as_str()).collect();
        named.sort();
        named.first().map(|(n, u)| (n.to_string(), u.to_string()))
    }

    /// Looks up a loaded background by exact URL and version (as recorded at planning time).
    pub fn get_background_version(&self, url: &str, version: &str) -> Option<Arc<LoadedBackground>> {
        self.background_cache.lock().expect("background cache").get(url)?.iter().find(|b| b.version == version).cloned()
    }

    /// Registered names and URLs, sorted by name.
    pub fn names(&self) -> Vec<(String, String)> {
        let mut v: Vec<_> = self.names.read().expect("names").iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort();
        v
    }

    /// Resolves `reference` to a loaded model (see the module docs for the order), reloading it
    /// if the stored object changed. Blocking; safe to call from async code.
    pub fn resolve(&self, reference: &str, model_dir: Option<&str>) -> Result<Arc<LoadedModel>> {
        let mut searched = Vec::new();
        let registered = self.names.read().expect("names").get(reference).cloned();
        if let Some(url) = registered {
            // Registered URLs were parsed by `register`.
            return self.load_url(&Url::parse(&url).map_err(|e| Error::external(ErrorKind::InvalidArgument, format!("bad model URL {url:?}"), e))?);
        }
        searched.push(format!("registered models ({})", {
            let names: Vec<String> = self.names().into_iter().map(|(n, _)| n).collect();
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        }));
        if looks_like_location(reference) {
            if self.names_only {
                // The URL of a model this server serves (what a coordinator's pool sends) is
                // accepted; any other location is not.
                if let Some(url) = self.served_url(reference, model_dir) {
                    return self.load_url(&url);
                }
                let mut names: Vec<String> = self.names().into_iter().map(|(n, _)| n).collect();
                if let Some(dir) = model_dir.filter(|d| !d.is_empty()) {
                    names.extend(self.list_dir(dir).unwrap_or_default());
                }
                return Err(Error::ModelNotFound(format!(
                    "model {reference:?} is a path or URL; this server serves registered models only: {}",
                    if names.is_empty() { "none".to_string() } else { names.join(", ") }
                )));
            }
            return self.load_url(&to_url(reference)?);
        }
        searched.push("not a URL or path".into());
        match model_dir.filter(|d| !d.is_empty()) {
            Some(dir) => {
                let base = to_url(dir)?;
                for ext in MODEL_EXTENSIONS {
                    let candidate = join_url(&base, &format!("{reference}.{ext}"))?;
                    match self.head(&candidate) {
                        Ok(version) => return self.load_versioned(&candidate, version),
                        Err(_) => searched.push(candidate.to_string()),
                    }
                }
                // A Spark ML model directory `<dir>/<name>/`.
                let plain = !reference.is_empty() && !reference.contains(['/', '\\', '%', '?', '#']) && !reference.starts_with('.');
                if plain {
                    let candidate = join_url(&base, reference)?;
                    if let Some(files) = self.spark_listing(&candidate)? {
                        return self.load_spark_dir(&candidate, files);
                    }
                    searched.push(format!("{candidate}/ (a Spark ML model directory)"));
                }
            }
            None => searched.push("no model directory set (shap.model_dir)".into()),
        }
        Err(Error::ModelNotFound(format!("unknown model {reference:?}; searched: {}", searched.join("; "))))
    }

    /// `reference` as a URL when it is a registered model's URL or a model file directly under
    /// `model_dir` (`<dir>/<name>.<ext>`, an extension of [`MODEL_EXTENSIONS`]).
    fn served_url(&self, reference: &str, model_dir: Option<&str>) -> Option<Url> {
        let url = to_url(reference).ok()?;
        if self.names.read().expect("names").values().any(|u| u == url.as_str()) {
            return Some(url);
        }
        let base = to_url(model_dir.filter(|d| !d.is_empty())?).ok()?;
        let base = join_url(&base, "").ok()?;
        let file = url.as_str().strip_prefix(base.as_str())?;
        let (stem, ext) = file.rsplit_once('.')?;
        let plain = !stem.is_empty() && !file.contains(['/', '\\', '%', '?', '#']) && !stem.starts_with('.');
        (plain && MODEL_EXTENSIONS.contains(&ext)).then_some(url)
    }

    /// Names of the models directly under `dir` (files ending in one of [`MODEL_EXTENSIONS`]),
    /// as `shap('<name>', …)` would find them.
    pub fn list_dir(&self, dir: &str) -> Result<Vec<String>> {
        let base = to_url(dir)?;
        let (store, prefix) = self.store_for(&base)?;
        let listed = run_io(async move { store.list_with_delimiter(Some(&prefix)).await.map(|l| l.objects) })
            .map_err(|e| store_error(format!("cannot list model directory {base}"), e))?;
        let mut names: Vec<String> = listed
            .iter()
            .filter_map(|o| {
                let file = o.location.filename()?;
                let (stem, ext) = file.rsplit_once('.')?;
                MODEL_EXTENSIONS.contains(&ext).then(|| stem.to_string())
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Looks up a loaded model by exact URL and version (as recorded at planning time).
    pub fn get_version(&self, url: &str, version: &str) -> Option<Arc<LoadedModel>> {
        self.cache.lock().expect("cache").get(url)?.iter().find(|m| m.version == version).cloned()
    }

    fn load_url(&self, url: &Url) -> Result<Arc<LoadedModel>> {
        match self.head(url) {
            Ok(version) => self.load_versioned(url, version),
            // Not an object: a Spark ML model is a directory of objects.
            Err(Error::ModelNotFound(message)) => match self.spark_listing(url)? {
                Some(files) => self.load_spark_dir(url, files),
                None => Err(Error::ModelNotFound(message)),
            },
            Err(e) => Err(e),
        }
    }

    /// The files of a Spark ML model directory at `url` (relative path and object), when the
    /// prefix holds one: a `metadata/part-*` object among them.
    fn spark_listing(&self, url: &Url) -> Result<Option<Vec<(String, object_store::ObjectMeta)>>> {
        use futures::TryStreamExt;
        let (store, prefix) = self.store_for(url)?;
        let listed_prefix = prefix.clone();
        let objects = run_io(async move { store.list(Some(&listed_prefix)).try_collect::<Vec<_>>().await })
            .map_err(|e| store_error(format!("cannot list model directory {url}"), e))?;
        let base = format!("{}/", prefix.as_ref().trim_end_matches('/'));
        let mut files: Vec<(String, object_store::ObjectMeta)> = objects
            .into_iter()
            .filter_map(|o| {
                let relative = o.location.as_ref().strip_prefix(base.as_str())?.to_string();
                spark::is_model_file(&relative).then_some((relative, o))
            })
            .collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(files.iter().any(|(f, _)| spark::is_metadata(f)).then_some(files))
    }

    /// Loads a Spark ML model directory; its version is that of all its files together.
    fn load_spark_dir(&self, url: &Url, files: Vec<(String, object_store::ObjectMeta)>) -> Result<Arc<LoadedModel>> {
        let listing: Vec<String> = files
            .iter()
            .map(|(f, o)| format!("{f}:{}", o.e_tag.clone().unwrap_or_else(|| format!("{}-{}", o.last_modified.timestamp_micros(), o.size))))
            .collect();
        let version = content_hash(listing.join("\n").as_bytes());
        if let Some(m) = self.get_version(url.as_str(), &version) {
            return Ok(m);
        }
        let (store, _) = self.store_for(url)?;
        let paths: Vec<(String, StorePath)> = files.into_iter().map(|(f, o)| (f, o.location)).collect();
        let read = run_io(async move {
            let mut out = Vec::with_capacity(paths.len());
            for (relative, path) in paths {
                out.push((relative, store.get(&path).await?.bytes().await?));
            }
            Ok::<_, object_store::Error>(out)
        })
        .map_err(|e| store_error(format!("cannot read model directory {url}"), e))?;
        let model = Arc::new(spark::from_files(&read, url.as_str())?);
        let mut hasher = blake3::Hasher::new();
        for (relative, bytes) in &read {
            hasher.update(relative.as_bytes());
            hasher.update(&(bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        let content_hash = format!("blake3:{}", hasher.finalize().to_hex());
        self.cache_loaded(LoadedModel { url: url.to_string(), version, content_hash, model })
    }

    fn cache_loaded(&self, loaded: LoadedModel) -> Result<Arc<LoadedModel>> {
        tracing::info!(
            url = loaded.url,
            version = loaded.version,
            content_hash = loaded.content_hash,
            trees = loaded.model.trees().len(),
            "loaded model"
        );
        let loaded = Arc::new(loaded);
        let mut cache = self.cache.lock().expect("cache");
        let versions = cache.entry(loaded.url.clone()).or_default();
        versions.insert(0, loaded.clone());
        versions.truncate(VERSIONS_KEPT);
        Ok(loaded)
    }

    fn load_versioned(&self, url: &Url, version: String) -> Result<Arc<LoadedModel>> {
        if let Some(m) = self.get_version(url.as_str(), &version) {
            return Ok(m);
        }
        let (store, path) = self.store_for(url)?;
        let url = url.as_str();
        let bytes = run_io(async move { store.get(&path).await?.bytes().await }).map_err(|e| store_error(format!("cannot read model {url}"), e))?;
        let model = Arc::new(Model::from_bytes(&bytes, url)?);
        let content_hash = content_hash(&bytes);
        self.cache_loaded(LoadedModel { url: url.to_string(), version, content_hash, model })
    }

    /// The object's version: its ETag, else last-modified and size.
    fn head(&self, url: &Url) -> Result<String> {
        let (store, path) = self.store_for(url)?;
        if let Some(version) = local_file_version(store.as_ref(), &path, url) {
            return version;
        }
        let meta = run_io(async move { store.head(&path).await }).map_err(|e| match e {
            object_store::Error::NotFound { .. } => model_not_found(url),
            e => store_error(format!("cannot reach model {url}"), e),
        })?;
        Ok(meta.e_tag.unwrap_or_else(|| format!("{}-{}", meta.last_modified.timestamp_micros(), meta.size)))
    }

    /// The store serving `url`: one registered on the DataFusion runtime, else one built from the
    /// URL and the environment (cached per scheme and host).
    fn store_for(&self, url: &Url) -> Result<(Arc<dyn ObjectStore>, StorePath)> {
        if let Some(env) = &self.runtime_env {
            let store_url = ObjectStoreUrl::parse(&url[..url::Position::BeforePath]).map_err(|e| from_datafusion(url.as_str(), e))?;
            if let Ok(store) = env.object_store(store_url) {
                let path = StorePath::from_url_path(url.path()).map_err(|e| Error::external(ErrorKind::InvalidArgument, url.as_str(), e))?;
                return Ok((store, path));
            }
        }
        let key = url[..url::Position::BeforePath].to_string();
        let no_store = |e: object_store::Error| Error::external(ErrorKind::InvalidArgument, format!("no object store for {url}"), e);
        // The path as `parse_url_opts` gives it; the store is built (from the environment) only
        // the first time its scheme and host are seen, not at every request's lookup.
        let (_, path) = object_store::ObjectStoreScheme::parse(url).map_err(|e| no_store(e.into()))?;
        if let Some(store) = self.stores.lock().expect("stores").get(&key) {
            return Ok((store.clone(), path));
        }
        let (built, path) = object_store::parse_url_opts(url, std::env::vars()).map_err(no_store)?;
        let mut stores = self.stores.lock().expect("stores");
        let store = stores.entry(key).or_insert_with(|| Arc::from(built)).clone();
        Ok((store, path))
    }
}

/// Registers `name` → `url` (parsed as a URL or a local path) in `names`.
fn insert_named(names: &RwLock<HashMap<String, String>>, kind: &str, name: &str, url: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument(format!("{kind} name for {url:?} is empty")));
    }
    let url = to_url(url)?;
    names.write().expect("names").insert(name.to_string(), url.to_string());
    Ok(())
}

/// Splits a `NAME=URL` value, trimmed; the error names the `kind` (model, background) and
/// shows `example`.
fn split_named<'a>(kind: &str, arg: &'a str, example: &str) -> Result<(&'a str, &'a str)> {
    let (name, url) = arg.split_once('=').ok_or_else(|| Error::InvalidArgument(format!("{kind} {arg:?}: expected NAME=URL, e.g. {example}")))?;
    Ok((name.trim(), url.trim()))
}

/// The version of a model that every machine agrees on: a hash of the file's bytes.
pub fn content_hash(bytes: &[u8]) -> String {
    format!("blake3:{}", blake3::hash(bytes).to_hex())
}

/// Whether a model reference is a URL or a path rather than a name.
fn looks_like_location(s: &str) -> bool {
    s.contains("://")
        || s.starts_with('/')
        || s.starts_with("./")
        || s.starts_with("../")
        || MODEL_EXTENSIONS.iter().any(|e| s.ends_with(&format!(".{e}")))
}

/// Turns a URL or a (relative or absolute) local path into a URL.
pub fn to_url(s: &str) -> Result<Url> {
    if s.contains("://") {
        return Url::parse(s).map_err(|e| Error::external(ErrorKind::InvalidArgument, format!("bad URL {s:?}"), e));
    }
    let path = std::path::absolute(s).map_err(|e| Error::io(s, e))?;
    Url::from_file_path(&path).map_err(|_| Error::InvalidArgument(format!("cannot turn {s:?} into a file URL")))
}

fn join_url(base: &Url, file: &str) -> Result<Url> {
    let mut s = base.to_string();
    if !s.ends_with('/') {
        s.push('/');
    }
    Url::parse(&s).and_then(|u| u.join(file)).map_err(|e| Error::external(ErrorKind::InvalidArgument, format!("bad model directory {base}"), e))
}

/// The version of a local file, read on this thread, when `store` is the default local file
/// system: the ETag object_store's `LocalFileSystem` gives (inode, modification time in
/// microseconds and size, in hex), from one `open` and `fstat`. Every request looks its model
/// up, and through the store that took about 85 µs (hand-offs to the I/O runtime and a blocking
/// thread) against 1 µs here; `None` for any other store, which is asked as before.
fn local_file_version(store: &dyn ObjectStore, path: &StorePath, url: &Url) -> Option<Result<String>> {
    static LOCAL: std::sync::OnceLock<object_store::local::LocalFileSystem> = std::sync::OnceLock::new();
    let local = LOCAL.get_or_init(object_store::local::LocalFileSystem::new);
    // The same store (root `/`): the same mapping of `path` to a file.
    if store.to_string() != local.to_string() {
        return None;
    }
    let file = local.path_to_filesystem(path).ok()?;
    let metadata = std::fs::File::open(&file).and_then(|f| f.metadata());
    Some(match metadata {
        Ok(m) if m.is_dir() => Err(model_not_found(url)),
        Ok(m) => {
            #[cfg(unix)]
            let inode = std::os::unix::fs::MetadataExt::ino(&m);
            #[cfg(not(unix))]
            let inode = 0u64;
            let mtime = m.modified().ok().and_then(|t| t.duration_since(std::time::SystemTime::UNIX_EPOCH).ok()).unwrap_or_default().as_micros();
            Ok(format!("{inode:x}-{mtime:x}-{:x}", m.len()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(model_not_found(url)),
        Err(e) => Err(Error::external(ErrorKind::Unavailable, format!("cannot reach model {url}"), e)),
    })
}

/// No object at `url` (a directory is none either): what `head` says for a missing model.
fn model_not_found(url: &Url) -> Error {
    Error::ModelNotFound(format!("model not found: {url}"))
}

/// An object store's error with what was being done, kept as the cause: a missing object is
/// not found, a refused credential or a bad request an invalid argument, anything else (the
/// store unreachable, a broken connection) unavailable.
fn store_error(context: String, e: object_store::Error) -> Error {
    let kind = match &e {
        object_store::Error::NotFound { .. } => ErrorKind::NotFound,
        object_store::Error::InvalidPath { .. }
        | object_store::Error::NotSupported { .. }
        | object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. }
        | object_store::Error::UnknownConfigurationKey { .. } => ErrorKind::InvalidArgument,
        _ => ErrorKind::Unavailable,
    };
    Error::external(kind, context, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_urls_and_paths_are_told_apart() {
        assert!(looks_like_location("s3://b/k.json"));
        assert!(looks_like_location("/tmp/m"));
        assert!(looks_like_location("models/fraud.json"));
        assert!(!looks_like_location("fraud"));
        assert_eq!(to_url("/tmp/x.json").unwrap().as_str(), "file:///tmp/x.json");
    }

    #[test]
    fn a_server_registry_refuses_paths_and_urls_naming_what_it_serves() {
        let r = ModelRegistry::names_only(None);
        r.register("fraud", "/nowhere/fraud.json").unwrap();
        for reference in
            ["/etc/passwd", "file:///etc/passwd", "http://169.254.169.254/x.json", "../m.json", "/models/sub/m.json", "/models/../etc/m.json"]
        {
            let e = r.resolve(reference, Some("/models")).unwrap_err().to_string();
            assert!(e.contains("registered models only: fraud"), "{e}");
        }
        // What a coordinator sends: a registered model's URL, or a file directly under the
        // model directory.
        assert_eq!(r.served_url("file:///nowhere/fraud.json", None).unwrap().as_str(), "file:///nowhere/fraud.json");
        assert_eq!(r.served_url("file:///models/churn.ubj", Some("/models")).unwrap().as_str(), "file:///models/churn.ubj");
    }

    #[test]
    fn a_background_resolves_by_its_name_or_the_url_it_was_registered_with_only() {
        let dir = tempfile::tempdir().unwrap();
        let (file, other, unregistered) = (dir.path().join("bg.csv"), dir.path().join("old.csv"), dir.path().join("else.csv"));
        for (path, rows) in [(&file, "1,2"), (&other, "3,4"), (&unregistered, "1,2")] {
            std::fs::write(path, format!("f0,f1\n{rows}\n")).unwrap();
        }
        let r = ModelRegistry::names_only(None);
        r.register_background("recent", file.to_str().unwrap()).unwrap();
        r.register_background("older", other.to_str().unwrap()).unwrap();
        let by_name = r.background("recent").unwrap();
        assert_eq!((by_name.name.as_str(), by_name.bytes.as_ref()), ("recent", b"f0,f1\n1,2\n".as_slice()));
        // Its path and its URL name it too.
        for reference in [file.to_str().unwrap().to_string(), to_url(file.to_str().unwrap()).unwrap().to_string()] {
            let b = r.background(&reference).unwrap();
            assert_eq!((b.name.as_str(), &b.content_hash), ("recent", &by_name.content_hash), "{reference}");
        }
        assert_eq!(r.background(other.to_str().unwrap()).unwrap().name, "older");
        // Another path is never read, even with the same rows, and a name must be registered.
        let e = r.background(unregistered.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("no registered background has") && e.contains("else.csv") && e.contains("older, recent"), "{e}");
        let e = r.background("oldest").unwrap_err().to_string();
        assert!(e.contains("unknown background \"oldest\"") && e.contains("older, recent"), "{e}");
    }

    #[test]
    fn a_local_files_version_is_the_local_stores_etag_read_without_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.json");
        std::fs::write(&file, b"{}").unwrap();
        let url = to_url(file.to_str().unwrap()).unwrap();
        let r = ModelRegistry::new(Some(Arc::new(RuntimeEnv::default())));
        let (store, path) = r.store_for(&url).unwrap();
        let fast = local_file_version(store.as_ref(), &path, &url).expect("the default local store").unwrap();
        let meta = run_io(async move { store.head(&path).await }).unwrap();
        assert_eq!(Some(fast.clone()), meta.e_tag, "the local store's own ETag");
        assert_eq!(r.head(&url).unwrap(), fast);
        // A change of the file is a new version; a directory or a missing file is no model.
        std::fs::write(&file, b"{ }").unwrap();
        assert_ne!(r.head(&url).unwrap(), fast);
        for missing in [dir.path().to_path_buf(), dir.path().join("none.json")] {
            let url = to_url(missing.to_str().unwrap()).unwrap();
            assert!(matches!(r.head(&url), Err(Error::ModelNotFound(_))), "{missing:?}");
        }
        // Any other store is asked as before.
        let memory = object_store::memory::InMemory::new();
        assert!(local_file_version(&memory, &StorePath::from("m.json"), &url).is_none());
    }

    #[test]
    fn unknown_model_error_lists_every_place_searched() {
        let r = ModelRegistry::new(None);
        r.register("a", "/nowhere/a.json").unwrap();
        let e = r.resolve("fraud", Some("/no/such/dir")).unwrap_err().to_string();
        for needle in [
            "\"fraud\"",
            "registered models (a)",
            "/no/such/dir/fraud.json",
            "/no/such/dir/fraud.ubj",
            "/no/such/dir/fraud.txt",
            "/no/such/dir/fraud.cbm",
        ] {
            assert!(e.contains(needle), "{needle} not in {e}");
        }
    }
}
