//! `cairn checkpoint` and `cairn backup` (make, `verify`, `restore`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};

use crate::report::{human_bytes, write_damage};
use crate::{open_for_reading, stdout, EXIT_DAMAGE};

/// Long description of `checkpoint`.
pub const CHECKPOINT_ABOUT: &str = "\
Make a consistent copy of the store in DEST (a new directory) while it is in use.

The copy holds every write up to one point and none after (whole batches only), every
keyspace: the key-value data, the file store and the file system. Writers wait only
for the cut (microseconds); sealed segments are hard-linked when DEST is on the
store's file system (seconds for any size), copied otherwise. The copy shares the
sealed segments' data with the store: for a copy that survives the loss of the
store's disk use `cairn backup`. Open it as a store: `cairn --db DEST stats`.";

/// Long description of `backup`.
pub const BACKUP_ABOUT: &str = "\
Back the store up to DEST (a new directory), check a backup, or restore one.

`cairn --db DIR backup DEST` copies a checkpoint of the store (see `cairn help
checkpoint`) to DEST and lists every file with its CRC-32C in DEST/BACKUP. With
--incremental BASE (an earlier backup, on DEST's file system), each sealed segment
that BASE holds byte for byte is hard-linked from it instead of copied: a nightly
backup writes only what changed. Every backup is complete by itself; deleting an
older one never harms a newer one.

`cairn backup verify BACKUP` checks every file against the list and every record of
every segment (exit status 2 on damage). `cairn backup restore BACKUP DIR` checks and
copies a backup to a new store directory DIR. A backup is a store directory, but
opening it for writing changes it: restore it first.";

/// Arguments of `checkpoint`.
#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// Where the copy goes (must not exist, or be an empty directory)
    #[arg(value_name = "DEST")]
    dest: PathBuf,
}

/// Arguments of `backup`.
#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_precedence_over_arg = true
)]
pub struct BackupArgs {
    /// Where the backup goes (must not exist, or be an empty directory)
    #[arg(value_name = "DEST")]
    dest: Option<PathBuf>,
    /// An earlier backup: copy only the segments it does not hold
    #[arg(long, value_name = "BASE")]
    incremental: Option<PathBuf>,
    /// `verify` or `restore` a backup
    #[command(subcommand)]
    action: Option<BackupAction>,
}

/// What `backup` does to an existing backup.
#[derive(Debug, Subcommand)]
enum BackupAction {
    /// Check every file of BACKUP against its list and every record; exit status 2 on
    /// damage
    Verify {
        /// The backup directory
        backup: PathBuf,
    },
    /// Check BACKUP and copy it to DIR, a new store directory
    Restore {
        /// The backup directory
        backup: PathBuf,
        /// Where the restored store goes (must not exist, or be an empty directory)
        dir: PathBuf,
    },
}

/// `checkpoint DEST`.
pub fn checkpoint(dir: &Path, args: &CheckpointArgs) -> Result<()> {
    let db = open_for_reading(dir)?;
    let r = db.checkpoint(&args.dest)?;
    db.close()?;
    let mut out = stdout();
    writeln!(
        out,
        "checkpoint of {} in {}: {} files linked ({}), {} copied ({}); writers held {:.0?}, took {:.2?}",
        dir.display(),
        args.dest.display(),
        r.linked_files,
        human_bytes(r.linked_bytes),
        r.copied_files,
        human_bytes(r.copied_bytes),
        r.cut,
        r.took
    )?;
    out.flush()?;
    Ok(())
}

/// `backup DEST [--incremental BASE]`, `backup verify BACKUP`, `backup restore BACKUP DIR`.
pub fn run(dir: &Path, args: &BackupArgs) -> Result<ExitCode> {
    let mut out = stdout();
    match (&args.action, &args.dest) {
        (Some(BackupAction::Verify { backup }), _) => {
            let r = cairn::backup::verify(backup)?;
            for d in &r.damage {
                write_damage(&mut out, d)?;
            }
            let verdict = match r.damage.len() {
                0 => "no damage found".to_string(),
                n => format!("{n} damaged place(s) found"),
            };
            writeln!(
                out,
                "verified {} files ({}), {} records: {verdict}",
                r.files_checked,
                human_bytes(r.bytes_checked),
                r.records_checked
            )?;
            out.flush()?;
            return Ok(match r.is_clean() {
                true => ExitCode::SUCCESS,
                false => ExitCode::from(EXIT_DAMAGE),
            });
        }
        (Some(BackupAction::Restore { backup, dir: to }), _) => {
            cairn::backup::restore(backup, to)?;
            writeln!(out, "restored {} to {}", backup.display(), to.display())?;
        }
        (None, Some(dest)) => {
            let db = open_for_reading(dir)?;
            let r = db.backup(dest, args.incremental.as_deref())?;
            db.close()?;
            writeln!(
                out,
                "backup of {} in {}: {} files copied ({}), {} linked from the base ({}); writers held {:.0?}, took {:.2?}",
                dir.display(),
                dest.display(),
                r.copied_files,
                human_bytes(r.copied_bytes),
                r.linked_files,
                human_bytes(r.linked_bytes),
                r.cut,
                r.took
            )?;
        }
        (None, None) => {
            anyhow::bail!("backup: give DEST, or `verify BACKUP`, or `restore BACKUP DIR`")
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
