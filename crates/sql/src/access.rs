//! What a Flight SQL client of `serve` may do to the server: read-only statements by default;
//! `CREATE EXTERNAL TABLE` only under the operator's `--data-root` prefixes, `COPY … TO` only
//! under `--allow-write` prefixes, either with file-format options only (no object-store
//! endpoints or credentials); no other DDL or DML; and no `SET` of the options that route
//! rows or credentials or change the whole process (workers, worker token, model directory,
//! DataFusion's runtime and catalog settings), which are the server's configuration alone.
//!
//! Locations are checked on the resolved path or URL: a local path is made absolute, its `..`
//! refused and its existing part resolved through symlinks before it is compared with the
//! (likewise resolved) prefixes, so neither `/data/../etc/passwd` nor a link out of a data root
//! escapes it.

use std::path::{Component, Path, PathBuf};

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, Statement};
use url::Url;

use shapfusion_core::error::{Error, Result};

/// Options a client may not `SET` or `RESET`: exact names, or prefixes ending in `.`.
/// `shap.v2_memory_mb` is here because it sizes the process's memory, not the client's.
pub const SERVER_SCOPED_OPTIONS: [&str; 6] =
    ["shap.workers", "shap.worker_token_file", "shap.model_dir", "shap.v2_memory_mb", "datafusion.runtime.", "datafusion.catalog."];

/// A location prefix: a local directory (resolved) or an object-store URL prefix.
#[derive(Debug, Clone, PartialEq)]
enum Root {
    Local(PathBuf),
    Remote(Url),
}

/// The operator's grants: where clients may create tables and where `COPY` may write.
#[derive(Debug, Clone, Default)]
pub struct AccessPolicy {
    read: Vec<Root>,
    write: Vec<Root>,
}

impl AccessPolicy {
    /// Grants reads under `data_roots` and writes under `write_roots` (local directories, which
    /// must exist, or URL prefixes such as `s3://bucket/shared/`).
    pub fn new(data_roots: &[String], write_roots: &[String]) -> Result<AccessPolicy> {
        let parse = |flag: &str, roots: &[String]| -> Result<Vec<Root>> {
            roots.iter().map(|r| root(r).map_err(|e| Error::InvalidArgument(format!("{flag} {r:?}: {e}")))).collect()
        };
        Ok(AccessPolicy { read: parse("data root", data_roots)?, write: parse("write root", write_roots)? })
    }

    /// Whether clients may write files anywhere (`--allow-write`).
    pub fn allows_writes(&self) -> bool {
        !self.write.is_empty()
    }

    /// Refuses a plan that reaches outside the grants (the whole plan is walked, so `EXPLAIN
    /// ANALYZE COPY …` is refused like `COPY …`). The message says what was refused and which
    /// flag grants it.
    pub fn check(&self, plan: &LogicalPlan) -> std::result::Result<(), String> {
        first_refusal(plan, |node| self.check_node(node))
    }

    /// Refuses a plan that scans files outside the `--data-root` prefixes: what a server that
    /// receives whole plans (a Ballista scheduler) checks, since its clients name tables by
    /// location in the plan itself.
    pub fn check_scans(&self, plan: &LogicalPlan) -> std::result::Result<(), String> {
        use datafusion::datasource::listing::ListingTable;
        use datafusion::datasource::source_as_provider;
        first_refusal(plan, |node| {
            let LogicalPlan::TableScan(scan) = node else { return Ok(()) };
            let Ok(provider) = source_as_provider(&scan.source) else { return Ok(()) };
            let Some(table) = provider.downcast_ref::<ListingTable>() else { return Ok(()) };
            for path in table.table_paths() {
                allowed(&self.read, path.as_str(), "read", "data roots").map_err(|e| format!("table {}: {e}", scan.table_name))?;
            }
            Ok(())
        })
    }

    fn check_node(&self, node: &LogicalPlan) -> std::result::Result<(), String> {
        match node {
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(cmd)) => {
                for location in &cmd.locations {
                    allowed(&self.read, location, "read", "data roots")?;
                }
                format_options_only(cmd.options.keys())
            }
            LogicalPlan::Ddl(ddl) => Err(format!(
                "{} is not allowed on this server: clients are read-only (tables come from the operator's tables, or CREATE EXTERNAL TABLE under a data root)",
                ddl.name()
            )),
            LogicalPlan::Copy(copy) => {
                allowed(&self.write, &copy.output_url, "write", "write roots")?;
                format_options_only(copy.options.keys())
            }
            LogicalPlan::Dml(dml) => Err(format!("{} is not allowed on this server: clients are read-only", dml.op)),
            LogicalPlan::Statement(Statement::SetVariable(s)) => server_scoped(&s.variable),
            LogicalPlan::Statement(Statement::ResetVariable(s)) => server_scoped(&s.variable),
            _ => Ok(()),
        }
    }
}

/// The first refusal `check` gives for a node of `plan` (subqueries included), if any.
fn first_refusal(plan: &LogicalPlan, check: impl Fn(&LogicalPlan) -> std::result::Result<(), String>) -> std::result::Result<(), String> {
    let mut refusal = None;
    let _ = plan.apply_with_subqueries(|node| {
        if let Err(e) = check(node) {
            refusal = Some(e);
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    refusal.map_or(Ok(()), Err)
}

/// Refuses statement options other than file-format and execution settings: object-store
/// endpoints and credentials (`aws.endpoint`, `aws.secret_access_key`, …) are the server's, or a
/// client could point the server's requests at an internal host.
fn format_options_only<'a>(keys: impl Iterator<Item = &'a String>) -> std::result::Result<(), String> {
    for key in keys {
        let k = key.to_ascii_lowercase();
        if !(k.starts_with("format.") || k.starts_with("execution.")) {
            return Err(format!(
                "option {key:?} is not allowed on this server: clients may set format.* and execution.* options; object-store endpoints and credentials are the server's"
            ));
        }
    }
    Ok(())
}

/// Refuses `SET`/`RESET` of a server-scoped option.
fn server_scoped(variable: &str) -> std::result::Result<(), String> {
    let name = variable.trim().to_ascii_lowercase();
    let scoped = SERVER_SCOPED_OPTIONS.iter().any(|o| if o.ends_with('.') { name.starts_with(o) } else { name == *o });
    if scoped {
        return Err(format!("{name} is server configuration and cannot be set by a client (server-scoped: {})", SERVER_SCOPED_OPTIONS.join(", ")));
    }
    Ok(())
}

/// Parses a root prefix.
fn root(s: &str) -> std::result::Result<Root, String> {
    if s.contains("://") && !s.starts_with("file://") {
        let mut url = Url::parse(s).map_err(|e| e.to_string())?;
        if url.path_segments().is_some_and(|mut p| p.any(|seg| seg == "..")) {
            return Err("a prefix may not contain '..'".into());
        }
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        return Ok(Root::Remote(url));
    }
    let path = local_path(s)?;
    let resolved = std::fs::canonicalize(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !resolved.is_dir() {
        return Err(format!("{} is not a directory", resolved.display()));
    }
    Ok(Root::Local(resolved))
}

/// A local path or `file://` URL as an absolute path, refusing `..`.
fn local_path(s: &str) -> std::result::Result<PathBuf, String> {
    let path = match s.strip_prefix("file://") {
        Some(_) => Url::parse(s).ok().and_then(|u| u.to_file_path().ok()).ok_or_else(|| format!("{s:?} is not a file URL"))?,
        None => PathBuf::from(s),
    };
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(format!("{s:?} contains '..'"));
    }
    std::path::absolute(&path).map_err(|e| e.to_string())
}

/// The path with its longest existing ancestor resolved through symlinks (the rest, which does
/// not exist yet, appended as written).
fn resolve_existing(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(resolved) = std::fs::canonicalize(&existing) {
            return rest.iter().rev().fold(resolved, |p: PathBuf, c: &std::ffi::OsString| p.join(c));
        }
        match (existing.file_name().map(|n| n.to_os_string()), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Whether `location` lies under one of `roots`; the error names the location and the flag.
fn allowed(roots: &[Root], location: &str, what: &str, flag: &str) -> std::result::Result<(), String> {
    let refuse = |why: &str| {
        let granted: Vec<String> = roots
            .iter()
            .map(|r| match r {
                Root::Local(p) => p.display().to_string(),
                Root::Remote(u) => u.to_string(),
            })
            .collect();
        Err(format!(
            "{location:?}: clients may not {what} there ({why}); the operator grants prefixes as {flag} (granted: {})",
            if granted.is_empty() { "none".to_string() } else { granted.join(", ") }
        ))
    };
    if location.contains("://") && !location.starts_with("file://") {
        let Ok(url) = Url::parse(location) else { return refuse("not a valid URL") };
        if url.path_segments().is_some_and(|mut p| p.any(|s| s == ".." || s == ".")) {
            return refuse("the URL contains '..'");
        }
        let inside = roots.iter().any(|r| match r {
            Root::Remote(root) => {
                url.scheme() == root.scheme()
                    && url.host_str() == root.host_str()
                    && url.port() == root.port()
                    && (url.path().starts_with(root.path()) || format!("{}/", url.path()) == root.path())
            }
            Root::Local(_) => false,
        });
        return if inside { Ok(()) } else { refuse("not under a granted prefix") };
    }
    let path = match local_path(location) {
        Ok(p) => resolve_existing(&p),
        Err(e) => return refuse(&e),
    };
    let inside = roots.iter().any(|r| matches!(r, Root::Local(root) if path.starts_with(root)));
    if inside {
        Ok(())
    } else {
        refuse("not under a granted directory")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_checked_after_resolving_dots_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("t.parquet"), b"x").unwrap();
        let roots = vec![root(data.to_str().unwrap()).unwrap(), root("s3://bucket/shared").unwrap()];
        assert!(allowed(&roots, data.join("t.parquet").to_str().unwrap(), "read", "data roots").is_ok());
        assert!(allowed(&roots, data.join("new/out.parquet").to_str().unwrap(), "write", "write roots").is_ok());
        assert!(allowed(&roots, "s3://bucket/shared/x/", "read", "data roots").is_ok());
        for bad in [
            "/etc/passwd".to_string(),
            format!("{}/../data2/x", data.display()),
            "s3://bucket/sharedother/x".into(),
            "s3://bucket/shared/../x".into(),
            "http://169.254.169.254/latest/meta-data/".into(),
        ] {
            let e = allowed(&roots, &bad, "read", "data roots").unwrap_err();
            assert!(e.contains("data roots"), "{e}");
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", data.join("escape")).unwrap();
            assert!(allowed(&roots, data.join("escape/passwd").to_str().unwrap(), "read", "data roots").is_err());
        }
    }

    #[test]
    fn server_scoped_options_are_refused() {
        for o in [
            "shap.workers",
            "SHAP.Worker_Token_File",
            "shap.model_dir",
            "shap.v2_memory_mb",
            "datafusion.runtime.memory_limit",
            "datafusion.catalog.location",
        ] {
            assert!(server_scoped(o).is_err(), "{o}");
        }
        for o in ["shap.algorithm", "shap.threads", "datafusion.execution.batch_size"] {
            assert!(server_scoped(o).is_ok(), "{o}");
        }
    }
}
