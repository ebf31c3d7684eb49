//! The stat cache only skips work: over random sequences of edits, the address computed through
//! the cache (kept in a real state database between plans) equals the address computed by reading
//! every byte. The edits are the ones that fool a cache keyed on too little: same-size rewrites
//! with the old mtime put back, touches without change, renames, editor saves by rename, chmod +x,
//! symlink retargets, `.dockerignore` edits, files appearing in ignored directories.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs::{self, File, FileTimes};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use meshtop::backends::state::StateDb;
use meshtop::workspace::inputs::{InputSpec, hash_inputs, hash_inputs_cached};
use meshtop::workspace::stat_cache::{ContextCache, RACY_NS, now_ns};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Edit {
    Write {
        file: usize,
        content: u8,
    },
    /// New bytes of the same length, then the old mtime put back.
    RewriteKeepingMtime {
        file: usize,
    },
    Touch {
        file: usize,
    },
    Rename {
        from: usize,
        to: usize,
    },
    /// An editor's save: a new file written beside, renamed over the old one.
    AtomicSave {
        file: usize,
        content: u8,
    },
    ToggleExecutable {
        file: usize,
    },
    Retarget {
        target: usize,
    },
    ToggleIgnore,
    AppearInIgnored {
        content: u8,
    },
    Remove {
        file: usize,
    },
    /// The Dockerfile (hashed through the cache as the other files are) rewritten, its size kept,
    /// with its old mtime put back or not.
    RewriteDockerfile {
        keep_mtime: bool,
    },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0..4usize, any::<u8>()).prop_map(|(file, content)| Edit::Write { file, content }),
        (0..4usize).prop_map(|file| Edit::RewriteKeepingMtime { file }),
        (0..4usize).prop_map(|file| Edit::Touch { file }),
        (0..4usize, 0..4usize).prop_map(|(from, to)| Edit::Rename { from, to }),
        (0..4usize, any::<u8>()).prop_map(|(file, content)| Edit::AtomicSave { file, content }),
        (0..4usize).prop_map(|file| Edit::ToggleExecutable { file }),
        (0..4usize).prop_map(|target| Edit::Retarget { target }),
        Just(Edit::ToggleIgnore),
        any::<u8>().prop_map(|content| Edit::AppearInIgnored { content }),
        (0..4usize).prop_map(|file| Edit::Remove { file }),
        any::<bool>().prop_map(|keep_mtime| Edit::RewriteDockerfile { keep_mtime }),
    ]
}

fn name(i: usize) -> String {
    format!("src/f{i}.txt")
}

/// Content whose length does not depend on `content`: rewrites keep the size.
fn bytes(content: u8) -> Vec<u8> {
    vec![content; 16]
}

/// Give `path` the mtime `meta` says it had (its ctime moves all the same).
fn put_back_mtime(path: &Path, meta: &fs::Metadata) {
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_times(FileTimes::new().set_modified(meta.modified().unwrap()))
        .unwrap();
}

fn apply(ctx: &Path, edit: &Edit) {
    match edit {
        Edit::Write { file, content } => fs::write(ctx.join(name(*file)), bytes(*content)).unwrap(),
        Edit::RewriteKeepingMtime { file } => {
            let path = ctx.join(name(*file));
            if let Ok(meta) = fs::metadata(&path) {
                let old = fs::read(&path).unwrap();
                let flipped: Vec<u8> = old.iter().map(|b| b ^ 0x55).collect();
                fs::write(&path, flipped).unwrap();
                put_back_mtime(&path, &meta);
            }
        }
        Edit::Touch { file } => {
            if let Ok(f) = File::options().write(true).open(ctx.join(name(*file))) {
                f.set_times(FileTimes::new().set_modified(SystemTime::now()))
                    .unwrap();
            }
        }
        Edit::Rename { from, to } => {
            let _ = fs::rename(ctx.join(name(*from)), ctx.join(name(*to)));
        }
        Edit::AtomicSave { file, content } => {
            let tmp = ctx.join("src/.save.tmp");
            fs::write(&tmp, bytes(*content)).unwrap();
            fs::rename(&tmp, ctx.join(name(*file))).unwrap();
        }
        Edit::ToggleExecutable { file } => {
            let path = ctx.join(name(*file));
            if let Ok(meta) = fs::metadata(&path) {
                let mode = meta.permissions().mode() ^ 0o100;
                fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        Edit::Retarget { target } => {
            let link = ctx.join("src/link");
            let _ = fs::remove_file(&link);
            std::os::unix::fs::symlink(format!("f{target}.txt"), &link).unwrap();
        }
        Edit::ToggleIgnore => {
            let path = ctx.join(".dockerignore");
            let text = fs::read_to_string(&path).unwrap_or_default();
            let next = if text.contains("src/f1.txt") {
                "ignored/\n"
            } else {
                "ignored/\nsrc/f1.txt\n"
            };
            fs::write(&path, next).unwrap();
        }
        Edit::AppearInIgnored { content } => {
            fs::create_dir_all(ctx.join("ignored")).unwrap();
            fs::write(ctx.join(format!("ignored/n{content}")), bytes(*content)).unwrap();
        }
        Edit::Remove { file } => {
            let _ = fs::remove_file(ctx.join(name(*file)));
        }
        Edit::RewriteDockerfile { keep_mtime } => {
            let path = ctx.join("Dockerfile");
            let meta = fs::metadata(&path).unwrap();
            let old = fs::read_to_string(&path).unwrap();
            // Same length: `COPY . /` and `COPY ./ ` alternate.
            let new = if old.contains("COPY . /") {
                old.replace("COPY . /", "COPY ./ ")
            } else {
                old.replace("COPY ./ ", "COPY . /")
            };
            fs::write(&path, new).unwrap();
            if *keep_mtime {
                put_back_mtime(&path, &meta);
            }
        }
    }
}

/// An hour ahead: every entry is past its racy window at once, so lookups do hit.
fn clock_ahead() -> i64 {
    now_ns() + 3600 * 1_000_000_000
}

/// The address through the cache kept in `history`, and how many files were read for it.
fn cached_digest(history: &StateDb, spec: &InputSpec, clock: fn() -> i64) -> (String, usize) {
    let known = history.input_stats_of(spec.context).unwrap();
    let cache = ContextCache::with_clock(known, clock);
    let inputs = hash_inputs_cached(spec, &cache).unwrap();
    let read = cache.stored_count();
    if let Some(entries) = cache.into_entries() {
        history
            .save_input_stats(&[(spec.context, entries)])
            .unwrap();
    }
    (inputs.digest, read)
}

/// A context of a few files and a state database of its own.
struct Fixture {
    _dir: tempfile::TempDir,
    _db: tempfile::TempDir,
    ctx: std::path::PathBuf,
    history: StateDb,
    args: BTreeMap<String, String>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = context();
        let ctx = dir.path().canonicalize().unwrap();
        let db = tempfile::tempdir().unwrap();
        let history = StateDb::open(&db.path().join("state.db")).unwrap();
        Fixture {
            _dir: dir,
            _db: db,
            ctx,
            history,
            args: BTreeMap::new(),
        }
    }

    /// Wait until the filesystem's clock has moved on: what changes after this has a ctime no
    /// earlier change had, whatever the kernel's timestamp granularity (a jiffy: 10 ms at HZ=100).
    /// A probe beside the context (not in it) is rewritten until its ctime moves.
    fn next_tick(&self) {
        let probe = self._db.path().join("tick");
        let ctime = || {
            fs::write(&probe, b"tick").unwrap();
            let meta = fs::metadata(&probe).unwrap();
            (meta.ctime(), meta.ctime_nsec())
        };
        let before = ctime();
        let deadline = Instant::now() + Duration::from_secs(5);
        while ctime() == before {
            assert!(
                Instant::now() < deadline,
                "the filesystem's timestamps never moved within 5 s (ctime stays {before:?})"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn spec(&self) -> InputSpec<'_> {
        InputSpec {
            context: &self.ctx,
            dockerfile: "Dockerfile",
            build_args: &self.args,
            base_digest: None,
            platforms: &[],
            upstreams: &meshtop::workspace::inputs::NO_UPSTREAMS,
            contexts: &meshtop::workspace::inputs::NO_CONTEXTS,
            context_images: &meshtop::workspace::inputs::NO_CONTEXTS,
        }
    }
}

fn context() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ctx = dir.path();
    fs::create_dir_all(ctx.join("src")).unwrap();
    fs::write(ctx.join("Dockerfile"), "FROM scratch\nCOPY . /\n").unwrap();
    fs::write(ctx.join(".dockerignore"), "ignored/\n").unwrap();
    for i in 0..3 {
        fs::write(ctx.join(name(i)), bytes(i as u8)).unwrap();
    }
    dir
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn cached_and_uncached_addresses_agree_over_any_edits(edits in prop::collection::vec(edit(), 1..24)) {
        let fixture = Fixture::new();
        let (ctx, history, spec) = (fixture.ctx.clone(), &fixture.history, fixture.spec());
        cached_digest(history, &spec, clock_ahead);
        for edit in &edits {
            // Every edit in a timestamp tick of its own, as edits a second apart are (ctime cannot
            // be put back; it is what catches a rewrite that restores the mtime).
            fixture.next_tick();
            apply(&ctx, edit);
            let (cached, _) = cached_digest(history, &spec, clock_ahead);
            let uncached = hash_inputs(&spec).unwrap().digest;
            prop_assert_eq!(cached, uncached, "after {:?}", edit);
        }
    }
}

#[test]
fn an_unchanged_context_is_not_read_again_and_a_changed_file_is() {
    let fixture = Fixture::new();
    let (ctx, history, spec) = (fixture.ctx.clone(), &fixture.history, fixture.spec());
    let (first, read) = cached_digest(history, &spec, clock_ahead);
    assert_eq!(
        read, 5,
        "the first plan reads every file, the Dockerfile too"
    );
    let (again, read) = cached_digest(history, &spec, clock_ahead);
    assert_eq!(
        (again.as_str(), read),
        (first.as_str(), 0),
        "a steady plan reads nothing, not even the Dockerfile"
    );
    // New bytes of the same size, a second newer (set, not waited for).
    let path = ctx.join(name(2));
    let hashed = fs::metadata(&path).unwrap().modified().unwrap();
    fs::write(&path, bytes(99)).unwrap();
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(hashed + Duration::from_secs(1))
        .unwrap();
    let (moved, read) = cached_digest(history, &spec, clock_ahead);
    assert_eq!(read, 1, "only the changed file is read");
    assert_ne!(moved, first);
    // The Dockerfile keeps its mtime: only its ctime, which cannot be set, tells the rewrite.
    fixture.next_tick();
    apply(&ctx, &Edit::RewriteDockerfile { keep_mtime: true });
    let (rebuilt, read) = cached_digest(history, &spec, clock_ahead);
    assert_eq!(read, 1, "only the changed Dockerfile is read");
    assert_ne!(
        rebuilt, moved,
        "the Dockerfile's new bytes move the address"
    );
    assert_eq!(rebuilt, hash_inputs(&spec).unwrap().digest);
}

#[test]
fn a_file_rewritten_in_the_tick_it_was_hashed_is_read_again() {
    // The real clock: the file was written just now, so its entry is racy and never trusted,
    // even when a same-size rewrite with the old mtime lands in the same timestamp tick.
    let fixture = Fixture::new();
    let (ctx, history, spec) = (fixture.ctx.clone(), &fixture.history, fixture.spec());
    let (before, _) = cached_digest(history, &spec, now_ns);
    apply(&ctx, &Edit::RewriteKeepingMtime { file: 0 });
    let (after, read) = cached_digest(history, &spec, now_ns);
    assert_ne!(after, before, "a racy entry answered for changed bytes");
    assert_eq!(after, hash_inputs(&spec).unwrap().digest);
    assert!(read >= 1);
    const { assert!(RACY_NS >= 1_000_000_000) };
}
