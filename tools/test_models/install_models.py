#!/usr/bin/env python3
"""Stage 5: installs what train.py wrote into models/ and writes its README.

    python3 tools/test_models/install_models.py DIR

DIR holds train.py's output: models.tar.part0, part1, ... (or models.tar)
and models.tar.sha256. The tar's SHA-256 is checked; models/target/ and
models/draft/ are replaced by its content; its metrics.json and train.log go
to models/; models/README.md is written from them and from
tools/test_models/data/meta.json. Standard library only.
"""
import hashlib
import io
import json
import shutil
import sys
import tarfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MODELS = REPO / "models"
LIMIT_BYTES = 30 << 20


def read_tar(src):
    parts = sorted(src.glob("models.tar.part*"),
                   key=lambda p: int(p.name[len("models.tar.part"):]))
    if parts:
        blob = b"".join(p.read_bytes() for p in parts)
    elif (src / "models.tar").exists():
        blob = (src / "models.tar").read_bytes()
    else:
        sys.exit(f"install_models: no models.tar or models.tar.part* in {src}")
    want = (src / "models.tar.sha256").read_text().split()[0]
    got = hashlib.sha256(blob).hexdigest()
    if got != want:
        sys.exit(f"install_models: models.tar SHA-256 is {got}, want {want}")
    return blob


def extract(blob):
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        names = tar.getnames()
        for n in names:
            top = n.split("/")[0]
            if top not in ("target", "draft", "metrics.json", "train.log") or ".." in n:
                sys.exit(f"install_models: unexpected member {n}")
        for d in ("target", "draft"):
            if (MODELS / d).exists():
                shutil.rmtree(MODELS / d)
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(MODELS, **kwargs)
    for p in MODELS.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)


def label(name):
    if name in ("target", "draft"):
        return name
    weight = float(name[len("draft_kd"):])
    how = ("trained on the text alone" if weight == 0 else
           f"distillation weight {weight:g}")
    return f"draft {how} (not shipped)"


def mib(n):
    return f"{n / (1 << 20):.1f} MiB"


def readme(metrics, meta):
    m, pairs = metrics["models"], metrics["pairs"]
    t, d = m["target"], m["draft"]
    others = {k: v for k, v in m.items() if k not in ("target", "draft")}
    size = {name: sum(f.stat().st_size for f in (MODELS / name).iterdir())
            for name in ("target", "draft", "tokenizer")}
    tok, spl, args = meta["tokenizer"], meta["splits"], metrics["args"]
    k = args["spec_k"]
    prompts = pairs["draft"]["prompts"]
    device = metrics.get("device")
    if not device:  # older runs: the log's first line ends with the device
        first = (MODELS / "train.log").read_text().split("\n")[0]
        device = first.rsplit(", ", 1)[-1] if first.startswith("torch ") else "GPU"
    L = []

    def add(*lines):
        """Table rows, headings and list items go as they are; a paragraph,
        given as one string, is wrapped at 78 columns."""
        for text in lines:
            if not text or text[0] in "|#-":
                L.append(text)
            else:
                L.append(textwrap.fill(text, 78, break_on_hyphens=False,
                                       break_long_words=False))

    add("# Bundled models", "",
        "A small Llama target and its draft, trained for verdict on "
        "public-domain books that Debian packages ship, with one SentencePiece "
        "tokenizer shared by both. They are the default model pair "
        "(`models/target` served with `models/draft` as its draft) and the "
        "pair of the end-to-end tests. Every file here is generated: "
        "`tools/test_models/README.md` says how to regenerate them, stage by "
        "stage.", "",
        "| directory or file | what |",
        "| --- | --- |",
        f"| `target/` | the target, {t['parameters'] / 1e6:.2f}M parameters "
        f"({mib(size['target'])}) |",
        f"| `draft/` | the draft, {d['parameters'] / 1e6:.2f}M parameters, "
        f"distilled from the target ({mib(size['draft'])}) |",
        "| `tokenizer/` | `tokenizer.model` (a copy is in each model's "
        "directory) and the readable `tokenizer.vocab` |",
        "| `metrics.json`, `train.log` | what the training run measured and "
        "printed |", "",
        "Each model directory has the Hugging Face layout: `config.json` "
        "(`model_type` llama, `LlamaForCausalLM`), `model.safetensors` (bf16, "
        "embeddings tied to the output layer, so no `lm_head.weight`), "
        "`tokenizer.model`, `tokenizer_config.json` and "
        "`generation_config.json` (greedy by default).", "",
        "## Shapes", "",
        "| | parameters | layers | hidden | heads | KV heads | head dim | MLP "
        "| vocabulary | context |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, x in (("target", t), ("draft", d)):
        s = x["shape"]
        add(f"| {name} | {x['parameters']:,} | {s['num_hidden_layers']} | "
            f"{s['hidden_size']} | {s['num_attention_heads']} | "
            f"{s['num_key_value_heads']} | "
            f"{s['hidden_size'] // s['num_attention_heads']} | "
            f"{s['intermediate_size']} | {tok['vocab_size']} | "
            f"{metrics['context']} |")
    add("",
        "RoPE theta 10000, RMSNorm epsilon 1e-5, SiLU MLP, no biases. Both "
        "models' head counts divide by 4, so tensor parallelism of 1, 2 or 4 "
        "splits them evenly; the target uses grouped-query attention (8 query "
        "heads, 4 KV heads), the draft plain multi-head attention.", "",
        "## Quality", "",
        "Measured by `tools/test_models/train.py` on the exported bf16 "
        "weights, reloaded with transformers "
        f"{metrics['versions']['transformers']}, over the held-out split "
        f"({spl['heldout']['tokens']:,} tokens: the last 5% of every document, "
        "never trained on; its loss also chose which evaluation's weights each "
        "model keeps, see Training).", "",
        "| model | held-out loss | held-out perplexity |",
        "| --- | --- | --- |")
    for name, x in (("target", t), ("draft", d), *others.items()):
        add(f"| {label(name)} | {x['heldout_loss']:.4f} | "
            f"{x['heldout_perplexity']:.2f} |")
    add("", "The draft against the target:", "",
        "| draft | acceptance, temperature 0 | acceptance, temperature 1 | "
        f"tokens a target pass (greedy, k={k}) | teacher-forced argmax "
        "agreement | teacher-forced sum min(p, q) |",
        "| --- | --- | --- | --- | --- | --- |")
    for name, pm in pairs.items():
        add(f"| {label(name)} | {pm['temperature_0']['acceptance']:.3f} | "
            f"{pm['temperature_1']['acceptance']:.3f} | "
            f"{pm['temperature_0'][f'tokens_per_target_pass_k{k}']:.2f} | "
            f"{pm['teacher_forced']['greedy_agreement']:.3f} | "
            f"{pm['teacher_forced']['sum_min_pq']:.3f} |")
    add("",
        f"Acceptance is per drafted token, over {prompts['count']} held-out "
        f"prompts of {prompts['prompt_tokens']} tokens, each continued by the "
        f"target for {prompts['generated_tokens']} tokens. At temperature 0 "
        "the target continues greedily and a drafted token is accepted when it "
        "is the target's argmax. At temperature 1 the target samples, and the "
        "acceptance is the mean over the generated positions of "
        "sum_v min(p_v, q_v), the probability that speculative sampling "
        "accepts the draft's token. Tokens a target pass simulates greedy "
        f"speculative decoding with {k} drafted tokens a step: the accepted "
        "ones plus the target's own. The teacher-forced columns compare the "
        "two models' next-token distributions along the held-out text itself. "
        "These numbers come from the training script; once verdict serves the "
        "pair, its own acceptance counters are the reference.", "",
        "The corpus is small, so data limits the target more than its size "
        "does: it trains with dropout, and the draft, distilled from the "
        "target's distributions, comes close to the target's perplexity on "
        "held-out text, while the same draft trained on the text alone does "
        "worse on perplexity and on acceptance. Greedy continuations soon "
        "repeat themselves, as models of this size do; `metrics.json` holds "
        "three.", "",
        "## Corpus", "",
        "Public-domain books, taken from these Debian 12 packages with "
        "`apt-get download` and `dpkg -x`:", "",
        "| package | version | architecture | SHA-256 of the .deb |",
        "| --- | --- | --- | --- |")
    for s in meta["sources"]:
        add(f"| {s['package']} | {s['version']} | {s['architecture']} | "
            f"`{s['sha256']}` |")
    by_pkg = {}
    for doc in meta["documents"]:
        by_pkg.setdefault(doc["package"], []).append(doc["title"])
    chars = spl["train"]["characters"] + spl["heldout"]["characters"]
    add("",
        "- r-cran-janeaustenr: Jane Austen's "
        + ", ".join(by_pkg["r-cran-janeaustenr"]) + ".",
        "- r-cran-tokenizers: Herman Melville's Moby Dick, without the "
        "etext's licence.",
        "- r-cran-tidytext: " + ", ".join(by_pkg["r-cran-tidytext"])
        + " (Dickens, Wells, Verne); its Pride and Prejudice is left out as a "
        "duplicate.",
        f"- bible-kjv-text: the King James Version, "
        f"{len(by_pkg['bible-kjv-text'])} books, one document each, read with "
        "the `bible` program of bible-kjv.", "",
        f"{len(meta['documents'])} documents, {chars:,} characters. Encoded, "
        f"{spl['train']['tokens']:,} tokens to train on and "
        f"{spl['heldout']['tokens']:,} held out "
        f"({spl['train']['characters'] / spl['train']['tokens']:.2f} "
        "characters a token), each document as `<s> text </s>` with its "
        "paragraphs joined by newlines.", "",
        "## Tokenizer", "",
        f"SentencePiece BPE, {tok['vocab_size']} pieces, trained by "
        "`spm_train` on the training split with Llama's settings: identity "
        "normalization, whitespace kept, a dummy prefix, digits split, byte "
        "fallback (256 byte pieces, so every UTF-8 string encodes; a newline "
        f"is `<0x0A>`). Special ids: `<unk>` {tok['unk_id']}, `<s>` "
        f"{tok['bos_id']}, `</s>` {tok['eos_id']}, `<pad>` {tok['pad_id']}. "
        "`tokenizer_config.json` puts `<s>` in front of a prompt and carries a "
        "plain chat template (`Role: content` lines, then `Assistant:`).", "",
        "## Training", "",
        f"One {device}, PyTorch {metrics['versions']['torch']}, seed "
        f"{metrics['seed']}, bf16 autocast, AdamW (betas 0.9 and 0.95, weight "
        f"decay 0.1 on matrices), {args['batch']} sequences of "
        f"{args['seq_len']} tokens a step, a linear warm-up over 5% of the "
        "steps then a cosine decay to 10% of the peak rate, gradients clipped "
        "at norm 1. Each model keeps the weights of its evaluation with the "
        f"lowest held-out loss ({args['evals']} evaluations a run).", "",
        "| model | epochs | steps (kept) | peak rate | dropout | loss | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- |")
    for name, x in (("target", t), ("draft", d), *others.items()):
        r = x["training"]
        w = r["distillation_weight"]
        loss = ("cross-entropy on the text" if w == 0 else
                "KL divergence to the target" if w == 1 else
                f"{w:g} KL to the target + {1 - w:g} cross-entropy")
        add(f"| {label(name)} | {r['epochs']:g} | {r['steps']} "
            f"({r['best_step']}) | {r['peak_lr']:g} | {r['dropout']:g} | "
            f"{loss} | {r['seconds']:.0f} |")
    add("",
        f"The whole run, measurements included, took {metrics['seconds']:.0f} "
        "s. GPU kernels do not promise bit-identical results, so a rerun gives "
        "close but not identical weights and numbers.")
    return "\n".join(L)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    src = Path(sys.argv[1])
    extract(read_tar(src))
    metrics = json.loads((MODELS / "metrics.json").read_text())
    meta = json.loads((HERE / "data" / "meta.json").read_text())
    if metrics["tokenizer"]["sha256"] != meta["tokenizer"]["sha256"]:
        sys.exit("install_models: the models were trained with another tokenizer")
    for name in ("target", "draft"):
        got = hashlib.sha256((MODELS / name / "tokenizer.model").read_bytes()).hexdigest()
        if got != meta["tokenizer"]["sha256"]:
            sys.exit(f"install_models: {name}/tokenizer.model differs from models/tokenizer")
    (MODELS / "README.md").write_text(readme(metrics, meta) + "\n")
    total = sum(p.stat().st_size for p in MODELS.rglob("*") if p.is_file())
    print(f"install_models: models/ holds {mib(total)}")
    if total > LIMIT_BYTES:
        sys.exit(f"install_models: models/ is over {mib(LIMIT_BYTES)}")


if __name__ == "__main__":
    main()
