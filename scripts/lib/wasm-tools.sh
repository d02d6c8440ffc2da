# shellcheck shell=bash
# Sourceable helpers that install the edge's build tools at the versions the repo pins.
#
# Used by scripts/edge-build and the test scripts. Each function is idempotent: silent when
# the tool is already right, one line on stderr when it installs something. Nothing here
# downloads a prebuilt binary (only crates.io and npm are reachable on our machines), so
# worker-build must be pointed at these local tools: see edge_tool_env.

# Repo root, whichever script sourced us.
WASM_TOOLS_ROOT="${WASM_TOOLS_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"

_wasm_tools_say() { printf 'wasm-tools: %s\n' "$*" >&2; }

# Runs a download step up to three times: one dropped connection should not fail a CI run.
_with_retries() {
  local attempt
  for attempt in 1 2 3; do
    "$@" && return 0
    _wasm_tools_say "attempt $attempt of 3 failed: $*"
    sleep $((attempt * 5))
  done
  return 1
}

# Version of a registry package as recorded in Cargo.lock (first match).
cargo_lock_version() {
  awk -v want="$1" '
    $0 == "name = \"" want "\"" { found = 1; next }
    found && /^version = / { gsub(/"/, "", $3); print $3; exit }
  ' "$WASM_TOOLS_ROOT/Cargo.lock"
}

# Installs a crate's binary at exactly VERSION unless `BIN --version` already reports it.
# No --locked: crates.io here lacks some versions that the published lockfiles name.
_ensure_cargo_bin() {
  local crate="$1" bin="$2" version="$3" have
  if [[ -z "$version" ]]; then
    _wasm_tools_say "cannot find the $crate version in Cargo.lock"; return 1
  fi
  # `|| true`: a missing tool is the normal first-run case, not an error under `set -e -o pipefail`.
  have="$("$bin" --version 2>/dev/null | awk '{print $NF}')" || true
  [[ "$have" == "$version" ]] && return 0
  _wasm_tools_say "installing $crate $version (found: ${have:-none}); takes a few minutes"
  _with_retries cargo install --quiet --version "$version" "$crate"
}

ensure_wasm_target() {
  rustup target list --installed | grep -qx wasm32-unknown-unknown && return 0
  _wasm_tools_say "adding rust target wasm32-unknown-unknown"
  _with_retries rustup target add wasm32-unknown-unknown
}

# wasm-bindgen's CLI refuses modules from any other wasm-bindgen version, so it follows the lock.
ensure_wasm_bindgen_cli() {
  _ensure_cargo_bin wasm-bindgen-cli wasm-bindgen "$(cargo_lock_version wasm-bindgen)"
}

# worker-build checks that its version matches the `worker` crate's (same minor).
ensure_worker_build() {
  _ensure_cargo_bin worker-build worker-build "$(cargo_lock_version worker)"
}

ensure_node_modules() {
  local lock="$WASM_TOOLS_ROOT/package-lock.json" stamp="$WASM_TOOLS_ROOT/node_modules/.package-lock.json"
  if [[ -f "$stamp" && ! "$lock" -nt "$stamp" ]]; then return 0; fi
  _wasm_tools_say "npm ci (wrangler, binaryen)"
  (cd "$WASM_TOOLS_ROOT" && _with_retries npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}

# All of the above.
ensure_edge_tools() {
  ensure_wasm_target && ensure_wasm_bindgen_cli && ensure_worker_build && ensure_node_modules
}

# Exports the {NAME}_BIN variables worker-build 0.8 reads (binary.rs: name in SHOUTY_SNAKE
# case + "_BIN") so it uses local tools instead of downloading them.
edge_tool_env() {
  local nm="$WASM_TOOLS_ROOT/node_modules"
  WASM_BINDGEN_BIN="$(command -v wasm-bindgen)"
  ESBUILD_BIN="$nm/.bin/esbuild"
  WASM_OPT_BIN="$nm/.bin/wasm-opt"
  export WASM_BINDGEN_BIN ESBUILD_BIN WASM_OPT_BIN
}
