#!/usr/bin/env python3
"""Turns a Llama-architecture GGUF file into a Hugging Face model folder.

    gguf_to_hf.py MODEL.gguf OUT_DIR

OUT_DIR gets config.json, model.safetensors (bf16), tokenizer.json,
tokenizer_config.json (with the GGUF's chat template) and
generation_config.json. The folder is written beside OUT_DIR and renamed
into place at the end, so OUT_DIR is either complete or absent.

What llama.cpp's converter changed is undone here: quantized tensors are
dequantized with the gguf package's own code, and the rows of the query and
key projections, which llama.cpp permutes for its interleaved RoPE, are put
back in the order of Hugging Face's rotate-half RoPE. Anything this script
does not know how to undo (another architecture, pre-tokenizer, tokenizer
model, token type or tensor type) is refused with a message naming it.
"""

import json
import os
import shutil
import sys

import ml_dtypes
import numpy as np
import safetensors.numpy
import gguf
import gguf.quants

# Tensor types whose dequantization through gguf.quants this converter uses.
SUPPORTED_TENSOR_TYPES = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"}

# llama.cpp's `tokenizer.ggml.pre` names, as Hugging Face pre-tokenizers.
# `smollm` splits every digit on its own, then applies the GPT-2 byte-level
# regex; `gpt-2` is the byte-level regex alone.
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
              "use_regex": True}
PRE_TOKENIZERS = {
    "smollm": {"type": "Sequence",
               "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTE_LEVEL]},
    "gpt-2": BYTE_LEVEL,
}

# GGUF token types (gguf.TokenType): which become added tokens.
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4

# GGUF tensor names (per layer after "blk.N.") and their Hugging Face names.
LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


class ConversionError(Exception):
  """The GGUF holds something this converter does not handle."""


def read_metadata(reader):
  """The GGUF's key-value pairs as Python values."""
  return {name: field.contents() for name, field in reader.fields.items()
          if not name.startswith("GGUF.")}


def required(meta, key, path):
  if key not in meta:
    raise ConversionError(f"{path}: metadata key '{key}' is missing")
  return meta[key]


def check_supported(meta, reader, path):
  arch = required(meta, "general.architecture", path)
  if arch != "llama":
    raise ConversionError(f"{path}: general.architecture is '{arch}'; only 'llama' is handled")
  model = required(meta, "tokenizer.ggml.model", path)
  if model != "gpt2":
    raise ConversionError(
        f"{path}: tokenizer.ggml.model is '{model}'; only 'gpt2' (byte-level BPE) is handled")
  pre = required(meta, "tokenizer.ggml.pre", path)
  if pre not in PRE_TOKENIZERS:
    raise ConversionError(f"{path}: tokenizer.ggml.pre is '{pre}'; handled: "
                          + ", ".join(sorted(PRE_TOKENIZERS)))
  for tensor in reader.tensors:
    if tensor.tensor_type.name not in SUPPORTED_TENSOR_TYPES:
      raise ConversionError(f"{path}: tensor {tensor.name} has type {tensor.tensor_type.name}; "
                            "handled: " + ", ".join(sorted(SUPPORTED_TENSOR_TYPES)))
  for key in ("llama.rope.scaling.type", "llama.expert_count"):
    if key in meta and meta[key] not in ("none", 0):
      raise ConversionError(f"{path}: {key} is {meta[key]!r}; only plain Llama is handled")


def shape_of(meta, path):
  """The model's shape from the llama.* keys."""
  hidden = int(required(meta, "llama.embedding_length", path))
  heads = int(required(meta, "llama.attention.head_count", path))
  kv_heads = int(meta.get("llama.attention.head_count_kv", heads))
  if hidden % heads:
    raise ConversionError(f"{path}: embedding_length {hidden} is not a multiple of "
                          f"head_count {heads}")
  head_dim = int(meta.get("llama.attention.key_length", hidden // heads))
  rope_dim = int(meta.get("llama.rope.dimension_count", head_dim))
  if rope_dim != head_dim:
    raise ConversionError(f"{path}: llama.rope.dimension_count {rope_dim} differs from the head "
                          f"size {head_dim}; partial RoPE is not handled")
  return dict(hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
              layers=int(required(meta, "llama.block_count", path)),
              mlp=int(required(meta, "llama.feed_forward_length", path)),
              context=int(required(meta, "llama.context_length", path)),
              eps=float(required(meta, "llama.attention.layer_norm_rms_epsilon", path)),
              theta=float(meta.get("llama.rope.freq_base", 10000.0)))


def unpermute_rope_rows(weight, heads):
  """Undoes llama.cpp's Q/K row permutation.

  llama.cpp stores each head's rows as interleaved pairs (the rotation
  partners i and i + d/2 of rotate-half RoPE next to each other); this puts
  the first of every pair in the first half of the head and the second in
  the second half again.
  """
  rows, cols = weight.shape
  head_dim = rows // heads
  return weight.reshape(heads, head_dim // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def dequantized(tensor):
  """The tensor as float32, rows by columns (GGUF lists dimensions inner first)."""
  shape = tuple(int(d) for d in reversed(tensor.shape))
  if tensor.tensor_type.name == "F32":
    values = np.asarray(tensor.data, dtype=np.float32)
  else:
    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
  return values.reshape(shape)


def hf_tensors(reader, shape, path):
  """Hugging Face name -> float32 array, for every tensor of the GGUF."""
  out = {}
  for tensor in reader.tensors:
    name = tensor.name
    if name in GLOBAL_TENSORS:
      hf_name = GLOBAL_TENSORS[name]
    elif name.startswith("blk.") and name.split(".", 2)[2] in LAYER_TENSORS:
      layer, rest = name.split(".", 2)[1:]
      hf_name = f"model.layers.{int(layer)}.{LAYER_TENSORS[rest]}"
    elif name == "rope_freqs.weight":
      raise ConversionError(f"{path}: tensor rope_freqs.weight (scaled RoPE) is not handled")
    else:
      raise ConversionError(f"{path}: tensor {name} is not part of a Llama model")
    weight = dequantized(tensor)
    if name.endswith("attn_q.weight"):
      weight = unpermute_rope_rows(weight, shape["heads"])
    elif name.endswith("attn_k.weight"):
      weight = unpermute_rope_rows(weight, shape["kv_heads"])
    out[hf_name] = weight
  expected = ["model.embed_tokens.weight", "model.norm.weight"] + [
      f"model.layers.{i}.{n}" for i in range(shape["layers"]) for n in LAYER_TENSORS.values()]
  missing = [n for n in expected if n not in out]
  if missing:
    raise ConversionError(f"{path}: tensors missing for {', '.join(missing[:4])}"
                          + (" ..." if len(missing) > 4 else ""))
  return out


def tokenizer_json(meta, path):
  tokens = list(required(meta, "tokenizer.ggml.tokens", path))
  types = list(meta.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens)))
  merges = []
  for merge in required(meta, "tokenizer.ggml.merges", path):
    parts = merge.split(" ")
    if len(parts) != 2:
      raise ConversionError(f"{path}: merge {merge!r} is not two pieces separated by one space")
    merges.append(parts)
  added = []
  for i, (token, kind) in enumerate(zip(tokens, types)):
    if kind not in (NORMAL, CONTROL, USER_DEFINED):
      raise ConversionError(f"{path}: token {i} ({token!r}) has token type {kind}; handled: "
                            "1 (normal), 3 (control), 4 (user-defined)")
    if kind != NORMAL:
      added.append({"id": i, "content": token, "single_word": False, "lstrip": False,
                    "rstrip": False, "normalized": False, "special": kind == CONTROL})
  return {
      "version": "1.0",
      "truncation": None,
      "padding": None,
      "added_tokens": added,
      "normalizer": None,
      "pre_tokenizer": PRE_TOKENIZERS[meta["tokenizer.ggml.pre"]],
      "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                         "use_regex": True},
      "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                  "use_regex": True},
      "model": {"type": "BPE", "dropout": None, "unk_token": None,
                "continuing_subword_prefix": None, "end_of_word_suffix": None,
                "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                "vocab": {token: i for i, token in enumerate(tokens)}, "merges": merges},
  }, added


def special_ids(meta, path):
  """bos/eos/pad/unk ids that the GGUF names, each checked against the vocabulary."""
  size = len(required(meta, "tokenizer.ggml.tokens", path))
  ids = {}
  for name in ("bos", "eos", "padding", "unknown"):
    key = f"tokenizer.ggml.{name}_token_id"
    if key in meta:
      value = int(meta[key])
      if not 0 <= value < size:
        raise ConversionError(f"{path}: {key} {value} is outside the vocabulary of {size}")
      ids[name] = value
  if "eos" not in ids:
    raise ConversionError(f"{path}: metadata key 'tokenizer.ggml.eos_token_id' is missing")
  return ids


def shortest_float(value):
  """A float32 metadata value as the shortest decimal that round-trips (1e-05, not 9.99e-06)."""
  return float(str(np.float32(value)))


def config_json(meta, shape, ids, tied, vocab_size):
  config = {
      "architectures": ["LlamaForCausalLM"],
      "model_type": "llama",
      "hidden_size": shape["hidden"],
      "intermediate_size": shape["mlp"],
      "num_hidden_layers": shape["layers"],
      "num_attention_heads": shape["heads"],
      "num_key_value_heads": shape["kv_heads"],
      "head_dim": shape["head_dim"],
      "hidden_act": "silu",
      "max_position_embeddings": shape["context"],
      "rms_norm_eps": shortest_float(shape["eps"]),
      "rope_theta": shortest_float(shape["theta"]),
      "rope_scaling": None,
      "attention_bias": False,
      "mlp_bias": False,
      "tie_word_embeddings": tied,
      "vocab_size": vocab_size,
      "eos_token_id": ids["eos"],
      "torch_dtype": "bfloat16",
  }
  if "bos" in ids:
    config["bos_token_id"] = ids["bos"]
  if "padding" in ids:
    config["pad_token_id"] = ids["padding"]
  return config


def tokenizer_config_json(meta, ids, added, tokens):
  config = {
      "tokenizer_class": "GPT2Tokenizer",
      "model_max_length": int(meta["llama.context_length"]),
      "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
      "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
      "clean_up_tokenization_spaces": False,
      "added_tokens_decoder": {
          str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                           "single_word", "special")} for t in added},
  }
  for name, field in (("bos", "bos_token"), ("eos", "eos_token"), ("padding", "pad_token"),
                      ("unknown", "unk_token")):
    if name in ids:
      config[field] = tokens[ids[name]]
  if "tokenizer.chat_template" in meta:
    config["chat_template"] = meta["tokenizer.chat_template"]
  return config


def generation_config_json(ids):
  config = {"eos_token_id": ids["eos"]}
  if "bos" in ids:
    config["bos_token_id"] = ids["bos"]
  if "padding" in ids:
    config["pad_token_id"] = ids["padding"]
  return config


def write_json(folder, name, value):
  with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2, ensure_ascii=False)
    f.write("\n")


def convert(gguf_path, out_dir):
  reader = gguf.GGUFReader(gguf_path)
  meta = read_metadata(reader)
  check_supported(meta, reader, gguf_path)
  shape = shape_of(meta, gguf_path)
  ids = special_ids(meta, gguf_path)
  tokenizer, added = tokenizer_json(meta, gguf_path)
  tokens = meta["tokenizer.ggml.tokens"]
  vocab_size = int(meta.get("llama.vocab_size", len(tokens)))
  if vocab_size != len(tokens):
    raise ConversionError(f"{gguf_path}: llama.vocab_size {vocab_size} differs from the "
                          f"{len(tokens)} tokens of tokenizer.ggml.tokens")
  tensors = hf_tensors(reader, shape, gguf_path)
  tied = "lm_head.weight" not in tensors

  staging = out_dir.rstrip("/") + ".partial"
  shutil.rmtree(staging, ignore_errors=True)
  os.makedirs(staging)
  safetensors.numpy.save_file({n: w.astype(ml_dtypes.bfloat16) for n, w in tensors.items()},
                              os.path.join(staging, "model.safetensors"),
                              metadata={"format": "pt"})
  os.chmod(os.path.join(staging, "model.safetensors"), 0o644)  # saved owner-only
  write_json(staging, "config.json", config_json(meta, shape, ids, tied, vocab_size))
  write_json(staging, "tokenizer.json", tokenizer)
  write_json(staging, "tokenizer_config.json", tokenizer_config_json(meta, ids, added, tokens))
  write_json(staging, "generation_config.json", generation_config_json(ids))
  shutil.rmtree(out_dir, ignore_errors=True)
  os.rename(staging, out_dir)


def main(argv):
  if len(argv) != 3:
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    return 2
  try:
    convert(argv[1], argv[2])
  except ConversionError as e:
    print(f"gguf_to_hf: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
