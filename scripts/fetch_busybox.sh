#!/usr/bin/env bash
# Fetch Debian's busybox-static for every architecture Debian 12 ships it on, through apt
# (the package registry), into .cache/busybox/<isa>/busybox.  Never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.cache/busybox
mkdir -p "$dest/debs"
# Debian architecture → emutrace ISA name
declare -A isa=([amd64]=x86_64 [i386]=i386 [arm64]=aarch64 [armhf]=arm [mipsel]=mipsel
                [ppc64el]=ppc64le [s390x]=s390x [mips64el]=mips64el)
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
native=$(dpkg --print-architecture)
need_update=0
# (read once: under pipefail, `dpkg ... | grep -q` fails when grep's early exit cuts dpkg's
# output short, and a known architecture looked new: a needless apt-get update)
known=$(dpkg --print-foreign-architectures)
for a in "${!isa[@]}"; do
  if [ "$a" != "$native" ] && ! grep -qx "$a" <<<"$known"; then
    $sudo dpkg --add-architecture "$a"; need_update=1
  fi
done
if [ "$need_update" = 1 ] || ! apt-cache show busybox-static:s390x >/dev/null 2>&1; then
  # a half-synced mirror index of one suite must not stop us: busybox comes from main
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
fi
# one `apt-get download` for every missing one: each apt call loads the package lists of
# all eight architectures (~5 s of CPU), so one call per package cost minutes
missing=()
for a in "${!isa[@]}"; do
  [ -x "$dest/${isa[$a]}/busybox" ] || missing+=("busybox-static:$a")
done
[ "${#missing[@]}" = 0 ] && exit 0
(cd "$dest/debs" && apt-get download -qq "${missing[@]}")
for a in "${!isa[@]}"; do
  out="$dest/${isa[$a]}/busybox"
  [ -x "$out" ] && continue
  deb=$(ls "$dest"/debs/busybox-static_*_"$a".deb | head -n1)
  tmp=$(mktemp -d)
  dpkg-deb -x "$deb" "$tmp"
  mkdir -p "$dest/${isa[$a]}"
  cp "$tmp/bin/busybox" "$out"
  rm -rf "$tmp"
  echo "busybox-static ($a) -> $out"
done
