//! The consistency check of the whole tree.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::errno::FsResult;
use super::inode::Inode;
use super::layout::*;
use super::{Fs, CHUNK_SIZE, ROOT};

/// What [`Fs::check`] found: an empty list means a consistent tree.
pub type CheckReport = Vec<String>;

/// A key as hexadecimal digits, for the report.
fn hex(k: &[u8]) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

impl Fs {
    /// Checks the whole tree: every entry names an existing inode of its type, every
    /// inode is reachable (or a recorded orphan), link counts and parents match, and no
    /// chunk or attribute outlives its inode. Damaged rows (keys or values too short
    /// for what their tag says they hold, rows of no known kind) are problems found
    /// too. Returns the problems found; an error only when the store can't be read.
    ///
    /// Inode rows are visited by number ([`cairn::Keyspace::for_each_numbered`]): a
    /// row under their tag whose key is not the tag and an 8-byte number is never read
    /// by the file system, nor seen here.
    pub fn check(&self) -> FsResult<CheckReport> {
        let mut problems = Vec::new();
        let mut inodes: BTreeMap<u64, Inode> = BTreeMap::new();
        // Inodes whose rows exist but can't be decoded: reported once, not again as
        // missing for each row that refers to them.
        let mut damaged: BTreeSet<u64> = BTreeSet::new();
        // Inode rows are numbered rows (kept by number only): visited, not scanned.
        self.rows.for_each_numbered(TAG_INODE, |ino, v| {
            match Inode::decode(ino, &v) {
                Ok(i) => {
                    inodes.insert(ino, i);
                }
                Err(_) => {
                    problems.push(format!("inode {ino}: damaged row of {} bytes", v.len()));
                    damaged.insert(ino);
                }
            }
            Ok(())
        })?;
        let known = |ino: u64| inodes.contains_key(&ino) || damaged.contains(&ino);
        let mut links: HashMap<u64, u32> = HashMap::new();
        let mut subdirs: HashMap<u64, u32> = HashMap::new();
        let mut orphans: BTreeSet<u64> = BTreeSet::new();
        // `None` once the lease row is found damaged (no inode is then judged by it).
        let mut lease = Some(ROOT + 1);
        // Every other row, in one pass in key order (chunks, entries, the lease,
        // orphans, attributes).
        for r in self.rows.scan_all_but(TAG_INODE) {
            let (key, v) = r?;
            let Some((&tag, k)) = key.split_first() else {
                problems.push("row with an empty key".to_string());
                continue;
            };
            match tag {
                TAG_LEASE if k.is_empty() => match decode_lease(&v) {
                    Some(l) if l > ROOT => lease = Some(l),
                    _ => {
                        problems.push(format!("inode-number lease: damaged value {}", hex(&v)));
                        lease = None;
                    }
                },
                TAG_DENTRY => {
                    let Some((parent, _part, name)) = split_dentry_suffix(k) else {
                        problems.push(format!("entry row: damaged key {}", hex(&key)));
                        continue;
                    };
                    let name = String::from_utf8_lossy(name).into_owned();
                    if name.is_empty() {
                        problems.push(format!("entry {parent}/: empty name"));
                    }
                    let Some((ino, kind)) = decode_dentry(&v) else {
                        problems.push(format!("entry {parent}/{name}: bad value"));
                        continue;
                    };
                    match inodes.get(&parent) {
                        Some(p) if p.is_dir() => {}
                        _ if damaged.contains(&parent) => {}
                        _ => problems
                            .push(format!("entry {parent}/{name}: parent is not a directory")),
                    }
                    match inodes.get(&ino) {
                        None if damaged.contains(&ino) => {}
                        None => {
                            problems.push(format!("entry {parent}/{name}: inode {ino} missing"))
                        }
                        Some(i) => {
                            if i.attr.mode & libc::S_IFMT != kind {
                                problems.push(format!("entry {parent}/{name}: type mismatch"));
                            }
                            if i.is_dir() {
                                *subdirs.entry(parent).or_default() += 1;
                                if i.parent != parent {
                                    problems.push(format!(
                                        "directory {ino}: parent {} but entry in {parent}",
                                        i.parent
                                    ));
                                }
                            }
                        }
                    }
                    *links.entry(ino).or_default() += 1;
                }
                TAG_ORPHAN => match decode_be_u64(k) {
                    Some(ino) => {
                        orphans.insert(ino);
                    }
                    None => problems.push(format!("orphan row: damaged key {}", hex(&key))),
                },
                TAG_CHUNK => {
                    let Some((ino, idx)) =
                        split_be_u64(k).and_then(|(ino, rest)| Some((ino, decode_be_u64(rest)?)))
                    else {
                        problems.push(format!("chunk row: damaged key {}", hex(&key)));
                        continue;
                    };
                    match inodes.get(&ino) {
                        None if damaged.contains(&ino) => {}
                        None => problems.push(format!("C row of missing inode {ino}")),
                        Some(i) => {
                            let end = idx
                                .checked_mul(CHUNK_SIZE)
                                .and_then(|s| s.checked_add(v.len() as u64));
                            if !i.chunked() || end.is_none_or(|e| e > i.attr.size) {
                                problems.push(format!("inode {ino}: chunk {idx} beyond its size"));
                            }
                            if v.len() as u64 > CHUNK_SIZE {
                                problems
                                    .push(format!("inode {ino}: chunk {idx} of {} bytes", v.len()));
                            }
                        }
                    }
                }
                TAG_XATTR => {
                    let Some((ino, name)) = split_be_u64(k) else {
                        problems.push(format!("attribute row: damaged key {}", hex(&key)));
                        continue;
                    };
                    if name.is_empty() {
                        problems.push(format!("inode {ino}: attribute with an empty name"));
                    }
                    if !known(ino) {
                        problems.push(format!("X row of missing inode {ino}"));
                    }
                }
                _ => problems.push(format!("row of no known kind: key {}", hex(&key))),
            }
        }
        for ino in &orphans {
            let n = links.get(ino).copied().unwrap_or(0);
            if *ino == ROOT || n > 0 {
                problems.push(format!("orphan row of inode {ino}, which has {n} entries"));
            } else if !known(*ino) {
                problems.push(format!("orphan row of missing inode {ino}"));
            }
        }
        for (ino, i) in &inodes {
            let n = links.get(ino).copied().unwrap_or(0);
            if let Some(lease) = lease {
                if *ino >= lease && *ino != ROOT {
                    problems.push(format!("inode {ino}: beyond the leased numbers {lease}"));
                }
            }
            if i.is_dir() {
                if *ino != ROOT && n != 1 {
                    problems.push(format!("directory {ino}: {n} entries"));
                }
                let want = 2 + subdirs.get(ino).copied().unwrap_or(0);
                if i.attr.nlink != want {
                    problems.push(format!(
                        "directory {ino}: nlink {} want {want}",
                        i.attr.nlink
                    ));
                }
            } else if n == 0 {
                if !orphans.contains(ino) {
                    problems.push(format!("inode {ino}: orphan (no entry)"));
                }
            } else if i.attr.nlink != n {
                problems.push(format!(
                    "inode {ino}: nlink {} but {n} entries",
                    i.attr.nlink
                ));
            }
            if i.attr.size > i64::MAX as u64 {
                problems.push(format!(
                    "inode {ino}: size {} beyond the largest file",
                    i.attr.size
                ));
            }
            if !i.chunked() && i.data.len() as u64 != i.attr.size {
                problems.push(format!(
                    "inode {ino}: inline data {} size {}",
                    i.data.len(),
                    i.attr.size
                ));
            }
        }
        Ok(problems)
    }
}
