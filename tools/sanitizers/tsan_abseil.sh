#!/usr/bin/env bash
# Builds Abseil under ThreadSanitizer for `bazel test --config=tsan`.
#
# Debian's Abseil archives are not instrumented, so TSan cannot see the
# synchronisation of absl::Mutex (every Condition a waiter evaluates inside
# UnlockSlow reads as a race). This builds the installed package from
# Debian's source (its release and its patches), with Debian's options.h (so the ABI matches /usr/include/absl),
# into static archives under PREFIX, and writes .tsan.bazelrc, which
# .bazelrc imports: its -L puts these archives ahead of the system's for
# --config=tsan only, and it names the suppressions file. Idempotent: a finished build is kept.
#
#   tools/sanitizers/tsan_abseil.sh [PREFIX]   (default /opt/verdict/tsan-abseil)
set -euo pipefail
cd "$(dirname "$0")/../.."
prefix=${1:-/opt/verdict/tsan-abseil}
# The installed package's own version: its patches change what the
# headers declare (a security fix adds a function), so they are applied too.
package=$(dpkg-query -W -f='${Version}' libabsl-dev)  # e.g. 20220623.1-1+deb12u2
version=${package%%-*}
pool=http://deb.debian.org/debian/pool/main/a/abseil
if [[ ! -f "$prefix/lib/libabsl_synchronization.a" ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  curl -sSfL -o "$work/abseil.tar.gz" "$pool/abseil_${version}.orig.tar.gz"
  curl -sSfL -o "$work/debian.tar.xz" "$pool/abseil_${package}.debian.tar.xz"
  tar -xzf "$work/abseil.tar.gz" -C "$work"
  src="$work/abseil-$version"
  tar -xJf "$work/debian.tar.xz" -C "$src"
  while read -r patch; do
    [[ -z "$patch" || "$patch" == \#* ]] && continue
    patch -s -p1 -d "$src" < "$src/debian/patches/$patch"
  done < "$src/debian/patches/series"
  # The system headers' options (Abseil's own types, the debian3 inline
  # namespace, hardened): the archives must define what they declare.
  cp /usr/include/absl/base/options.h "$src/absl/base/options.h"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_STANDARD=17 -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_TESTING=OFF >"$work/build.log" 2>&1
  # GCC warns that TSan does not model atomic_thread_fence (Abseil's
  # sequence locks); the log is shown only when the build fails.
  if ! cmake --build "$work/build" -j"$(nproc)" >>"$work/build.log" 2>&1 ||
     ! cmake --install "$work/build" >>"$work/build.log" 2>&1; then
    tail -40 "$work/build.log" >&2
    exit 1
  fi
fi
cat > .tsan.bazelrc <<RC
# Written by tools/sanitizers/tsan_abseil.sh: Abseil built under TSan, and
# the suppressions (each with its reason) in tools/sanitizers/tsan.supp.
build:tsan --linkopt=-L$prefix/lib
build:tsan --test_env=TSAN_OPTIONS=suppressions=$PWD/tools/sanitizers/tsan.supp
RC
echo "tsan_abseil: Abseil $package under TSan in $prefix; .tsan.bazelrc written"
