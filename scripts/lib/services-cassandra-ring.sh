# shellcheck shell=bash
# scripts/lib/services-cassandra-ring.sh — the three-node Cassandra ring of
# `scripts/services --topology cluster`: nodes on 127.0.0.1, 127.0.0.2 and
# 127.0.0.3 (Linux routes all of 127/8 to lo), each with the same CQL and
# storage ports, 127.0.0.1 the seed. Nodes join one at a time: Cassandra
# refuses to bootstrap a node while another is still joining.
#
# Sourced by scripts/services; uses its helpers (cassandra_launch,
# cassandra_wait_cql, write_cassandra_conf_in, ...). Node n lives in
# $STATE_DIR/cassandra-ring/<n>/: conf/, data dirs, cassandra.log, cassandra.pid.
# JMX stays off, as on the single node (no cassandra.jmx.* property), so there
# is no JMX port to keep apart; readiness is checked over CQL (cql_ping.py).

RING_SIZE=3
RING_PORT="${BG_CASSANDRA_RING_PORT:-9042}"
RING_STORAGE_PORT="${BG_CASSANDRA_RING_STORAGE_PORT:-7000}"
RING_HEAP="${BG_CASSANDRA_HEAP:-768m}"
RING_DIR="$STATE_DIR/cassandra-ring"
RING_NUM_TOKENS=16
# A joining node waits up to RING_DELAY (30 s by default) for ring information,
# then sleeps RING_DELAY so that every node has learnt of it; on loopback gossip
# takes about a second.
RING_DELAY_MS=5000
# A read at ALL fails at once (Unavailable) while its coordinator believes a
# replica is down, and system_distributed is replicated to 3 nodes by default:
# through each node, it asks "does this node see every other one up?" — the
# U of nodetool's UN, without JMX.
RING_ALL_UP_QUERY="SELECT id FROM system_distributed.repair_history LIMIT 1"

ring_node_address() { echo "127.0.0.$1"; }

ring_node_dir() { echo "$RING_DIR/$1"; }

ring_node_pid() { pid_alive "$(ring_node_dir "$1")/cassandra.pid" org.apache.cassandra.service.CassandraDaemon; }

ring_cql() { # ring_cql N [cql_ping.py ARG...]
  local n=$1; shift
  cql_at "$(ring_node_address "$n")" "$RING_PORT" --timeout 5 "$@" 2>/dev/null
}

conf_value() { # conf_value CASSANDRA_YAML KEY  -> the value of a top-level KEY
  awk -v k="$2:" '$1 == k {print $2; exit}' "$1" 2>/dev/null
}

ports_in_common() { # ports_in_common CASSANDRA_YAML CQL_PORT STORAGE_PORT  -> those of the two the yaml uses too
  local conf=$1 clash=()
  [[ $(conf_value "$conf" native_transport_port) == "$2" ]] && clash+=("$2")
  [[ $(conf_value "$conf" storage_port) == "$3" ]] && clash+=("$3")
  local IFS=/
  echo "${clash[*]}"
}

# The ring's first node and the single node both default to 127.0.0.1:9042
# and :7000, and both topologies share one state dir: name the one to stop.
refuse_if_ring_holds_single_node_ports() {
  local pid clash
  pid=$(ring_node_pid 1) || return 0
  clash=$(ports_in_common "$(ring_node_dir 1)/conf/cassandra.yaml" "$CASSANDRA_PORT" "$CASSANDRA_STORAGE_PORT")
  [[ -z $clash ]] \
    || die "the Cassandra ring (--topology cluster; node 1, pid $pid) holds 127.0.0.1:$clash; stop it first: scripts/services stop --topology cluster cassandra"
}

refuse_if_single_node_holds_ring_ports() {
  local pid clash
  pid=$(cassandra_pid) || return 0
  clash=$(ports_in_common "$CASS_CONF/cassandra.yaml" "$RING_PORT" "$RING_STORAGE_PORT")
  [[ -z $clash ]] \
    || die "the single-node Cassandra (pid $pid) holds 127.0.0.1:$clash, which the ring's node 1 needs; stop it first: scripts/services stop cassandra (or move the ring: BG_CASSANDRA_RING_PORT, BG_CASSANDRA_RING_STORAGE_PORT)"
}

# port_holder ADDRESS PORT  -> who listens there ("pid N: Cassandra, config F"),
# when ss can tell: most often the single node of another checkout.
port_holder() {
  local pid config
  pid=$(ss -Hltnp "src $1:$2" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2)
  [[ -n $pid ]] || return 1
  config=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | sed -n 's#^-Dcassandra.config=file://##p')
  if [[ -n $config ]]; then echo "pid $pid: Cassandra, config $config"
  else echo "pid $pid: $(cat "/proc/$pid/comm" 2>/dev/null)"
  fi
}

write_ring_node_conf() { # write_ring_node_conf N
  local n=$1 dir
  dir=$(ring_node_dir "$n")
  # Its own cluster name, so a ring node can never gossip with the single node.
  write_cassandra_conf_in "$dir" CLUSTER_NAME=bloomgate-ring NUM_TOKENS="$RING_NUM_TOKENS" \
    ADDRESS="$(ring_node_address "$n")" SEEDS="$(ring_node_address 1):$RING_STORAGE_PORT" \
    NATIVE_PORT="$RING_PORT" STORAGE_PORT="$RING_STORAGE_PORT" HINTED_HANDOFF=true \
    AUTHENTICATOR=AllowAllAuthenticator AUTHORIZER=AllowAllAuthorizer
  cat "$LIB_DIR/cassandra/ring.yaml" >>"$dir/conf/cassandra.yaml"
}

ring_peers_of() { ring_cql "$1" "SELECT peer FROM system.peers"; }

# Waits until every other running node lists node N among its peers, which
# Cassandra records once N has joined (state NORMAL): only then may the next
# node bootstrap.
ring_wait_known_to_others() { # ring_wait_known_to_others N
  local n=$1 other address deadline
  address=$(ring_node_address "$n")
  deadline=$(( $(now) + CASSANDRA_START_TIMEOUT ))
  for ((other = 1; other <= RING_SIZE; other++)); do
    (( other == n )) && continue
    ring_node_pid "$other" >/dev/null || continue
    until ring_peers_of "$other" | grep -qx "$address"; do
      (( $(now) < deadline )) \
        || die "cassandra-$n answers CQL but cassandra-$other does not list $address among its peers after ${CASSANDRA_START_TIMEOUT}s (logs: $(ring_node_dir "$n")/cassandra.log, $(ring_node_dir "$other")/cassandra.log)"
      sleep 1
    done
  done
}

ring_node_start() { # ring_node_start N  -> running, answering CQL, joined
  local n=$1 name="cassandra-$1" address dir pid p
  address=$(ring_node_address "$n")
  dir=$(ring_node_dir "$n")
  if pid=$(ring_node_pid "$n"); then
    if ring_cql "$n" --quiet; then
      log "$name already running (pid $pid) on $address:$RING_PORT"
      return 0
    fi
    log "$name (pid $pid) exists but is not answering CQL yet; waiting"
  else
    rm -f "$dir/cassandra.pid"
    (( n == 1 )) && refuse_if_single_node_holds_ring_ports
    for p in "$RING_PORT" "$RING_STORAGE_PORT"; do
      port_open_on "$address" "$p" \
        && die "port $address:$p, which $name needs, is already in use ($(port_holder "$address" "$p" || echo 'by another process')); stop that, or move the ring: BG_CASSANDRA_RING_PORT / BG_CASSANDRA_RING_STORAGE_PORT"
    done
    ensure_java17
    ensure_cassandra_lib
    write_ring_node_conf "$n"
    log "starting $name on $address:$RING_PORT (storage port $RING_STORAGE_PORT, heap $RING_HEAP, log $dir/cassandra.log)"
    cassandra_launch "$name" "$dir" "$dir/cassandra.log" "$dir/cassandra.pid" "$RING_HEAP" \
      "-Dcassandra.ring_delay_ms=$RING_DELAY_MS"
  fi
  local t0 release
  t0=$(now)
  release=$(cassandra_wait_cql "$name" "$address" "$RING_PORT" "$dir/cassandra.pid" "$dir/cassandra.log" \
              "scripts/services stop --topology cluster cassandra")
  ring_wait_known_to_others "$n"
  log "$name ready (pid $(<"$dir/cassandra.pid")) on $address:$RING_PORT, release_version $release, after $(( $(now) - t0 ))s"
}

# Prints the first reason the ring is not three nodes all Up and Normal as
# every node sees it, and succeeds; fails, printing nothing, when it is.
ring_problem() {
  local n peers
  for ((n = 1; n <= RING_SIZE; n++)); do
    ring_cql "$n" --quiet || { echo "cassandra-$n does not answer CQL"; return 0; }
    peers=$(ring_peers_of "$n" | wc -l)
    (( peers == RING_SIZE - 1 )) || { echo "cassandra-$n knows $peers peers, not $((RING_SIZE - 1))"; return 0; }
    ring_cql "$n" --quiet --consistency ALL "$RING_ALL_UP_QUERY" \
      || { echo "cassandra-$n does not see every node up yet"; return 0; }
  done
  return 1
}

ring_wait_all_up() {
  local deadline problem
  deadline=$(( $(now) + CASSANDRA_START_TIMEOUT ))
  while problem=$(ring_problem); do
    (( $(now) < deadline )) \
      || die "the Cassandra ring is not all up after ${CASSANDRA_START_TIMEOUT}s: $problem (logs: $RING_DIR/<n>/cassandra.log)"
    sleep 1
  done
}

cassandra_ring_start() {
  ensure_python3
  local n t0
  t0=$(now)
  # In order, each joined before the next starts; nodes already up are only checked.
  for ((n = 1; n <= RING_SIZE; n++)); do ring_node_start "$n"; done
  ring_wait_all_up
  log "cassandra ring ready: $RING_SIZE nodes up on 127.0.0.1-$RING_SIZE:$RING_PORT (datacenter $(ring_cql 1 "SELECT data_center FROM system.local")), after $(( $(now) - t0 ))s"
}

cassandra_ring_stop() {
  local n pid pids=()
  for ((n = RING_SIZE; n >= 1; n--)); do
    if pid=$(ring_node_pid "$n"); then
      log "stopping cassandra-$n (pid $pid)"
      pids[n]=$pid
    fi
  done
  # Each node drains for ~10 s on SIGTERM; they need not wait for one another.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for ((n = RING_SIZE; n >= 1; n--)); do
    [[ -n ${pids[n]:-} ]] && kill_pid "${pids[n]}" "cassandra-$n" 45
    rm -f "$(ring_node_dir "$n")/cassandra.pid"
  done
  log "cassandra ring stopped"
}

ring_node_state() { # ring_node_state N -> up (answers CQL) | starting | down
  if ! ring_node_pid "$1" >/dev/null; then echo down
  elif ring_cql "$1" --quiet; then echo up
  else echo starting
  fi
}

# One line per node: `address cql_port state pid|-` (state: up, starting, down).
cassandra_ring_nodes() {
  local n pid
  for ((n = 1; n <= RING_SIZE; n++)); do
    pid=$(ring_node_pid "$n") || pid=-
    echo "$(ring_node_address "$n") $RING_PORT $(ring_node_state "$n") $pid"
  done
}

cassandra_ring_status() {
  local n pid state
  for ((n = 1; n <= RING_SIZE; n++)); do
    state=$(ring_node_state "$n")
    if pid=$(ring_node_pid "$n"); then
      case "$state" in
        up) printf '%-11s %-9s pid %-8s %s:%s\n' "cassandra-$n" running "$pid" "$(ring_node_address "$n")" "$RING_PORT" ;;
        *)  printf '%-11s %-9s pid %-8s %s:%s (CQL port not open yet)\n' "cassandra-$n" starting "$pid" "$(ring_node_address "$n")" "$RING_PORT" ;;
      esac
    else
      printf '%-11s %-9s %-12s %s:%s\n' "cassandra-$n" stopped - "$(ring_node_address "$n")" "$RING_PORT"
    fi
  done
}

cassandra_ring_wipe() {
  cassandra_ring_stop
  rm -rf "$RING_DIR"
  log "cassandra ring data deleted ($RING_DIR)"
}
