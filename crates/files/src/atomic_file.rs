//! Output files written whole or not at all: the content goes to a hidden temporary file beside
//! the target, which is synced and renamed over the target only once everything is written. A
//! failed or killed run leaves the previous file (or none) under the target's name, never a
//! truncated one.

use std::fs::File;
use std::path::{Path, PathBuf};

use shapfusion_core::error::{Error, Result};

/// A file being written for `target`; [`commit`](Self::commit) puts it in place, dropping it
/// without committing removes it.
#[derive(Debug)]
pub struct AtomicFile {
    temp: tempfile::NamedTempFile,
    target: PathBuf,
}

impl AtomicFile {
    /// Starts a file for `target`, in the same directory (so the rename cannot cross
    /// file systems). Refuses a target that is one of `inputs` (the same file, by any path or
    /// link) before anything is written.
    pub fn create(target: &Path, inputs: &[&Path]) -> Result<AtomicFile> {
        for input in inputs {
            if same_file(target, input) {
                return Err(Error::InvalidArgument(format!(
                    "the output {} is the input {}: writing it would destroy the input; choose another output path",
                    target.display(),
                    input.display()
                )));
            }
        }
        if target.is_dir() {
            return Err(Error::InvalidArgument(format!("the output {} is a directory; give a file name", target.display())));
        }
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".partial");
        // A temporary file is private (0600); the output is not: it keeps the permissions of
        // the file it replaces, or gets the usual 0644.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let permissions = std::fs::metadata(target).map(|m| m.permissions()).unwrap_or_else(|_| std::fs::Permissions::from_mode(0o644));
            builder.permissions(permissions);
        }
        let temp = builder.tempfile_in(dir).map_err(|e| Error::io(dir, e))?;
        Ok(AtomicFile { temp, target: target.to_path_buf() })
    }

    /// A handle to write the content through.
    pub fn file(&self) -> Result<File> {
        self.temp.as_file().try_clone().map_err(|e| Error::io(self.temp.path(), e))
    }

    /// Syncs the content to disk and renames it over the target, then syncs the directory so
    /// the rename itself survives a crash.
    pub fn commit(self) -> Result<()> {
        self.temp.as_file().sync_all().map_err(|e| Error::io(self.temp.path(), e))?;
        let target = self.target;
        self.temp.persist(&target).map_err(|e| Error::io(&target, e.error))?;
        #[cfg(unix)]
        if let Some(dir) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            // Best effort: some file systems refuse to sync a directory.
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }
}

/// Whether `a` and `b` name the same existing file (through links or different spellings).
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return ma.dev() == mb.dev() && ma.ino() == mb.ino();
        }
    }
    matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn content_appears_only_on_commit_and_an_abandoned_file_leaves_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.parquet");
        std::fs::write(&target, b"previous").unwrap();
        let pending = AtomicFile::create(&target, &[]).unwrap();
        pending.file().unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"previous");
        drop(pending);
        assert_eq!(std::fs::read(&target).unwrap(), b"previous");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "the abandoned file is removed");
        let pending = AtomicFile::create(&target, &[]).unwrap();
        pending.file().unwrap().write_all(b"new").unwrap();
        pending.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
    }

    #[test]
    #[cfg(unix)]
    fn an_output_is_readable_like_any_file_or_keeps_the_permissions_it_had() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.png");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        AtomicFile::create(&target, &[]).unwrap().commit().unwrap();
        assert_eq!(mode(&target), 0o644);
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        AtomicFile::create(&target, &[]).unwrap().commit().unwrap();
        assert_eq!(mode(&target), 0o600);
    }

    #[test]
    fn the_input_is_refused_as_output_by_any_name() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.csv");
        std::fs::write(&input, b"a\n1\n").unwrap();
        let other_name = dir.path().join(".").join("in.csv");
        let e = AtomicFile::create(&other_name, &[&input]).unwrap_err().to_string();
        assert!(e.contains("would destroy the input"), "{e}");
        #[cfg(unix)]
        {
            let link = dir.path().join("link.csv");
            std::os::unix::fs::symlink(&input, &link).unwrap();
            assert!(AtomicFile::create(&link, &[&input]).is_err());
        }
        assert_eq!(std::fs::read(&input).unwrap(), b"a\n1\n");
        let e = AtomicFile::create(dir.path(), &[]).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
    }
}
