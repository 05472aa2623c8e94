//! The consistency check of the whole tree.

use std::collections::{BTreeMap, HashMap};

use super::errno::FsResult;
use super::inode::Inode;
use super::layout::*;
use super::{Fs, CHUNK_SIZE, ROOT};

/// What [`Fs::check`] found: an empty list means a consistent tree.
pub type CheckReport = Vec<String>;

impl Fs {
    /// Checks the whole tree: every entry names an existing inode of its type, every
    /// inode is reachable (or a recorded orphan), link counts and parents match, and no
    /// chunk or attribute outlives its inode. Returns the problems found.
    pub fn check(&self) -> FsResult<CheckReport> {
        let mut problems = Vec::new();
        let mut inodes: BTreeMap<u64, Inode> = BTreeMap::new();
        // Inode rows are numbered rows (kept by number only): visited, not scanned.
        let mut bad = None;
        self.rows.for_each_numbered(TAG_INODE, |ino, v| {
            match Inode::decode(ino, &v) {
                Ok(i) => {
                    inodes.insert(ino, i);
                }
                Err(e) => bad = bad.or(Some(e)),
            }
            Ok(())
        })?;
        if let Some(e) = bad {
            return Err(e);
        }
        let mut links: HashMap<u64, u32> = HashMap::new();
        let mut subdirs: HashMap<u64, u32> = HashMap::new();
        for r in self.rows.scan_prefix(&[TAG_DENTRY], None) {
            let (k, v) = r?;
            let parent = u64::from_be_bytes(k[..8].try_into().unwrap());
            let name = String::from_utf8_lossy(&k[DENTRY_PREFIX_LEN - 1..]).into_owned();
            let Some((ino, kind)) = decode_dentry(&v) else {
                problems.push(format!("entry {parent}/{name}: bad value"));
                continue;
            };
            match inodes.get(&parent) {
                Some(p) if p.is_dir() => {}
                _ => problems.push(format!("entry {parent}/{name}: parent is not a directory")),
            }
            match inodes.get(&ino) {
                None => problems.push(format!("entry {parent}/{name}: inode {ino} missing")),
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
        let orphans: std::collections::HashSet<u64> = self
            .rows
            .scan_prefix(&[TAG_ORPHAN], None)
            .map(|r| r.map(|(k, _)| u64::from_be_bytes(k[..8].try_into().unwrap())))
            .collect::<Result<_, _>>()?;
        let lease = self
            .rows
            .get(&lease_key())?
            .map(|v| u64_at(&v, 0))
            .unwrap_or(ROOT + 1);
        for (ino, i) in &inodes {
            let n = links.get(ino).copied().unwrap_or(0);
            if *ino >= lease && *ino != ROOT {
                problems.push(format!("inode {ino}: beyond the leased numbers {lease}"));
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
            if !i.chunked() && i.data.len() as u64 != i.attr.size {
                problems.push(format!(
                    "inode {ino}: inline data {} size {}",
                    i.data.len(),
                    i.attr.size
                ));
            }
        }
        for tag in [TAG_CHUNK, TAG_XATTR] {
            for r in self.rows.scan_prefix(&[tag], None) {
                let (k, v) = r?;
                let ino = u64::from_be_bytes(k[..8].try_into().unwrap());
                match inodes.get(&ino) {
                    None => problems.push(format!("{} row of missing inode {ino}", tag as char)),
                    Some(i) if tag == TAG_CHUNK => {
                        let idx = u64::from_be_bytes(k[8..16].try_into().unwrap());
                        if !i.chunked() || idx * CHUNK_SIZE + v.len() as u64 > i.attr.size {
                            problems.push(format!("inode {ino}: chunk {idx} beyond its size"));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(problems)
    }
}
