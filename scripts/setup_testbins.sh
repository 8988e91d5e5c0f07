#!/usr/bin/env bash
# What `make testbins` needs beyond scripts/setup.sh: Debian's cross g++ for the C++ program
# testbins/src/cxx.cpp, gnu-efi and nasm for testbins/uefi and testbins/dos (the cross gcc,
# binutils and libc headers come with setup.sh, which the tests need them for; listed here
# too so that this alone is enough).  Installs only what is missing.
set -euo pipefail
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }
missing=()
installed g++ || missing+=(g++)  # x86_64-linux-gnu-g++ is the host's
for triple in i686-linux-gnu aarch64-linux-gnu arm-linux-gnueabihf mips-linux-gnu \
              mipsel-linux-gnu riscv64-linux-gnu powerpc-linux-gnu powerpc64le-linux-gnu \
              s390x-linux-gnu mips64el-linux-gnuabi64 \
              mips64-linux-gnuabi64 m68k-linux-gnu sparc64-linux-gnu \
              powerpc64-linux-gnu; do
  for tool in gcc g++ binutils; do installed "$tool-$triple" || missing+=("$tool-$triple"); done
done
installed gnu-efi || missing+=(gnu-efi)  # testbins/uefi: a UEFI application
installed nasm || missing+=(nasm)  # testbins/dos: a DOS .COM program
installed gcc-arm-none-eabi || missing+=(gcc-arm-none-eabi)  # testbins/mcu: Cortex-M firmware
installed gcc-mingw-w64-x86-64 || missing+=(gcc-mingw-w64-x86-64)  # testbins/windows: a PE program
[ "${#missing[@]}" = 0 ] && exit 0
$sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
