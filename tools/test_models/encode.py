#!/usr/bin/env python3
"""Stage 3: encodes the corpus with the trained tokenizer into token ids.

    /usr/bin/python3 tools/test_models/encode.py [WORK]

Needs the sentencepiece Python module (Debian python3-sentencepiece, hence
Debian's own python3). Each document is encoded whole, newlines included, the
way the runtime encodes a prompt, as <s> text </s>; the held-out tail of each
document likewise. Writes into tools/test_models/data/: train.bin and
heldout.bin (the ids as little-endian uint16, documents back to back in
corpus order) and meta.json (tokenizer, sizes, SHA-256s, documents, source
packages).
"""
import array
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

try:
    import sentencepiece as spm
except ImportError:
    sys.exit("encode: no sentencepiece module: apt-get install "
             "python3-sentencepiece and run with /usr/bin/python3")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TOKENIZER = REPO / "models" / "tokenizer" / "tokenizer.model"
DATA = HERE / "data"


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tsv(path):
    lines = path.read_text("utf-8").rstrip("\n").split("\n")
    head = lines[0].split("\t")
    return [dict(zip(head, line.split("\t"))) for line in lines[1:]]


def main():
    work = Path(sys.argv[1] if len(sys.argv) > 1 else
                os.path.join(tempfile.gettempdir(), "verdict-test-models"))
    corpus = work / "corpus"
    if not (corpus / "documents.tsv").exists():
        sys.exit(f"encode: {corpus}/documents.tsv is missing: run fetch_corpus.sh")
    if not TOKENIZER.exists():
        sys.exit(f"encode: {TOKENIZER} is missing: run train_tokenizer.sh")
    sp = spm.SentencePieceProcessor(model_file=str(TOKENIZER))
    vocab = sp.get_piece_size()
    bos, eos = sp.bos_id(), sp.eos_id()
    if vocab > 65536 or min(bos, eos) < 0:
        sys.exit("encode: the tokenizer needs <s>, </s> and at most 65536 pieces")

    docs = tsv(corpus / "documents.tsv")
    DATA.mkdir(exist_ok=True)
    meta = {
        "tokenizer": {"file": "models/tokenizer/tokenizer.model",
                      "sha256": sha256(TOKENIZER), "vocab_size": vocab,
                      "unk_id": sp.unk_id(), "bos_id": bos, "eos_id": eos,
                      "pad_id": sp.pad_id()},
        "dtype": "uint16 little-endian",
        "splits": {},
        "documents": [],
        "sources": tsv(corpus / "sources.tsv"),
    }
    for d in docs:
        meta["documents"].append({"file": d["file"], "title": d["title"],
                                  "package": d["package"]})
    for split in ("train", "heldout"):
        ids = array.array("H")
        chars = 0
        for d, m in zip(docs, meta["documents"]):
            text = (corpus / split / d["file"]).read_text("utf-8").rstrip("\n")
            m[f"{split}_offset"] = len(ids)
            ids.append(bos)
            ids.extend(sp.encode(text))
            ids.append(eos)
            m[f"{split}_tokens"] = len(ids) - m[f"{split}_offset"]
            chars += len(text)
        if sys.byteorder != "little":
            ids.byteswap()
        path = DATA / f"{split}.bin"
        path.write_bytes(ids.tobytes())
        meta["splits"][split] = {"file": path.name, "tokens": len(ids),
                                 "characters": chars, "sha256": sha256(path)}
        print(f"encode: {split}: {len(ids)} tokens, {chars / len(ids):.2f} "
              f"characters a token -> {path.relative_to(REPO)}")
    (DATA / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", "utf-8")


if __name__ == "__main__":
    main()
