#!/usr/bin/env bash
# One-command set-up on a fresh Debian machine: system packages, the Python package with its
# test dependencies, Debian's busybox-static for the real-program tests; then the bundled
# example runs (an s390x program on this x86_64 host).
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
if ! command -v qemu-s390x-static >/dev/null 2>&1; then
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq qemu-user-static uftrace >/dev/null
fi
# Debian's cross compilers: tests compile against each ISA's glibc headers at run time
# (test_sigframe: the signal-frame layout against ucontext_t; test_hardening_selfmod builds
# its program) and `make testbins` rebuilds the committed programs with them.
cross_gccs="gcc-i686-linux-gnu gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf gcc-mips-linux-gnu
  gcc-mipsel-linux-gnu gcc-riscv64-linux-gnu gcc-powerpc-linux-gnu gcc-powerpc64le-linux-gnu
  gcc-s390x-linux-gnu"
# shellcheck disable=SC2086
if ! dpkg-query -W $cross_gccs >/dev/null 2>&1; then
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $cross_gccs >/dev/null
fi
# Debian's cross sysroots (/usr/<triple>): the roots of the dynamic-binary tests (issue 15);
# the x86_64 programs use the host's own /.  Skipped when every one is present.
cross_libcs="libc6-arm64-cross libc6-armhf-cross libc6-i386-cross libc6-mips-cross libc6-mipsel-cross
  libc6-riscv64-cross libc6-powerpc-cross libc6-ppc64el-cross libc6-s390x-cross"
# shellcheck disable=SC2086
if ! dpkg-query -W $cross_libcs >/dev/null 2>&1; then
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $cross_libcs >/dev/null
fi
# Kernel images (issue 14, tests/test_kernel.py): qemu-system-<arch> is the oracle of the
# mini-kernels in testbins/kernel (arm/aarch64 in qemu-system-arm, riscv64 in -misc, i386
# in -x86).
if ! command -v qemu-system-aarch64 >/dev/null 2>&1 || ! command -v qemu-system-riscv64 >/dev/null 2>&1 ||
   ! command -v qemu-system-i386 >/dev/null 2>&1; then
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    qemu-system-arm qemu-system-misc qemu-system-x86 >/dev/null
fi
# Kernel images on ppc/ppc64le (issue 14, tests/test_kernel.py): qemu-system-ppc
# (qemu-system-ppc -M bamboo, qemu-system-ppc64 -M pseries) is the oracle of
# testbins/kernel/ppc and ppc64le.
if ! command -v qemu-system-ppc >/dev/null 2>&1 || ! command -v qemu-system-ppc64 >/dev/null 2>&1; then
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    qemu-system-ppc >/dev/null
fi
# ... and the mips/mipsel mini-kernels' oracle (issue 14, boards malta/maltael):
# qemu-system-mips(el) -M malta, Debian's qemu-system-mips package
if ! command -v qemu-system-mipsel >/dev/null 2>&1; then
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    qemu-system-mips >/dev/null
fi
# ... and Debian's U-Boot for QEMU (u-boot-qemu) and OpenSBI (opensbi), unpacked under
# .cache/firmware once (never committed): tests/test_kernel.py boots them to the prompt.
for pkg in u-boot-qemu opensbi; do
  if [ ! -d ".cache/firmware/$pkg/usr/lib" ]; then
    mkdir -p .cache/firmware
    ( cd .cache/firmware && rm -f "${pkg}"_*.deb &&
      { apt-get download "$pkg" 2>/dev/null ||
        { $sudo apt-get update -qq && apt-get download "$pkg"; }; } &&
      dpkg-deb -x "${pkg}"_*.deb "$pkg" )
  fi
done
# ... and a Linux kernel from Debian (linux-image-*-cloud-arm64): only its vmlinuz, as
# .cache/firmware/linux-arm64/vmlinuz (tests/test_kernel.py boots it to the VFS panic).
if [ ! -f .cache/firmware/linux-arm64/vmlinuz ]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
    $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
  fi
  pkg=$(apt-cache depends linux-image-cloud-arm64:arm64 | awk '/Depends: linux-image-/ {print $2; exit}')
  tmp=$(mktemp -d)
  ( cd "$tmp" && apt-get download "$pkg" 2>/dev/null ) &&
    dpkg-deb --fsys-tarfile "$tmp"/linux-image-*.deb | tar -x -C "$tmp" --wildcards './boot/vmlinuz-*' &&
    mkdir -p .cache/firmware/linux-arm64 && cp "$tmp"/boot/vmlinuz-* .cache/firmware/linux-arm64/vmlinuz
  rm -rf "$tmp"
fi
# native hot path (issue 9): `pip install -e .` compiles emutrace/native/hotpath.c, which needs a
# C compiler and the Python headers; installed only when one of them is missing
if ! command -v gcc >/dev/null 2>&1 || ! python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcc python3-dev >/dev/null
fi
python3 -m pip install -q -e '.[test]'
python3 -c 'from emutrace import native; native.load()' ||
  echo "warning: the native hot path was not built; --engine native is unavailable"
bash scripts/fetch_busybox.sh
# issue 11: Debian's static shells (bash-static, zsh-static, sash) for tests/test_shells.py,
# into .cache/shells/<isa>/ (cached; needs the foreign architectures fetch_busybox.sh adds)
bash scripts/fetch_shells.sh
# Tracing dynamic programs (issue 15): the cross binutils (objdump's @plt names are the oracle
# of PLT naming, objcopy/readelf split debug files in tests/test_debuginfo.py), and a Debian
# arm64 root with coreutils for tests/test_rootfs.py, made by `emutrace rootfs` once into
# .cache/rootfs/aarch64 (arm64 was added as a foreign architecture by fetch_busybox.sh).
cross_binutils="binutils-aarch64-linux-gnu binutils-arm-linux-gnueabihf binutils-i686-linux-gnu
  binutils-mips-linux-gnu binutils-mipsel-linux-gnu binutils-riscv64-linux-gnu
  binutils-powerpc-linux-gnu binutils-powerpc64le-linux-gnu binutils-s390x-linux-gnu"
# shellcheck disable=SC2086
if ! dpkg-query -W $cross_binutils >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $cross_binutils >/dev/null
fi
# Debian's own dynamic programs (issue 15, tests/test_debian_programs.py): a root per Debian
# ISA made by `emutrace rootfs` into .cache/rootfs/<isa> (coreutils, grep, sed, findutils,
# diffutils, gawk and their libraries; the .debs, ~90 MB for all seven, are kept in
# .cache/rootfs-debs).  Idempotent: a root whose marker lists every package is left alone.
debian_programs="coreutils grep sed findutils diffutils gawk"
for isa in x86_64 i386 aarch64 arm mipsel ppc64le s390x; do
  root=".cache/rootfs/$isa"
  complete=1
  for pkg in $debian_programs; do
    grep -q "^$pkg:" "$root/.emutrace-rootfs" 2>/dev/null || complete=0
  done
  if [ "$complete" = 0 ]; then
    # shellcheck disable=SC2086
    python3 -m emutrace rootfs --arch "$isa" -o "$root" --cache .cache/rootfs-debs $debian_programs
  fi
done
echo "== bundled example: emutrace run testbins/s390x/calls recursion"
python3 -m emutrace run testbins/s390x/calls recursion
