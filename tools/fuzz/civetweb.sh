#!/usr/bin/env bash
# Builds civetweb from Debian's source of the packaged version (the one the
# server links: libcivetweb1 1.15+dfsg-4, with Debian's patches and build
# options) as a static library instrumented like the fuzz targets (clang,
# libFuzzer's coverage, AddressSanitizer, UndefinedBehaviorSanitizer), so
# that civetweb's own request parser guides the HTTP fuzz targets too.
# Prints the folder that holds libcivetweb.a; run.sh links the fuzz targets
# against it ahead of the system's uninstrumented shared library.
#
#   tools/fuzz/civetweb.sh [CACHE_DIR]
#
# The sources are checked against the checksums of Debian's archive.
set -euo pipefail
version=1.15+dfsg
revision=4
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/verdict/civetweb-$version-$revision}
pool=https://deb.debian.org/debian/pool/main/c/civetweb
declare -A sha256=(
  ["civetweb_$version.orig.tar.xz"]=ec372e9737bc820118bbb735f46a07d41f795814ca0f38bc6e67048e7a460f33
  ["civetweb_$version-$revision.debian.tar.xz"]=2fe67d05a15be93764398275372f41f6228b17497b23d04f149482ffde7b3fb8
)
lib="$cache/lib"
if [[ -f "$lib/libcivetweb.a" ]]; then
  echo "$lib"
  exit 0
fi
mkdir -p "$cache"
for f in "${!sha256[@]}"; do
  if [[ ! -f "$cache/$f" ]]; then
    curl -fsSL --retry 3 -o "$cache/$f.part" "$pool/$f" >&2
    # Only a file with the archive's checksum enters the cache.
    if ! echo "${sha256[$f]}  $cache/$f.part" | sha256sum --quiet -c - >&2; then
      rm -f "$cache/$f.part"
      exit 1
    fi
    mv "$cache/$f.part" "$cache/$f"
  fi
done
src="$cache/src"
rm -rf "$src" "$cache/build"
mkdir -p "$src"
tar -C "$src" --strip-components=1 -xJf "$cache/civetweb_$version.orig.tar.xz"
tar -C "$src" -xJf "$cache/civetweb_$version-$revision.debian.tar.xz"
while read -r patch; do
  [[ -z "$patch" || "$patch" == \#* ]] && continue
  patch -d "$src" -p1 --quiet < "$src/debian/patches/$patch" >&2
done < "$src/debian/patches/series"
# debian/rules' options, as a static library; the C++ wrapper is not used.
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
cmake -S "$src" -B "$cache/build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_C_FLAGS="$flags" -DBUILD_SHARED_LIBS=OFF -DCIVETWEB_BUILD_TESTING=OFF \
  -DCIVETWEB_ENABLE_WEBSOCKETS=ON -DCIVETWEB_ENABLE_CXX=OFF -DCIVETWEB_ENABLE_ASAN=OFF \
  -DCIVETWEB_ENABLE_SERVER_EXECUTABLE=OFF -DCIVETWEB_INSTALL_EXECUTABLE=OFF > "$cache/cmake.log" 2>&1
cmake --build "$cache/build" --target civetweb-c-library -j "$(nproc)" > "$cache/build.log" 2>&1
mkdir -p "$lib"
# Copied under another name first: the archive's presence means it is whole.
cp "$(find "$cache/build" -name 'libcivetweb.a' | head -1)" "$lib/libcivetweb.a.part"
mv "$lib/libcivetweb.a.part" "$lib/libcivetweb.a"
echo "$lib"
