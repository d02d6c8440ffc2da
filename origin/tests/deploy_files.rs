//! The deployment files name only real settings, and what they configure is accepted by the
//! origin's own validation: a typo in a manifest's variable would otherwise be ignored at
//! start (variables that are not settings are not read) and surface only as a wrong default.

use bloomgate_origin::config::{Config, ENV_PREFIX};

/// `NAME=value` lines of an environment file, comments and blank lines skipped.
fn variables(file: &str) -> Vec<(String, String)> {
    file.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (name, value) = line.split_once('=').unwrap_or_else(|| panic!("not NAME=value: {line}"));
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// Loads `vars` as the origin would from its environment, after checking each names a setting.
fn load(source: &str, vars: Vec<(String, String)>) -> Config {
    let names = Config::setting_names();
    for (name, _) in &vars {
        let setting = name.strip_prefix(ENV_PREFIX).unwrap_or_else(|| panic!("{source}: {name} lacks BLOOMGATE_"));
        assert!(names.contains(&setting.to_ascii_lowercase()), "{source}: {name} is not a setting");
    }
    let no_flags = serde_json::Map::new();
    let config = Config::load_from(None, vars, &no_flags).unwrap_or_else(|e| panic!("{source}: {e}"));
    config.validate().unwrap_or_else(|e| panic!("{source}: {e}"));
    config
}

#[test]
fn the_kubernetes_config_and_secret_examples_name_only_settings_and_validate() {
    let mut vars = variables(include_str!("../../deploy/kubernetes/origin.env"));
    vars.extend(variables(include_str!("../../deploy/kubernetes/secrets.env.example")));
    let config = load("deploy/kubernetes", vars);
    assert_eq!(config.cassandra_nodes.len(), 3, "a ring of three, as the consistency level needs");
    assert!(!config.writer_tokens.is_empty() && config.edge_secret.is_some());
}

#[test]
fn a_misspelt_variable_in_a_deployment_file_is_caught() {
    let vars = variables("BLOOMGATE_WRITER_TOKEN=one-letter-short-of-the-setting\n");
    let caught = std::panic::catch_unwind(|| load("example", vars));
    assert!(caught.is_err(), "BLOOMGATE_WRITER_TOKEN is not a setting (BLOOMGATE_WRITER_TOKENS is)");
}

#[test]
fn the_kubernetes_probes_and_scrapes_use_the_admin_port_the_config_opens() {
    let config = load("deploy/kubernetes/origin.env", variables(include_str!("../../deploy/kubernetes/origin.env")));
    let admin = config.admin_listen.expect("the manifests keep metrics and readiness off the Service's port");
    let deployment = include_str!("../../deploy/kubernetes/deployment.yaml");
    assert!(
        deployment.contains(&format!("- name: admin\n              containerPort: {}", admin.port())),
        "{deployment}"
    );
    assert!(deployment.contains(&format!("prometheus.io/port: \"{}\"", admin.port())));
    let readiness = deployment.split("readinessProbe:").nth(1).expect("a readiness probe");
    assert!(
        readiness.split("Probe:").next().unwrap_or_default().contains("port: admin"),
        "readiness is on the admin port"
    );
    let service = include_str!("../../deploy/kubernetes/service.yaml");
    assert!(!service.contains(&admin.port().to_string()), "the Service exposes the API port alone");
}
