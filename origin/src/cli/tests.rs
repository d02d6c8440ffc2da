//! The command line: every setting reaches the config, every command that calls an origin
//! reads its token from `BLOOMGATE_TOKEN`, and `create`, `list`, `lookup`, `stats` and `drop`
//! do what they say against an origin served on the embedded stores.

use super::*;
use clap::CommandFactory;

fn parse(args: &[&str]) -> Command {
    Cli::try_parse_from([&["bloomgate-origin"], args].concat()).unwrap().command
}

#[test]
fn every_parsed_flag_reaches_the_config() {
    let Command::Serve(args) = parse(&[
        "serve",
        "--redis-write-timeout-ms",
        "1234",
        "--max-filter-bytes",
        "99",
        "--rebuild-grace-ms",
        "7",
        "--header-read-timeout-ms",
        "8",
        "--max-connections",
        "9",
        "--journal-enabled",
        "false",
        "--cassandra-manage-schema",
        "false",
        "--writer-tokens",
        "aaaaaaaaaaaaaaaa,bbbbbbbbbbbbbbbb",
        "--ops-tokens",
        "cccccccccccccccc",
    ]) else {
        unreachable!()
    };
    let c = args.into_config().unwrap();
    assert_eq!(c.redis_write_timeout_ms, 1234, "was parsed and silently ignored");
    assert_eq!((c.max_filter_bytes, c.rebuild_grace_ms), (99, 7));
    assert_eq!((c.header_read_timeout_ms, c.max_connections), (8, 9));
    assert!(!c.journal_enabled);
    assert!(!c.cassandra_manage_schema);
    assert_eq!(c.writer_tokens, ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"]);
    assert_eq!(c.ops_tokens, ["cccccccccccccccc"]);
}

fn check(args: &[&str]) -> anyhow::Result<bloomgate_origin::config::Config> {
    match parse(&[&["check-config"], args].concat()) {
        Command::CheckConfig(args) => serve::check_config(*args),
        _ => unreachable!(),
    }
}

#[test]
fn check_config_refuses_what_serve_would_refuse_with_the_same_message() {
    let err = check(&["--edge-secret", "dev-edge-secret"]).unwrap_err().to_string();
    assert!(err.contains("edge_secret must be at least 16 characters"), "{err}");
    let err = check(&["--writer-tokens", "short"]).unwrap_err().to_string();
    assert!(err.contains("writer tokens must be at least 16 characters"), "{err}");
    let err = check(&["--ops-tokens", "short"]).unwrap_err().to_string();
    assert!(err.contains("ops tokens must be at least 16 characters"), "{err}");
    let err = check(&["--max-batch", "0"]).unwrap_err().to_string();
    assert!(err.contains("max_batch"), "{err}");
    let ok = check(&["--edge-secret", "dev-edge-secret-0123", "--max-batch", "7"]).unwrap();
    assert_eq!(ok.max_batch, 7, "check-config reads the flags serve reads");
    // A shared database with a filter in each process: refused, unless said to be the only origin.
    let err = check(&["--cassandra-nodes", "10.0.0.1:9042"]).unwrap_err().to_string();
    assert!(err.contains("redis_url") && err.contains("single_origin"), "{err}");
    check(&["--cassandra-nodes", "10.0.0.1:9042", "--single-origin", "true"]).unwrap();
    let err = check(&["--redis-url", "redis://r/", "--redis-tls-ca-file", "/ca.pem"]).unwrap_err().to_string();
    assert!(err.contains("rediss://"), "TLS files with a plaintext URL: {err}");
}

#[test]
fn every_command_that_calls_an_origin_takes_its_token_and_ca_file_from_the_environment() {
    let cli = Cli::command();
    let callers = ["create", "list", "stats", "drop", "lookup", "load"];
    for name in callers {
        let command = cli.find_subcommand(name).unwrap_or_else(|| panic!("no command {name}"));
        let token =
            command.get_arguments().find(|a| a.get_id() == "token").unwrap_or_else(|| panic!("{name}: no --token"));
        assert_eq!(token.get_env().and_then(|e| e.to_str()), Some("BLOOMGATE_TOKEN"), "{name}");
        let ca_file =
            command.get_arguments().find(|a| a.get_id() == "ca_file").unwrap_or_else(|| panic!("{name}: no --ca-file"));
        assert_eq!(ca_file.get_env().and_then(|e| e.to_str()), Some("BLOOMGATE_CA_FILE"), "{name}");
    }
    for command in cli.get_subcommands() {
        for arg in command.get_arguments() {
            let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
            assert_ne!(
                env,
                "BLOOMGATE_WRITER_TOKEN",
                "{}: one letter from the setting BLOOMGATE_WRITER_TOKENS",
                command.get_name()
            );
        }
    }
}

/// Every environment variable an argument reads, over every command.
fn variables_read() -> std::collections::BTreeSet<String> {
    let cli = Cli::command();
    let arguments = cli.get_arguments().chain(cli.get_subcommands().flat_map(|c| c.get_arguments()));
    arguments.filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()).collect()
}

#[test]
fn the_variables_the_command_line_reads_are_the_ones_config_loading_accepts() {
    use bloomgate_origin::config::{Config, BINARY_ENV, ENV_PREFIX};
    let read = variables_read();
    let settings: Vec<String> =
        Config::setting_names().iter().map(|s| format!("{ENV_PREFIX}{}", s.to_ascii_uppercase())).collect();
    let unlisted: Vec<&String> =
        read.iter().filter(|v| !BINARY_ENV.contains(&v.as_str()) && !settings.contains(v)).collect();
    assert!(unlisted.is_empty(), "read by the command line, yet refused at load as unknown: {unlisted:?}");
    let unread: Vec<&&str> = BINARY_ENV.iter().filter(|v| !read.contains(**v)).collect();
    assert!(unread.is_empty(), "accepted at load, yet read by no argument: {unread:?}");
}

#[test]
fn drops_keep_the_keys_unless_told_otherwise() {
    let Command::Drop(args) = parse(&["drop", "--filter", "f"]) else { unreachable!() };
    assert_eq!(args.keys_arg(), bloomgate_client::api::DropKeys::Keep);
    let Command::Drop(args) = parse(&["drop", "--filter", "f", "--keys", "delete"]) else { unreachable!() };
    assert_eq!(args.keys_arg(), bloomgate_client::api::DropKeys::Delete);
    assert!(Cli::try_parse_from(["bloomgate-origin", "drop", "--filter", "f", "--keys", "all"]).is_err());
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An origin on the embedded stores (its key file in `dir`), served on a free port until the
/// test ends; its base URL.
async fn served(dir: &TempDir) -> String {
    let dir = dir.0.clone();
    let config = bloomgate_origin::config::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir,
        writer_tokens: vec!["writer-token-0123456789".into()],
        ops_tokens: vec!["ops-token-0123456789abc".into()],
        recovery_interval_ms: 0,
        ..Default::default()
    };
    let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state = bloomgate_origin::build_state(config).await.unwrap();
    tokio::spawn(bloomgate_origin::run(listener, state, std::future::pending()));
    base
}

/// Runs a command line against `base` with `token`, and what it printed.
async fn run_printed(base: &str, token: Option<&str>, args: &[&str]) -> anyhow::Result<String> {
    let mut line: Vec<&str> = args.to_vec();
    line.extend(["--origin", base]);
    if let Some(token) = token {
        line.extend(["--token", token]);
    }
    let mut out = Vec::new();
    match parse(&line) {
        Command::Create(args) => filters::create(args, &mut out).await?,
        Command::List(args) => filters::list(args, &mut out).await?,
        Command::Stats(args) => filters::stats(args, &mut out).await?,
        Command::Drop(args) => filters::drop(args, &mut out).await?,
        Command::Lookup(args) => keys::lookup(args, &mut out).await?,
        _ => unreachable!("not a command that prints"),
    }
    Ok(String::from_utf8(out)?)
}

#[tokio::test]
async fn create_list_lookup_stats_and_drop_through_the_api() {
    let dir = TempDir(std::env::temp_dir().join(format!("bloomgate-cli-test-{:016x}", rand::random::<u64>())));
    let base = served(&dir).await;
    let (writer, ops) = (Some("writer-token-0123456789"), Some("ops-token-0123456789abc"));
    let created = run_printed(&base, writer, &["create", "--filter", "users", "--capacity", "1000"]).await.unwrap();
    assert!(
        created.starts_with("filter users ready (key_format hex:64, capacity 1000, fp_rate 0.01): generation "),
        "{created}"
    );
    let listed = run_printed(&base, ops, &["list"]).await.unwrap();
    assert!(
        listed
            .starts_with("filter  key_format  capacity  fp_rate  generation\nusers   hex:64      1000      0.01     "),
        "{listed}"
    );

    let stored = "ab".repeat(32);
    let client = bloomgate_client::Client::builder(&base).token(writer.unwrap()).build().unwrap();
    client.insert("users", &stored, b"").await.unwrap();
    let absent = "cd".repeat(32);
    let one = run_printed(&base, None, &["lookup", "--filter", "users", &absent]).await.unwrap();
    assert_eq!(one, format!("{absent} not seen (by filter)\n"));
    let both = run_printed(&base, None, &["lookup", "--filter", "users", &stored, &absent, "--json"]).await.unwrap();
    let lines: Vec<serde_json::Value> = both.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!((lines[0]["seen"].as_bool(), lines[1]["seen"].as_bool()), (Some(true), Some(false)));
    let stats = run_printed(&base, ops, &["stats", "--filter", "users", "--json"]).await.unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&stats).unwrap()["capacity"], 1000);

    let refused = run_printed(&base, ops, &["drop", "--filter", "users"]).await.unwrap_err().to_string();
    assert!(refused.contains("403") && refused.contains("read-only"), "{refused}");
    let missing = run_printed(&base, None, &["drop", "--filter", "users"]).await.unwrap_err().to_string();
    assert!(missing.contains("BLOOMGATE_TOKEN"), "{missing}");
    let dropped = run_printed(&base, writer, &["drop", "--filter", "users", "--keys", "delete"]).await.unwrap();
    assert_eq!(dropped, "dropped filter users and deleted its 1 keys from the database\n");
    let gone = run_printed(&base, None, &["lookup", "--filter", "users", &stored]).await.unwrap_err().to_string();
    assert!(gone.contains("404") && gone.contains("no filter named"), "{gone}");
    assert!(run_printed(&base, ops, &["list"]).await.unwrap().contains("(no filters"));
}

#[tokio::test]
async fn a_bad_origin_url_or_ca_file_names_the_flag_to_fix() {
    let err = run_printed("127.0.0.1:8080", None, &["list"]).await.unwrap_err().to_string();
    assert!(
        err.starts_with("--origin (BLOOMGATE_ORIGIN_URL): invalid server URL") && err.contains("https://"),
        "{err}"
    );
    let err = run_printed("https://127.0.0.1:9", None, &["list", "--ca-file", "/nonexistent/ca.pem"]).await;
    let err = err.unwrap_err().to_string();
    assert!(err.starts_with("--ca-file (BLOOMGATE_CA_FILE)") && err.contains("/nonexistent/ca.pem"), "{err}");
}

/// A CA certificate, made once with openssl: parsed into the client's roots here, never met in
/// a handshake (the client crate's and the end-to-end tests do that).
const SOME_CA_PEM: &str = "\
-----BEGIN CERTIFICATE-----
MIIBlzCCAT2gAwIBAgIUe4WrkFz1h/X61uyzrqVxSgQOAIwwCgYIKoZIzj0EAwIw
IDEeMBwGA1UEAwwVYmxvb21nYXRlIENMSSB0ZXN0IENBMCAXDTI2MTIwNjE0NDcz
OVoYDzIxMjYxMTEyMTQ0NzM5WjAgMR4wHAYDVQQDDBVibG9vbWdhdGUgQ0xJIHRl
c3QgQ0EwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQGVmMGz2oUTs0YUMeHfrIM
ekoL28HazbEi+LO21p9ZfJWYZppHsgRk5PdREMc6jQbvkYJ0zL4mnCaKcan/iu/Z
o1MwUTAdBgNVHQ4EFgQUMTRI24FlAESlD0cVImbddiaAeOswHwYDVR0jBBgwFoAU
MTRI24FlAESlD0cVImbddiaAeOswDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQD
AgNIADBFAiBaNu7Q/2BHTWcBAZ5moamieyK+bY2kcc7wa1lmd3rL4QIhAKhF6Nhc
DeEDYt5k6JgUH3ffzPy3S2pfjraLwxMU03dW
-----END CERTIFICATE-----
";

#[tokio::test]
async fn an_https_origin_with_a_ca_file_is_called() {
    let dir = TempDir(std::env::temp_dir().join(format!("bloomgate-cli-ca-{:016x}", rand::random::<u64>())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let ca_file = dir.0.join("ca.pem");
    std::fs::write(&ca_file, SOME_CA_PEM).unwrap();
    let line = ["list", "--ca-file", ca_file.to_str().unwrap()];
    let err = run_printed("https://127.0.0.1:9", None, &line).await.unwrap_err().to_string();
    assert!(err.contains("cannot reach the origin at https://127.0.0.1:9"), "settings taken, call made: {err}");
}

#[tokio::test]
async fn an_origin_that_is_not_running_is_named() {
    let err = run_printed("http://127.0.0.1:9", None, &["list"]).await.unwrap_err().to_string();
    assert!(err.contains("cannot reach the origin at http://127.0.0.1:9"), "{err}");
}
