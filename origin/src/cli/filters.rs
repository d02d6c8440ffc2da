//! `create`, `list`, `stats` and `drop`: filters as their users manage them, through a running
//! origin's API.

use super::Origin;
use bloomgate_client::api::{CreateFilter, DropKeys, FilterList, ReadConsistency};
use bloomgate_filter::KeyFormat;
use clap::Args;
use std::io::Write;

#[derive(Args)]
pub struct CreateArgs {
    /// Filter to create: 1-64 characters of a-z, 0-9, '-' and '_'.
    #[arg(long)]
    filter: String,
    /// Keys the filter is sized for.
    #[arg(long)]
    capacity: u64,
    /// Target false-positive rate at capacity, in (0, 1).
    #[arg(long, default_value_t = 0.01)]
    fp_rate: f64,
    /// How keys are written: hex:64 (SHA-256), hex, hex:N, md5, sha1, sha256, bytes.
    #[arg(long, default_value = "hex:64")]
    key_format: KeyFormat,
    /// Bytes per segment, a power of two.
    #[arg(long, default_value_t = bloomgate_filter::params::DEFAULT_SEGMENT_BYTES)]
    segment_bytes: u64,
    /// How origins answer "no" from their local copies: lease or barrier (default: the
    /// origin's read_consistency).
    #[arg(long)]
    read_consistency: Option<ReadConsistency>,
    /// Print the origin's JSON (the filter's stats) instead of a line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    origin: Origin,
}

#[derive(Args)]
pub struct ListArgs {
    /// Print the origin's JSON instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    origin: Origin,
}

#[derive(Args)]
pub struct StatsArgs {
    /// Filter to describe.
    #[arg(long)]
    filter: String,
    /// Print the origin's JSON instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    origin: Origin,
}

#[derive(Args)]
pub struct DropArgs {
    /// Filter to drop.
    #[arg(long)]
    filter: String,
    /// What happens to the filter's keys in the database: keep them (a filter created again
    /// under the name is built from them), or delete them too.
    #[arg(long, value_enum, default_value_t = KeysArg::Keep)]
    keys: KeysArg,
    /// Print the origin's JSON instead of a line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    origin: Origin,
}

impl DropArgs {
    /// What the drop does with the keys.
    pub fn keys_arg(&self) -> DropKeys {
        self.keys.into()
    }
}

/// `--keys`, as the API's [`DropKeys`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KeysArg {
    /// Leave the keys in the database.
    Keep,
    /// Delete the keys from the database.
    Delete,
}

impl From<KeysArg> for DropKeys {
    fn from(keys: KeysArg) -> DropKeys {
        match keys {
            KeysArg::Keep => DropKeys::Keep,
            KeysArg::Delete => DropKeys::Delete,
        }
    }
}

/// `create`.
pub async fn create(args: CreateArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let client = args.origin.client()?;
    args.origin.token("create")?;
    let create = CreateFilter {
        capacity: args.capacity,
        fp_rate: args.fp_rate,
        key_format: args.key_format,
        segment_bytes: args.segment_bytes,
        read_consistency: args.read_consistency,
    };
    let stats = client
        .create_filter(&args.filter, &create)
        .await
        .map_err(|e| args.origin.failed(&format!("create {:?}", args.filter), e))?;
    if args.json {
        return Ok(writeln!(out, "{}", serde_json::to_string_pretty(&stats)?)?);
    }
    let sizing = format!("key_format {}, capacity {}, fp_rate {}", args.key_format, args.capacity, args.fp_rate);
    match stats.generation {
        Some(generation) => writeln!(out, "filter {} ready ({sizing}): generation {generation}", args.filter)?,
        None => writeln!(
            out,
            "filter {} created ({sizing}): its first generation is being built from the keys the database holds under its name",
            args.filter
        )?,
    }
    Ok(())
}

/// `list`.
pub async fn list(args: ListArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let list = args.origin.client()?.list_filters().await.map_err(|e| args.origin.failed("list the filters", e))?;
    match args.json {
        true => writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?,
        false => write!(out, "{}", table(&list))?,
    }
    Ok(())
}

/// The filter list as a table people read.
fn table(list: &FilterList) -> String {
    let mut rows = vec![["filter", "key_format", "capacity", "fp_rate", "generation"].map(String::from)];
    for f in &list.filters {
        let generation = match (f.dropping, f.generation) {
            (true, _) => "dropping (send the drop again to finish it)".to_owned(),
            (false, Some(g)) => g.to_string(),
            (false, None) => "none (being built; lookups read the database)".to_owned(),
        };
        rows.push([f.name.clone(), f.key_format.clone(), f.capacity.to_string(), f.fp_rate.to_string(), generation]);
    }
    let widths: Vec<usize> = (0..5).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    if list.filters.is_empty() {
        text.push_str("(no filters: create one with `bloomgate-origin create`)\n");
    }
    text
}

/// `stats`.
pub async fn stats(args: StatsArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let stats = args
        .origin
        .client()?
        .stats(&args.filter)
        .await
        .map_err(|e| args.origin.failed(&format!("stats of {:?}", args.filter), e))?;
    let stats = serde_json::to_value(&stats)?;
    match args.json {
        true => writeln!(out, "{}", serde_json::to_string_pretty(&stats)?)?,
        false => write!(out, "{}", super::stats_table::render(&stats))?,
    }
    Ok(())
}

/// `drop`.
pub async fn drop(args: DropArgs, out: &mut impl Write) -> anyhow::Result<()> {
    args.origin.token("drop")?;
    let dropped = args
        .origin
        .client()?
        .drop_filter(&args.filter, args.keys_arg())
        .await
        .map_err(|e| args.origin.failed(&format!("drop {:?}", args.filter), e))?;
    if args.json {
        return Ok(writeln!(out, "{}", serde_json::to_string_pretty(&dropped)?)?);
    }
    match dropped.keys_deleted {
        Some(n) => writeln!(out, "dropped filter {} and deleted its {n} keys from the database", args.filter)?,
        None => writeln!(
            out,
            "dropped filter {}; its keys are kept in the database (creating it again builds it from them)",
            args.filter
        )?,
    }
    Ok(())
}
