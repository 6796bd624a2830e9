"""Tests of gguf_to_hf.py on small GGUF files written here with gguf.GGUFWriter.

The model's Q and K rows are stored the way llama.cpp's converter stores
them (permuted for interleaved RoPE); the test checks that attention scores
computed llama.cpp's way on the GGUF rows equal those computed Hugging
Face's way (rotate-half RoPE) on the converted rows, that every other
tensor comes back as its dequantized values in bf16, that tokenizer.json
loads in the `tokenizers` library and splits digits one by one, and that
what the converter does not handle is refused with a message naming it.

    gguf_to_hf_test.py GGUF_TO_HF_PY
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import gguf
import gguf.quants
import ml_dtypes
import numpy as np
import safetensors.numpy
from tokenizers import Tokenizer

CONVERTER = os.path.abspath(sys.argv.pop(1))
sys.path.insert(0, os.path.dirname(CONVERTER))
import gguf_to_hf  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, LAYERS = 256, 4, 2, 64, 512, 2
THETA = 50000.0
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "1 2", "Ġ 1"]
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}"
Q8_0 = gguf.GGMLQuantizationType.Q8_0
Q4_1 = gguf.GGMLQuantizationType.Q4_1
F32 = gguf.GGMLQuantizationType.F32
Q6_K = gguf.GGMLQuantizationType.Q6_K


def byte_level_alphabet():
  """The 256 characters GPT-2's byte-level encoding maps bytes to."""
  printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD))
               + list(range(0xAE, 0x100)))
  chars, extra = [], 0
  for b in range(256):
    if b in printable:
      chars.append(chr(b))
    else:
      chars.append(chr(256 + extra))
      extra += 1
  return chars


def vocabulary():
  tokens = SPECIAL + byte_level_alphabet()
  tokens += ["".join(m.split(" ")) for m in MERGES]
  types = [gguf.TokenType.CONTROL] * len(SPECIAL) + [gguf.TokenType.NORMAL] * (
      len(tokens) - len(SPECIAL))
  return tokens, types


def llama_cpp_permute(weight, heads):
  """What llama.cpp's converter does to HF Q/K rows: each head's two halves
  interleaved, row i of the first half next to row i of the second."""
  rows, cols = weight.shape
  return weight.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def hf_weights(rng, tied):
  vocab = len(vocabulary()[0])
  w = {"token_embd.weight": rng.standard_normal((vocab, HIDDEN)),
       "output_norm.weight": 1 + 0.1 * rng.standard_normal(HIDDEN)}
  if not tied:
    w["output.weight"] = rng.standard_normal((vocab, HIDDEN))
  for i in range(LAYERS):
    shapes = {"attn_norm.weight": (HIDDEN,), "ffn_norm.weight": (HIDDEN,),
              "attn_q.weight": (HEADS * HEAD_DIM, HIDDEN),
              "attn_k.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
              "attn_v.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
              "attn_output.weight": (HIDDEN, HEADS * HEAD_DIM),
              "ffn_gate.weight": (MLP, HIDDEN), "ffn_up.weight": (MLP, HIDDEN),
              "ffn_down.weight": (HIDDEN, MLP)}
    for name, shape in shapes.items():
      w[f"blk.{i}.{name}"] = 0.05 * rng.standard_normal(shape)
  return {n: v.astype(np.float32) for n, v in w.items()}


def write_gguf(path, weights, arch="llama", pre="smollm", types=None):
  """A GGUF as llama.cpp writes one: Q/K rows permuted, 2-D tensors
  quantized (`types` names a tensor type per GGUF name; Q4_1 by default,
  the embedding Q8_0), norms F32."""
  types = types or {}
  writer = gguf.GGUFWriter(path, arch)
  writer.add_block_count(LAYERS)
  writer.add_context_length(2048)
  writer.add_embedding_length(HIDDEN)
  writer.add_feed_forward_length(MLP)
  writer.add_head_count(HEADS)
  writer.add_head_count_kv(KV_HEADS)
  writer.add_rope_freq_base(THETA)
  writer.add_rope_dimension_count(HEAD_DIM)
  writer.add_layer_norm_rms_eps(1e-5)
  tokens, token_types = vocabulary()
  writer.add_vocab_size(len(tokens))
  writer.add_tokenizer_model("gpt2")
  writer.add_tokenizer_pre(pre)
  writer.add_token_list(tokens)
  writer.add_token_types(token_types)
  writer.add_token_merges(MERGES)
  writer.add_bos_token_id(1)
  writer.add_eos_token_id(2)
  writer.add_add_bos_token(False)
  writer.add_chat_template(TEMPLATE)
  stored = {}
  for name, w in weights.items():
    if name.endswith("attn_q.weight"):
      w = llama_cpp_permute(w, HEADS)
    elif name.endswith("attn_k.weight"):
      w = llama_cpp_permute(w, KV_HEADS)
    qtype = types.get(name, F32 if w.ndim == 1 else Q8_0 if name == "token_embd.weight" else Q4_1)
    if qtype == F32:
      writer.add_tensor(name, w)
      stored[name] = w
    elif qtype == Q6_K:  # gguf cannot quantize to it: zero blocks, written raw
      block, size = gguf.GGML_QUANT_SIZES[qtype]
      data = np.zeros((w.shape[0], w.shape[1] // block * size), dtype=np.uint8)
      writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
    else:
      data = gguf.quants.quantize(w, qtype)
      writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
      stored[name] = gguf.quants.dequantize(data, qtype)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return stored  # the rows as the GGUF holds them, dequantized


def rope_interleaved(x, positions):
  """llama.cpp's RoPE for Llama: rotates the pairs (2i, 2i+1)."""
  inv = THETA ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
  ang = positions[:, None] * inv[None, :]
  cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
  a, b = x[..., 0::2], x[..., 1::2]
  out = np.empty_like(x)
  out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
  return out


def rope_rotate_half(x, positions):
  """Hugging Face's RoPE: rotates the pairs (i, i + d/2)."""
  inv = THETA ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
  ang = positions[:, None] * inv[None, :]
  cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
  a, b = x[..., :HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
  return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def attention_scores(q_rows, k_rows, rope, h):
  positions = np.arange(h.shape[0], dtype=np.float64)
  q = rope((h @ q_rows.T).reshape(-1, HEADS, HEAD_DIM), positions)
  k = rope((h @ k_rows.T).reshape(-1, KV_HEADS, HEAD_DIM), positions)
  k = np.repeat(k, HEADS // KV_HEADS, axis=1)
  return np.einsum("thd,shd->hts", q, k)


class ConvertTest(unittest.TestCase):

  def setUp(self):
    self.dir = tempfile.TemporaryDirectory()
    self.gguf = os.path.join(self.dir.name, "model.gguf")
    self.out = os.path.join(self.dir.name, "hf")

  def tearDown(self):
    self.dir.cleanup()

  def convert(self, weights, **kwargs):
    stored = write_gguf(self.gguf, weights, **kwargs)
    gguf_to_hf.convert(self.gguf, self.out)
    return stored, safetensors.numpy.load_file(os.path.join(self.out, "model.safetensors"))

  def read_json(self, name):
    with open(os.path.join(self.out, name), encoding="utf-8") as f:
      return json.load(f)

  def test_attention_is_llama_cpp_s_on_the_gguf_rows(self):
    weights = hf_weights(np.random.default_rng(1), tied=True)
    stored, out = self.convert(weights)
    h = np.random.default_rng(2).standard_normal((7, HIDDEN))
    for i in range(LAYERS):
      gguf_scores = attention_scores(stored[f"blk.{i}.attn_q.weight"],
                                     stored[f"blk.{i}.attn_k.weight"], rope_interleaved, h)
      hf = [out[f"model.layers.{i}.self_attn.{p}_proj.weight"].astype(np.float64)
            for p in ("q", "k")]
      hf_scores = attention_scores(hf[0], hf[1], rope_rotate_half, h)
      # bf16 rounding of the weights is the only difference.
      np.testing.assert_allclose(hf_scores, gguf_scores, rtol=0, atol=0.02 * np.abs(
          gguf_scores).max())
      # Exactly: each row is quantized on its own, so the converted rows are
      # the original Hugging Face rows through Q4_1 and bf16.
      for p, hf_rows in zip(("q", "k"), hf):
        original = weights[f"blk.{i}.attn_{p}.weight"]
        expected = gguf.quants.dequantize(gguf.quants.quantize(original, Q4_1), Q4_1)
        np.testing.assert_array_equal(hf_rows, expected.astype(ml_dtypes.bfloat16).astype(
            np.float64), err_msg=f"layer {i} {p}_proj")

  def test_other_tensors_are_their_dequantized_values_in_bf16(self):
    stored, out = self.convert(hf_weights(np.random.default_rng(3), tied=True))
    names = {"token_embd.weight": "model.embed_tokens.weight",
             "output_norm.weight": "model.norm.weight",
             "blk.1.attn_v.weight": "model.layers.1.self_attn.v_proj.weight",
             "blk.1.ffn_down.weight": "model.layers.1.mlp.down_proj.weight",
             "blk.0.ffn_norm.weight": "model.layers.0.post_attention_layernorm.weight"}
    for gguf_name, hf_name in names.items():
      self.assertEqual(out[hf_name].dtype, ml_dtypes.bfloat16, hf_name)
      np.testing.assert_array_equal(out[hf_name], stored[gguf_name].astype(ml_dtypes.bfloat16),
                                    err_msg=hf_name)
    self.assertEqual(len(out), 2 + 9 * LAYERS)  # tied: no lm_head.weight

  def test_config_files(self):
    self.convert(hf_weights(np.random.default_rng(4), tied=True))
    config = self.read_json("config.json")
    self.assertEqual((config["model_type"], config["hidden_size"], config["num_hidden_layers"],
                      config["num_attention_heads"], config["num_key_value_heads"],
                      config["head_dim"], config["intermediate_size"], config["vocab_size"]),
                     ("llama", HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, MLP,
                      len(vocabulary()[0])))
    self.assertEqual((config["rope_theta"], config["rms_norm_eps"]), (THETA, 1e-5))
    self.assertTrue(config["tie_word_embeddings"])
    self.assertEqual((config["bos_token_id"], config["eos_token_id"]), (1, 2))
    tokenizer_config = self.read_json("tokenizer_config.json")
    self.assertEqual(tokenizer_config["chat_template"], TEMPLATE)
    self.assertEqual((tokenizer_config["bos_token"], tokenizer_config["eos_token"]),
                     ("<|im_start|>", "<|im_end|>"))
    self.assertEqual(self.read_json("generation_config.json")["eos_token_id"], 2)

  def test_an_output_layer_is_kept_untied(self):
    weights = hf_weights(np.random.default_rng(5), tied=False)
    stored, out = self.convert(weights)
    self.assertFalse(self.read_json("config.json")["tie_word_embeddings"])
    np.testing.assert_array_equal(out["lm_head.weight"],
                                  stored["output.weight"].astype(ml_dtypes.bfloat16))

  def test_tokenizer_splits_digits_and_keeps_special_tokens(self):
    self.convert(hf_weights(np.random.default_rng(6), tied=True))
    tokenizer = Tokenizer.from_file(os.path.join(self.out, "tokenizer.json"))
    encoding = tokenizer.encode("<|im_start|> the 12x<|im_end|>")
    # "12" and "Ġ1" are merges of the vocabulary, but digits stand alone
    # and apart from the space before them.
    self.assertEqual(encoding.tokens, ["<|im_start|>", "Ġthe", "Ġ", "1", "2", "x", "<|im_end|>"])
    self.assertEqual(tokenizer.decode(encoding.ids, skip_special_tokens=True), " the 12x")
    self.assertEqual(tokenizer.decode(tokenizer.encode("\t¡ü €").ids), "\t¡ü €")

  def test_gpt2_pre_tokenizer_keeps_digits_together(self):
    self.convert(hf_weights(np.random.default_rng(9), tied=True), pre="gpt-2")
    tokenizer = Tokenizer.from_file(os.path.join(self.out, "tokenizer.json"))
    self.assertEqual(tokenizer.encode(" the 12x").tokens, ["Ġthe", "Ġ", "12", "x"])

  def test_what_is_not_handled_is_refused_by_name(self):
    weights = hf_weights(np.random.default_rng(7), tied=True)
    cases = [
        (dict(arch="qwen2"), "general.architecture is 'qwen2'; only 'llama' is handled"),
        (dict(pre="llama-bpe"), "tokenizer.ggml.pre is 'llama-bpe'; handled: gpt-2, smollm"),
        (dict(types={"blk.0.ffn_up.weight": gguf.GGMLQuantizationType.BF16}),
         None),  # handled
    ]
    for kwargs, message in cases:
      write_gguf(self.gguf, weights, **kwargs)
      result = subprocess.run([sys.executable, CONVERTER, self.gguf, self.out],
                              capture_output=True, text=True)
      if message is None:
        self.assertEqual(result.returncode, 0, result.stderr)
        continue
      self.assertEqual(result.returncode, 1, kwargs)
      self.assertIn(message, result.stderr)
      self.assertIn(self.gguf, result.stderr)
      self.assertFalse(os.path.exists(self.out + ".partial"))

  def test_an_unhandled_tensor_type_is_refused_and_no_folder_is_left(self):
    weights = hf_weights(np.random.default_rng(8), tied=True)
    write_gguf(self.gguf, weights, types={"blk.1.ffn_gate.weight": Q6_K})
    with self.assertRaisesRegex(gguf_to_hf.ConversionError,
                                "tensor blk.1.ffn_gate.weight has type Q6_K; handled: "):
      gguf_to_hf.convert(self.gguf, self.out)
    self.assertFalse(os.path.exists(self.out))


if __name__ == "__main__":
  unittest.main()
