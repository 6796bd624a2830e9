#!/usr/bin/env python3
"""Stage 4: trains the target and the draft on one GPU and exports both.

    PYTHONUNBUFFERED=1 python3 tools/test_models/train.py --out DIR

Reads tools/test_models/data/ (stage 3) and models/tokenizer/tokenizer.model
(stage 2). Needs a CUDA GPU, PyTorch, transformers 5, safetensors and
sentencepiece. Trains a Llama target, then the draft, distilled from the
target (and, for comparison only, a draft trained on the text alone), all
with fixed seeds, bf16 autocast, AdamW and a cosine schedule, keeping each
model's weights from the evaluation with the lowest held-out loss. Exports
target/ and draft/ in Hugging Face layout (bf16 safetensors), reloads them,
measures them on the held-out split and writes DIR/models.tar.part0, part1,
... (one tar of target/, draft/, metrics.json and train.log, cut into parts of
15 MiB), DIR/models.tar.sha256, DIR/metrics.json and DIR/train.log.

Measures, on the exported bf16 weights:
  - held-out perplexity of each model;
  - teacher-forced agreement on held-out text: how often the draft's argmax
    is the target's, and the mean of sum_v min(p_v, q_v) (temperature 1);
  - acceptance on held-out prompts: the target continues each prompt, greedily
    (temperature 0) or by sampling (temperature 1); per generated token, the
    draft's greedy token is accepted when it is the target's, and a sampled
    one with probability sum_v min(p_v, q_v); with k drafted tokens a step,
    greedy decoding's tokens per target pass are counted too.
"""
import argparse
import copy
import hashlib
import json
import math
import shutil
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TOKENIZER = REPO / "models" / "tokenizer" / "tokenizer.model"

# Head counts divide by 4 so that tensor parallelism of 1, 2 and 4 works.
SHAPES = {
    "target": dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                   num_attention_heads=8, num_key_value_heads=4),
    "draft": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4),
}
HEAD_DIM = 64
CONTEXT = 1024
ROPE_THETA = 10000.0
PART_BYTES = 15 << 20

LOG = []


def log(*parts):
    line = " ".join(str(p) for p in parts)
    LOG.append(line)
    print(line, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--data", type=Path, default=HERE / "data")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--seq-len", type=int, default=CONTEXT)
    p.add_argument("--batch", type=int, default=16, help="sequences a step")
    p.add_argument("--target-epochs", type=float, default=16)
    p.add_argument("--target-lr", type=float, default=1.5e-3)
    p.add_argument("--target-dropout", type=float, default=0.2,
                   help="dropout on each residual branch, in training only")
    p.add_argument("--draft-epochs", type=float, default=16)
    p.add_argument("--draft-lr", type=float, default=3e-3)
    p.add_argument("--draft-dropout", type=float, default=0.0)
    p.add_argument("--kd-weights", default="1.0,0.0",
                   help="drafts to train, by the weight of the distillation "
                        "loss (1 - weight goes to the text's own loss); the "
                        "first is exported, the others are only measured")
    p.add_argument("--evals", type=int, default=20, help="evaluations a run")
    p.add_argument("--prompts", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--gen-len", type=int, default=64)
    p.add_argument("--spec-k", type=int, default=4)
    return p.parse_args()


def load_data(data_dir, torch, np, device):
    meta = json.loads((data_dir / "meta.json").read_text())
    out = {}
    for split in ("train", "heldout"):
        info = meta["splits"][split]
        ids = np.fromfile(data_dir / info["file"], dtype="<u2")
        if len(ids) != info["tokens"]:
            sys.exit(f"train: {info['file']}: {len(ids)} tokens, meta.json "
                     f"says {info['tokens']}")
        out[split] = torch.from_numpy(ids.astype(np.int64)).to(device)
    return meta, out["train"], out["heldout"]


def make_config(LlamaConfig, shape, tok):
    if shape["hidden_size"] != shape["num_attention_heads"] * HEAD_DIM:
        sys.exit(f"train: hidden size {shape['hidden_size']} is not "
                 f"{shape['num_attention_heads']} heads of {HEAD_DIM}")
    for k in ("num_attention_heads", "num_key_value_heads"):
        if shape[k] % 4:
            sys.exit(f"train: {k} {shape[k]} does not divide by 4")
    return LlamaConfig(
        vocab_size=tok["vocab_size"], head_dim=HEAD_DIM,
        max_position_embeddings=CONTEXT, hidden_act="silu", rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        initializer_range=0.02, tie_word_embeddings=True, attention_bias=False,
        mlp_bias=False, bos_token_id=tok["bos_id"], eos_token_id=tok["eos_id"],
        pad_token_id=tok["pad_id"], use_cache=True, **shape)


def add_dropout(model, p, F):
    """Dropout on the output of every attention and MLP block while training.
    Hooks only: the exported model is a plain Llama."""
    def hook(module, inputs, output):
        if isinstance(output, tuple):
            return (F.dropout(output[0], p, module.training),) + output[1:]
        return F.dropout(output, p, module.training)
    handles = []
    if p > 0:
        for layer in model.model.layers:
            handles.append(layer.self_attn.register_forward_hook(hook))
            handles.append(layer.mlp.register_forward_hook(hook))
    return handles


def heldout_windows(heldout, seq_len):
    """Windows of seq_len + 1 tokens, overlapping by one, so that every
    held-out token after the first is predicted exactly once."""
    n = (len(heldout) - 1) // seq_len
    return [heldout[i * seq_len:i * seq_len + seq_len + 1] for i in range(n)]


def train(name, model, train_ids, heldout, args, epochs, lr, dropout, teacher,
          kd_weight, torch, F):
    seq, batch = args.seq_len, args.batch
    steps = max(1, int(epochs * (len(train_ids) - 1) / (seq * batch)))
    warmup = max(1, steps // 20)
    eval_every = max(1, steps // args.evals)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    offsets = torch.arange(seq + 1, device=train_ids.device)
    windows = torch.stack(heldout_windows(heldout, seq))
    best = (float("inf"), -1, None)
    hooks = add_dropout(model, dropout, F)
    log(f"[{name}] {steps} steps of {batch}x{seq} tokens ({epochs} epochs), "
        f"peak lr {lr}, dropout {dropout}, distillation weight {kd_weight}")
    t0 = time.time()
    for step in range(1, steps + 1):
        if step <= warmup:
            scale = step / warmup
        else:
            progress = (step - warmup) / max(1, steps - warmup)
            scale = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
        for group in opt.param_groups:
            group["lr"] = lr * scale
        starts = torch.randint(0, len(train_ids) - seq - 1, (batch,),
                               generator=gen).to(train_ids.device)
        chunk = train_ids[starts[:, None] + offsets]
        x, y = chunk[:, :-1], chunk[:, 1:]
        model.train()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x, use_cache=False).logits
        logits = logits.float()
        loss = ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                    y.reshape(-1))
        if teacher is not None and kd_weight > 0:
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                t_logits = teacher(input_ids=x, use_cache=False).logits
            kd = F.kl_div(F.log_softmax(logits, -1),
                          F.log_softmax(t_logits.float(), -1),
                          log_target=True, reduction="none").sum(-1).mean()
            loss = kd_weight * kd + (1 - kd_weight) * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % eval_every == 0 or step == steps:
            val = evaluate_loss(model, windows, torch, F, autocast=True)
            if val < best[0]:
                best = (val, step, {k: v.detach().clone()
                                    for k, v in model.state_dict().items()})
            log(f"[{name}] step {step}/{steps} train loss {ce.item():.4f} "
                f"held-out loss {val:.4f} (ppl {math.exp(val):.1f}) "
                f"lr {lr * scale:.2e} {time.time() - t0:.0f}s")
    for h in hooks:
        h.remove()
    model.load_state_dict(best[2])
    log(f"[{name}] kept step {best[1]}: held-out loss {best[0]:.4f}, "
        f"{time.time() - t0:.1f}s")
    return {"steps": steps, "best_step": best[1], "epochs": epochs,
            "peak_lr": lr, "dropout": dropout, "distillation_weight": kd_weight,
            "seconds": round(time.time() - t0, 1)}


def evaluate_loss(model, windows, torch, F, autocast):
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16,
                                         enabled=autocast):
        for chunk in windows.split(32):
            logits = model(input_ids=chunk[:, :-1], use_cache=False).logits
            y = chunk[:, 1:]
            total += F.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                                     y.reshape(-1), reduction="sum").item()
            count += y.numel()
    return total / count


def export(model, path, meta, torch, GenerationConfig):
    tok = meta["tokenizer"]
    m = copy.deepcopy(model).to(torch.bfloat16)
    m.generation_config = GenerationConfig(
        bos_token_id=tok["bos_id"], eos_token_id=tok["eos_id"],
        pad_token_id=tok["pad_id"], do_sample=False, max_length=CONTEXT)
    m.save_pretrained(path)
    cfg_path = path / "config.json"
    cfg = json.loads(cfg_path.read_text())
    # Readers written for transformers 4 look for these at the top level.
    cfg.setdefault("rope_theta", ROPE_THETA)
    cfg.setdefault("torch_dtype", "bfloat16")
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    shutil.copy(TOKENIZER, path / "tokenizer.model")
    specials = {tok["unk_id"]: "<unk>", tok["bos_id"]: "<s>",
                tok["eos_id"]: "</s>", tok["pad_id"]: "<pad>"}
    tcfg = {
        "tokenizer_class": "LlamaTokenizer",
        "model_max_length": CONTEXT,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "pad_token": "<pad>",
        "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False, "legacy": False,
        "added_tokens_decoder": {
            str(i): {"content": s, "lstrip": False, "normalized": False,
                     "rstrip": False, "single_word": False, "special": True}
            for i, s in sorted(specials.items())},
        "chat_template": (
            "{% for message in messages %}"
            "{{ message['role'] | capitalize }}: {{ message['content'] }}\n"
            "{% endfor %}"
            "{% if add_generation_prompt %}Assistant:{% endif %}"),
    }
    (path / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(path.iterdir())}
    want = {"config.json", "model.safetensors", "tokenizer.model",
            "tokenizer_config.json", "generation_config.json"}
    if not want <= set(files):
        sys.exit(f"train: {path} holds {sorted(files)}, missing "
                 f"{sorted(want - set(files))}")
    return files


def prompts_from(heldout, args, torch):
    span = len(heldout) - args.prompt_len - args.gen_len
    starts = [i * span // args.prompts for i in range(args.prompts)]
    return torch.stack([heldout[s:s + args.prompt_len] for s in starts])


def generate(model, prompts, steps, temperature, gen, torch):
    seq = prompts
    with torch.no_grad():
        for _ in range(steps):
            logits = model(input_ids=seq, use_cache=False).logits[:, -1].float()
            if temperature == 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                probs = torch.softmax(logits / temperature, -1)
                nxt = torch.multinomial(probs, 1, generator=gen)
            seq = torch.cat([seq, nxt], 1)
    return seq


def tokens_per_pass(matches, k):
    """Greedy speculative decoding with k drafted tokens a step: each target
    pass yields the accepted prefix plus the target's own next token."""
    total_tokens, passes = 0, 0
    for row in matches:
        i = 0
        while i < len(row):
            m = 0
            while m < k and i + m < len(row) and row[i + m]:
                m += 1
            i += m + 1
            passes += 1
        total_tokens += len(row)
    return total_tokens / passes


def pair_metrics(target, draft, heldout, prompts, args, torch, F):
    out = {}
    windows = torch.stack(heldout_windows(heldout, args.seq_len))
    agree, minsum, count = 0, 0.0, 0
    with torch.no_grad():
        for chunk in windows.split(16):
            x = chunk[:, :-1]
            p = torch.softmax(target(input_ids=x, use_cache=False).logits.float(), -1)
            q = torch.softmax(draft(input_ids=x, use_cache=False).logits.float(), -1)
            agree += (p.argmax(-1) == q.argmax(-1)).sum().item()
            minsum += torch.minimum(p, q).sum(-1).sum().item()
            count += x.numel()
    out["teacher_forced"] = {"tokens": count, "greedy_agreement": agree / count,
                             "sum_min_pq": minsum / count}
    P = args.prompt_len
    gen = torch.Generator(device=prompts.device).manual_seed(args.seed + 2)
    for temperature in (0.0, 1.0):
        seq = generate(target, prompts, args.gen_len, temperature, gen, torch)
        with torch.no_grad():
            x = seq[:, :-1]
            tl = target(input_ids=x, use_cache=False).logits[:, P - 1:].float()
            dl = draft(input_ids=x, use_cache=False).logits[:, P - 1:].float()
        generated = seq[:, P:]
        if temperature == 0:
            match = dl.argmax(-1) == generated
            out["temperature_0"] = {
                "acceptance": match.float().mean().item(),
                "target_recomputed_argmax_agreement":
                    (tl.argmax(-1) == generated).float().mean().item(),
                f"tokens_per_target_pass_k{args.spec_k}":
                    tokens_per_pass(match.cpu().tolist(), args.spec_k),
            }
        else:
            p, q = torch.softmax(tl, -1), torch.softmax(dl, -1)
            out["temperature_1"] = {
                "acceptance": torch.minimum(p, q).sum(-1).mean().item()}
    out["prompts"] = {"count": len(prompts), "prompt_tokens": P,
                      "generated_tokens": args.gen_len}
    return out


def main():
    args = parse_args()
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
        import transformers
        from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        sys.exit(f"train: {e}: needs numpy, torch and transformers")
    if not torch.cuda.is_available():
        sys.exit("train: no CUDA device")
    if int(transformers.__version__.split(".")[0]) < 5:
        sys.exit(f"train: transformers {transformers.__version__}: needs 5 or later")
    if not TOKENIZER.exists():
        sys.exit(f"train: {TOKENIZER} is missing: run train_tokenizer.sh")
    t_start = time.time()
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    args.out.mkdir(parents=True, exist_ok=True)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.cuda.get_device_name()}")
    meta, train_ids, heldout = load_data(args.data, torch, np, device)
    tok = meta["tokenizer"]
    if hashlib.sha256(TOKENIZER.read_bytes()).hexdigest() != tok["sha256"]:
        sys.exit("train: the data was encoded with another tokenizer: "
                 "rerun encode.py")
    log(f"data: {len(train_ids)} train tokens, {len(heldout)} held-out tokens, "
        f"vocabulary {tok['vocab_size']}")
    kd_weights = [float(w) for w in args.kd_weights.split(",")]

    models, runs = {}, {}
    torch.manual_seed(args.seed)
    target = LlamaForCausalLM(make_config(LlamaConfig, SHAPES["target"], tok)).to(device)
    log(f"[target] attention: {target.config._attn_implementation}, "
        f"{sum(p.numel() for p in target.parameters())} parameters")
    runs["target"] = train("target", target, train_ids, heldout, args,
                           args.target_epochs, args.target_lr, args.target_dropout,
                           None, 0.0, torch, F)
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    for w in kd_weights:
        name = f"draft_kd{w:g}"
        torch.manual_seed(args.seed)
        draft = LlamaForCausalLM(make_config(LlamaConfig, SHAPES["draft"], tok)).to(device)
        runs[name] = train(name, draft, train_ids, heldout, args, args.draft_epochs,
                           args.draft_lr, args.draft_dropout, target, w, torch, F)
        models[name] = draft
    exported = f"draft_kd{kd_weights[0]:g}"

    stage = args.out / "stage"
    if stage.exists():
        shutil.rmtree(stage)
    files = {"target": export(target, stage / "target", meta, torch, GenerationConfig),
             "draft": export(models[exported], stage / "draft", meta, torch,
                             GenerationConfig)}
    # Everything below is measured on the exported bf16 weights, reloaded.
    loaded = {}
    for name in ("target", "draft"):
        m = LlamaForCausalLM.from_pretrained(stage / name, dtype=torch.bfloat16)
        loaded[name] = m.to(device).eval()
    for name in models:
        if name != exported:
            loaded[name] = copy.deepcopy(models[name]).to(torch.bfloat16).eval()
    windows = torch.stack(heldout_windows(heldout, args.seq_len))
    prompts = prompts_from(heldout, args, torch)
    metrics = {
        "tokenizer": tok, "context": CONTEXT, "seed": args.seed,
        "data": {k: v["tokens"] for k, v in meta["splits"].items()},
        "args": {k: (str(v) if isinstance(v, Path) else v)
                 for k, v in vars(args).items()},
        "versions": {"torch": torch.__version__,
                     "transformers": transformers.__version__},
        "device": torch.cuda.get_device_name(),
        "exported_draft": exported, "models": {}, "pairs": {},
    }
    for name, m in loaded.items():
        loss = evaluate_loss(m, windows, torch, F, autocast=False)
        run = runs[name if name != "draft" else exported]
        metrics["models"][name] = {
            "parameters": sum(p.numel() for p in m.parameters()),
            "shape": SHAPES["target" if name == "target" else "draft"],
            "heldout_loss": loss, "heldout_perplexity": math.exp(loss),
            "training": run}
        if name in files:
            metrics["models"][name]["files_sha256"] = files[name]
        log(f"[{name}] exported bf16: held-out perplexity {math.exp(loss):.2f}")
    for name in loaded:
        if name == "target":
            continue
        pm = pair_metrics(loaded["target"], loaded[name], heldout, prompts, args,
                          torch, F)
        metrics["pairs"][name] = pm
        log(f"[{name} vs target] teacher-forced agreement "
            f"{pm['teacher_forced']['greedy_agreement']:.3f}, sum min(p,q) "
            f"{pm['teacher_forced']['sum_min_pq']:.3f}; acceptance T=0 "
            f"{pm['temperature_0']['acceptance']:.3f} "
            f"({pm['temperature_0'][f'tokens_per_target_pass_k{args.spec_k}']:.2f} "
            f"tokens a target pass, k={args.spec_k}), T=1 "
            f"{pm['temperature_1']['acceptance']:.3f}")

    try:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=str(TOKENIZER))
        samples = []
        for text in ("It is a truth universally acknowledged",
                     "Call me Ishmael.", "In the beginning"):
            ids = torch.tensor([[tok["bos_id"]] + sp.encode(text)], device=device)
            out = generate(loaded["target"], ids, 40, 0.0, None, torch)
            samples.append(sp.decode(out[0, 1:].tolist()))
            log(f"[sample] {samples[-1]!r}")
        metrics["target_greedy_samples"] = samples
    except ImportError:
        log("[sample] no sentencepiece module: samples skipped")
    metrics["seconds"] = round(time.time() - t_start, 1)
    log(f"done in {metrics['seconds']}s")

    text = json.dumps(metrics, indent=2) + "\n"
    (stage / "metrics.json").write_text(text)
    (stage / "train.log").write_text("\n".join(LOG) + "\n")
    tar_path = stage / "models.tar"
    with tarfile.open(tar_path, "w") as tar:
        for name in ("target", "draft", "metrics.json", "train.log"):
            tar.add(stage / name, arcname=name)
    # Parts of at most PART_BYTES, for transports that cap a file's size;
    # install_models.py joins them and checks models.tar.sha256.
    blob = tar_path.read_bytes()
    (args.out / "models.tar.sha256").write_text(
        f"{hashlib.sha256(blob).hexdigest()}  models.tar\n")
    for old in args.out.glob("models.tar.part*"):
        old.unlink()
    for i in range(0, len(blob), PART_BYTES):
        (args.out / f"models.tar.part{i // PART_BYTES}").write_bytes(
            blob[i:i + PART_BYTES])
    (args.out / "metrics.json").write_text(text)
    (args.out / "train.log").write_text("\n".join(LOG) + "\n")
    shutil.rmtree(stage)
    print(text)


if __name__ == "__main__":
    main()
