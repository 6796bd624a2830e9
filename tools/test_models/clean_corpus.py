#!/usr/bin/env python3
"""Cleans the raw text of stage 1 into documents of one paragraph a line.

    clean_corpus.py RAW_DIR CORPUS_DIR

Each novel is one document; the King James Version is 66, one a book. A
paragraph is a run of non-blank lines joined with single spaces; a verse is a
paragraph of its own, its number dropped. Underscores (the italics markup of
the etexts) go, and so do paragraphs about the etext itself.

The held-out split is the tail of each document: the last paragraphs that
together hold at most HELDOUT_FRACTION of its characters (one at least).
CORPUS_DIR gets train/NN-name.txt and heldout/NN-name.txt, and documents.tsv
(file, title, package, paragraphs and characters of each split), in the fixed
order that later stages follow.
"""
import re
import sys
import unicodedata
from pathlib import Path

NOVELS = [  # (raw file stem, title, package)
    ("sensesensibility", "Sense and Sensibility", "r-cran-janeaustenr"),
    ("prideprejudice", "Pride and Prejudice", "r-cran-janeaustenr"),
    ("mansfieldpark", "Mansfield Park", "r-cran-janeaustenr"),
    ("emma", "Emma", "r-cran-janeaustenr"),
    ("northangerabbey", "Northanger Abbey", "r-cran-janeaustenr"),
    ("persuasion", "Persuasion", "r-cran-janeaustenr"),
    ("mobydick", "Moby Dick", "r-cran-tokenizers"),
    ("greatexpectations", "Great Expectations", "r-cran-tidytext"),
    ("thewaroftheworlds", "The War of the Worlds", "r-cran-tidytext"),
    ("twentythousandleaguesunderthesea",
     "Twenty Thousand Leagues under the Sea", "r-cran-tidytext"),
]
KJV_BOOKS = 66
HELDOUT_FRACTION = 0.05


def normalize(text):
    text = unicodedata.normalize("NFC", text.replace("\ufeff", ""))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def paragraphs(lines):
    out, cur = [], []
    for line in lines + [""]:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            out.append(" ".join(cur))
            cur = []
    out = [re.sub(r"\s+", " ", p.replace("_", "")).strip() for p in out]
    return [p for p in out
            if p and not re.search(r"gutenberg|etext|produced by", p, re.I)]


def novel(raw_dir, stem):
    lines = normalize((raw_dir / f"{stem}.txt").read_text("utf-8")).split("\n")
    starts = [i for i, l in enumerate(lines) if l.startswith("*** START OF")]
    ends = [i for i, l in enumerate(lines) if l.startswith("*** END OF")]
    if starts or ends:  # a full etext with its licence around the book
        if len(starts) != 1 or len(ends) != 1 or starts[0] >= ends[0]:
            sys.exit(f"clean_corpus: {stem}: unexpected etext markers")
        lines = lines[starts[0] + 1:ends[0]]
    return paragraphs(lines)


def kjv(raw_dir):
    books = []  # (name, [paragraph])
    head = re.compile(r"^(\S.*) (\d+)$")
    verse = re.compile(r"^\s+\d+ (\S.*)$")
    for line in normalize((raw_dir / "kjv.txt").read_text("utf-8")).split("\n"):
        if not line.strip():
            continue
        m = head.match(line)
        if m:
            if not books or books[-1][0] != m.group(1):
                books.append((m.group(1), []))
            books[-1][1].append(line.strip())
            continue
        m = verse.match(line)
        if not m or not books:
            sys.exit(f"clean_corpus: kjv: unexpected line {line!r}")
        books[-1][1].append(re.sub(r"\s+", " ", m.group(1)).strip())
    if len(books) != KJV_BOOKS:
        sys.exit(f"clean_corpus: kjv: {len(books)} books, want {KJV_BOOKS}")
    return books


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    raw_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    docs = [(stem, title, pkg, novel(raw_dir, stem))
            for stem, title, pkg in NOVELS]
    for name, paras in kjv(raw_dir):
        slug = "kjv-" + re.sub(r"[^a-z0-9]+", "", name.lower())
        docs.append((slug, f"King James Version: {name}", "bible-kjv-text", paras))
    rows = ["file\ttitle\tpackage\ttrain_paragraphs\ttrain_characters"
            "\theldout_paragraphs\theldout_characters"]
    totals = [0, 0]
    for split in ("train", "heldout"):
        (out_dir / split).mkdir(exist_ok=True)
    for i, (stem, title, pkg, paras) in enumerate(docs):
        if len(paras) < 10:
            sys.exit(f"clean_corpus: {title}: only {len(paras)} paragraphs")
        size = sum(len(p) + 1 for p in paras)
        cut, tail = len(paras) - 1, len(paras[-1]) + 1
        while tail + len(paras[cut - 1]) + 1 <= HELDOUT_FRACTION * size:
            cut -= 1
            tail += len(paras[cut]) + 1
        name = f"{i:02d}-{stem}.txt"
        row = [name, title, pkg]
        for j, (split, part) in enumerate(
                (("train", paras[:cut]), ("heldout", paras[cut:]))):
            text = "\n".join(part) + "\n"
            (out_dir / split / name).write_text(text, "utf-8")
            row += [str(len(part)), str(len(text))]
            totals[j] += len(text)
        rows.append("\t".join(row))
    (out_dir / "documents.tsv").write_text("\n".join(rows) + "\n", "utf-8")
    print(f"clean_corpus: {len(docs)} documents, {totals[0]} characters to "
          f"train on, {totals[1]} held out")


if __name__ == "__main__":
    main()
