#!/usr/bin/env python3
"""Writes a small tokenizer.json from a large one, for fuzz seeds.

    tools/fuzz/shrink_tokenizer.py IN.json OUT.json [--keep 400]

Keeps the vocabulary's first KEEP ids and the merges among them, so the
file still loads and encodes; added tokens outside the kept ids get the
ids after them (and the post-processor's special tokens follow), so the
ids stay dense as in a real file.
"""
import argparse
import json


def shrink(spec, keep):
    model = spec["model"]
    vocab = {tok: i for tok, i in model["vocab"].items() if i < keep}
    model["vocab"] = vocab
    merges = []
    for m in model["merges"]:
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        if left in vocab and right in vocab and left + right in vocab:
            merges.append(m)
    model["merges"] = merges
    next_id = keep
    new_id = {}
    for t in spec.get("added_tokens") or []:
        if vocab.get(t["content"]) == t["id"]:
            continue
        if t["id"] >= keep:
            new_id[t["id"]] = next_id
            t["id"] = next_id
            next_id += 1
    post = spec.get("post_processor") or {}
    for p in [post] + list(post.get("processors") or []):
        for special in (p.get("special_tokens") or {}).values():
            special["ids"] = [new_id.get(i, i) for i in special["ids"]]
    return spec


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--keep", type=int, default=400)
    args = parser.parse_args()
    with open(args.input, encoding="utf-8") as f:
        spec = json.load(f)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(shrink(spec, args.keep), f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    main()
