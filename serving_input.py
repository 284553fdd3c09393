# coding=utf-8
"""The serving input of the models the scripts export (`--export_dir`).

A served request feeds what `convert_single_example` (run_classifier.py) or
`convert_examples_to_features` (run_squad.py) makes of an example: int32
input_ids, input_mask and segment_ids of [batch, max_seq_length].
"""

import tensorflow as tf

import estimator

MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")


def receiver_fn_builder(seq_length, stand_ins):
  """Returns a serving_input_receiver_fn for `Estimator.export_saved_model`.

  Args:
    seq_length: int, the --max_seq_length the model was trained with.
    stand_ins: dict name -> dtype of the other features the model_fn reads
      (labels, ids) that no prediction depends on; each is fed as zeros of
      shape [batch].
  """

  def serving_input_receiver_fn():
    receiver_tensors = {
        name: tf.compat.v1.placeholder(tf.int32, [None, seq_length],
                                       name=name)
        for name in MODEL_INPUTS}
    batch_size = tf.shape(receiver_tensors["input_ids"])[0]
    features = dict(receiver_tensors)
    for name, dtype in stand_ins.items():
      features[name] = tf.zeros([batch_size], dtype)
    return estimator.ServingInputReceiver(features, receiver_tensors)

  return serving_input_receiver_fn
