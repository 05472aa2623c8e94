mod common;

use cairn_fs::{Cred, FileSystem, ROOT};
use common::Cluster;

const R: Cred = Cred::ROOT;

#[test]
fn smoke() {
    let c = Cluster::start(3, 8192);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    assert!(d.is_dir());
    let f = fs.create(&R, d.ino, b"f", 0o644).unwrap();
    assert_eq!(fs.lookup(&R, d.ino, b"f").unwrap().ino, f.ino);
    assert_eq!(fs.lookup(&R, ROOT, b"d").unwrap().ino, d.ino);
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 3);
    fs.write(&R, f.ino, 0, b"hello").unwrap();
    assert_eq!(fs.read(&R, f.ino, 0, 10).unwrap(), b"hello");
    let names: Vec<_> = fs
        .readdir(&R, d.ino, None, 100)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec![b"f".to_vec()]);
    fs.rename(&R, d.ino, b"f", ROOT, b"g", 0).unwrap();
    assert_eq!(fs.lookup(&R, ROOT, b"g").unwrap().ino, f.ino);
    fs.unlink(&R, ROOT, b"g").unwrap();
    fs.rmdir(&R, ROOT, b"d").unwrap();
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 2);
    c.check();
    c.shutdown();
}

/// How many times `counting` ran: the server's opens through it.
static OPENS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn counting(open: &mut dyn FnMut()) {
    OPENS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    open();
}

fn skipping(_open: &mut dyn FnMut()) {}

/// A host's open wrapper (`ServerOptions::open_with`, what `cairn serve` allows huge
/// pages in) runs the store's open once, and the server then serves the store it
/// opened; a wrapper that does not run the open is an error, not a server without a
/// store.
#[test]
fn a_host_runs_the_servers_open_through_its_wrapper() {
    use cairn_cluster::{server, ServerError};
    let mut c = Cluster::start(1, 8192);
    let d = c.client().mkdir(&R, ROOT, b"d", 0o755).unwrap();
    c.shutdown_one(0);
    let mut o = c.opts(0, None);
    o.open_with = Some(skipping);
    let skipped = server::start(o.clone());
    assert!(
        matches!(skipped, Err(ServerError::OpenSkipped)),
        "{:?}",
        skipped.err()
    );
    o.open_with = Some(counting);
    let h = server::start(o).unwrap();
    assert_eq!(OPENS.load(std::sync::atomic::Ordering::SeqCst), 1);
    c.servers[0] = Some(h);
    assert_eq!(c.client().lookup(&R, ROOT, b"d").unwrap().ino, d.ino);
    c.check();
    c.shutdown();
}
