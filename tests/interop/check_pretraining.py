"""Google's pre-training heads (random values on MiniLM) converted to
Hugging Face's layout: BertForPreTraining's masked-LM and next-sentence
logits against the heads' formulas in NumPy on modeling.BertModel's
outputs, on real MRPC dev pairs."""

import numpy as np
from scipy import special

from checkpoints import conversion
import modeling
import side_by_side

TOLERANCE = 1e-5

# Google's pre-training heads, as its checkpoints name them: name -> shape
# ("H" the hidden size, "V" the vocabulary's).
PRETRAINING_HEADS = {
    "cls/predictions/transform/dense/kernel": ("H", "H"),
    "cls/predictions/transform/dense/bias": ("H",),
    "cls/predictions/transform/LayerNorm/gamma": ("H",),
    "cls/predictions/transform/LayerNorm/beta": ("H",),
    "cls/predictions/output_bias": ("V",),
    "cls/seq_relationship/output_weights": (2, "H"),
    "cls/seq_relationship/output_bias": (2,),
}


def pretraining_logits(tensors, sequence, pooled):
  """Masked-LM logits [B, S, V] and next-sentence logits [B, 2] of
  Google's pre-training heads (erf GELU, LayerNorm epsilon 1e-12, output
  layer tied to the word embeddings), in float64."""
  x = sequence.astype(np.float64) @ tensors[
      "cls/predictions/transform/dense/kernel"] + tensors[
          "cls/predictions/transform/dense/bias"]
  x = 0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  x = (x - mean) / np.sqrt(var + 1e-12) * tensors[
      "cls/predictions/transform/LayerNorm/gamma"] + tensors[
          "cls/predictions/transform/LayerNorm/beta"]
  masked_lm = x @ tensors["bert/embeddings/word_embeddings"].T + tensors[
      "cls/predictions/output_bias"]
  next_sentence = pooled.astype(np.float64) @ tensors[
      "cls/seq_relationship/output_weights"].T + tensors[
          "cls/seq_relationship/output_bias"]
  return masked_lm, next_sentence


def test_bert_for_pretraining_gives_the_heads_logits(assets_dir, minilm_dir,
                                                     tmp_path):
  config_file = side_by_side.minilm_config(minilm_dir, str(tmp_path),
                                           "gelu_exact")
  bert_config = modeling.BertConfig.from_json_file(config_file)
  sizes = {"H": bert_config.hidden_size, "V": bert_config.vocab_size}
  shapes = [(name, [sizes.get(d, d) for d in dims])
            for name, dims in PRETRAINING_HEADS.items()]
  inputs = side_by_side.mrpc_inputs(assets_dir, minilm_dir)
  prefix, hf_dir = side_by_side.converted_random_head(
      str(tmp_path), minilm_dir, config_file, shapes, scale=0.02, seed=3,
      task="pretraining", max_seq_length=inputs[0].shape[1])
  sequence, pooled = side_by_side.ours(
      prefix, side_by_side.encoder(bert_config), inputs)
  tensors = {name: value.astype(np.float64) for name, value in
             conversion.read_google_checkpoint(prefix).items()}
  masked_lm, next_sentence = pretraining_logits(tensors, sequence, pooled)
  theirs = side_by_side.hf_outputs(
      side_by_side.hf_model("BertForPreTraining", hf_dir), *inputs)
  real = inputs[1].astype(bool)
  np.testing.assert_allclose(theirs.prediction_logits.numpy()[real],
                             masked_lm[real], rtol=0, atol=TOLERANCE)
  np.testing.assert_allclose(theirs.seq_relationship_logits.numpy(),
                             next_sentence, rtol=0, atol=TOLERANCE)
