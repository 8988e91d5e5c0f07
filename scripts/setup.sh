#!/usr/bin/env bash
# One-command set-up on a fresh Debian machine: system packages, the Python package with its
# test dependencies, Debian's busybox-static for the real-program tests; then the bundled
# example runs (an s390x program on this x86_64 host).
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }
# Debian's packages, in one `apt-get update` and two installs (each apt call reloads every
# package list; one call per group cost minutes on a fresh machine):
# * qemu-user-static (the oracle of Linux programs) and Debian's uftrace (reads our traces);
# * the cross compilers: tests compile against each ISA's glibc headers at run time
#   (test_sigframe: the signal-frame layout against ucontext_t; test_hardening_selfmod builds
#   its program) and `make testbins` rebuilds the committed programs with them (g++ for
#   the C++ program testbins/src/cxx.cpp);
# * the cross sysroots (/usr/<triple>): the roots of the dynamic-binary tests (issue 15; the
#   x86_64 programs use the host's own /);
# * the cross binutils (issue 15): objdump's @plt names are the oracle of PLT naming,
#   objcopy/readelf split debug files in tests/test_debuginfo.py;
# * a C compiler and Python headers when missing: `pip install -e .` compiles
#   emutrace/native/*.c (issue 9);
# * without recommends, qemu-system-<arch>: the oracle of the mini-kernels in testbins/kernel
#   (issue 14: arm/aarch64 in qemu-system-arm, riscv64 in -misc, i386 in -x86, ppc/ppc64le in
#   -ppc (bamboo, pseries), mips/mipsel in -mips (malta)).
# The foreign architectures come first: Debian's programs of the other ISAs (busybox, the
# shells, the roots of tests/test_debian_programs.py, the arm64 kernel) are fetched below.
foreign="arm64 armhf i386 mipsel ppc64el s390x"
update=0
for a in $foreign; do
  if ! dpkg --print-foreign-architectures | grep -qx "$a"; then
    $sudo dpkg --add-architecture "$a"; update=1
  fi
done
with_recommends="qemu-user-static uftrace
  gcc-i686-linux-gnu gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf gcc-mips-linux-gnu
  gcc-mipsel-linux-gnu gcc-riscv64-linux-gnu gcc-powerpc-linux-gnu gcc-powerpc64le-linux-gnu
  gcc-s390x-linux-gnu
  g++-i686-linux-gnu g++-aarch64-linux-gnu g++-arm-linux-gnueabihf g++-mips-linux-gnu
  g++-mipsel-linux-gnu g++-riscv64-linux-gnu g++-powerpc-linux-gnu g++-powerpc64le-linux-gnu
  g++-s390x-linux-gnu
  libc6-arm64-cross libc6-armhf-cross libc6-i386-cross libc6-mips-cross libc6-mipsel-cross
  libc6-riscv64-cross libc6-powerpc-cross libc6-ppc64el-cross libc6-s390x-cross
  binutils-aarch64-linux-gnu binutils-arm-linux-gnueabihf binutils-i686-linux-gnu
  binutils-mips-linux-gnu binutils-mipsel-linux-gnu binutils-riscv64-linux-gnu
  binutils-powerpc-linux-gnu binutils-powerpc64le-linux-gnu binutils-s390x-linux-gnu"
if ! command -v gcc >/dev/null 2>&1 || ! python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  with_recommends="$with_recommends gcc python3-dev"
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
if [ "${#missing[@]}" != 0 ]; then
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ "${#missing_bare[@]}" != 0 ]; then
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing_bare[@]}" >/dev/null
fi
# ... and Debian's U-Boot for QEMU (u-boot-qemu) and OpenSBI (opensbi), unpacked under
# .cache/firmware once (never committed): tests/test_kernel.py boots them to the prompt.
firmware=()
for pkg in u-boot-qemu opensbi; do
  [ -d ".cache/firmware/$pkg/usr/lib" ] || firmware+=("$pkg")
done
if [ "${#firmware[@]}" != 0 ]; then
  mkdir -p .cache/firmware
  ( cd .cache/firmware && for pkg in "${firmware[@]}"; do rm -f "${pkg}"_*.deb; done &&
    apt-get download -qq "${firmware[@]}" &&
    for pkg in "${firmware[@]}"; do dpkg-deb -x "${pkg}"_*.deb "$pkg"; done )
fi
# ... and a Linux kernel from Debian (linux-image-*-cloud-arm64): only its vmlinuz, as
# .cache/firmware/linux-arm64/vmlinuz (tests/test_kernel.py boots it to the VFS panic).
if [ ! -f .cache/firmware/linux-arm64/vmlinuz ]; then
  pkg=$(apt-cache depends linux-image-cloud-arm64:arm64 | awk '/Depends: linux-image-/ {print $2; exit}')
  tmp=$(mktemp -d)
  ( cd "$tmp" && apt-get download "$pkg" 2>/dev/null ) &&
    dpkg-deb --fsys-tarfile "$tmp"/linux-image-*.deb | tar -x -C "$tmp" --wildcards './boot/vmlinuz-*' &&
    mkdir -p .cache/firmware/linux-arm64 && cp "$tmp"/boot/vmlinuz-* .cache/firmware/linux-arm64/vmlinuz
  rm -rf "$tmp"
fi
# the package, with its test extras; `pip install -e .` compiles emutrace/native/*.c
python3 -m pip install -q -e '.[test]'
python3 -c 'from emutrace import native; native.load()' ||
  echo "warning: the native hot path was not built; --engine native is unavailable"
python3 -c 'from emutrace.native import disasmlib; assert disasmlib._sweep()' 2>/dev/null ||
  echo "warning: discovery's sweep in C (emutrace/native/sweep.c) was not built; it runs in Python"
bash scripts/fetch_busybox.sh
# issue 11: Debian's static shells (bash-static, zsh-static, sash) for tests/test_shells.py,
# into .cache/shells/<isa>/ (cached; needs the foreign architectures fetch_busybox.sh adds)
bash scripts/fetch_shells.sh
# Debian's own dynamic programs (issue 15, tests/test_debian_programs.py): a root per Debian
# ISA made by `emutrace rootfs` into .cache/rootfs/<isa> (coreutils, grep, sed, findutils,
# diffutils, gawk and their libraries; the .debs, ~90 MB for all seven, are kept in
# .cache/rootfs-debs/<isa>).  Idempotent: a root whose marker lists every package is left
# alone.  The seven are made side by side (each mostly waits for apt and dpkg-deb), each
# with its own .deb directory (two `apt-get download`s of one file must not meet).
debian_programs="coreutils grep sed findutils diffutils gawk"
pids=()
for isa in x86_64 i386 aarch64 arm mipsel ppc64le s390x; do
  root=".cache/rootfs/$isa"
  complete=1
  for pkg in $debian_programs; do
    grep -q "^$pkg:" "$root/.emutrace-rootfs" 2>/dev/null || complete=0
  done
  if [ "$complete" = 0 ]; then
    # shellcheck disable=SC2086
    python3 -m emutrace rootfs --arch "$isa" -o "$root" --cache ".cache/rootfs-debs/$isa" \
      $debian_programs &
    pids+=("$!")
  fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
# Roots that work like a system (tests/test_system_root.py): Debian's perl, python3, dash
# and bash per Debian ISA in .cache/system-roots/<isa> (one after another: they share the
# .deb directories above).  `emutrace rootfs` also makes their /tmp, home, /dev and /proc.
system_programs="perl-base python3-minimal dash bash coreutils"
for isa in x86_64 i386 aarch64 arm mipsel ppc64le s390x; do
  root=".cache/system-roots/$isa"
  complete=1
  for pkg in $system_programs; do
    grep -q "^$pkg:" "$root/.emutrace-rootfs" 2>/dev/null || complete=0
  done
  if [ "$complete" = 0 ]; then
    # shellcheck disable=SC2086
    python3 -m emutrace rootfs --arch "$isa" -o "$root" --cache ".cache/rootfs-debs/$isa" \
      $system_programs
  fi
done
echo "== bundled example: emutrace run testbins/s390x/calls recursion"
python3 -m emutrace run testbins/s390x/calls recursion
