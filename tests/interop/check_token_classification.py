"""A token classifier (random values on MiniLM, CoNLL-2003's 9 labels)
written as run_ner.py leaves its output folder and converted to Hugging
Face's layout: BertForTokenClassification's logits against
tasks.ner.create_model's at the real tokens of windows of real SQuAD
paragraphs; then transformers' own save_pretrained of it, converted back,
against the checkpoint. With labels on each word's first sub-token (-100
elsewhere, as Hugging Face's token-classification examples label them), its
loss equals create_model's under --loss_average=word."""

import json
import os

import numpy as np
import tensorflow as tf

import modeling
import side_by_side
from tasks import ner
import tokenization

LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG",
          "B-PER", "I-PER"]
NUM_PARAGRAPHS = 4
MAX_SEQ_LENGTH = 128
TOLERANCE = 1e-4
# BertForTokenClassification has no pooler.
POOLER = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")


def windows(assets_dir, tokenizer, label_mask=False):
  """input_ids, input_mask, segment_ids: int32 [windows, MAX_SEQ_LENGTH]
  of the first paragraphs of SQuAD v1.1 dev's first article, in windows
  of MAX_SEQ_LENGTH tokens, half a window apart; with `label_mask` also
  each window's mask of its words' first sub-tokens (every word, as
  training labels them)."""
  with open(os.path.join(assets_dir, "squad", "v1.1", "dev-v1.1.json"),
            encoding="utf-8") as f:
    article = json.load(f)["data"][0]
  rows, masks = [], []
  for paragraph in article["paragraphs"][:NUM_PARAGRAPHS]:
    words = [word for word, _, _ in
             tokenization.split_words_with_offsets(paragraph["context"])]
    for window in ner.text_windows(words, tokenizer, MAX_SEQ_LENGTH,
                                   MAX_SEQ_LENGTH // 2, is_training=True):
      ids = tokenizer.convert_tokens_to_ids(window.tokens)
      padding = [0] * (MAX_SEQ_LENGTH - len(ids))
      rows.append(ids + padding)
      masks.append(window.label_mask + padding)
  ids = np.array(rows, np.int32)
  inputs = ids, (ids > 0).astype(np.int32), np.zeros_like(ids)
  return inputs + (np.array(masks, np.int32),) if label_mask else inputs


def test_bert_for_token_classification_gives_our_tag_logits(
    assets_dir, minilm_dir, tmp_path):
  config_file = os.path.join(minilm_dir, side_by_side.MINILM_CONFIG)
  bert_config = modeling.BertConfig.from_json_file(config_file)
  inputs = windows(assets_dir, side_by_side.minilm_tokenizer(minilm_dir))

  def build(input_ids, input_mask, segment_ids):
    no_labels = tf.zeros_like(input_ids)
    return ner.create_model(bert_config, False, input_ids, input_mask,
                            segment_ids, no_labels, no_labels, len(LABELS),
                            False)[2]

  prefix, hf_dir = side_by_side.converted_random_head(
      str(tmp_path), minilm_dir, config_file,
      side_by_side.head_shapes(build, inputs), scale=0.2, seed=0,
      task=ner.TASK_NAME, max_seq_length=MAX_SEQ_LENGTH, labels=LABELS)
  model = side_by_side.hf_model("BertForTokenClassification", hf_dir)
  real = inputs[1].astype(bool)
  np.testing.assert_allclose(
      side_by_side.hf_outputs(model, *inputs).logits.numpy()[real],
      side_by_side.ours(prefix, build, inputs)[real], rtol=0,
      atol=TOLERANCE)
  side_by_side.assert_round_trip(model, hf_dir, prefix, str(tmp_path),
                                 absent=POOLER)


def test_word_averaged_loss_is_bert_for_token_classifications(
    assets_dir, minilm_dir, tmp_path):
  config_file = os.path.join(minilm_dir, side_by_side.MINILM_CONFIG)
  bert_config = modeling.BertConfig.from_json_file(config_file)
  *inputs, label_mask = windows(
      assets_dir, side_by_side.minilm_tokenizer(minilm_dir), label_mask=True)
  label_ids = np.random.default_rng(5).integers(
      0, len(LABELS), size=label_mask.shape).astype(np.int32)

  def build(input_ids, input_mask, segment_ids):
    loss, _, logits, _ = ner.create_model(
        bert_config, False, input_ids, input_mask, segment_ids,
        tf.constant(label_ids), tf.constant(label_mask), len(LABELS), False,
        loss_average="word")
    return loss, logits

  prefix, hf_dir = side_by_side.converted_random_head(
      str(tmp_path), minilm_dir, config_file,
      side_by_side.head_shapes(build, inputs), scale=0.2, seed=1,
      task=ner.TASK_NAME, max_seq_length=MAX_SEQ_LENGTH, labels=LABELS)
  model = side_by_side.hf_model("BertForTokenClassification", hf_dir)
  theirs = side_by_side.hf_outputs(
      model, *inputs,
      labels=np.where(label_mask == 1, label_ids, -100).astype(np.int64))
  loss, _ = side_by_side.ours(prefix, build, inputs)
  # Windows of different lengths: a window-averaged loss would differ.
  assert len(set(label_mask.sum(axis=1))) > 1
  np.testing.assert_allclose(theirs.loss.item(), loss, rtol=1e-5)
