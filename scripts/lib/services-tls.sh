# shellcheck shell=bash
# scripts/lib/services-tls.sh — the services of `scripts/services --tls`: Redis,
# a Redis Cluster and a Cassandra node that speak only TLS and want a password,
# beside (never instead of) the plain ones, for the tests of the origin's TLS
# and credential settings.
#
# Sourced by scripts/services; uses its helpers (log, die, pid_alive,
# cassandra_launch, ...) and the Redis Cluster's functions
# (services-redis-cluster.sh), configured here for the TLS cluster.
#
# Certificates, keys and passwords are made here, on this machine (openssl,
# keytool), once: $TLS_DIR (.state/tls) keeps them, and any of them missing
# makes all of them anew (and restarts the TLS services that run with the old
# ones). The user `bloomgate` and its passwords are the same on all three.
# What a client needs is written to $TLS_DIR/settings.env (see scripts/services).

TLS_DIR="$STATE_DIR/tls"
TLS_USER=bloomgate
TLS_DAYS=3650
TLS_REDIS_PORT="${BG_TLS_REDIS_PORT:-6400}"
TLS_REDIS_CLUSTER_BASE_PORT="${BG_TLS_REDIS_CLUSTER_BASE_PORT:-7101}"
TLS_CASSANDRA_PORT="${BG_TLS_CASSANDRA_PORT:-9142}"
TLS_CASSANDRA_STORAGE_PORT="${BG_TLS_CASSANDRA_STORAGE_PORT:-7100}"
TLS_CASSANDRA_HEAP="${BG_TLS_CASSANDRA_HEAP:-512m}"

TLS_CA="$TLS_DIR/ca.pem"
TLS_WRONG_CA="$TLS_DIR/wrong-ca.pem"
TLS_SERVER_CERT="$TLS_DIR/server.pem"
TLS_SERVER_KEY="$TLS_DIR/server.key"
TLS_CLIENT_CERT="$TLS_DIR/client.pem"
TLS_CLIENT_KEY="$TLS_DIR/client.key"
TLS_WRONG_CLIENT_CERT="$TLS_DIR/wrong-client.pem"
TLS_WRONG_CLIENT_KEY="$TLS_DIR/wrong-client.key"
TLS_KEYSTORE="$TLS_DIR/cassandra-keystore.p12"
TLS_KEYSTORE_PASSWORD="$TLS_DIR/cassandra-keystore-password"
TLS_REDIS_PASSWORD="$TLS_DIR/redis-password"
TLS_CASSANDRA_PASSWORD="$TLS_DIR/cassandra-password"
# Cassandra's default superuser, made by the node itself on its first start.
TLS_CASSANDRA_SUPERUSER=cassandra
TLS_CASSANDRA_SUPERUSER_PASSWORD="$TLS_DIR/cassandra-superuser-password"
TLS_SETTINGS="$TLS_DIR/settings.env"
# Everything made together from one CA (the passwords are kept apart: see tls_ensure_material).
TLS_CERT_FILES=("$TLS_CA" "$TLS_DIR/ca.key" "$TLS_WRONG_CA" "$TLS_DIR/wrong-ca.key"
                "$TLS_SERVER_CERT" "$TLS_SERVER_KEY" "$TLS_CLIENT_CERT" "$TLS_CLIENT_KEY"
                "$TLS_WRONG_CLIENT_CERT" "$TLS_WRONG_CLIENT_KEY" "$TLS_KEYSTORE" "$TLS_KEYSTORE_PASSWORD")
# Set when this run made certificates or passwords: services still running with the old ones restart.
TLS_MATERIAL_NEW=false
TLS_MATERIAL_CHECKED=false # once per run, for whichever TLS service starts first

REDIS_TLS_DIR="$STATE_DIR/redis-tls"
REDIS_TLS_PID="$RUN_DIR/redis-tls.pid"
REDIS_TLS_LOG="$LOG_DIR/redis-tls.log"
CASS_TLS_DIR="$STATE_DIR/cassandra-tls"
CASS_TLS_PID="$RUN_DIR/cassandra-tls.pid"
CASS_TLS_LOG="$LOG_DIR/cassandra-tls.log"

# Every redis-cli call: TLS against the CA, with the client certificate, as the
# ACL user; the password travels in REDISCLI_AUTH (tls_configure), not argv.
TLS_REDIS_CLI_ARGS=(--tls --cacert "$TLS_CA" --cert "$TLS_CLIENT_CERT" --key "$TLS_CLIENT_KEY" --user "$TLS_USER")

# Points the Redis Cluster functions at the TLS cluster; called by scripts/services for --tls.
tls_configure() {
  # Three masters, no replicas: the failover tests use the plain cluster.
  redis_cluster_configure "TLS redis cluster" "$TLS_REDIS_CLUSTER_BASE_PORT" 3 0 \
    "$STATE_DIR/redis-cluster-tls" BG_TLS_REDIS_CLUSTER_BASE_PORT --tls
  # shellcheck disable=SC2034 # both read by services-redis-cluster.sh
  REDIS_CLUSTER_CONF=tls_redis_conf_cluster REDIS_CLUSTER_CLI_ARGS=("${TLS_REDIS_CLI_ARGS[@]}")
  tls_export_redis_auth
}

tls_export_redis_auth() {
  if [[ -s $TLS_REDIS_PASSWORD ]]; then
    REDISCLI_AUTH=$(<"$TLS_REDIS_PASSWORD")
    export REDISCLI_AUTH
  fi
}

# ------------------------------------------------------------- material ---
tls_run() { # tls_run COMMAND...  -> runs it with its output in $TLS_DIR/make.log; dies with that log
  "$@" >>"$TLS_DIR/make.log" 2>&1 </dev/null || die_with_log "$TLS_DIR/make.log" 20 "making the TLS material failed: $*"
}

tls_new_key_csr() { # tls_new_key_csr NAME SUBJECT  -> $TLS_DIR/NAME.key, $TLS_DIR/NAME.csr
  tls_run openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$TLS_DIR/$1.key" -out "$TLS_DIR/$1.csr" -subj "$2"
}

tls_new_ca() { # tls_new_ca NAME SUBJECT  -> $TLS_DIR/NAME.pem, $TLS_DIR/NAME.key
  tls_run openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$TLS_DIR/$1.key" -out "$TLS_DIR/$1.pem" -days "$TLS_DAYS" -subj "$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}

tls_sign() { # tls_sign NAME CA EXTENSIONS  -> $TLS_DIR/NAME.pem from NAME.csr, signed by CA
  local name=$1 ca=$2 extensions=$3
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
    "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid" "$extensions" >"$TLS_DIR/$name.ext"
  # A random positive serial, so certificates made anew never repeat one.
  tls_run openssl x509 -req -in "$TLS_DIR/$name.csr" -CA "$TLS_DIR/$ca.pem" -CAkey "$TLS_DIR/$ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$TLS_DAYS" -extfile "$TLS_DIR/$name.ext" -out "$TLS_DIR/$name.pem"
  rm -f "$TLS_DIR/$name.csr" "$TLS_DIR/$name.ext"
}

tls_new_password() { # tls_new_password FILE  -> 32 hex digits: safe in URLs, CQL strings and YAML
  openssl rand -hex 16 >"$1"
}

tls_make_certificates() {
  local file
  for file in "${TLS_CERT_FILES[@]}"; do rm -f "$file"; done
  : >"$TLS_DIR/make.log"
  log "making a CA, server and client certificates and Cassandra's keystore in $TLS_DIR (openssl, keytool)"
  tls_new_ca ca "/O=bloomgate/CN=bloomgate dev CA"
  # Unrelated to the first: a client that trusts it must fail to verify the servers.
  tls_new_ca wrong-ca "/O=bloomgate/CN=bloomgate wrong CA"
  # The servers' certificate also serves as the client one between Redis Cluster nodes.
  tls_new_key_csr server "/O=bloomgate/CN=localhost"
  tls_sign server ca $'extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost'
  tls_new_key_csr client "/O=bloomgate/CN=$TLS_USER"
  tls_sign client ca "extendedKeyUsage=clientAuth"
  tls_new_key_csr wrong-client "/O=bloomgate/CN=$TLS_USER"
  tls_sign wrong-client wrong-ca "extendedKeyUsage=clientAuth"
  # Cassandra reads a Java keystore: the server's key and chain, put there by
  # Java 17's own keytool from the PKCS#12 file openssl writes.
  tls_new_password "$TLS_KEYSTORE_PASSWORD"
  tls_run openssl pkcs12 -export -name cassandra -in "$TLS_SERVER_CERT" -inkey "$TLS_SERVER_KEY" \
    -certfile "$TLS_CA" -passout "file:$TLS_KEYSTORE_PASSWORD" -out "$TLS_DIR/server-openssl.p12"
  tls_run "$(dirname "$JAVA_BIN")/keytool" -importkeystore -noprompt \
    -srckeystore "$TLS_DIR/server-openssl.p12" -srcstoretype PKCS12 -srcstorepass:file "$TLS_KEYSTORE_PASSWORD" \
    -destkeystore "$TLS_KEYSTORE" -deststoretype PKCS12 -deststorepass:file "$TLS_KEYSTORE_PASSWORD"
  rm -f "$TLS_DIR/server-openssl.p12"
}

# Makes what is missing; sets TLS_MATERIAL_NEW when it made anything a running service uses.
tls_ensure_material() {
  $TLS_MATERIAL_CHECKED && return 0
  TLS_MATERIAL_CHECKED=true
  command -v openssl >/dev/null 2>&1 || apt_install openssl
  ensure_java17 # its keytool
  mkdir -p "$TLS_DIR"
  chmod 700 "$TLS_DIR"
  local file umask_was
  umask_was=$(umask)
  umask 077 # keys and passwords readable by their owner alone
  for file in "${TLS_CERT_FILES[@]}"; do
    [[ -s $file ]] && continue
    tls_make_certificates
    TLS_MATERIAL_NEW=true
    break
  done
  # The Redis password is in the servers' configuration; Cassandra's is set at every start.
  [[ -s $TLS_REDIS_PASSWORD ]] || { tls_new_password "$TLS_REDIS_PASSWORD"; TLS_MATERIAL_NEW=true; }
  [[ -s $TLS_CASSANDRA_PASSWORD ]] || tls_new_password "$TLS_CASSANDRA_PASSWORD"
  echo cassandra >"$TLS_CASSANDRA_SUPERUSER_PASSWORD"
  umask "$umask_was"
  tls_export_redis_auth
  tls_write_settings
}

tls_write_settings() {
  local password port urls=() addresses=()
  password=$(<"$TLS_REDIS_PASSWORD")
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    urls+=("rediss://$TLS_USER:$password@127.0.0.1:$port")
    addresses+=("127.0.0.1:$port")
  done
  {
    echo "# Written by scripts/services start --tls: what a client of the TLS services needs."
    echo "# NAME=VALUE, one a line, nothing quoted; the names are described in scripts/services."
    local name value
    while read -r name value; do
      # Plain enough for a shell and for a reader that splits at the first '='.
      [[ $value =~ ^[A-Za-z0-9_./:@,+=-]+$ ]] \
        || die "$name would be '$value', which a shell reads otherwise: use a state dir without such characters (BG_STATE_DIR)"
      printf '%s=%s\n' "$name" "$value"
    done <<EOF
BG_TLS_DIR $TLS_DIR
BG_TLS_CA_FILE $TLS_CA
BG_TLS_WRONG_CA_FILE $TLS_WRONG_CA
BG_TLS_CLIENT_CERT_FILE $TLS_CLIENT_CERT
BG_TLS_CLIENT_KEY_FILE $TLS_CLIENT_KEY
BG_TLS_WRONG_CLIENT_CERT_FILE $TLS_WRONG_CLIENT_CERT
BG_TLS_WRONG_CLIENT_KEY_FILE $TLS_WRONG_CLIENT_KEY
BG_TLS_REDIS_URL rediss://$TLS_USER:$password@127.0.0.1:$TLS_REDIS_PORT
BG_TLS_REDIS_ADDR 127.0.0.1:$TLS_REDIS_PORT
BG_TLS_REDIS_USER $TLS_USER
BG_TLS_REDIS_PASSWORD_FILE $TLS_REDIS_PASSWORD
BG_TLS_REDIS_CLUSTER_URLS $(IFS=,; echo "${urls[*]}")
BG_TLS_REDIS_CLUSTER_ADDRS $(IFS=,; echo "${addresses[*]}")
BG_TLS_CASSANDRA_ADDR 127.0.0.1:$TLS_CASSANDRA_PORT
BG_TLS_CASSANDRA_USER $TLS_USER
BG_TLS_CASSANDRA_PASSWORD_FILE $TLS_CASSANDRA_PASSWORD
BG_TLS_CASSANDRA_SUPERUSER $TLS_CASSANDRA_SUPERUSER
BG_TLS_CASSANDRA_SUPERUSER_PASSWORD_FILE $TLS_CASSANDRA_SUPERUSER_PASSWORD
EOF
  } >"$TLS_SETTINGS.tmp"
  chmod 600 "$TLS_SETTINGS.tmp"
  mv -f "$TLS_SETTINGS.tmp" "$TLS_SETTINGS"
}

tls_wipe_material() {
  rm -rf "$TLS_DIR"
  log "TLS certificates, keys and passwords deleted ($TLS_DIR)"
}

# ---------------------------------------------------------------- redis ---
tls_redis_conf() { # tls_redis_conf PORT  -> redis.conf lines: TLS only on PORT, the ACL user
  local password
  password=$(<"$TLS_REDIS_PASSWORD")
  cat <<EOF
port 0
tls-port $1
tls-cert-file $TLS_SERVER_CERT
tls-key-file $TLS_SERVER_KEY
tls-ca-cert-file $TLS_CA
tls-auth-clients optional
tls-replication yes
user default off
user $TLS_USER on >$password ~* &* +@all
masteruser $TLS_USER
masterauth $password
EOF
}

tls_redis_conf_cluster() { tls_redis_conf "$1"; echo "tls-cluster yes"; }

redis_tls_cli() { timeout 5 redis-cli -h 127.0.0.1 -p "$TLS_REDIS_PORT" "${TLS_REDIS_CLI_ARGS[@]}" "$@" 2>/dev/null; }

redis_tls_pid() { pid_alive "$REDIS_TLS_PID" redis-server; }

redis_tls_ping() { [[ $(redis_tls_cli ping) == PONG ]]; }

redis_tls_start() {
  ensure_redis_installed
  tls_ensure_material
  local pid i
  if pid=$(redis_tls_pid); then
    if $TLS_MATERIAL_NEW; then
      log "TLS redis (pid $pid) runs with old certificates or password: restarting it"
      redis_tls_stop
    else
      redis_tls_ping || die_with_log "$REDIS_TLS_LOG" 30 "TLS redis (pid $pid) is running but does not answer PING over TLS on 127.0.0.1:$TLS_REDIS_PORT"
      log "TLS redis already running (pid $pid) on 127.0.0.1:$TLS_REDIS_PORT"
      return 0
    fi
  fi
  rm -f "$REDIS_TLS_PID"
  port_open "$TLS_REDIS_PORT" && die "port 127.0.0.1:$TLS_REDIS_PORT is already in use by another process (set BG_TLS_REDIS_PORT)"
  mkdir -p "$REDIS_TLS_DIR" "$LOG_DIR" "$RUN_DIR"
  # A file, not arguments: the password stays out of the process list.
  (
    umask 077
    cat >"$REDIS_TLS_DIR/redis.conf" <<EOF
# Generated by scripts/services (--tls); rewritten at every start.
bind 127.0.0.1
dir $REDIS_TLS_DIR
daemonize yes
pidfile $REDIS_TLS_PID
logfile $REDIS_TLS_LOG
save ""
appendonly no
maxmemory-policy noeviction
EOF
    tls_redis_conf "$TLS_REDIS_PORT" >>"$REDIS_TLS_DIR/redis.conf"
  )
  log "starting TLS redis on 127.0.0.1:$TLS_REDIS_PORT (dir $REDIS_TLS_DIR)"
  redis-server "$REDIS_TLS_DIR/redis.conf" </dev/null 9>&- \
    || die_with_log "$REDIS_TLS_LOG" 30 "redis-server (TLS) failed to start"
  for ((i = 0; i < 100; i++)); do
    if redis_tls_ping; then
      log "TLS redis ready (pid $(redis_tls_pid || echo '?')) on 127.0.0.1:$TLS_REDIS_PORT, user $TLS_USER"
      return 0
    fi
    sleep 0.1
  done
  die_with_log "$REDIS_TLS_LOG" 30 "TLS redis did not answer PING over TLS on 127.0.0.1:$TLS_REDIS_PORT within 10s"
}

redis_tls_stop() {
  local pid
  if ! pid=$(redis_tls_pid); then
    rm -f "$REDIS_TLS_PID"
    log "TLS redis not running"
    return 0
  fi
  log "stopping TLS redis (pid $pid)"
  redis_tls_cli shutdown nosave >/dev/null || true
  kill_pid "$pid" "TLS redis" 10
  rm -f "$REDIS_TLS_PID"
  log "TLS redis stopped"
}

redis_tls_status() {
  local pid
  if pid=$(redis_tls_pid); then
    if redis_tls_ping; then
      printf '%-10s %-9s pid %-8s 127.0.0.1:%s (TLS, user %s)\n' redis-tls running "$pid" "$TLS_REDIS_PORT" "$TLS_USER"
    else
      printf '%-10s %-9s pid %-8s 127.0.0.1:%s (not answering PING over TLS)\n' redis-tls unhealthy "$pid" "$TLS_REDIS_PORT"
    fi
  else
    printf '%-10s %-9s %-12s 127.0.0.1:%s\n' redis-tls stopped - "$TLS_REDIS_PORT"
  fi
}

redis_tls_wipe() {
  redis_tls_stop
  rm -rf "$REDIS_TLS_DIR"
  log "TLS redis data deleted ($REDIS_TLS_DIR)"
}

# The cluster: services-redis-cluster.sh's functions, as tls_configure set them up.
redis_cluster_tls_start() {
  ensure_redis_installed
  tls_ensure_material
  local port
  if $TLS_MATERIAL_NEW; then
    for port in "${REDIS_CLUSTER_PORTS[@]}"; do
      rc_pid "$port" >/dev/null || continue
      log "the TLS redis cluster runs with old certificates or password: restarting it"
      redis_cluster_stop
      break
    done
  fi
  redis_cluster_start
}
redis_cluster_tls_stop() { redis_cluster_stop; }
redis_cluster_tls_status() { redis_cluster_status; }
redis_cluster_tls_wipe() { redis_cluster_wipe; }

# ------------------------------------------------------------ cassandra ---
cassandra_tls_pid() { pid_alive "$CASS_TLS_PID" org.apache.cassandra.service.CassandraDaemon; }

cql_tls() { # cql_tls USER PASSWORD_FILE [cql_ping.py ARG...]
  local user=$1 password_file=$2; shift 2
  cql_at 127.0.0.1 "$TLS_CASSANDRA_PORT" --cafile "$TLS_CA" --user "$user" --password-file "$password_file" "$@"
}

write_cassandra_tls_conf() {
  write_cassandra_conf_in "$CASS_TLS_DIR" CLUSTER_NAME=bloomgate-tls NUM_TOKENS=1 \
    ADDRESS=127.0.0.1 SEEDS="127.0.0.1:$TLS_CASSANDRA_STORAGE_PORT" \
    NATIVE_PORT="$TLS_CASSANDRA_PORT" STORAGE_PORT="$TLS_CASSANDRA_STORAGE_PORT" HINTED_HANDOFF=false \
    AUTHENTICATOR=PasswordAuthenticator AUTHORIZER=CassandraAuthorizer
  render_template "$LIB_DIR/cassandra/tls.yaml" KEYSTORE="$TLS_KEYSTORE" \
    KEYSTORE_PASSWORD="$(<"$TLS_KEYSTORE_PASSWORD")" >>"$CASS_TLS_DIR/conf/cassandra.yaml"
  chmod 600 "$CASS_TLS_DIR/conf/cassandra.yaml" # it holds the keystore's password
}

cassandra_tls_user_logs_in() { cql_tls "$TLS_USER" "$TLS_CASSANDRA_PASSWORD" --quiet --timeout 5 2>/dev/null; }

cassandra_tls_as_superuser() { # cassandra_tls_as_superuser <<< STATEMENTS
  cql_tls "$TLS_CASSANDRA_SUPERUSER" "$TLS_CASSANDRA_SUPERUSER_PASSWORD" --quiet -
}

# The role the tests log in as: not a superuser, but every permission on every
# keyspace (to create its keyspace and tables, read and write them). Statements
# go through stdin, keeping the password off the command line. A role kept
# from an earlier password file gets the current password; only then, as
# Cassandra refuses a second password change within 5 s.
cassandra_tls_ensure_role() {
  cassandra_tls_user_logs_in && return 0
  local password
  password=$(<"$TLS_CASSANDRA_PASSWORD")
  cassandra_tls_as_superuser <<EOF
CREATE ROLE IF NOT EXISTS $TLS_USER WITH PASSWORD = '$password' AND LOGIN = true AND SUPERUSER = false
GRANT ALL PERMISSIONS ON ALL KEYSPACES TO $TLS_USER
EOF
  cassandra_tls_user_logs_in && return 0
  log "the role $TLS_USER exists with another password: setting the one in $TLS_CASSANDRA_PASSWORD"
  cassandra_tls_as_superuser <<<"ALTER ROLE $TLS_USER WITH PASSWORD = '$password' AND LOGIN = true"
  cassandra_tls_user_logs_in
}

cassandra_tls_start() {
  ensure_python3
  tls_ensure_material
  local pid
  if pid=$(cassandra_tls_pid) && $TLS_MATERIAL_NEW; then
    log "TLS cassandra (pid $pid) runs with an old keystore: restarting it"
    cassandra_tls_stop
  fi
  if pid=$(cassandra_tls_pid); then
    if cassandra_tls_user_logs_in; then
      log "TLS cassandra already running (pid $pid) on 127.0.0.1:$TLS_CASSANDRA_PORT, user $TLS_USER logs in"
      return 0
    fi
    log "TLS cassandra process (pid $pid) exists but $TLS_USER cannot log in yet; waiting"
  else
    rm -f "$CASS_TLS_PID"
    local p
    for p in "$TLS_CASSANDRA_PORT" "$TLS_CASSANDRA_STORAGE_PORT"; do
      port_open "$p" && die "port 127.0.0.1:$p is already in use by another process (set BG_TLS_CASSANDRA_PORT / BG_TLS_CASSANDRA_STORAGE_PORT)"
    done
    ensure_cassandra_lib
    write_cassandra_tls_conf
    log "starting TLS cassandra $CASSANDRA_VERSION on 127.0.0.1:$TLS_CASSANDRA_PORT (storage port $TLS_CASSANDRA_STORAGE_PORT, heap $TLS_CASSANDRA_HEAP, log $CASS_TLS_LOG)"
    # The default superuser is made 10 s after start by default; the role setup needs it.
    cassandra_launch "TLS cassandra" "$CASS_TLS_DIR" "$CASS_TLS_LOG" "$CASS_TLS_PID" "$TLS_CASSANDRA_HEAP" \
      -Dcassandra.superuser_setup_delay_ms=0
  fi
  local t0 release
  t0=$(now)
  # Until the superuser can log in over TLS: the port is open, TLS works and the role exists.
  release=$(cassandra_wait_cql "TLS cassandra" 127.0.0.1 "$TLS_CASSANDRA_PORT" "$CASS_TLS_PID" "$CASS_TLS_LOG" \
              "scripts/services stop --tls cassandra" --cafile "$TLS_CA" \
              --user "$TLS_CASSANDRA_SUPERUSER" --password-file "$TLS_CASSANDRA_SUPERUSER_PASSWORD")
  cassandra_tls_ensure_role \
    || die_with_log "$CASS_TLS_LOG" 30 "the role $TLS_USER cannot log in to the TLS cassandra (above); to start it afresh: scripts/services wipe --tls cassandra"
  log "TLS cassandra ready (pid $(<"$CASS_TLS_PID")) on 127.0.0.1:$TLS_CASSANDRA_PORT, release_version $release, user $TLS_USER, after $(( $(now) - t0 ))s"
}

cassandra_tls_stop() {
  local pid
  if ! pid=$(cassandra_tls_pid); then
    rm -f "$CASS_TLS_PID"
    log "TLS cassandra not running"
    return 0
  fi
  log "stopping TLS cassandra (pid $pid)"
  kill_pid "$pid" "TLS cassandra" 45
  rm -f "$CASS_TLS_PID"
  log "TLS cassandra stopped"
}

cassandra_tls_status() {
  local pid
  if pid=$(cassandra_tls_pid); then
    if port_open "$TLS_CASSANDRA_PORT"; then
      printf '%-13s %-9s pid %-8s 127.0.0.1:%s (TLS, user %s)\n' cassandra-tls running "$pid" "$TLS_CASSANDRA_PORT" "$TLS_USER"
    else
      printf '%-13s %-9s pid %-8s 127.0.0.1:%s (CQL port not open yet)\n' cassandra-tls starting "$pid" "$TLS_CASSANDRA_PORT"
    fi
  else
    printf '%-13s %-9s %-12s 127.0.0.1:%s\n' cassandra-tls stopped - "$TLS_CASSANDRA_PORT"
  fi
}

cassandra_tls_wipe() {
  cassandra_tls_stop
  rm -rf "$CASS_TLS_DIR"
  log "TLS cassandra data deleted ($CASS_TLS_DIR)"
}
