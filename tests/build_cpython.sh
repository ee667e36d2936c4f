#!/usr/bin/env bash
# Build a CPython of a pinned version for the Python frames' tests (tests/test_pyframes.py), once
# per machine: the source tarball from Debian's archive (checked against its sha256), configured
# with --prefix in the cache directory (outside the clone) and built with -g, no PGO/LTO (so
# that the build takes minutes and the binary keeps its symbols), then a venv of it with pystack.
#
#   tests/build_cpython.sh 3.13      # -> ${STACKWALK_CACHE:-~/.cache/stackwalk}/cpython-3.13.5
#   tests/build_cpython.sh 3.14      # headers only -> .../cpython-3.14.10-headers/include
#
# Nothing is done when the interpreter is already installed there (the venv is made if missing).
# 3.14 cannot be built here: its source tarball is not in Debian's pool (sid's Sources index
# names python3.14_3.14.10.orig.tar.xz, which is not served) and sid's binaries need glibc 2.38+.
# Its headers (libpython3.14-dev, which ships Include/internal) are what the Rust unit tests
# check the reading of its _Py_DebugOffsets table against.
set -euo pipefail

minor=${1:?usage: build_cpython.sh 3.13|3.14}
cache=${STACKWALK_CACHE:-$HOME/.cache/stackwalk}
mkdir -p "$cache"

if [ "$minor" = 3.14 ]; then
  # sid's libpython3.14-dev 3.14.10-1 (its Packages index gives the sha256)
  url=http://deb.debian.org/debian/pool/main/p/python3.14/libpython3.14-dev_3.14.10-1_amd64.deb
  sha256=ce226a5a09bd3739123b95c5a41688ee3110651e6b4f9b22973a27c7be2f64fa
  headers=$cache/cpython-3.14.10-headers
  if [ ! -e "$headers/include/python3.14/internal/pycore_debug_offsets.h" ]; then
    work=$(mktemp -d "$cache/headers-3.14.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    curl -fsSL --retry 3 -o "$work/dev.deb" "$url" \
      || { echo "build_cpython.sh: $url cannot be downloaded (sid moved on? pin the new one)" >&2; exit 1; }
    echo "$sha256  $work/dev.deb" | sha256sum -c --quiet - \
      || { echo "build_cpython.sh: $url: wrong sha256 (expected $sha256)" >&2; exit 1; }
    dpkg-deb -x "$work/dev.deb" "$work/root"
    rm -rf "$headers"
    mkdir -p "$headers"
    mv "$work/root/usr/include" "$headers/include"
  fi
  echo "$headers/include"
  exit 0
fi

case "$minor" in
  3.13)
    # Debian trixie's python3.13 (a stable suite: its pool file stays)
    version=3.13.5
    url=http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_3.13.5.orig.tar.xz
    sha256=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
    ;;
  *)
    echo "build_cpython.sh: no pinned source for CPython $minor (3.13 and 3.14's headers are)" >&2
    exit 2
    ;;
esac

prefix=$cache/cpython-$version
python=$prefix/bin/python$minor

if [ ! -x "$python" ]; then
  work=$(mktemp -d "$cache/build-$version.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  tarball=$work/$(basename "$url")
  echo "build_cpython.sh: downloading $url" >&2
  curl -fsSL --retry 3 -o "$tarball" "$url"
  echo "$sha256  $tarball" | sha256sum -c --quiet - \
    || { echo "build_cpython.sh: $url: wrong sha256 (expected $sha256)" >&2; exit 1; }
  tar -xJf "$tarball" -C "$work"
  src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
  start=$SECONDS
  echo "build_cpython.sh: building CPython $version into $prefix" >&2
  (
    cd "$src"
    # -g (configure's default CFLAGS are "-g -O2" without --enable-optimizations' PGO/LTO)
    ./configure --prefix="$prefix" --with-ensurepip=install >"$work/configure.log" 2>&1 \
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
