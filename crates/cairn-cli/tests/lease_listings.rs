//! Listing leases of cluster mounts, through the binary: `cairn serve` processes on
//! loopback and `cairn mount --cluster` of them (skipped where FUSE can't be used).
//!
//! A mount that found a partition of a directory empty answers the kernel's lookups of
//! new names there itself (a create is then one request, not two):
//! - its creates in a directory it made send one `LOOKUP` in all (the first), and
//!   every file is there afterwards, through either mount;
//! - another mount's create, unlink or rename in that directory is seen by the first
//!   at once (the listing is revoked before the change returns), and a name it holds is
//!   refused as existing;
//! - a file it renames to a name its listing said absent is moved in its kernel, and
//!   another mount's rename over it shows at once.
//!
//! A listing carries the entries' attributes (READDIRPLUS), leased: a stat of every
//! entry after it asks the mount nothing, and another mount's chmod, write, rename or
//! unlink of a listed file is seen by the first at once.
//!
//! A listing that brought every name of a directory is kept under the listing's lease:
//! the mount lists it again without a request, and another mount's create, unlink,
//! rename or chmod there shows in the next listing at once.

mod common;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use common::cluster::Cluster;
use common::net::{free_ports, Net};
use common::Mount;

/// Files the test creates in its directory.
const FILES: usize = 300;
/// Directories the listing test makes beside its files.
const SUBDIRS: usize = 10;

/// A cluster of three servers and two mounts of it, the first counting its requests
/// (`CAIRN_FUSE_STATS`, written to `stats` when it ends).
struct Two {
    cluster: Cluster,
    _tmp: tempfile::TempDir,
    a: PathBuf,
    b: PathBuf,
    stats: PathBuf,
    ma: Mount,
    mb: Mount,
}

impl Two {
    /// `None` where FUSE can't be used (the skip is reported).
    fn start() -> Option<Two> {
        let n = 3;
        let cluster = Cluster::start_on(Net::Loopback(free_ports(2 * n)), n, 8192, "never", &[]);
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, stats) = (
            tmp.path().join("mnt-a"),
            tmp.path().join("mnt-b"),
            tmp.path().join("stats-a"),
        );
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let env = [(cairn_fuse::STATS_ENV, stats.as_path())];
        let ma = Mount::cluster_env(&cluster.file, &a, &[], &env)?;
        let mb = Mount::cluster(&cluster.file, &b, &[])?;
        Some(Two {
            cluster,
            _tmp: tmp,
            a,
            b,
            stats,
            ma,
            mb,
        })
    }
}

/// The requests a mount counted, written when it ends (`CAIRN_FUSE_STATS`).
fn counts_after(m: Mount, stats: &Path) -> BTreeMap<String, u64> {
    drop(m);
    cairn_fuse::parse_counts(&std::fs::read_to_string(stats).unwrap())
}

/// The requests a running mount counted so far (SIGUSR1 makes it write them).
fn counts_now(m: &Mount, stats: &Path) -> BTreeMap<String, u64> {
    let _ = std::fs::remove_file(stats);
    // SAFETY: kill(2) has no memory effects; the pid is the mount's own child.
    assert_eq!(unsafe { libc::kill(m.pid(), libc::SIGUSR1) }, 0);
    for _ in 0..500 {
        // The mount writes the file whole (a rename), once.
        if let Ok(text) = std::fs::read_to_string(stats) {
            return cairn_fuse::parse_counts(&text);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the mount wrote no counts in 5 s");
}

/// Creates `name` exclusively; the error kind if it fails.
fn create_new(p: &Path) -> Result<(), ErrorKind> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(p)
        .map(drop)
        .map_err(|e| e.kind())
}

/// The names in directory `p`.
fn names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn exists(p: &Path) -> bool {
    match std::fs::symlink_metadata(p) {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::NotFound => false,
        Err(e) => panic!("{}: {e}", p.display()),
    }
}

#[test]
fn creates_in_an_empty_directory_ask_no_lookups_and_others_changes_show_at_once() {
    let Some(Two {
        cluster: _cluster,
        _tmp,
        a,
        b,
        stats,
        ma,
        mb,
    }) = Two::start()
    else {
        return;
    };

    // The first mount makes a directory and files in it: its kernel asks it about
    // each new name, and the servers are asked about the first only.
    let d = a.join("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..FILES {
        create_new(&d.join(format!("f{i}"))).unwrap();
    }
    for i in 0..FILES {
        assert!(exists(&b.join("d").join(format!("f{i}"))), "f{i} through b");
    }

    // Another mount's changes there show in the first at once: the servers revoke
    // its listing before they return.
    create_new(&b.join("d/new")).unwrap();
    assert!(exists(&d.join("new")), "b's create, through a");
    assert_eq!(create_new(&d.join("new")), Err(ErrorKind::AlreadyExists));
    std::fs::rename(b.join("d/f1"), b.join("d/moved")).unwrap();
    assert!(
        !exists(&d.join("f1")) && exists(&d.join("moved")),
        "b's rename"
    );
    std::fs::remove_file(b.join("d/f2")).unwrap();
    assert!(!exists(&d.join("f2")), "b's unlink, through a");
    // A name nobody made is still absent, and can be made; one too long for any
    // directory is refused as such, not answered absent by the listing.
    assert!(!exists(&d.join("other")));
    let long = d.join("n".repeat(256));
    let too_long = |e: std::io::Error| e.raw_os_error() == Some(libc::ENAMETOOLONG);
    assert!(
        std::fs::symlink_metadata(&long).is_err_and(too_long),
        "lstat"
    );
    assert!(std::fs::remove_file(&long).is_err_and(too_long), "unlink");
    assert!(std::fs::remove_dir(&long).is_err_and(too_long), "rmdir");
    create_new(&d.join("other")).unwrap();
    assert!(exists(&b.join("d/other")));

    // A file the first mount renames to a name its listing said absent: the kernel
    // keeps the moved entry, and another mount replacing it is seen at once.
    std::fs::create_dir(a.join("r")).unwrap();
    assert!(!exists(&a.join("r/probe")), "a's listing of r");
    std::fs::write(a.join("mine"), b"mine").unwrap();
    std::fs::rename(a.join("mine"), a.join("r/moved")).unwrap();
    assert_eq!(std::fs::read(a.join("r/moved")).unwrap(), b"mine");
    std::fs::write(b.join("theirs"), b"theirs").unwrap();
    std::fs::rename(b.join("theirs"), b.join("r/moved")).unwrap();
    assert_eq!(
        std::fs::read(a.join("r/moved")).unwrap(),
        b"theirs",
        "b's rename over a's renamed file, through a"
    );

    // The same in a fresh directory the second mount made and the first looked in.
    std::fs::create_dir(b.join("e")).unwrap();
    assert!(
        !exists(&a.join("e/x")),
        "absent: the first mount's listing of e"
    );
    create_new(&b.join("e/x")).unwrap();
    assert!(exists(&a.join("e/x")), "b's create in e, through a");

    let got = counts_after(ma, &stats);
    drop(mb);
    let sent = |k: &str| got.get(&format!("{}{k}", cairn_fuse::SENT_PREFIX)).copied();
    let lookups = sent("LOOKUP").unwrap_or(0);
    // d, the files, other, r and mine.
    assert_eq!(sent("MAKE"), Some(FILES as u64 + 4), "{got:?}");
    // The first absent name of d, then a's lookups after b's changes (of new, f1,
    // moved, f2, other, e, e/x and the like): far fewer than one per create.
    assert!(
        lookups <= 20,
        "{lookups} LOOKUPs sent for {FILES} creates: {got:?}"
    );
    assert!(
        got.get("LOOKUP").copied().unwrap_or(0) >= FILES as u64,
        "the kernel asked about each new name: {got:?}"
    );
}

#[test]
fn a_listing_leases_its_entries_and_others_changes_show_at_once() {
    use std::os::unix::fs::PermissionsExt;
    let Some(Two {
        cluster: _cluster,
        _tmp,
        a,
        b,
        stats,
        ma,
        mb,
    }) = Two::start()
    else {
        return;
    };

    // The second mount makes the files: the first knows nothing of them.
    std::fs::create_dir(b.join("l")).unwrap();
    for i in 0..FILES {
        std::fs::write(b.join(format!("l/f{i}")), vec![b'x'; i]).unwrap();
    }
    for i in 0..SUBDIRS {
        std::fs::create_dir(b.join(format!("l/s{i}"))).unwrap();
        std::fs::write(b.join(format!("l/s{i}/in")), b"in").unwrap();
    }
    // The first lists the directory, then stats every entry and lists each
    // subdirectory: the listing brought them all, with their attributes (the
    // directories' from their homes).
    let d = a.join("l");
    let mut listed = 0;
    for e in std::fs::read_dir(&d).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        let i: usize = name[1..].parse().unwrap();
        if name.starts_with('s') {
            assert!(m.is_dir());
            assert_eq!(names(&e.path()), ["in"]);
        } else {
            assert_eq!(m.len(), i as u64);
        }
        listed += 1;
    }
    assert_eq!(listed, FILES + SUBDIRS);

    // The second mount's changes of listed files show in the first at once.
    let perm = std::fs::Permissions::from_mode(0o600);
    std::fs::set_permissions(b.join("l/f3"), perm).unwrap();
    let mode = std::fs::symlink_metadata(d.join("f3"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o600, "b's chmod, through a");
    std::fs::write(b.join("l/f4"), b"longer than four").unwrap();
    assert_eq!(
        std::fs::symlink_metadata(d.join("f4")).unwrap().len(),
        16,
        "b's write"
    );
    assert_eq!(std::fs::read(d.join("f4")).unwrap(), b"longer than four");
    std::fs::rename(b.join("l/f5"), b.join("l/g5")).unwrap();
    assert!(
        !exists(&d.join("f5")) && exists(&d.join("g5")),
        "b's rename"
    );
    std::fs::remove_file(b.join("l/f6")).unwrap();
    assert!(!exists(&d.join("f6")), "b's unlink, through a");

    let got = counts_after(ma, &stats);
    drop(mb);
    let fuse = |k: &str| got.get(k).copied().unwrap_or(0);
    let sent = |k: &str| fuse(&format!("{}{k}", cairn_fuse::SENT_PREFIX));
    assert!(fuse("READDIRPLUS") >= 1, "{got:?}");
    // The kernel's last call of a listing, which finds its end, asks the servers
    // nothing.
    assert!(sent("READDIR") < fuse("READDIRPLUS"), "{got:?}");
    // The stats of the listed entries asked the mount nothing (a few lookups come
    // from the changes after them, and the subdirectories' own entries): without the
    // listing's attributes, one LOOKUP each.
    assert!(
        fuse("LOOKUP") + fuse("GETATTR") <= 30,
        "{} LOOKUPs and {} GETATTRs for {FILES} stats after a listing: {got:?}",
        fuse("LOOKUP"),
        fuse("GETATTR")
    );
    // Nor did opening the directories listed, or their `..` entries, ask the
    // servers: their attributes and entries were kept under leases.
    assert!(sent("OPENDIR") <= 1, "{got:?}");
    assert!(sent("PARENTOF") <= 1, "{got:?}");
}

#[test]
fn a_whole_listing_is_kept_and_others_changes_show_in_the_next() {
    use std::os::unix::fs::PermissionsExt;
    let Some(Two {
        cluster: _cluster,
        _tmp,
        a,
        b,
        stats,
        ma,
        mb,
    }) = Two::start()
    else {
        return;
    };
    // More entries than one kernel call takes: the listing is several calls.
    let files = 700;
    std::fs::create_dir(b.join("k")).unwrap();
    for i in 0..files {
        std::fs::write(b.join(format!("k/f{i}")), vec![b'y'; i]).unwrap();
    }
    std::fs::create_dir(b.join("k/sub")).unwrap();
    let (ka, kb) = (a.join("k"), b.join("k"));
    let sent = |c: &BTreeMap<String, u64>| {
        let key = format!("{}READDIR", cairn_fuse::SENT_PREFIX);
        c.get(&key).copied().unwrap_or(0)
    };
    let calls = |c: &BTreeMap<String, u64>| c.get("READDIRPLUS").copied().unwrap_or(0);

    // The first listing asks the servers once (the directory is one partition),
    // however many calls the kernel makes; the next ones ask nothing, and stats of
    // the entries neither.
    let start = counts_now(&ma, &stats);
    let first = names(&ka);
    assert_eq!(first.len(), files + 1);
    let listed = counts_now(&ma, &stats);
    assert!(calls(&listed) - calls(&start) >= 3, "{listed:?}");
    assert_eq!(sent(&listed) - sent(&start), 1, "{listed:?}");
    let before = sent(&listed);
    for _ in 0..3 {
        assert_eq!(names(&ka), first);
        for i in 0..files {
            let m = std::fs::symlink_metadata(ka.join(format!("f{i}"))).unwrap();
            assert_eq!(m.len(), i as u64);
        }
    }
    let after = sent(&counts_now(&ma, &stats));
    assert_eq!(after, before, "listings of a kept listing sent READDIRs");

    // The first mount's own create keeps it whole; so does its own chmod of an
    // entry, whose new attributes it keeps (no listing is asked for again).
    create_new(&ka.join("mine")).unwrap();
    assert!(names(&ka).contains(&"mine".to_string()));
    let before = sent(&counts_now(&ma, &stats));
    std::fs::set_permissions(ka.join("f5"), std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(names(&ka).contains(&"f5".to_string()));
    let mode = std::fs::symlink_metadata(kb.join("f5"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o640, "a's chmod, through b");
    let mode = std::fs::symlink_metadata(ka.join("f5"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o640, "a's chmod, through a");
    let after = sent(&counts_now(&ma, &stats));
    assert_eq!(after, before, "a listing after an own chmod sent READDIRs");

    // Every change by the second mount shows in the first's next listing.
    let same = |what: &str| assert_eq!(names(&ka), names(&kb), "after b's {what}");
    create_new(&kb.join("theirs")).unwrap();
    same("create");
    std::fs::remove_file(kb.join("f1")).unwrap();
    same("unlink");
    std::fs::rename(kb.join("f2"), kb.join("g2")).unwrap();
    same("rename");
    std::fs::rename(kb.join("f3"), b.join("away")).unwrap();
    same("rename out");
    std::fs::create_dir(kb.join("sub2")).unwrap();
    same("mkdir");
    std::fs::remove_dir(kb.join("sub")).unwrap();
    same("rmdir");
    std::fs::set_permissions(kb.join("f4"), std::fs::Permissions::from_mode(0o600)).unwrap();
    names(&ka);
    let mode = std::fs::symlink_metadata(ka.join("f4"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o600, "b's chmod, through a's listing");
    let listed = names(&ka);
    assert!(listed.contains(&"theirs".to_string()) && listed.contains(&"g2".to_string()));
    assert!(!listed.contains(&"f1".to_string()) && !listed.contains(&"sub".to_string()));
    drop(ma);
    drop(mb);
}
