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
    fs.write(f.ino, 0, b"hello").unwrap();
    assert_eq!(fs.read(f.ino, 0, 10).unwrap(), b"hello");
    let names: Vec<_> = fs
        .readdir(d.ino, None, 100)
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
