#!/usr/bin/env bash
# Stage 2: trains the SentencePiece BPE tokenizer that both models share, on
# the train split of stage 1's corpus.
#
#   tools/test_models/train_tokenizer.sh [WORK]
#
# Writes models/tokenizer/tokenizer.model and tokenizer.vocab. The settings
# follow Llama's tokenizer: identity normalization, whitespace kept, a dummy
# prefix, digits split, byte fallback (so any UTF-8 text, newlines included,
# encodes), and ids 0 <unk>, 1 <s>, 2 </s>, 3 <pad>. One thread and no input
# sampling or shuffling make the result reproducible. Needs spm_train
# (Debian sentencepiece).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-${TMPDIR:-/tmp}/verdict-test-models}
out=$repo/models/tokenizer
vocab_size=4096

command -v spm_train >/dev/null || {
  echo "train_tokenizer: spm_train is missing: apt-get install sentencepiece" >&2
  exit 1
}
[[ -d $work/corpus/train ]] || { echo "train_tokenizer: run fetch_corpus.sh first" >&2; exit 1; }
# The model records its input and output names: run where both are relative.
cd "$work/corpus/train"
inputs=$(ls *.txt | LC_ALL=C sort | paste -sd, -)
rm -f tokenizer.model tokenizer.vocab

spm_train \
  --input="$inputs" \
  --model_prefix=tokenizer \
  --model_type=bpe \
  --vocab_size=$vocab_size \
  --character_coverage=0.99995 \
  --byte_fallback=true \
  --normalization_rule_name=identity \
  --remove_extra_whitespaces=false \
  --add_dummy_prefix=true \
  --split_digits=true \
  --allow_whitespace_only_pieces=true \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 \
  --unk_piece='<unk>' --bos_piece='<s>' --eos_piece='</s>' --pad_piece='<pad>' \
  --max_sentence_length=32768 \
  --input_sentence_size=0 \
  --shuffle_input_sentence=false \
  --num_threads=1 \
  --minloglevel=1
mkdir -p "$out"
mv tokenizer.model tokenizer.vocab "$out/"
echo "train_tokenizer: wrote $out/tokenizer.model ($vocab_size pieces)"
