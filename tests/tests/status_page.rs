//! The status page in a real browser (Debian's headless Chromium): an origin on real Redis and
//! Cassandra serves `/status` with `status_page = true` (404 without), the page draws its plots
//! from `/status/data` with no error, and a screenshot of it is not blank.

use bloomgate_tests::origin::TestOrigin;
use bloomgate_tests::{random_keys, unique_filter};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's Chromium (`apt-get install chromium`; `scripts/test` installs it), or
/// `BG_TEST_CHROMIUM`.
fn chromium() -> PathBuf {
    let path = std::env::var_os("BG_TEST_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(path.exists(), "{} not found: `apt-get install chromium` (scripts/test installs it)", path.display());
    path
}

/// Runs headless Chromium on `url` with `args`; its stdout and stderr. On a blocking thread:
/// the origin it asks is served by this test's runtime. Output goes through files, not pipes: a
/// helper process Chromium leaves behind can hold a pipe open after it exits.
async fn headless(url: &str, profile: &Path, args: &[&str]) -> (String, String) {
    let (url, profile) = (url.to_owned(), profile.to_owned());
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || run_headless(&url, &profile, &args)).await.unwrap()
}

fn run_headless(url: &str, profile: &Path, args: &[String]) -> (String, String) {
    let (out_path, err_path) = (profile.join("stdout.txt"), profile.join("stderr.txt"));
    let mut child = Command::new(chromium())
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"])
        .args(["--disable-crash-reporter", "--disable-breakpad"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--enable-logging=stderr", "--v=0", "--window-size=1280,1000", "--virtual-time-budget=5000"])
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("run chromium");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (std::fs::read_to_string(out_path).unwrap_or_default(), std::fs::read_to_string(err_path).unwrap_or_default())
}

/// Pixels unlike the page's background, and distinct colours, in an RGB(A) PNG.
fn ink(png_path: &Path) -> (usize, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png_path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let background = [0xfa, 0xfb, 0xfc];
    let mut colours = std::collections::HashSet::new();
    let mut inked = 0;
    for px in buf[..info.buffer_size()].chunks(channels) {
        let rgb = [px[0], px[1], px[2]];
        if rgb != background {
            inked += 1;
        }
        colours.insert(rgb);
    }
    (inked, colours.len())
}

#[tokio::test]
async fn the_status_page_draws_every_plot_in_a_browser_without_errors() {
    let origin = TestOrigin::on_services(|c| {
        // Its own keyspace: the recovery check (which samples the plots) acts on every filter.
        c.cassandra_keyspace = "bloomgate_status_test".into();
        c.recovery_interval_ms = 200;
        c.status_page = true;
    })
    .await;
    let filter = unique_filter("status");
    origin.create_filter(&filter, 10_000, 0.01).await;
    origin.insert_all(&filter, &random_keys(300)).await;
    let data_url = format!("{}/status/data", origin.base);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for key in random_keys(20) {
            origin.get(&filter, &key).await;
        }
        let data: serde_json::Value = origin.http.get(&data_url).send().await.unwrap().json().await.unwrap();
        let samples = data["filters"][&filter].as_array().map_or(0, Vec::len);
        if samples >= 4 {
            break;
        }
        assert!(Instant::now() < deadline, "the recovery check recorded {samples} samples in 20 s");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    let page = format!("{}/status", origin.base);
    let r = origin.http.get(&page).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/html"));

    let profile = tempdir("profile");
    let (dom, log) = headless(&page, &profile, &["--dump-dom"]).await;
    // Earlier runs' filters share the keyspace, and the page shows every filter it has samples of.
    let rendered: usize = dom
        .split("data-rendered=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the page did not finish rendering:\n{dom}\n{log}"));
    assert!(rendered >= 1, "{dom}");
    assert!(dom.contains(&format!("<h2>{filter}</h2>")), "{dom}");
    assert_eq!(dom.matches("<svg").count(), 6 * rendered, "six plots a filter:\n{dom}");
    assert!(dom.matches("<path").count() >= 6 * rendered, "every plot drew a line:\n{dom}");
    assert!(dom.contains("<p id=\"error\"></p>"), "the page reported an error:\n{dom}");
    // Chromium logs every console message as `…:CONSOLE:…`; the page writes one only on an error.
    for bad in [":CONSOLE", "Uncaught"] {
        assert!(!log.contains(bad), "the browser reported {bad:?}:\n{log}");
    }

    let shot = profile.join("status.png");
    let (_, log) = headless(&page, &profile, &[&format!("--screenshot={}", shot.display())]).await;
    assert!(shot.exists(), "no screenshot:\n{log}");
    let (inked, colours) = ink(&shot);
    assert!(inked > 20_000, "the screenshot is nearly blank: {inked} pixels drawn");
    assert!(colours > 20, "the screenshot has {colours} colours: no plots");

    // Off unless turned on.
    let closed = TestOrigin::on_services(|c| c.recovery_interval_ms = 0).await;
    let r = closed.http.get(format!("{}/status", closed.base)).send().await.unwrap();
    assert_eq!(r.status(), 404, "the status page is off by default");
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bloomgate-status-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
