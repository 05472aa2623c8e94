//! The permission cases of the suite: owner, group and other rules, supplementary
//! groups, and what a caller may do by inode number alone.

use super::{assert_consistent, e, mode, names, size, Target, ALICE, BOB, R};
use crate::{Cred, Groups, SetAttr, TimeSet, ROOT};

/// Owner, group and other rules; chmod, chown, utimens and truncate rights; sticky
/// directories; permission checks switched off.
pub fn permissions(t: &dyn Target) {
    let fs = t.fs();
    let home = fs.mkdir(&R, ROOT, b"home", 0o755).unwrap();
    // Only root may write in a 0755 root-owned dir.
    assert_eq!(e(fs.create(&ALICE, home.ino, b"x", 0o644)), libc::EACCES);
    assert_eq!(e(fs.mkdir(&ALICE, home.ino, b"x", 0o755)), libc::EACCES);
    fs.setattr(
        &R,
        home.ino,
        &SetAttr {
            uid: Some(1000),
            gid: Some(1000),
            ..Default::default()
        },
    )
    .unwrap();
    let f = fs.create(&ALICE, home.ino, b"x", 0o600).unwrap();
    assert_eq!((f.uid, f.gid), (1000, 1000));
    assert_eq!(e(fs.open_file(&BOB, f.ino, libc::O_RDONLY)), libc::EACCES);
    fs.open_file(&ALICE, f.ino, libc::O_RDWR).unwrap();
    fs.release(&ALICE, f.ino).unwrap();
    // chmod by a non-owner, chown by a non-root user, explicit times by a non-owner.
    let chmod = mode(0o644);
    assert_eq!(e(fs.setattr(&BOB, f.ino, &chmod)), libc::EPERM);
    fs.setattr(&ALICE, f.ino, &chmod).unwrap();
    let chown = SetAttr {
        uid: Some(1001),
        ..Default::default()
    };
    assert_eq!(e(fs.setattr(&ALICE, f.ino, &chown)), libc::EPERM);
    fs.setattr(&R, f.ino, &chown).unwrap();
    let times = SetAttr {
        mtime: Some(TimeSet::At(5)),
        ..Default::default()
    };
    assert_eq!(e(fs.setattr(&ALICE, f.ino, &times)), libc::EPERM);
    assert_eq!(e(fs.setattr(&ALICE, f.ino, &size(0))), libc::EACCES);
    // Search permission on the directory (a chmod of a directory reaches every check
    // of an entry in it, wherever it is made).
    fs.setattr(&R, home.ino, &mode(0o700)).unwrap();
    assert_eq!(e(fs.lookup(&BOB, home.ino, b"x")), libc::EACCES);
    assert_eq!(e(fs.opendir(&BOB, home.ino)), libc::EACCES);
    fs.opendir(&ALICE, home.ino).unwrap();
    assert_eq!(e(fs.unlink(&BOB, home.ino, b"x")), libc::EACCES);
    assert_eq!(e(fs.create(&BOB, home.ino, b"y", 0o644)), libc::EACCES);
    // Sticky directory: only the owner of a file (or of the directory) removes it.
    let tmp = fs.mkdir(&R, ROOT, b"tmp", 0o1777).unwrap();
    assert_eq!(tmp.mode & 0o7777, 0o1777);
    fs.create(&ALICE, tmp.ino, b"a", 0o644).unwrap();
    assert_eq!(e(fs.unlink(&BOB, tmp.ino, b"a")), libc::EPERM);
    fs.unlink(&ALICE, tmp.ino, b"a").unwrap();
    // Switched off (as under a FUSE mount with default_permissions), where the
    // implementation lets its caller switch them off.
    fs.set_permission_checks(false);
    if t.profile().checks_can_be_switched_off {
        fs.lookup(&BOB, home.ino, b"x").unwrap();
    } else {
        assert_eq!(e(fs.lookup(&BOB, home.ino, b"x")), libc::EACCES);
    }
    fs.set_permission_checks(true);
    assert_eq!(e(fs.lookup(&BOB, home.ino, b"x")), libc::EACCES);
    assert_consistent(t);
}

/// Group rights through supplementary groups; chgrp rules; setgid dropped by chmod.
pub fn supplementary_groups(t: &dyn Target) {
    let fs = t.fs();
    let staff = 50;
    let shared = fs.mkdir(&R, ROOT, b"shared", 0o770).unwrap();
    fs.setattr(
        &R,
        shared.ino,
        &SetAttr {
            gid: Some(staff),
            ..Default::default()
        },
    )
    .unwrap();
    let carol = Cred::new(1002, 1002).with_groups(&[7, staff]);
    // Group access through a supplementary group; none without it.
    let f = fs.create(&carol, shared.ino, b"notes", 0o640).unwrap();
    assert_eq!(e(fs.create(&BOB, shared.ino, b"x", 0o644)), libc::EACCES);
    assert_eq!(e(fs.lookup(&BOB, shared.ino, b"notes")), libc::EACCES);
    // chgrp to a group the owner belongs to, not to another.
    let to = |gid| SetAttr {
        gid: Some(gid),
        ..Default::default()
    };
    fs.setattr(&carol, f.ino, &to(staff)).unwrap();
    fs.setattr(&carol, f.ino, &to(7)).unwrap();
    assert_eq!(e(fs.setattr(&carol, f.ino, &to(99))), libc::EPERM);
    // Reading by another member of the file's group.
    fs.setattr(&carol, f.ino, &to(staff)).unwrap();
    let dave = Cred::new(1003, 1003).with_groups(&[staff]);
    fs.open_file(&dave, f.ino, libc::O_RDONLY).unwrap();
    fs.release(&dave, f.ino).unwrap();
    assert_eq!(e(fs.open_file(&dave, f.ino, libc::O_WRONLY)), libc::EACCES);
    // chmod g+s by an owner outside the file's group drops the setgid bit.
    fs.setattr(&R, f.ino, &to(99)).unwrap();
    let sgid = mode(0o2640);
    let a = fs.setattr(&carol, f.ino, &sgid).unwrap();
    assert_eq!(a.mode & 0o7777, 0o640);
    fs.setattr(&R, f.ino, &to(staff)).unwrap();
    let a = fs.setattr(&carol, f.ino, &sgid).unwrap();
    assert_eq!(a.mode & 0o7777, 0o2640);
    assert_eq!(Groups::new(&[1; 40]).as_slice().len(), Groups::MAX);
    assert_consistent(t);
}

/// What a caller may do by inode number alone, without the path that would lead to
/// it: read and write data, list a directory, read extended attributes, release an
/// open, each checked against the caller (as an NFS server checks each request); the
/// owner keeps access to what it made and opened; a file made read-only by its create
/// can still be written through the create's own open.
pub fn data_access_by_inode(t: &dyn Target) {
    let fs = t.fs();
    let secret = fs.create(&R, ROOT, b"secret", 0o600).unwrap();
    fs.write(&R, secret.ino, 0, b"root only").unwrap();
    fs.setxattr(&R, secret.ino, b"trusted.k", b"t", 0).unwrap();
    fs.setxattr(&R, secret.ino, b"user.k", b"u", 0).unwrap();
    fs.setxattr(&R, secret.ino, b"security.k", b"s", 0).unwrap();
    let private = fs.mkdir(&R, ROOT, b"private", 0o700).unwrap();
    fs.create(&R, private.ino, b"inside", 0o644).unwrap();
    // Nothing of root's 0600 file or 0700 directory reaches another user.
    assert_eq!(e(fs.read(&ALICE, secret.ino, 0, 100)), libc::EACCES);
    assert_eq!(e(fs.write(&ALICE, secret.ino, 0, b"x")), libc::EACCES);
    assert_eq!(e(fs.readdir(&ALICE, private.ino, None, 10)), libc::EACCES);
    assert_eq!(e(fs.getxattr(&ALICE, secret.ino, b"user.k")), libc::EACCES);
    assert_eq!(
        e(fs.getxattr(&ALICE, secret.ino, b"trusted.k")),
        libc::ENODATA
    );
    assert_eq!(
        fs.getxattr(&ALICE, secret.ino, b"security.k").unwrap(),
        b"s"
    );
    let mut listed = fs.listxattr(&ALICE, secret.ino).unwrap();
    listed.sort();
    assert_eq!(listed, vec![b"security.k".to_vec(), b"user.k".to_vec()]);
    let copy = fs.create(&R, ROOT, b"copy", 0o666).unwrap();
    assert_eq!(
        e(fs.copy_range(&ALICE, secret.ino, 0, copy.ino, 0, 9)),
        libc::EACCES
    );
    assert_eq!(fs.read(&R, secret.ino, 0, 100).unwrap(), b"root only");
    assert_eq!(fs.getxattr(&R, secret.ino, b"trusted.k").unwrap(), b"t");
    assert_eq!(fs.listxattr(&R, secret.ino).unwrap().len(), 3);
    assert_eq!(names(fs, private.ino), vec![b"inside".to_vec()]);
    // The bits decide for others: group and other readers, execute-only programs.
    fs.setattr(&R, secret.ino, &mode(0o604)).unwrap();
    assert_eq!(fs.read(&ALICE, secret.ino, 0, 4).unwrap(), b"root");
    assert_eq!(e(fs.write(&ALICE, secret.ino, 0, b"x")), libc::EACCES);
    fs.setattr(&R, secret.ino, &mode(0o711)).unwrap();
    assert_eq!(fs.read(&ALICE, secret.ino, 0, 4).unwrap(), b"root");
    // A file created read-only is written through its create's open; its owner keeps
    // reading and writing it whatever its mode; no one else does.
    let open = fs.mkdir(&R, ROOT, b"open", 0o777).unwrap();
    let ro = fs.create(&ALICE, open.ino, b"ro", 0o444).unwrap();
    assert_eq!(
        e(fs.open_created(&BOB, ro.ino, libc::O_WRONLY)),
        libc::EACCES
    );
    fs.open_created(&ALICE, ro.ino, libc::O_WRONLY).unwrap();
    assert_eq!(
        e(fs.open_file(&ALICE, ro.ino, libc::O_WRONLY)),
        libc::EACCES
    );
    assert_eq!(fs.write(&ALICE, ro.ino, 0, b"mine").unwrap(), 4);
    fs.setattr(&ALICE, ro.ino, &mode(0o000)).unwrap();
    assert_eq!(fs.read(&ALICE, ro.ino, 0, 10).unwrap(), b"mine");
    assert_eq!(e(fs.read(&BOB, ro.ino, 0, 10)), libc::EACCES);
    // Unlinked while open, it stays readable by the one who opened it until its
    // release.
    fs.unlink(&ALICE, open.ino, b"ro").unwrap();
    assert_eq!(fs.read(&ALICE, ro.ino, 0, 10).unwrap(), b"mine");
    fs.release(&ALICE, ro.ino).unwrap();
    assert_consistent(t);
}
