//! Human-readable rendering of statistics and verification findings.

use std::io::{self, Write};

use cairn::{Damage, KeyspaceStats, ShardStats, Stats};
use cairn_files::FileStats;

/// Writes `stats` as a table: one row per shard, then the total.
pub fn write_stats_table(out: &mut impl Write, stats: &Stats) -> io::Result<()> {
    writeln!(
        out,
        "{:>6} {:>12} {:>11} {:>11} {:>11} {:>9} {:>10} {:>10} {:>11} {:>10}",
        "shard",
        "keys",
        "live",
        "reclaimable",
        "disk",
        "segments",
        "write amp",
        "space amp",
        "index",
        "index/key",
    )?;
    for shard in &stats.shards {
        write_stats_row(out, shard)?;
    }
    write_stats_row(out, &stats.total)?;
    write_routing(out, stats)
}

/// Writes the store's format version and how its keys are routed to shards.
fn write_routing(out: &mut impl Write, stats: &Stats) -> io::Result<()> {
    if stats.grouped_rows.is_empty() {
        return writeln!(
            out,
            "format version {}: every key in the shard its hash names",
            stats.format_version
        );
    }
    let regions: Vec<String> = stats
        .grouped_rows
        .iter()
        .map(|&(ks, tag)| {
            let tag = if tag.is_ascii_graphic() {
                format!("'{}'", tag as char)
            } else {
                format!("{tag:#04x}")
            };
            format!("keyspace {} tag {tag}", keyspace_name(ks))
        })
        .collect();
    writeln!(
        out,
        "format version {}: numbered rows of {} in shards by group of 64 numbers, other keys by hash",
        stats.format_version,
        regions.join(", ")
    )
}

/// Writes one row of the stats table; a row without a shard number is the total.
fn write_stats_row(out: &mut impl Write, s: &ShardStats) -> io::Result<()> {
    let shard = s
        .shard
        .map_or_else(|| "total".to_string(), |n| n.to_string());
    writeln!(
        out,
        "{:>6} {:>12} {:>11} {:>11} {:>11} {:>9} {:>10} {:>10} {:>11} {:>10}",
        shard,
        s.keys,
        human_bytes(s.live_bytes),
        human_bytes(s.reclaimable_bytes),
        human_bytes(s.disk_bytes),
        s.segments,
        write_amp(s),
        space_amp(s),
        human_bytes(s.index_bytes),
        index_per_key(s),
    )
}

/// The name of keyspace `id` in tables: cairn's own layers by name.
pub fn keyspace_name(id: u8) -> String {
    match id {
        0 => "0 key-value".into(),
        1 => "1 file store".into(),
        2 => "2 file system".into(),
        3 => "3 cluster".into(),
        n => n.to_string(),
    }
}

/// Writes the live, reclaimable and on-disk bytes of each keyspace (records only:
/// segment headers and hint files are in the shard table's disk column), then the
/// file store's own view: its files, and what waits for its collector.
pub fn write_space_table(out: &mut impl Write, stats: &Stats, files: &FileStats) -> io::Result<()> {
    writeln!(
        out,
        "{:<15} {:>12} {:>11} {:>11} {:>11}",
        "keyspace", "keys", "live", "reclaimable", "disk"
    )?;
    let mut rows: Vec<KeyspaceStats> = stats.keyspaces.clone();
    for id in [0, 1] {
        if !rows.iter().any(|k| k.keyspace == id) {
            rows.push(stats.keyspace(id));
        }
    }
    rows.sort_by_key(|k| k.keyspace);
    for k in &rows {
        writeln!(
            out,
            "{:<15} {:>12} {:>11} {:>11} {:>11}",
            keyspace_name(k.keyspace),
            k.keys,
            human_bytes(k.live_bytes),
            human_bytes(k.reclaimable_bytes),
            human_bytes(k.disk_bytes),
        )?;
    }
    writeln!(
        out,
        "file store: {} files, {} in {} chunks; live {}, reclaimable {}, disk {}; \
         {} versions ({}) waiting for the collector",
        files.files,
        human_bytes(files.bytes),
        files.chunks,
        human_bytes(files.live_bytes),
        human_bytes(files.reclaimable_bytes),
        human_bytes(files.disk_bytes),
        files.pending_gc,
        human_bytes(files.pending_bytes),
    )
}

/// Writes one damaged place as a single line: path, offset if known, and what is wrong.
pub fn write_damage(out: &mut impl Write, damage: &Damage) -> io::Result<()> {
    let detail = damage.detail.replace('\n', " ");
    match damage.offset {
        Some(offset) => writeln!(
            out,
            "damaged: {} at offset {offset}: {detail}",
            damage.path.display()
        ),
        None => writeln!(out, "damaged: {}: {detail}", damage.path.display()),
    }
}

/// A byte count in binary units with one decimal, e.g. `1.5 MiB`; exact below 1 KiB.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Write amplification (bytes written to files over bytes written by callers, since
/// the store was opened), or `-` when nothing was written since then.
pub fn write_amp(s: &ShardStats) -> String {
    if s.user_bytes_written == 0 {
        return "-".to_string();
    }
    ratio(s.write_amplification)
}

/// Space amplification (disk bytes over live bytes), or `-` for an empty shard.
pub fn space_amp(s: &ShardStats) -> String {
    if s.live_bytes == 0 {
        return "-".to_string();
    }
    ratio(s.space_amplification)
}

/// Index memory per key such as `41.3 B`, or `-` when there are no keys.
pub fn index_per_key(s: &ShardStats) -> String {
    if s.keys == 0 || !s.index_bytes_per_key.is_finite() {
        return "-".to_string();
    }
    format!("{:.1} B", s.index_bytes_per_key)
}

/// A factor such as `1.23x`, or `-` when it is not a finite number.
fn ratio(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.2}x")
    } else {
        "-".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }

    #[test]
    fn undefined_ratios_show_a_dash() {
        let empty = ShardStats::default();
        assert_eq!(write_amp(&empty), "-");
        assert_eq!(space_amp(&empty), "-");
        assert_eq!(index_per_key(&empty), "-");
        let busy = ShardStats {
            keys: 2,
            live_bytes: 10,
            user_bytes_written: 10,
            write_amplification: 1.5,
            space_amplification: 2.0,
            index_bytes_per_key: 40.25,
            ..ShardStats::default()
        };
        assert_eq!(write_amp(&busy), "1.50x");
        assert_eq!(space_amp(&busy), "2.00x");
        assert_eq!(index_per_key(&busy), "40.2 B");
        assert_eq!(ratio(f64::NAN), "-");
    }
}
