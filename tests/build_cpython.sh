#!/usr/bin/env bash
# Build a CPython of a pinned version for the Python frames' tests (tests/test_pyframes.py), once
# per machine: the source tarball from Debian's archive (apt-get source, and checked against its
# pinned sha256), configured
# with --prefix in the cache directory (outside the clone) and built with -g, no PGO/LTO (so
# that the build takes minutes and the binary keeps its symbols), then a venv of it with pystack.
#
#   tests/build_cpython.sh 3.13      # -> ${STACKWALK_CACHE:-~/.cache/stackwalk}/cpython-3.13.5
#   tests/build_cpython.sh 3.13t     # -> .../cpython-3.13.5t (free-threaded: --disable-gil)
#   tests/build_cpython.sh 3.14      # -> .../cpython-3.14.X (Debian's binaries, see below)
#
# Nothing is done when the interpreter is already installed there (the venv is made if missing).
#
# 3.14 cannot be built here: its source tarball is not in Debian's pool (sid's Sources index
# names python3.14_3.14.10.orig.tar.xz, which is not served). Debian sid's own build is used
# instead, unpacked from its packages, with sid's glibc next to it (its binaries need glibc 2.38+,
# newer than this machine's): the executable's interpreter and run path set to those
# (patchelf). libpython3.14-dev gives the headers (Include/internal too). sid moves on and its
# pool files go, so the packages are the ones sid's index names now (apt-get download through
# tests/debian_packages.py, which checks each against the signed index). Its pystack is the
# tests' own (a venv of it would need Debian's python3.14-venv and more of sid).
set -euo pipefail

minor=${1:?usage: build_cpython.sh 3.13|3.13t|3.14}
cache=${STACKWALK_CACHE:-$HOME/.cache/stackwalk}
mkdir -p "$cache"

# Debian's packages and sources are downloaded by tests/debian_packages.py (apt's own client on
# a private state: nothing of the machine's apt is touched; the first of the machine's apt
# repositories that serves the suite; the index checked against Debian's archive keyring), with
# the system's python3 (this runs before the project's venv is made), its state in the cache.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
arch=$(dpkg --print-architecture)

if [ "$minor" = 3.14 ]; then
  for python in "$cache"/cpython-3.14.*/usr/bin/python3.14; do
    [ -x "$python" ] && { echo "$python"; exit 0; }
  done
  work=$(mktemp -d "$cache/unpack-3.14.XXXXXX")
  trap 'rm -rf "$work" "$cache"/apt-sid-*' EXIT
  # (apt-get download checks each package against the index's hashes.)
  python3 "$here/debian_packages.py" sid "$arch" "$work" python3.14-minimal libpython3.14-minimal \
    libpython3.14-stdlib libpython3.14-dev libc6 libexpat1 zlib1g || exit 1
  release=""
  for deb in "$work"/python3.14-minimal_*.deb; do
    if [ -f "$deb" ]; then release=$(dpkg-deb -f "$deb" Version | sed 's/-.*//'); fi
  done
  [ -n "$release" ] || { echo "build_cpython.sh: sid has no python3.14-minimal" >&2; exit 1; }
  echo "build_cpython.sh: unpacking Debian sid's CPython $release" >&2
  for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$work/root"
  done
  root=$cache/cpython-$release
  lib=$root/usr/lib/x86_64-linux-gnu
  patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --set-rpath "$lib" \
    "$work/root/usr/bin/python3.14"
  rm -rf "$root"
  mv "$work/root" "$root"
  "$root/usr/bin/python3.14" -c 'import sys; assert sys.version_info[:2] == (3, 14), sys.version'
  echo "$root/usr/bin/python3.14"
  exit 0
fi

# 3.13t: the same source built free-threaded (--disable-gil: no GIL, per-object reference
# counts and locks, PEP 703), installed as python3.13t.
threading=""
case "$minor" in
  3.13t)
    threading=t
    minor=3.13
    ;;
esac
case "$minor" in
  3.13)
    # Debian trixie's python3.13 (a stable suite: its pool file stays)
    version=3.13.5
    suite=trixie
    orig=python3.13_3.13.5.orig.tar.xz
    sha256=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
    ;;
  *)
    echo "build_cpython.sh: no pinned CPython $minor (3.13 and 3.14 are)" >&2
    exit 2
    ;;
esac

prefix=$cache/cpython-$version$threading
python=$prefix/bin/python$minor$threading

if [ ! -x "$python" ]; then
  work=$(mktemp -d "$cache/build-$version.XXXXXX")
  trap 'rm -rf "$work" "$cache"/apt-"$suite"-*' EXIT
  echo "build_cpython.sh: downloading the source of Debian $suite's python$minor" >&2
  python3 "$here/debian_packages.py" --source "$suite" "$arch" "$work" "python$minor" \
    || exit 1
  tarball=$work/$orig
  [ -f "$tarball" ] || { echo "build_cpython.sh: $suite's python$minor is not $version" >&2; exit 1; }
  echo "$sha256  $tarball" | sha256sum -c --quiet - \
    || { echo "build_cpython.sh: $orig: wrong sha256 (expected $sha256)" >&2; exit 1; }
  tar -xJf "$tarball" -C "$work"
  src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
  start=$SECONDS
  echo "build_cpython.sh: building CPython $version into $prefix" >&2
  (
    cd "$src"
    # -g (configure's default CFLAGS are "-g -O2" without --enable-optimizations' PGO/LTO)
    ./configure --prefix="$prefix" --with-ensurepip=install ${threading:+--disable-gil} \
      >"$work/configure.log" 2>&1 \
      || { tail -n 40 "$work/configure.log" >&2; exit 1; }
    make -j2 >"$work/make.log" 2>&1 || { tail -n 40 "$work/make.log" >&2; exit 1; }
    make install >"$work/install.log" 2>&1 || { tail -n 40 "$work/install.log" >&2; exit 1; }
  )
  echo "build_cpython.sh: CPython $version built in $((SECONDS - start)) s" >&2
fi

# pystack, the reference, from PyPI, in a venv of this interpreter.
venv=$prefix/venv
if [ ! -x "$venv/bin/pystack" ]; then
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check pystack
fi
echo "$python"
