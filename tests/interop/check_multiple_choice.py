"""A multiple-choice head (random values on MiniLM) written as run_swag.py
leaves its output folder and converted to Hugging Face's layout:
BertForMultipleChoice's logits against tasks.multiple_choice.create_model's
on questions built from SQuAD's paragraphs (tools/next_sentence_choices.py,
laid out by tasks/swag.py); then transformers' own save_pretrained of it,
converted back, against the checkpoint."""

import json
import os
import random

import numpy as np
import tensorflow as tf

import modeling
import side_by_side
from tasks import multiple_choice
from tasks import swag
from tools import next_sentence_choices

NUM_QUESTIONS = 16
MAX_SEQ_LENGTH = 64
TOLERANCE = 1e-4


def questions(assets_dir, tokenizer):
  """input_ids, input_mask, segment_ids: int32 [NUM_QUESTIONS, 4,
  MAX_SEQ_LENGTH] of the first questions of SQuAD v1.1 dev's articles."""
  with open(os.path.join(assets_dir, "squad", "v1.1", "dev-v1.1.json"),
            encoding="utf-8") as f:
    articles = json.load(f)["data"]
  rng = random.Random(0)
  rows = []
  for article in articles:
    rows += next_sentence_choices.article_questions(article, rng, 1, 0)
    if len(rows) >= NUM_QUESTIONS:
      break
  shape = (NUM_QUESTIONS, swag.NUM_CHOICES, MAX_SEQ_LENGTH)
  arrays = [np.zeros(shape, np.int32) for _ in range(3)]
  for i, row in enumerate(rows[:NUM_QUESTIONS]):
    context, endings = row[3], row[6:6 + swag.NUM_CHOICES]
    for j, (tokens, segments) in enumerate(swag.choice_layouts(
        context, endings, MAX_SEQ_LENGTH, tokenizer)):
      ids = tokenizer.convert_tokens_to_ids(tokens)
      arrays[0][i, j, :len(ids)] = ids
      arrays[1][i, j, :len(ids)] = 1
      arrays[2][i, j, :len(ids)] = segments
  return arrays


def test_bert_for_multiple_choice_gives_our_choice_logits(
    assets_dir, minilm_dir, tmp_path):
  config_file = os.path.join(minilm_dir, side_by_side.MINILM_CONFIG)
  bert_config = modeling.BertConfig.from_json_file(config_file)
  inputs = questions(assets_dir, side_by_side.minilm_tokenizer(minilm_dir))

  def build(input_ids, input_mask, segment_ids):
    return multiple_choice.create_model(
        bert_config, False, input_ids, input_mask, segment_ids,
        tf.zeros([NUM_QUESTIONS], tf.int32), False)[2]

  prefix, hf_dir = side_by_side.converted_random_head(
      str(tmp_path), minilm_dir, config_file,
      side_by_side.head_shapes(build, inputs), scale=0.5, seed=0,
      task=multiple_choice.TASK_NAME, max_seq_length=MAX_SEQ_LENGTH,
      num_choices=swag.NUM_CHOICES)
  model = side_by_side.hf_model("BertForMultipleChoice", hf_dir)
  np.testing.assert_allclose(
      side_by_side.hf_outputs(model, *inputs).logits.numpy(),
      side_by_side.ours(prefix, build, inputs), rtol=0, atol=TOLERANCE)
  side_by_side.assert_round_trip(model, hf_dir, prefix, str(tmp_path))
