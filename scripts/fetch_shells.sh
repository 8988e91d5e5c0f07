#!/usr/bin/env bash
# Fetch Debian's static shells (bash-static, zsh-static, sash) for the seven architectures
# Debian ships them on, through apt (the package registry), into .cache/shells/<isa>/
# {bash,zsh,sash} — the real-program tests.  Idempotent; never committed.
# Needs the foreign architectures that scripts/fetch_busybox.sh adds (run it first).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.cache/shells
mkdir -p "$dest/debs"
declare -A isa=([amd64]=x86_64 [i386]=i386 [arm64]=aarch64 [armhf]=arm [mipsel]=mipsel
                [ppc64el]=ppc64le [s390x]=s390x)
# package → path of the program inside the package → name under .cache/shells/<isa>/
declare -A member=([bash-static]=bin/bash-static [zsh-static]=bin/zsh-static [sash]=bin/sash)
declare -A short=([bash-static]=bash [zsh-static]=zsh [sash]=sash)
# one `apt-get download` for every missing one (each apt call loads all package lists)
missing=()
for a in "${!isa[@]}"; do
  for pkg in "${!member[@]}"; do
    [ -x "$dest/${isa[$a]}/${short[$pkg]}" ] || missing+=("$pkg:$a")
  done
done
[ "${#missing[@]}" = 0 ] && exit 0
(cd "$dest/debs" && apt-get download -qq "${missing[@]}")
for a in "${!isa[@]}"; do
  for pkg in "${!member[@]}"; do
    out="$dest/${isa[$a]}/${short[$pkg]}"
    [ -x "$out" ] && continue
    deb=$(ls "$dest"/debs/"$pkg"_*_"$a".deb | head -n1)
    tmp=$(mktemp -d)
    dpkg-deb -x "$deb" "$tmp"
    mkdir -p "$dest/${isa[$a]}"
    cp "$tmp/${member[$pkg]}" "$out"
    rm -rf "$tmp"
    echo "$pkg ($a) -> $out"
  done
done
