//! `lookup` and `load`: keys, through a running origin's API.

use super::bulk_load::LoadOptions;
use super::Origin;
use bloomgate_client::api::KeyAnswer;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Args)]
pub struct LookupArgs {
    /// Filter to ask.
    #[arg(long)]
    filter: String,
    /// Keys to look up, in the filter's key format.
    #[arg(required = true)]
    keys: Vec<String>,
    /// Print the answers as JSON, one object per key and line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    origin: Origin,
}

#[derive(Args)]
pub struct LoadArgs {
    /// Filter to load into.
    #[arg(long)]
    filter: String,
    /// File of keys, one per line; `-` for stdin.
    file: PathBuf,
    /// Keys per request.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Stop at the first bad line instead of reporting and skipping it.
    #[arg(long)]
    abort_on_bad_line: bool,
    #[command(flatten)]
    origin: Origin,
}

/// `lookup`: one line per key, `KEY seen|not seen (by ANSWERER)`.
pub async fn lookup(args: LookupArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let client = args.origin.client()?;
    let what = format!("lookup in {:?}", args.filter);
    // Any number of keys: the client splits them to the origin's `max_batch`.
    let answers: Vec<KeyAnswer> = match args.keys.as_slice() {
        [key] => vec![client.lookup(&args.filter, key).await.map_err(|e| args.origin.failed(&what, e))?],
        keys => client.lookup_batch(&args.filter, keys).await.map_err(|e| args.origin.failed(&what, e))?.results,
    };
    for answer in answers {
        match args.json {
            true => writeln!(out, "{}", serde_json::to_string(&answer)?)?,
            false => {
                let seen = if answer.seen { "seen" } else { "not seen" };
                writeln!(out, "{} {seen} (by {})", answer.key, answer.answered_by.as_str())?
            }
        }
    }
    Ok(())
}

/// `load`.
pub async fn load(args: LoadArgs) -> anyhow::Result<()> {
    args.origin.token("load")?;
    let options = LoadOptions {
        client: args.origin.client()?,
        filter: args.filter,
        batch: args.batch,
        concurrency: args.concurrency,
        abort_on_bad_line: args.abort_on_bad_line,
    };
    let report = super::bulk_load::load(&args.file, &options).await?;
    println!("{report}");
    if report.failed_batches > 0 {
        anyhow::bail!("{} batches were not stored; rerun the load (writes are idempotent)", report.failed_batches);
    }
    Ok(())
}
