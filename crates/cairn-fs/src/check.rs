//! The consistency check of the whole tree.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::errno::FsResult;
use super::inode::Inode;
use super::layout::{
    decode_be_u64, decode_dentry, decode_lease, split_be_u64, split_dentry_suffix, TAG_CHUNK,
    TAG_DENTRY, TAG_INODE, TAG_LEASE, TAG_ORPHAN, TAG_XATTR,
};
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
        let mut c = Checker::default();
        // Inode rows are numbered rows (kept by number only): visited, not scanned.
        self.rows.for_each_numbered(TAG_INODE, |ino, v| {
            c.inode_row(ino, &v);
            Ok(())
        })?;
        // Every other row, in one pass in key order (chunks, entries, the lease,
        // orphans, attributes).
        for r in self.rows.scan_all_but(TAG_INODE) {
            let (key, v) = r?;
            c.row(&key, &v);
        }
        c.check_orphans();
        c.check_inodes();
        Ok(c.problems)
    }
}

/// The state of one [`Fs::check`]: the inodes read, what the other rows say of them,
/// and the problems found so far.
struct Checker {
    problems: CheckReport,
    inodes: BTreeMap<u64, Inode>,
    /// Inodes whose rows exist but can't be decoded: reported once, not again as
    /// missing for each row that refers to them.
    damaged: BTreeSet<u64>,
    /// Entries naming each inode.
    links: HashMap<u64, u32>,
    /// Subdirectories of each directory.
    subdirs: HashMap<u64, u32>,
    orphans: BTreeSet<u64>,
    /// `None` once the lease row is found damaged (no inode is then judged by it).
    lease: Option<u64>,
}

impl Default for Checker {
    fn default() -> Self {
        Checker {
            problems: Vec::new(),
            inodes: BTreeMap::new(),
            damaged: BTreeSet::new(),
            links: HashMap::new(),
            subdirs: HashMap::new(),
            orphans: BTreeSet::new(),
            lease: Some(ROOT + 1),
        }
    }
}

impl Checker {
    /// Whether inode `ino` has a row (decodable or not).
    fn known(&self, ino: u64) -> bool {
        self.inodes.contains_key(&ino) || self.damaged.contains(&ino)
    }

    fn problem(&mut self, p: String) {
        self.problems.push(p);
    }

    /// An inode row.
    fn inode_row(&mut self, ino: u64, v: &[u8]) {
        match Inode::decode(ino, v) {
            Ok(i) => {
                self.inodes.insert(ino, i);
            }
            Err(_) => {
                self.problem(format!("inode {ino}: damaged row of {} bytes", v.len()));
                self.damaged.insert(ino);
            }
        }
    }

    /// A row of any kind but inodes.
    fn row(&mut self, key: &[u8], v: &[u8]) {
        let Some((&tag, k)) = key.split_first() else {
            self.problem("row with an empty key".to_string());
            return;
        };
        match tag {
            TAG_LEASE if k.is_empty() => match decode_lease(v) {
                Some(l) if l > ROOT => self.lease = Some(l),
                _ => {
                    self.problem(format!("inode-number lease: damaged value {}", hex(v)));
                    self.lease = None;
                }
            },
            TAG_DENTRY => self.dentry_row(key, k, v),
            TAG_ORPHAN => match decode_be_u64(k) {
                Some(ino) => {
                    self.orphans.insert(ino);
                }
                None => self.problem(format!("orphan row: damaged key {}", hex(key))),
            },
            TAG_CHUNK => self.chunk_row(key, k, v),
            TAG_XATTR => {
                let Some((ino, name)) = split_be_u64(k) else {
                    self.problem(format!("attribute row: damaged key {}", hex(key)));
                    return;
                };
                if name.is_empty() {
                    self.problem(format!("inode {ino}: attribute with an empty name"));
                }
                if !self.known(ino) {
                    self.problem(format!("X row of missing inode {ino}"));
                }
            }
            _ => self.problem(format!("row of no known kind: key {}", hex(key))),
        }
    }

    /// An entry row: `key` whole, `k` after its tag.
    fn dentry_row(&mut self, key: &[u8], k: &[u8], v: &[u8]) {
        let Some((parent, _part, name)) = split_dentry_suffix(k) else {
            self.problem(format!("entry row: damaged key {}", hex(key)));
            return;
        };
        let name = String::from_utf8_lossy(name).into_owned();
        if name.is_empty() {
            self.problem(format!("entry {parent}/: empty name"));
        }
        let Some((ino, kind)) = decode_dentry(v) else {
            self.problem(format!("entry {parent}/{name}: bad value"));
            return;
        };
        match self.inodes.get(&parent) {
            Some(p) if p.is_dir() => {}
            _ if self.damaged.contains(&parent) => {}
            _ => self.problem(format!("entry {parent}/{name}: parent is not a directory")),
        }
        match self.inodes.get(&ino) {
            None if self.damaged.contains(&ino) => {}
            None => self.problem(format!("entry {parent}/{name}: inode {ino} missing")),
            Some(i) => {
                let (is_dir, mismatch, iparent) =
                    (i.is_dir(), i.attr.mode & libc::S_IFMT != kind, i.parent);
                if mismatch {
                    self.problem(format!("entry {parent}/{name}: type mismatch"));
                }
                if is_dir {
                    *self.subdirs.entry(parent).or_default() += 1;
                    if iparent != parent {
                        self.problem(format!(
                            "directory {ino}: parent {iparent} but entry in {parent}"
                        ));
                    }
                }
            }
        }
        *self.links.entry(ino).or_default() += 1;
    }

    /// A chunk row: `key` whole, `k` after its tag.
    fn chunk_row(&mut self, key: &[u8], k: &[u8], v: &[u8]) {
        let Some((ino, idx)) =
            split_be_u64(k).and_then(|(ino, rest)| Some((ino, decode_be_u64(rest)?)))
        else {
            self.problem(format!("chunk row: damaged key {}", hex(key)));
            return;
        };
        match self.inodes.get(&ino) {
            None if self.damaged.contains(&ino) => {}
            None => self.problem(format!("C row of missing inode {ino}")),
            Some(i) => {
                let end = idx
                    .checked_mul(CHUNK_SIZE)
                    .and_then(|s| s.checked_add(v.len() as u64));
                let beyond = !i.chunked() || end.is_none_or(|e| e > i.attr.size);
                if beyond {
                    self.problem(format!("inode {ino}: chunk {idx} beyond its size"));
                }
                if v.len() as u64 > CHUNK_SIZE {
                    self.problem(format!("inode {ino}: chunk {idx} of {} bytes", v.len()));
                }
            }
        }
    }

    /// Orphan rows name inodes that exist and have no entry.
    fn check_orphans(&mut self) {
        let mut problems = Vec::new();
        for ino in &self.orphans {
            let n = self.links.get(ino).copied().unwrap_or(0);
            if *ino == ROOT || n > 0 {
                problems.push(format!("orphan row of inode {ino}, which has {n} entries"));
            } else if !self.known(*ino) {
                problems.push(format!("orphan row of missing inode {ino}"));
            }
        }
        self.problems.extend(problems);
    }

    /// Each inode against its entries, the lease, and its own size and data.
    fn check_inodes(&mut self) {
        let mut problems = Vec::new();
        for (ino, i) in &self.inodes {
            let n = self.links.get(ino).copied().unwrap_or(0);
            if let Some(lease) = self.lease {
                if *ino >= lease && *ino != ROOT {
                    problems.push(format!("inode {ino}: beyond the leased numbers {lease}"));
                }
            }
            if i.is_dir() {
                if *ino != ROOT && n != 1 {
                    problems.push(format!("directory {ino}: {n} entries"));
                }
                let want = 2 + self.subdirs.get(ino).copied().unwrap_or(0);
                if i.attr.nlink != want {
                    problems.push(format!(
                        "directory {ino}: nlink {} want {want}",
                        i.attr.nlink
                    ));
                }
            } else if n == 0 {
                if !self.orphans.contains(ino) {
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
        self.problems.extend(problems);
    }
}
