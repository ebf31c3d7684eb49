//! A secret of this state file's owner, mixed into the key BuildKit keeps each served context's
//! last copy under (see `mesh::sent::cache_key`). BuildKit compares a new context with the copy kept
//! under the same key and asks only for files whose stat data differ: anyone who can open a session
//! on a shared builder daemon under that key could leave a look-alike copy there (same sizes and
//! mtimes, other bytes), and a build would take its files unasked. A key made of the machine and
//! the directory alone could be computed by anyone; with this secret it cannot.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::{StateDb, StateError};

/// The secret's length, in bytes.
const SECRET_LEN: usize = 32;

impl StateDb {
    /// This state file's context secret, made (32 random bytes, mode 0600, beside the state file as
    /// `<name>.context-key`) on first use; two processes making it at once read the one that won.
    pub fn context_secret(&self) -> Result<Vec<u8>, StateError> {
        let path = self.context_secret_path();
        let failed = |what, source| StateError::Io {
            path: path.clone(),
            what,
            source,
        };
        match fs::read(&path) {
            Ok(secret) if secret.len() == SECRET_LEN => return Ok(secret),
            Ok(_) => {
                return Err(failed(
                    "the context key is not 32 bytes; remove it and a new one is made",
                    io::Error::from(io::ErrorKind::InvalidData),
                ));
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(failed("reading the context key", error)),
        }
        let mut secret = vec![0u8; SECRET_LEN];
        fs::File::open("/dev/urandom")
            .and_then(|mut random| random.read_exact(&mut secret))
            .map_err(|e| failed("reading /dev/urandom for the context key", e))?;
        let made = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        match made {
            Ok(mut file) => {
                file.write_all(&secret)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| failed("writing the context key", e))?;
                Ok(secret)
            }
            // Another process made it first: theirs stands.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                fs::read(&path).map_err(|e| failed("reading the context key", e))
            }
            Err(error) => Err(failed("making the context key", error)),
        }
    }

    fn context_secret_path(&self) -> PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".context-key");
        self.path.with_file_name(name)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_secret_is_made_once_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let first = StateDb::open(&path).unwrap().context_secret().unwrap();
        assert_eq!(first.len(), SECRET_LEN);
        let file = dir.path().join("state.db.context-key");
        let mode = fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = StateDb::open(&path).unwrap().context_secret().unwrap();
        assert_eq!(first, again, "kept across opens");
        let other = tempfile::tempdir().unwrap();
        let elsewhere = StateDb::open(&other.path().join("state.db"))
            .unwrap()
            .context_secret()
            .unwrap();
        assert_ne!(first, elsewhere, "each state file its own");
        fs::write(&file, b"short").unwrap();
        let error = StateDb::open(&path).unwrap().context_secret().unwrap_err();
        assert!(error.to_string().contains("not 32 bytes"), "{error}");
    }
}
