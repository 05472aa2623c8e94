//! The client: the operations of [`cairn_fs::FileSystem`] on a cluster, with a cache of
//! each directory's GIGA+ bitmap corrected by the servers' redirects.

use std::path::Path;
use std::time::Duration;

use cairn_fs::{Attr, Cred, DirEntry, Errno, FileSystem, FsResult, SetAttr, StatFs};

use crate::config::ClusterConfig;
use crate::error::ClientError;

/// How a client behaves.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// How long an operation may take, retries included, before it fails with `EIO`.
    pub timeout: Duration,
    /// Longest wait to open a connection to a server.
    pub connect_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

/// A client of a cluster (cheap to clone; blocking calls, on a runtime of its own).
#[derive(Clone)]
pub struct Client {
    cfg: ClusterConfig,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("servers", &self.cfg.len())
            .finish()
    }
}

impl Client {
    /// A client of the cluster described by the cluster file at `cluster_file`.
    pub fn connect(cluster_file: &Path) -> Result<Client, ClientError> {
        Client::with_config(ClusterConfig::load(cluster_file)?, ClientOptions::default())
    }

    /// A client of cluster `cfg`.
    pub fn with_config(cfg: ClusterConfig, opts: ClientOptions) -> Result<Client, ClientError> {
        let _ = opts;
        Ok(Client { cfg })
    }

    /// Redirects received so far (requests sent with a stale bitmap).
    pub fn redirects(&self) -> u64 {
        0
    }
}

fn unbuilt<T>() -> FsResult<T> {
    Err(Errno(libc::ENOSYS))
}

impl FileSystem for Client {
    fn lookup(&self, _cred: &Cred, _parent: u64, _name: &[u8]) -> FsResult<Attr> {
        unbuilt()
    }
    fn getattr(&self, _ino: u64) -> FsResult<Attr> {
        unbuilt()
    }
    fn setattr(&self, _cred: &Cred, _ino: u64, _s: &SetAttr) -> FsResult<Attr> {
        unbuilt()
    }
    fn create(&self, _cred: &Cred, _parent: u64, _name: &[u8], _mode: u32) -> FsResult<Attr> {
        unbuilt()
    }
    fn mknod(&self, _c: &Cred, _p: u64, _n: &[u8], _m: u32, _r: u32) -> FsResult<Attr> {
        unbuilt()
    }
    fn mkdir(&self, _cred: &Cred, _parent: u64, _name: &[u8], _mode: u32) -> FsResult<Attr> {
        unbuilt()
    }
    fn symlink(&self, _c: &Cred, _p: u64, _n: &[u8], _t: &[u8]) -> FsResult<Attr> {
        unbuilt()
    }
    fn readlink(&self, _ino: u64) -> FsResult<Vec<u8>> {
        unbuilt()
    }
    fn link(&self, _c: &Cred, _ino: u64, _p: u64, _n: &[u8]) -> FsResult<Attr> {
        unbuilt()
    }
    fn unlink(&self, _cred: &Cred, _parent: u64, _name: &[u8]) -> FsResult<()> {
        unbuilt()
    }
    fn rmdir(&self, _cred: &Cred, _parent: u64, _name: &[u8]) -> FsResult<()> {
        unbuilt()
    }
    fn rename(&self, _c: &Cred, _p: u64, _n: &[u8], _np: u64, _nn: &[u8], _f: u32) -> FsResult<()> {
        unbuilt()
    }
    fn opendir(&self, _cred: &Cred, _ino: u64) -> FsResult<()> {
        unbuilt()
    }
    fn readdir(&self, _ino: u64, _after: Option<&[u8]>, _limit: usize) -> FsResult<Vec<DirEntry>> {
        unbuilt()
    }
    fn parent_of(&self, _ino: u64) -> FsResult<u64> {
        unbuilt()
    }
    fn open_file(&self, _cred: &Cred, _ino: u64, _flags: i32) -> FsResult<Attr> {
        unbuilt()
    }
    fn release(&self, _ino: u64) -> FsResult<()> {
        unbuilt()
    }
    fn read(&self, _ino: u64, _offset: u64, _size: usize) -> FsResult<Vec<u8>> {
        unbuilt()
    }
    fn write(&self, _ino: u64, _offset: u64, _data: &[u8]) -> FsResult<usize> {
        unbuilt()
    }
    fn fsync(&self, _ino: u64) -> FsResult<()> {
        unbuilt()
    }
    fn getxattr(&self, _ino: u64, _name: &[u8]) -> FsResult<Vec<u8>> {
        unbuilt()
    }
    fn setxattr(&self, _c: &Cred, _ino: u64, _n: &[u8], _v: &[u8], _f: u32) -> FsResult<()> {
        unbuilt()
    }
    fn listxattr(&self, _ino: u64) -> FsResult<Vec<Vec<u8>>> {
        unbuilt()
    }
    fn removexattr(&self, _cred: &Cred, _ino: u64, _name: &[u8]) -> FsResult<()> {
        unbuilt()
    }
    fn statfs(&self) -> FsResult<StatFs> {
        unbuilt()
    }
    fn set_permission_checks(&self, _on: bool) {}
    fn close(self: Box<Self>) -> FsResult<()> {
        Ok(())
    }
}
