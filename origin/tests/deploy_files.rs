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

#[test]
fn the_shipped_templates_create_the_keyspace_with_three_replicas_per_data_centre() {
    let three_per_dc = "{'class': 'NetworkTopologyStrategy', 'datacenter1': 3}";
    let kubernetes =
        load("deploy/kubernetes/origin.env", variables(include_str!("../../deploy/kubernetes/origin.env")));
    assert_eq!(kubernetes.cassandra_replication, three_per_dc);
    let example = load("deploy/origin.env.example", variables(include_str!("../../deploy/origin.env.example")));
    assert_eq!(example.cassandra_replication, three_per_dc);
}

#[test]
fn kubernetes_pods_run_no_ddl_and_a_job_applies_the_schema_with_their_settings() {
    let config = load("deploy/kubernetes/origin.env", variables(include_str!("../../deploy/kubernetes/origin.env")));
    assert!(!config.cassandra_manage_schema, "pods check the schema's version; the Job applies it");
    let kustomization = include_str!("../../deploy/kubernetes/kustomization.yaml");
    assert!(kustomization.contains("\n  - schema-job.yaml\n"), "the Job is part of the set");
    let job = include_str!("../../deploy/kubernetes/schema-job.yaml");
    assert!(job.contains("kind: Job") && job.contains(r#"args: ["--log-format", "json", "schema", "apply"]"#));
    let deployment = include_str!("../../deploy/kubernetes/deployment.yaml");
    let env_from = |manifest: &str| {
        manifest.split("envFrom:").nth(1).map(|rest| rest.split("resources:").next().unwrap_or_default().to_owned())
    };
    assert_eq!(env_from(job), env_from(deployment), "the Job reads the origins' ConfigMap and Secret");
    for hardening in [
        "runAsNonRoot: true",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "automountServiceAccountToken: false",
        "backoffLimit:",
        "ttlSecondsAfterFinished:",
        "restartPolicy: Never",
    ] {
        assert!(job.contains(hardening), "schema-job.yaml lacks {hardening}");
    }
    let readme = include_str!("../../deploy/kubernetes/README.md");
    assert!(readme.contains("kubectl wait --for=condition=complete job/bloomgate-schema"), "the README runs it first");
}
