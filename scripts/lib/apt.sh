# scripts/lib/apt.sh — Debian packages for the project's scripts (sourced, not run).
#   as_root CMD...     runs CMD as root: directly, or through `sudo -n`
#   apt_ensure PKG...  apt-get install; if that fails (no package lists yet on a fresh
#                      machine), apt-get update and install again. Waits up to 5 minutes
#                      for a dpkg lock another install holds. Output goes to the caller's
#                      stdout/stderr: redirect it where it should be kept.

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
  else
    echo "need root (or sudo) to run: $*" >&2
    return 1
  fi
}

apt_ensure() {
  command -v apt-get >/dev/null 2>&1 || { echo "apt-get not found; install manually: $*" >&2; return 1; }
  local apt=(apt-get -o DPkg::Lock::Timeout=300)
  as_root "${apt[@]}" install -y --no-install-recommends "$@" </dev/null && return 0
  as_root "${apt[@]}" update </dev/null &&
    as_root "${apt[@]}" install -y --no-install-recommends "$@" </dev/null
}
