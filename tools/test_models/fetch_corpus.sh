#!/usr/bin/env bash
# Stage 1: fetches the public-domain corpus from Debian packages and cleans it
# into plain text, one file per document, one paragraph per line.
#
#   tools/test_models/fetch_corpus.sh [WORK]
#
# WORK (default: $TMPDIR/verdict-test-models) receives debs/, root/ (the
# unpacked packages), raw/ (the text as the packages hold it) and corpus/
# (the cleaned documents, split into train/ and heldout/, plus sources.tsv, which names every package, its
# version and the SHA-256 of its .deb). Nothing is installed from the
# downloaded packages: they are unpacked with dpkg -x. Reading the R data
# needs Rscript (Debian r-base-core); run as root, the script installs it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=${1:-${TMPDIR:-/tmp}/verdict-test-models}

# package=version pairs; the versions are Debian 12 (bookworm)'s.
packages=(
  r-cran-janeaustenr=1.0.0-1   # Jane Austen's six novels (R data)
  r-cran-tokenizers=0.3.0-1    # Moby Dick (R data set 'mobydick')
  r-cran-tidytext=0.4.1-1      # extdata/books.rda: Dickens, Wells, Verne
  bible-kjv-text=4.38          # King James Version, compressed
  bible-kjv=4.38               # the program that reads it
)

if ! command -v Rscript >/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "fetch_corpus: installing r-base-core for Rscript"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends r-base-core
  else
    echo "fetch_corpus: Rscript is missing: apt-get install r-base-core" >&2
    exit 1
  fi
fi

rm -rf "$work/debs" "$work/root" "$work/raw" "$work/corpus"
mkdir -p "$work/debs" "$work/root" "$work/raw" "$work/corpus"
# (apt-get may warn that it downloads unsandboxed as root: harmless.)
(cd "$work/debs" && apt-get download -q "${packages[@]}")

printf 'package\tversion\tarchitecture\tsha256\n' >"$work/corpus/sources.tsv"
for deb in "$work"/debs/*.deb; do
  dpkg -x "$deb" "$work/root"
  printf '%s\t%s\t%s\t%s\n' "$(dpkg-deb -f "$deb" Package)" \
    "$(dpkg-deb -f "$deb" Version)" "$(dpkg-deb -f "$deb" Architecture)" \
    "$(sha256sum "$deb" | cut -d' ' -f1)" >>"$work/corpus/sources.tsv"
done

lib=$work/root/usr/lib/R/site-library
Rscript --vanilla "$here/dump_r_text.R" "$lib" "$work/raw"
"$work/root/usr/bin/bible" -p "$work/root/usr/lib" -l0 'gen1:1-rev22:21' \
  >"$work/raw/kjv.txt"

python3 "$here/clean_corpus.py" "$work/raw" "$work/corpus"
echo "fetch_corpus: corpus in $work/corpus"
