#!/usr/bin/env bash
# The newest leg of the support matrix: Debian 13 (trixie) with its Python 3.13, and the newest
# releases of every dependency that resolve from PyPI, in a debootstrap chroot under the repo.
#   .ci/newest.sh            build the chroot (once) and its venv, then run the suite in it
#   .ci/newest.sh --setup-only   build them, run nothing (.ci/run builds every leg's first)
#   NEWEST_ROOT=DIR          where the chroot lives (default: .newest/root, inside the repo)
#   NEWEST_MIRROR=URL        the Debian mirror (default: the first one apt uses here, else deb.debian.org)
#   NEWEST_TORCH=0           leave torch out (then the suite's torch tests skip; see README)
# Needs root (debootstrap, chroot, mounts). Everything it makes is under NEWEST_ROOT.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
ROOT=${NEWEST_ROOT:-$REPO/.newest/root}
TORCH=${NEWEST_TORCH:-1}
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

mirror() {  # the Debian mirror apt uses on this machine (deb822 or one-line sources)
  local m
  m=$(grep -hoE '^(URIs:|deb)[[:space:]]+[^ ]*debian\.org/debian/?([[:space:]]|$)' \
      /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null | awk '{print $2}' | head -1 || true)
  echo "${NEWEST_MIRROR:-${m:-http://deb.debian.org/debian}}"
}

t0=$(date +%s)
if [ ! -x "$ROOT/usr/bin/python3.13" ]; then
  command -v debootstrap >/dev/null || { $SUDO apt-get update -qq; \
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq debootstrap; }
  $SUDO rm -rf "$ROOT"; mkdir -p "$(dirname "$ROOT")"
  $SUDO debootstrap --variant=minbase --include=python3.13,python3.13-venv,ca-certificates \
    trixie "$ROOT" "$(mirror)" > "$(dirname "$ROOT")/debootstrap.log"
  echo "newest: debootstrap trixie $(($(date +%s) - t0)) s"
fi
# the host's CA bundle (a proxy's CA where there is one); the source tree as it is now
$SUDO cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
$SUDO cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
$SUDO rm -rf "$ROOT/src"; $SUDO mkdir -p "$ROOT/src"
git ls-files -z --cached --others --exclude-standard | $SUDO tar -C "$REPO" --null -T - -cf - \
  | $SUDO tar -C "$ROOT/src" -xf -

mounted=()
cleanup() { for ((i=${#mounted[@]}-1; i>=0; i--)); do $SUDO umount -l "${mounted[i]}" || true; done; }
trap cleanup EXIT
for m in proc dev/shm; do
  if ! mountpoint -q "$ROOT/$m"; then
    $SUDO mkdir -p "$ROOT/$m"
    if [ "$m" = proc ]; then $SUDO mount -t proc proc "$ROOT/proc"; else $SUDO mount -t tmpfs shm "$ROOT/dev/shm"; fi
    mounted+=("$ROOT/$m")
  fi
done

# a clean environment: only what the chroot's pip and the suite need
in_root() {
  $SUDO chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/venv/bin:/usr/bin:/bin LANG=C.UTF-8 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 "${@}"
}
t1=$(date +%s)
# the venv is made again when pyproject.toml or the torch choice changes
want="$(sha256sum pyproject.toml | cut -c1-16) torch=$TORCH"
if [ "$(cat "$ROOT/venv/.ckpt-newest" 2>/dev/null)" != "$want" ]; then
  $SUDO rm -rf "$ROOT/venv"
  in_root /usr/bin/python3.13 -m venv /venv
  # torch from PyPI (its default CUDA build: the one `pip install` gives users) unless left out
  extra=""; [ "$TORCH" = 1 ] && extra="torch"
  in_root /venv/bin/pip install -q --upgrade pip
  in_root /venv/bin/pip install -q $extra -e "/src[dev,ray]"
  echo "$want" > "$ROOT/venv/.ckpt-newest"
  echo "newest: venv $(($(date +%s) - t1)) s, $(du -sh "$ROOT/venv" | cut -f1)"
fi
in_root /venv/bin/python -c 'import sys, importlib.metadata as m
print("newest: python", sys.version.split()[0], *(f"{p} {m.version(p)}" for p in
  ("numpy", "safetensors", "pydantic", "typer", "huggingface_hub", "ml_dtypes", "torch", "triton")
  if any(d.metadata["Name"].lower().replace("-", "_") == p for d in m.distributions())))'
[ "${1:-}" = "--setup-only" ] && exit 0
t2=$(date +%s)
in_root /bin/sh -c 'cd /src && /venv/bin/python -m pytest -p no:cacheprovider "$@"' sh "$@"
echo "newest: suite $(($(date +%s) - t2)) s"
