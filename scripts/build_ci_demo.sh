#!/usr/bin/env bash
# The inputs of examples/ci/zlib (docs/ci.md "A real project"): zlib's own test programs
# (test/example.c, test/infcover.c, test/minigzip.c) from Debian's source package, built
# with Debian's cross compilers for every ISA as static programs, into
# examples/ci/zlib/build/<isa>/ (ignored by git: third-party binaries are never committed).
#
#   bash scripts/build_ci_demo.sh [--isas "x86_64 arm"] [--regress "ISA ..."] [--out DIR]
#   bash scripts/build_ci_demo.sh --fetch-only
#
# --regress "ISA ...": those ISAs' programs are built from a copy of zlib with one changed
#   branch (REGRESSION below), the other ISAs' as Debian ships the source; without it every
#   ISA's is the unchanged source.  Each ISA's directory records which variant it holds
#   (.variant) and is rebuilt only when it is not the one asked for.
# --out DIR: build there instead (tests/test_ci_demo.py builds into .cache/ci-demo/test/).
# --fetch-only: only the source, when it is not there yet (scripts/setup.sh runs this).
#
# The source comes once through `apt-get source` (Debian's archive, a deb-src line for the
# mirror the host already uses, in an apt configuration of our own under .cache/ci-demo/apt:
# the host's apt state is not touched) into .cache/ci-demo/zlib.  The ISAs are the fifteen
# of testbins/Makefile; static programs need each cross compiler's libc6-dev-<arch>-cross,
# which its gcc-<triple> recommends (scripts/setup.sh installs them with their recommends).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
isas="x86_64 i386 aarch64 arm mips mipsel riscv64 ppc ppc64le s390x mips64el mips64 m68k sparc64 ppc64"
regress=""
out="$repo/examples/ci/zlib/build"
fetch_only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --isas) isas=$2; shift 2 ;;
    --regress) regress=$2; shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    --fetch-only) fetch_only=1; shift ;;
    *) echo "usage: $0 [--isas \"ISA ...\"] [--regress \"ISA ...\"] [--out DIR] | --fetch-only" >&2
       exit 64 ;;
  esac
done

triple() {
  case "$1" in
    x86_64) echo x86_64-linux-gnu ;; i386) echo i686-linux-gnu ;;
    aarch64) echo aarch64-linux-gnu ;; arm) echo arm-linux-gnueabihf ;;
    mips) echo mips-linux-gnu ;; mipsel) echo mipsel-linux-gnu ;;
    mips64el) echo mips64el-linux-gnuabi64 ;; mips64) echo mips64-linux-gnuabi64 ;;
    m68k) echo m68k-linux-gnu ;; sparc64) echo sparc64-linux-gnu ;;
    riscv64) echo riscv64-linux-gnu ;; ppc) echo powerpc-linux-gnu ;;
    ppc64le) echo powerpc64le-linux-gnu ;; s390x) echo s390x-linux-gnu ;;
    ppc64) echo powerpc64-linux-gnu ;;
    *) echo "build_ci_demo: unknown ISA $1" >&2; exit 64 ;;
  esac
}

cache="$repo/.cache/ci-demo"
src="$cache/zlib"
if [ ! -f "$src/zlib.h" ]; then
  apt="$cache/apt"
  mkdir -p "$apt/lists/partial" "$cache/download"
  mirror=$(grep -rhoE '^(deb|URIs:) *http[^ ]*/debian/?( |$)' /etc/apt/sources.list \
             /etc/apt/sources.list.d/ 2>/dev/null | grep -oE 'http[^ ]*' | head -1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
  echo "deb-src $mirror $suite main" > "$apt/sources.list"
  opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/none"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=")
  apt-get -qq "${opts[@]}" update
  ( cd "$cache/download" && rm -rf ./* &&
    apt-get -qq "${opts[@]}" source --download-only zlib 2>/dev/null )
  tmp=$(mktemp -d "$cache/zlib.XXXXXX")
  tar -xf "$cache"/download/zlib_*.orig.tar.* -C "$tmp" --strip-components=1
  rm -rf "$src" && mv -T "$tmp" "$src"
fi
[ -n "$fetch_only" ] && exit 0

# The changed branch: inflate() hands a block to inflate_fast() only when at least 258
# bytes of output space are left (the longest match, inflate.c); the regressed copy asks
# for more room than that, so a stream's last stretch is decoded slowly, one code at a
# time, by inflate() itself.  The output stays correct: only the calls change.
REGRESSION='s/if (have >= 6 \&\& left >= 258) {/if (have >= 6 \&\& left >= 4096) {/'
regressed="$cache/zlib-regressed"
if [ -n "$regress" ] && [ ! -f "$regressed/zlib.h" ]; then
  tmp=$(mktemp -d "$cache/zlib-regressed.XXXXXX")
  cp -r "$src/." "$tmp"
  sed -i "$REGRESSION" "$tmp/inflate.c"
  cmp -s "$src/inflate.c" "$tmp/inflate.c" &&
    { echo "build_ci_demo: the regression's pattern no longer matches inflate.c" >&2; exit 1; }
  rm -rf "$regressed" && mv -T "$tmp" "$regressed"
fi

# Debian's own flags for zlib (dpkg-buildflags: -O2 -g; the configure script's defines),
# static, source paths mapped so that the build is the same wherever it runs
LIBZ="adler32 crc32 deflate infback inffast inflate inftrees trees zutil compress uncompr
      gzclose gzlib gzread gzwrite"
build_isa() {
  local isa=$1 variant=$2 from dir cc
  from=$src; [ "$variant" = regressed ] && from=$regressed
  dir="$out/$isa"
  if [ "$(cat "$dir/.variant" 2>/dev/null)" = "$variant" ] && [ -x "$dir/example" ]; then
    return 0
  fi
  cc="$(triple "$isa")-gcc"
  rm -rf "$dir" && mkdir -p "$dir/obj"
  local flags=(-O2 -g -D_LARGEFILE64_SOURCE=1 -DHAVE_HIDDEN "-ffile-prefix-map=$from=zlib"
               -I "$from")
  local f objs=()
  for f in $LIBZ; do
    "$cc" "${flags[@]}" -c "$from/$f.c" -o "$dir/obj/$f.o"; objs+=("$dir/obj/$f.o")
  done
  for f in example infcover minigzip; do
    "$cc" "${flags[@]}" -static "$from/test/$f.c" "${objs[@]}" -o "$dir/$f"
  done
  rm -rf "$dir/obj"
  # minigzip's input: zlib's own manual page (text, 4 KB)
  cp "$from/zlib.3" "$dir/input.txt"
  echo "$variant" > "$dir/.variant"
  echo "build_ci_demo: $isa ($variant)"
}

pids=()
for isa in $isas; do
  variant=unchanged; [[ " $regress " == *" $isa "* ]] && variant=regressed
  build_isa "$isa" "$variant" & pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
exit $failed
