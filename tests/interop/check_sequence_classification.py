"""A classifier fine-tuned here (run_classifier.py on MRPC from MiniLM, a
short run) and converted to Hugging Face's layout:
BertForSequenceClassification's logits against
tasks.classification_model.create_model's on real MRPC dev pairs; then
transformers' own save_pretrained of it, converted back, against the
fine-tuned checkpoint."""

import os

import numpy as np
import pytest
import tensorflow as tf

from checkpoints import checkpoint_checks
from checkpoints import conversion
import modeling
import side_by_side
from tasks import classification_model

TOLERANCE = 1e-5


@pytest.mark.slow
def test_fine_tuned_classifier_in_bert_for_sequence_classification(
    assets_dir, minilm_dir, tmp_path, run_script):
  config_file = side_by_side.minilm_config(minilm_dir, str(tmp_path),
                                           "gelu_exact")
  inputs = side_by_side.mrpc_inputs(assets_dir, minilm_dir)
  output_dir = str(tmp_path / "mrpc")
  # 34 updates of 16 pairs: enough to move every weight off MiniLM's.
  result = run_script("run_classifier.py", [
      "--task_name=MRPC", "--do_train",
      "--data_dir=%s" % os.path.join(assets_dir, "glue", "MRPC"),
      "--vocab_file=%s" % os.path.join(minilm_dir,
                                       side_by_side.MINILM_VOCAB),
      "--bert_config_file=%s" % config_file,
      "--init_checkpoint=%s" % os.path.join(
          minilm_dir, side_by_side.MINILM_CHECKPOINT),
      "--do_lower_case=True", "--max_seq_length=%d" % inputs[0].shape[1],
      "--train_batch_size=16", "--learning_rate=5e-5",
      "--num_train_epochs=0.15", "--output_dir=%s" % output_dir], 900)
  assert result.returncode == 0, result.stderr[-3000:]
  prefix = checkpoint_checks.latest_checkpoint(output_dir)
  hf_dir = str(tmp_path / "hf")
  conversion.convert(output_dir, hf_dir)
  model = side_by_side.hf_model("BertForSequenceClassification", hf_dir)
  assert model.config.id2label == {0: "0", 1: "1"}
  bert_config = modeling.BertConfig.from_json_file(config_file)

  def build(input_ids, input_mask, segment_ids):
    return classification_model.create_model(
        bert_config, False, input_ids, input_mask, segment_ids,
        tf.zeros_like(input_ids[:, 0]), 2, False)[2]

  np.testing.assert_allclose(
      side_by_side.hf_outputs(model, *inputs).logits.numpy(),
      side_by_side.ours(prefix, build, inputs), rtol=0, atol=TOLERANCE)
  side_by_side.assert_round_trip(model, hf_dir, prefix, str(tmp_path))


@pytest.mark.slow
def test_multi_label_classifier_in_bert_for_sequence_classification(
    assets_dir, minilm_dir, tmp_path):
  """A multi-label head (run_classifier.py on your own files) of random
  values on MiniLM: the conversion says problem_type
  multi_label_classification, so that transformers scores it with
  sigmoids; their values and its binary cross-entropy loss equal ours on
  real MRPC dev texts and made-up label sets."""
  config_file = side_by_side.minilm_config(minilm_dir, str(tmp_path),
                                           "gelu_exact")
  inputs = side_by_side.mrpc_inputs(assets_dir, minilm_dir)
  bert_config = modeling.BertConfig.from_json_file(config_file)
  labels = np.random.default_rng(3).integers(
      0, 2, (inputs[0].shape[0], 4)).astype(np.float32)

  def build(input_ids, input_mask, segment_ids):
    loss, _, _, probabilities = classification_model.create_model(
        bert_config, False, input_ids, input_mask, segment_ids,
        tf.constant(labels), 4, False, multi_label=True)
    return loss, probabilities

  prefix, hf_dir = side_by_side.converted_random_head(
      str(tmp_path / "work"), minilm_dir, config_file,
      side_by_side.head_shapes(build, inputs), 0.5, 11, "file",
      inputs[0].shape[1], labels=["w", "x", "y", "z"],
      problem_type="multi_label", text_pairs=True)
  model = side_by_side.hf_model("BertForSequenceClassification", hf_dir)
  assert model.config.problem_type == "multi_label_classification"
  theirs = side_by_side.hf_outputs(model, *inputs, labels=labels)
  loss, probabilities = side_by_side.ours(prefix, build, inputs)
  np.testing.assert_allclose(
      side_by_side.torch.sigmoid(theirs.logits).numpy(), probabilities,
      rtol=0, atol=TOLERANCE)
  np.testing.assert_allclose(theirs.loss.item(), loss, rtol=1e-5)
