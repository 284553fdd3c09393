"""A SQuAD head (random values on MiniLM) converted to Hugging Face's
layout: BertForQuestionAnswering's start and end logits against
tasks.squad_model.create_model's on real MRPC dev pairs."""

import numpy as np

import modeling
import side_by_side
from tasks import squad_model

TOLERANCE = 1e-5


def test_bert_for_question_answering_gives_our_span_logits(
    assets_dir, minilm_dir, tmp_path):
  config_file = side_by_side.minilm_config(minilm_dir, str(tmp_path),
                                           "gelu_exact")
  bert_config = modeling.BertConfig.from_json_file(config_file)
  inputs = side_by_side.mrpc_inputs(assets_dir, minilm_dir)

  def build(input_ids, input_mask, segment_ids):
    return squad_model.create_model(bert_config, False, input_ids,
                                    input_mask, segment_ids, False)

  prefix, hf_dir = side_by_side.converted_random_head(
      str(tmp_path), minilm_dir, config_file,
      side_by_side.head_shapes(build, inputs), scale=0.02, seed=3,
      task="squad", max_seq_length=inputs[0].shape[1])
  start, end = side_by_side.ours(prefix, build, inputs)
  theirs = side_by_side.hf_outputs(
      side_by_side.hf_model("BertForQuestionAnswering", hf_dir), *inputs)
  np.testing.assert_allclose(theirs.start_logits.numpy(), start, rtol=0,
                             atol=TOLERANCE)
  np.testing.assert_allclose(theirs.end_logits.numpy(), end, rtol=0,
                             atol=TOLERANCE)
