"""Trains the tokenizer.json fixtures of runtime/text/testdata with the
Hugging Face `tokenizers` library, and writes the parity corpus.

Run from the repository root with the test venv (tools/setup.sh makes it):

    /opt/verdict/python/bin/python3 tools/test_data/make_tokenizer_fixtures.py

Each fixture reproduces the configuration of a family of public files from
its published description (pre-tokenizer regex, normalizers, decoders,
post-processor), with a small vocabulary trained here on the corpus below:

  gpt2/       byte-level BPE, the GPT-2 regex inside ByteLevel, merges
              written as "a b" strings, added tokens with lstrip, rstrip and
              single_word
  llama3/     Split with a Llama-3-style regex, then ByteLevel without its own
              regex; ignore_merges; a BOS template
  qwen2/      NFC, Split with a Qwen2-style regex (single digits), ByteLevel
  metaspace/  SentencePiece-converted style: Prepend and Replace normalizers,
              no pre-tokenizer, BPE with byte_fallback and <unk>; decoders
              Replace, ByteFallback, Fuse, Strip; a <s> template
  metaspace_split/  Metaspace pre-tokenizer (prepend_scheme "first", split)
              with Digits, and the Metaspace decoder

The parity corpus (parity_lines.jsonl, one JSON string per line) is the
held-out split of the bundled corpus, decoded with spm_decode, followed by
generated lines that stress scripts, whitespace and special-token strings.
Everything is seeded: a rerun writes the same files.
"""

import json
import os
import random
import struct
import subprocess

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

ROOT = os.getcwd()
OUT = os.path.join(ROOT, "runtime", "text", "testdata")
SP_MODEL = os.path.join(ROOT, "models", "tokenizer", "tokenizer.model")
HELDOUT = os.path.join(ROOT, "tools", "test_models", "data", "heldout.bin")

GPT2_REGEX = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"
              r"|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS_LINES = 5200
GENERATED_LINES = 7000


def corpus_lines():
  data = open(HELDOUT, "rb").read()
  ids = struct.unpack("<%dH" % (len(data) // 2), data)
  docs, cur = [], []
  for i in ids:
    if i in (1, 2):
      if cur:
        docs.append(cur)
      cur = []
    else:
      cur.append(i)
  if cur:
    docs.append(cur)
  text = subprocess.run(["spm_decode", "--model=" + SP_MODEL, "--input_format=id"],
                        input="\n".join(" ".join(map(str, d)) for d in docs),
                        capture_output=True, text=True, check=True).stdout
  lines = []
  for para in text.split("\n"):
    words = para.split(" ")
    chunk = []
    for w in words:
      chunk.append(w)
      if sum(len(c) + 1 for c in chunk) > 240:
        lines.append(" ".join(chunk))
        chunk = []
    if chunk and " ".join(chunk).strip():
      lines.append(" ".join(chunk))
  return lines[:CORPUS_LINES]


CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坐集编宝谈府拉黑且随格尽剑讲布杀微怕母调局根曾准团段终乐切级克精哪官示冷域"
HIRAGANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをん"
ARABIC = ["السلام", "عليكم", "مرحبا", "بالعالم", "كتاب", "اللغة", "العربية", "جميلة", "مدرسة", "١٢٣٤٥", "٠٩"]
DEVANAGARI = ["नमस्ते", "दुनिया", "हिन्दी", "भाषा", "संस्कृत", "क्षत्रिय", "ज्ञान", "१२३४", "प्रेम", "विद्यालय"]
COMBINING = ["e\u0301", "a\u0300", "o\u0308", "n\u0303", "c\u0327", "u\u0308\u0301", "A\u030a",
             "\u0065\u0323\u0302", "i\u0307", "Z\u0336a\u0336", "q\u20e3"]
PRECOMPOSED = ["é", "à", "ö", "ñ", "ç", "ǘ", "Å", "ệ", "ﬁ", "Ω", "Ω", "Å"]
EMOJI = ["😀", "🚀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "❤️", "🇫🇷", "🧑🏿\u200d💻",
         "👩\u200d❤️\u200d💋\u200d👨", "✨", "🤖", "1️⃣", "☕"]
WHITESPACE = ["  ", "   ", "\t", "\t\t", "\r\n", "\n", "\n\n", " \n ", "\u00a0", "\u3000", "\u2009",
              "\u200b", "\u0085", "\u2028", " \t ", "\r", "    \n"]
CODE = ["def f(x):\n    return x**2", "for (int i = 0; i < n; ++i) {", "}", "if (a && b) { c(); }",
        "x = [1, 2, 3]", "print('hello')", "#include <vector>", "std::vector<int> v;", "SELECT * FROM t;",
        "a->b", "0x1F", "foo_bar_baz", "camelCaseName", "λx. x", "$HOME/.bashrc", "http://example.com/a?b=c",
        "// comment", "/* block */", "{\"key\": [true, null]}", "<div class=\"a\">", "x != y", "i++"]
SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|im_start|>",
            "<|im_end|>", "<s>", "</s>", "<unk>", "<mask>", " <mask> ", "[[code]]", "verdict",
            "verdicts", "a verdict.", "<|endoftext", "<s", "<0x41>", "<0xFF>"]
ODD = ["\ufffd", "\ufffd\ufffd", "\\xff\\xfe", "Ã©", "â€™", "\u00ad", "\ufeff", "\u2581", "\u2581\u2581x",
       "Ġ", "Ċ", "'S", "'LL", "I'M", "don't", "it's", "\x00", "\x07", "\x7f", "\U0001d54f", "\U00010348",
       "\uff21\uff22", "ｶﾀｶﾅ", "²³", "½", "Ⅻ"]
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tokenizer", "speculative",
         "decoding", "The", "HELLO", "World", "naïve", "café", "Straße", "İstanbul", "ǅemal", "ΑΒΓ",
         "привет", "мир", "שלום", "ไทย", "한국어", "ტექსტი", "Ελληνικά"]


def generated_lines(rng):
  def digits():
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 14)))

  pools = [
      lambda: rng.choice(WORDS),
      lambda: "".join(rng.choice(CJK) for _ in range(rng.randint(1, 8))),
      lambda: "".join(rng.choice(HIRAGANA) for _ in range(rng.randint(1, 6))),
      lambda: rng.choice(ARABIC),
      lambda: rng.choice(DEVANAGARI),
      lambda: rng.choice(COMBINING),
      lambda: rng.choice(PRECOMPOSED),
      lambda: rng.choice(EMOJI),
      lambda: rng.choice(WHITESPACE),
      lambda: rng.choice(CODE),
      lambda: rng.choice(SPECIALS),
      lambda: rng.choice(ODD),
      digits,
      lambda: rng.choice([".", ",", "!", "?", ";", ":", "...", "—", "–", "(", ")", "\"", "'", "«", "»", "、", "。"]),
  ]
  weights = [30, 6, 3, 4, 4, 4, 3, 5, 10, 4, 6, 4, 6, 10]
  lines = []
  for _ in range(GENERATED_LINES):
    n = rng.randint(1, 24)
    parts = []
    for _ in range(n):
      parts.append(rng.choices(pools, weights)[0]())
      sep = rng.random()
      if sep < 0.6:
        parts.append(" ")
      elif sep < 0.7:
        parts.append(rng.choice(WHITESPACE))
    line = "".join(parts)
    if rng.random() < 0.1:
      line = " " + line
    if rng.random() < 0.1:
      line = line + rng.choice(WHITESPACE)
    lines.append(line)
  # Fixed edge cases.
  lines += ["", " ", "  ", "\n", "\r\n", "\t", "a", " a", "a ", "<|endoftext|>", "<s>", "</s>",
            "<s>hello", "hello</s>", "<|endoftext|><|endoftext|>", "x<mask>y", "x <mask> y",
            "verdict", "averdict verdict_ verdict.", "1234567890", "   leading", "trailing   ",
            "\u2581", "\u2581hello", "<0x0A>", "e\u0301", "\U0001f468\u200d\U0001f469\u200d\U0001f467"]
  return lines


def byte_level_bpe(pre_tokenizer, normalizer, lines, vocab_size, specials):
  tok = Tokenizer(models.BPE())
  if normalizer is not None:
    tok.normalizer = normalizer
  tok.pre_tokenizer = pre_tokenizer
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(lines, trainer)
  return tok


def save(tok, name, edit=None):
  d = os.path.join(OUT, name)
  os.makedirs(d, exist_ok=True)
  spec = json.loads(tok.to_str())
  if edit is not None:
    edit(spec)
  text = json.dumps(spec, ensure_ascii=False, indent=1)
  Tokenizer.from_str(text)  # the library must accept the edited file
  with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
    f.write(text + "\n")


def main():
  rng = random.Random(20261202)
  lines = corpus_lines() + generated_lines(rng)
  with open(os.path.join(OUT, "parity_lines.jsonl"), "w", encoding="utf-8") as f:
    for line in lines:
      f.write(json.dumps(line, ensure_ascii=False) + "\n")
  print(len(lines), "parity lines")

  # GPT-2 style.
  tok = byte_level_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), None,
                       lines, 6000, ["<|endoftext|>"])
  tok.post_processor = processors.ByteLevel(trim_offsets=False)
  tok.add_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False),
                  AddedToken("verdict", single_word=True, normalized=True),
                  AddedToken("[[code]]", rstrip=True, normalized=False)])

  def merges_as_strings(spec):
    spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]
  save(tok, "gpt2", merges_as_strings)

  # Llama-3 style.
  specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
  tok = byte_level_bpe(pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), None, lines, 7000, specials)
  tok.post_processor = processors.Sequence([
      processors.ByteLevel(trim_offsets=False),
      processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                    pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                    special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])])

  def llama3(spec):
    spec["model"]["ignore_merges"] = True
  save(tok, "llama3", llama3)

  # Qwen2 style.
  tok = byte_level_bpe(pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), normalizers.NFC(),
      lines, 7000, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
  tok.post_processor = processors.ByteLevel(trim_offsets=False)
  save(tok, "qwen2")

  # SentencePiece-converted style (Llama 2): byte fallback, <unk>, normalizers
  # that prepend and replace the space, no pre-tokenizer. The byte tokens are
  # trained as special tokens so that they get ids, then left in the model's
  # vocabulary only.
  byte_tokens = ["<0x%02X>" % b for b in range(256)]
  tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
  tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                         normalizers.Replace(" ", "\u2581")])
  tok.pre_tokenizer = None
  trainer = trainers.BpeTrainer(vocab_size=4000, min_frequency=2, limit_alphabet=160,
                                special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                show_progress=False)
  # Without a pre-tokenizer the whole line is one word; train on words so
  # that merges stay within them, as SentencePiece's do.
  tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
  tok.train_from_iterator(lines, trainer)
  tok.pre_tokenizer = None
  tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                   decoders.Fuse(), decoders.Strip(" ", 1, 0)])
  tok.post_processor = processors.TemplateProcessing(
      single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])

  def metaspace(spec):
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in byte_tokens]
    spec["pre_tokenizer"] = None
  save(tok, "metaspace", metaspace)

  # Newer SentencePiece conversions: the Metaspace pre-tokenizer and decoder.
  tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True),
      pre_tokenizers.Digits(individual_digits=True)])
  trainer = trainers.BpeTrainer(vocab_size=4000, min_frequency=2, limit_alphabet=200,
                                special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                show_progress=False)
  tok.train_from_iterator(lines, trainer)
  tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)

  def metaspace_split(spec):
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in byte_tokens]
  save(tok, "metaspace_split", metaspace_split)


if __name__ == "__main__":
  main()
