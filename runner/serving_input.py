# coding=utf-8
"""The serving input of an exported model (`--export_dir`).

A served request feeds what a task's feature conversion makes of an
example: int32 input_ids, input_mask and segment_ids of [batch, length]
(or [batch, choices, length] for multiple choice). The length may be
anything up to the --max_seq_length the model was trained with: a request
need not pad to it (the padding a request leaves out changes nothing, as
attention ignores padding), and a longer one is refused.
"""

import collections

import tensorflow as tf

from runner import model_spec

MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")
# The name of the signature that takes raw text.
TEXT_SIGNATURE = "text"


class TextSignature(collections.namedtuple(
    "TextSignature", ["inputs_fn", "outputs_fn"])):
  """A signature from raw text, beside the one from ids.

  inputs_fn: callable () -> (placeholders by input name, the MODEL_INPUTS
    Tensors they make), called first in the export graph.
  outputs_fn: callable (the model_fn's predictions, the placeholders) ->
    outputs by name.
  """


def receiver_fn_builder(seq_length, stand_ins, choices=False,
                        text_signature=None):
  """Returns a serving_input_receiver_fn for `Estimator.export_saved_model`.

  Args:
    seq_length: int, the --max_seq_length the model was trained with: the
      longest request it serves.
    stand_ins: dict name -> dtype of the other features the model_fn reads
      (labels, ids) that no prediction depends on; each is fed as zeros of
      shape [batch].
    choices: whether an example is several sequences (run_swag.py's
      choices): the inputs are then [batch, choices, length].
    text_signature: a TextSignature, or None. Its inputs feed the model
      when a request does not feed the ids: each id input is a placeholder
      whose default is what the texts make, so both signatures share one
      model and each computes only what its own inputs need.
  """

  def serving_input_receiver_fn():
    shape = [None, None, None] if choices else [None, None]
    extra_signatures = {}
    if text_signature is None:
      receiver_tensors = {
          name: tf.compat.v1.placeholder(tf.int32, shape, name=name)
          for name in MODEL_INPUTS}
    else:
      texts, from_texts = text_signature.inputs_fn()
      receiver_tensors = {
          name: tf.compat.v1.placeholder_with_default(
              from_texts[name], shape, name=name)
          for name in MODEL_INPUTS}
      extra_signatures[TEXT_SIGNATURE] = (
          texts, lambda predictions: text_signature.outputs_fn(predictions,
                                                               texts))
    length = tf.shape(receiver_tensors["input_ids"])[-1]
    check = tf.debugging.assert_less_equal(
        length, seq_length,
        message="Requests may hold at most --max_seq_length=%d tokens per "
        "example." % seq_length)
    with tf.control_dependencies([check]):
      features = {name: tf.identity(tensor)
                  for name, tensor in receiver_tensors.items()}
    batch_size = tf.shape(receiver_tensors["input_ids"])[0]
    for name, dtype in stand_ins.items():
      features[name] = tf.zeros([batch_size], dtype)
    return model_spec.ServingInputReceiver(features, receiver_tensors,
                                           extra_signatures)

  return serving_input_receiver_fn
