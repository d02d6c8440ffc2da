# shellcheck shell=bash
# Free disk space, checked before a build that needs several GB (sourced by scripts/test).

# report_free_disk DIR MIN_GB: says how much space DIR's filesystem has left, and warns, naming
# what to remove, when it is under MIN_GB (a full disk fails the build half-way, with a
# rustc "No space left on device" that hides the cause among hundreds of lines).
report_free_disk() {
  local dir="$1" min_gb="$2" free_kb free_gb
  free_kb="$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')"
  free_gb=$((free_kb / 1024 / 1024))
  if ((free_gb < min_gb)); then
    printf 'warning: only %s GB free on the filesystem of %s; a fresh build and test run needs about %s GB.\n' \
      "$free_gb" "$dir" "$min_gb" >&2
    printf '         Free space first (e.g. `cargo clean` in other checkouts, old target/ directories).\n' >&2
  else
    printf 'disk: %s GB free on the filesystem of %s\n' "$free_gb" "$dir" >&2
  fi
}
