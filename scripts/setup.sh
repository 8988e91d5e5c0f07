#!/usr/bin/env bash
# One-command set-up on a fresh Debian machine: system packages, the Python package with its
# test dependencies, Debian's programs and roots for the real-program tests; then the bundled
# example runs (an s390x program on this x86_64 host).  What only `make testbins` needs (the
# cross g++) is installed by scripts/setup_testbins.sh, which `make testbins` runs.
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }

# apt's binary cache of the package lists, kept in .cache/apt: Debian's container images
# turn it off (/etc/apt/apt.conf.d/docker-clean: Dir::Cache::pkgcache ""), and then every
# apt call parses the lists of all eight architectures again (~6 s of CPU; this set-up makes
# ~35 calls).  APT_CONFIG is read before apt.conf.d, so ours names a directory of links to
# the host's apt.conf.d parts plus one last part that sets the cache's file.
aptdir="$PWD/.cache/apt"
rm -rf "$aptdir/apt.conf.d"
mkdir -p "$aptdir/apt.conf.d"
for part in /etc/apt/apt.conf.d/*; do [ -e "$part" ] && ln -s "$part" "$aptdir/apt.conf.d/"; done
printf 'Dir::Cache::pkgcache "%s/pkgcache.bin";\n' "$aptdir" > "$aptdir/apt.conf.d/zz-emutrace-pkgcache"
printf 'Dir::Etc::Parts "%s/apt.conf.d";\n' "$aptdir" > "$aptdir/apt.conf"
export APT_CONFIG="$aptdir/apt.conf"

# Debian's packages the tests need, in one `apt-get update` and two installs:
# * qemu-user-static (the oracle of Linux programs) and Debian's uftrace (reads our traces);
# * the cross C compilers: tests compile against each ISA's glibc headers at run time
#   (test_sigframe: the signal-frame layout against ucontext_t; test_abi_tables: the ABI
#   tables regenerated; test_hardening_selfmod and test_hardening_int80 build their programs);
# * the cross sysroots (/usr/<triple>): the roots of the dynamic-binary tests (the x86_64
#   programs use the host's own /);
# * the cross binutils: objdump's @plt names are the oracle of PLT naming,
#   objcopy/readelf split debug files in tests/test_debuginfo.py;
# * a C compiler and Python headers when missing: `pip install -e .` compiles
#   emutrace/native/*.c;
# * dtc (device-tree-compiler): `run --machine` compiles the device tree a virt board makes;
# * without recommends, qemu-system-<arch>: the oracle of the mini-kernels in testbins/kernel
#   (arm/aarch64 in qemu-system-arm, riscv64 in -misc, i386 in -x86, ppc/ppc64le in -ppc
#   (bamboo, pseries), mips/mipsel in -mips (malta)).
# The foreign architectures come first: Debian's programs of the other ISAs (busybox, the
# shells, the roots of tests/test_debian_programs.py and test_system_root.py, the arm64
# kernel) are fetched below.
foreign="arm64 armhf i386 mipsel ppc64el s390x"
update=0
# (the list read once: under pipefail, `dpkg ... | grep -q` fails when grep's early exit
# cuts dpkg's output short, and an architecture already known looked new)
known=$(dpkg --print-foreign-architectures)
for a in $foreign; do
  if ! grep -qx "$a" <<<"$known"; then
    $sudo dpkg --add-architecture "$a"; update=1
  fi
done
with_recommends="qemu-user-static uftrace device-tree-compiler
  gcc-i686-linux-gnu gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf gcc-mips-linux-gnu
  gcc-mipsel-linux-gnu gcc-riscv64-linux-gnu gcc-powerpc-linux-gnu gcc-powerpc64le-linux-gnu
  gcc-s390x-linux-gnu gcc-mips64el-linux-gnuabi64 gcc-mips64-linux-gnuabi64
  gcc-m68k-linux-gnu gcc-sparc64-linux-gnu gcc-powerpc64-linux-gnu
  libc6-arm64-cross libc6-armhf-cross libc6-i386-cross libc6-mips-cross libc6-mipsel-cross
  libc6-riscv64-cross libc6-powerpc-cross libc6-ppc64el-cross libc6-s390x-cross
  binutils-aarch64-linux-gnu binutils-arm-linux-gnueabihf binutils-i686-linux-gnu
  binutils-mips-linux-gnu binutils-mipsel-linux-gnu binutils-riscv64-linux-gnu
  binutils-powerpc-linux-gnu binutils-powerpc64le-linux-gnu binutils-s390x-linux-gnu
  binutils-mips64el-linux-gnuabi64 binutils-mips64-linux-gnuabi64 binutils-m68k-linux-gnu
  binutils-sparc64-linux-gnu binutils-powerpc64-linux-gnu"
has_compiler=1
if ! command -v gcc >/dev/null 2>&1 || ! python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  with_recommends="$with_recommends gcc python3-dev"; has_compiler=0
fi
without_recommends="qemu-system-arm qemu-system-misc qemu-system-x86 qemu-system-ppc
  qemu-system-mips"
missing=(); missing_bare=()
for p in $with_recommends; do installed "$p" || missing+=("$p"); done
for p in $without_recommends; do installed "$p" || missing_bare+=("$p"); done
if [ "$update" = 1 ] || [ "${#missing[@]}" != 0 ] || [ "${#missing_bare[@]}" != 0 ] ||
   ! apt-cache show busybox-static:s390x >/dev/null 2>&1; then
  # a half-synced mirror index of one suite must not stop us
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
fi

# The package, with its test extras (`pip install -e .` compiles emutrace/native/*.c): beside
# apt's installs when the compiler is already there (pip needs nothing apt installs then).
pip_install() {
  python3 -m pip install -q -e '.[test,qiling]'  # (qiling: `run --target qiling`)
  python3 -c 'from emutrace import native; native.load()' ||
    echo "warning: the native hot path was not built; --engine native is unavailable"
  python3 -c 'from emutrace.native import disasmlib; assert disasmlib._sweep()' 2>/dev/null ||
    echo "warning: discovery's sweep in C (emutrace/native/sweep.c) was not built; it runs in Python"
}
pip_pid=""
if [ "$has_compiler" = 1 ]; then pip_install & pip_pid=$!; fi
if [ "${#missing[@]}" != 0 ]; then
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ "${#missing_bare[@]}" != 0 ]; then
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing_bare[@]}" >/dev/null
fi
if [ -n "$pip_pid" ]; then wait "$pip_pid"; else pip_install; fi

# What is fetched from Debian into .cache (never committed; each part skips what is there),
# all side by side: each part mostly waits for the mirror, apt or dpkg-deb.  After the
# installs above: an install changes dpkg's status, which makes every apt call rebuild the
# binary cache; it is rebuilt once here, before the parallel calls read it.
apt-cache stats >/dev/null
jobs_started=()
start() { "$@" & jobs_started+=("$!:$*"); }

# Debian's U-Boot for QEMU (u-boot-qemu) and OpenSBI (opensbi), unpacked under
# .cache/firmware: tests/test_kernel.py boots them to the prompt.
fetch_firmware() {
  local firmware=() pkg
  for pkg in u-boot-qemu opensbi; do
    [ -d ".cache/firmware/$pkg/usr/lib" ] || firmware+=("$pkg")
  done
  [ "${#firmware[@]}" = 0 ] && return 0
  mkdir -p .cache/firmware
  ( cd .cache/firmware && for pkg in "${firmware[@]}"; do rm -f "${pkg}"_*.deb; done &&
    apt-get download -qq "${firmware[@]}" &&
    for pkg in "${firmware[@]}"; do dpkg-deb -x "${pkg}"_*.deb "$pkg"; done )
}
# A Linux kernel from Debian (linux-image-*-cloud-arm64): its vmlinuz, as
# .cache/firmware/linux-arm64/vmlinuz (tests/test_linux_boot.py boots it), and the same
# build's System.map (the names of its functions at their link addresses), which Debian
# ships in the -dbg package (the linux-image package's own is a stub): extracted from it
# alone, as .cache/firmware/linux-arm64/System.map.
fetch_kernel() {
  local dir=.cache/firmware/linux-arm64 pkg tmp version
  [ -f $dir/vmlinuz ] && [ -f $dir/System.map ] && return 0
  tmp=$(mktemp -d)
  if [ ! -f $dir/vmlinuz ]; then
    pkg=$(apt-cache depends linux-image-cloud-arm64:arm64 | awk '/Depends: linux-image-/ {print $2; exit}')
    ( cd "$tmp" && apt-get download "$pkg" 2>/dev/null ) &&
      dpkg-deb --fsys-tarfile "$tmp"/linux-image-*.deb | tar -x -C "$tmp" --wildcards './boot/vmlinuz-*' &&
      mkdir -p $dir && cp "$tmp"/boot/vmlinuz-* $dir/vmlinuz || { rm -rf "$tmp"; return 1; }
  fi
  # the kernel's release as its banner says it ("Linux version 6.1.0-57-cloud-arm64 ...")
  version=$(grep -a -o -m1 'Linux version [^ ]*' $dir/vmlinuz | awk '{print $3}')
  ( cd "$tmp" && apt-get download "linux-image-$version-dbg:arm64" 2>/dev/null ) &&
    dpkg-deb --fsys-tarfile "$tmp"/linux-image-"$version"-dbg_*.deb |
      tar -x -C "$tmp" --wildcards "./usr/lib/debug/boot/System.map-$version" &&
    cp "$tmp/usr/lib/debug/boot/System.map-$version" $dir/System.map
  local status=$?
  rm -rf "$tmp"
  return $status
}
# Debian's busybox-static, then its static shells (bash-static, zsh-static, sash) for
# tests/test_shells.py: .cache/busybox/<isa>/, .cache/shells/<isa>/.
fetch_programs() { bash scripts/fetch_busybox.sh && bash scripts/fetch_shells.sh; }
# Per Debian ISA, two roots made by `emutrace rootfs`, one after the other (they share the
# ISA's .deb directory .cache/rootfs-debs/<isa>: two `apt-get download`s of one file must not
# meet), the seven ISAs side by side:
# * .cache/rootfs/<isa>: Debian's own dynamic programs (tests/test_debian_programs.py):
#   coreutils, grep, sed, findutils, diffutils, gawk and their libraries;
# * .cache/system-roots/<isa>: roots that work like a system (tests/test_system_root.py):
#   Debian's perl, python3, dash and bash; `emutrace rootfs` also makes their /tmp, home,
#   /dev and /proc;
# * .cache/battery-roots/<isa>: Debian's sqlite3, file and openssl (tests/test_battery.py).
# A root whose marker lists every package is left alone.
root_with() {
  local isa=$1 root=$2 pkg; shift 2
  for pkg in "$@"; do
    if ! grep -q "^$pkg:" "$root/.emutrace-rootfs" 2>/dev/null; then
      python3 -m emutrace rootfs --arch "$isa" -o "$root" --cache ".cache/rootfs-debs/$isa" "$@"
      return
    fi
  done
}
roots() {
  root_with "$1" ".cache/rootfs/$1" coreutils grep sed findutils diffutils gawk &&
    root_with "$1" ".cache/system-roots/$1" perl-base python3-minimal dash bash coreutils &&
    root_with "$1" ".cache/battery-roots/$1" sqlite3 file openssl
}
# zlib's source from Debian's source package, in .cache/ci-demo/zlib: examples/ci/zlib's
# programs and tests/test_ci_demo.py's are cross-built from it (scripts/build_ci_demo.sh).
fetch_zlib() { bash scripts/build_ci_demo.sh --fetch-only; }
start fetch_firmware
start fetch_kernel
start fetch_programs
start fetch_zlib
for isa in x86_64 i386 aarch64 arm mipsel ppc64le s390x; do start roots "$isa"; done
failed=0
for job in "${jobs_started[@]}"; do
  wait "${job%%:*}" || { echo "setup: failed: ${job#*:}" >&2; failed=1; }
done
[ "$failed" = 0 ]

echo "== bundled example: emutrace run testbins/s390x/calls recursion"
python3 -m emutrace run testbins/s390x/calls recursion
