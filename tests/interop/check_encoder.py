"""MiniLM converted to Hugging Face's layout: transformers' BertModel
against modeling.BertModel on real MRPC dev pairs, with either GELU."""

import json
import os

import numpy as np
import pytest

from checkpoints import conversion
import modeling
import side_by_side

# Float32 rounding of PyTorch's and TensorFlow's kernels stays below this.
TOLERANCE = 1e-5


@pytest.mark.parametrize("hidden_act, hf_act", [("gelu_exact", "gelu"),
                                                ("gelu", "gelu_new")])
def test_bert_model_gives_our_encoder_outputs(hidden_act, hf_act, assets_dir,
                                              minilm_dir, tmp_path):
  """Google's "gelu" is the tanh approximation, transformers' "gelu_new";
  "gelu_exact" (erf) is transformers' "gelu"."""
  config_file = side_by_side.minilm_config(minilm_dir, str(tmp_path),
                                           hidden_act)
  prefix = os.path.join(minilm_dir, side_by_side.MINILM_CHECKPOINT)
  hf_dir = str(tmp_path / "hf")
  conversion.convert(prefix, hf_dir, bert_config_file=config_file)
  with open(os.path.join(hf_dir, conversion.HF_CONFIG_FILE)) as f:
    assert json.load(f)["hidden_act"] == hf_act
  inputs = side_by_side.mrpc_inputs(assets_dir, minilm_dir)
  sequence, pooled = side_by_side.ours(
      prefix,
      side_by_side.encoder(modeling.BertConfig.from_json_file(config_file)),
      inputs)
  theirs = side_by_side.hf_outputs(
      side_by_side.hf_model("BertModel", hf_dir), *inputs)
  real = inputs[1].astype(bool)
  np.testing.assert_allclose(theirs.last_hidden_state.numpy()[real],
                             sequence[real], rtol=0, atol=TOLERANCE)
  np.testing.assert_allclose(theirs.pooler_output.numpy(), pooled, rtol=0,
                             atol=TOLERANCE)
