# coding=utf-8
"""The export: the PREDICT graph with a checkpoint's weights as a SavedModel
for serving.

`export_saved_model` builds the graph on a `serving_input_receiver_fn`'s
placeholders, signs it ("serving_default" and the receiver's extra
signatures) and writes it under a temporary name, renamed when complete. A
full disk (or a folder that cannot be written) ends in
disk_space.WriteFailed: one line naming the folder, the model and about how
much space it needs.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import os
import time

from absl import logging
import tensorflow as tf

from checkpoints import checkpoint_checks
from engine import graph_keys
from engine import weight_casts
from runner import checkpointing
from runner import model_spec
from runner import sessions
from userio import disk_space
from userio import file_systems


def export_saved_model(graphs, export_dir_base, serving_input_receiver_fn,
                       checkpoint_path=None, assets=None):
  """Writes a SavedModel of the model_fn of `graphs` (a
  model_graphs.ModelGraphs) in PREDICT mode; returns its directory.

  The other arguments, the layout and the errors: see
  Estimator.export_saved_model.
  """
  model_dir = graphs.config.model_dir
  checkpoint = checkpoint_path or checkpoint_checks.latest_checkpoint(
      model_dir)
  if not checkpoint:
    raise ValueError(
        "Nothing to export: no checkpoint in %s. Train first (--do_train) "
        "or point --output_dir at a finished run." % model_dir)
  logging.info("Exporting %s as a SavedModel into %s ...", checkpoint,
               export_dir_base)
  graph = graphs.new_graph()
  with graph.as_default():
    tf.compat.v1.train.get_or_create_global_step()
    receiver = serving_input_receiver_fn()
    spec = graphs.call_model_fn(receiver.features, model_spec.ModeKeys.PREDICT,
                                graphs.params_with_batch_size(None))
    if not isinstance(spec.predictions, dict):
      raise ValueError("export_saved_model needs the model_fn's PREDICT "
                       "predictions as a dict of named Tensors.")
    signatures = {"serving_default": _predict_signature(
        receiver.receiver_tensors,
        _served_predictions(spec.predictions, receiver))}
    for name, (inputs, outputs_fn) in receiver.extra_signatures.items():
      signatures[name] = _predict_signature(
          inputs, outputs_fn(spec.predictions))
    # A registry the model's code keeps while building (dropout sites) is
    # a Python object: the MetaGraph cannot hold it, and serving does not
    # need it.
    graph.clear_collection(graph_keys.DROPOUT_SITES)
    export_dir = _new_export_dir(export_dir_base)
    temporary_dir = export_dir + ".incomplete"
    if tf.io.gfile.exists(temporary_dir):  # Left by an interrupted export.
      tf.io.gfile.rmtree(temporary_dir)
    with disk_space.writing(
        export_dir_base, "the SavedModel %s" % os.path.basename(export_dir),
        size=lambda: _saved_model_bytes(graph, assets),
        flag="--export_dir"):
      _write_saved_model(graphs.config, graph, checkpoint, signatures,
                         temporary_dir, assets)
      file_systems.move_folder(temporary_dir, export_dir)
  logging.info("Exported %s as a SavedModel to %s", checkpoint, export_dir)
  return export_dir


def _write_saved_model(config, graph, checkpoint, signatures, folder, assets):
  """Writes the SavedModel of `graph` with `checkpoint`'s weights, the
  SignatureDefs `signatures` by name and the files `assets` into
  `folder` (see Estimator.export_saved_model), in a session made with
  RunConfig `config`."""
  with sessions.session(config, graph) as sess:
    checkpointing.restore(checkpointing.new_saver(), sess, checkpoint)
    builder = tf.compat.v1.saved_model.Builder(folder)
    # The weight copies are filled when the SavedModel is loaded.
    builder.add_meta_graph_and_variables(
        sess, [tf.compat.v1.saved_model.SERVING],
        signature_def_map=signatures,
        strip_default_attrs=True, main_op=weight_casts.initializer(graph))
    builder.save()
  extra = os.path.join(folder, "assets.extra")
  for name, path in sorted((assets or {}).items()):
    tf.io.gfile.makedirs(extra)
    tf.io.gfile.copy(path, os.path.join(extra, name), overwrite=True)


def _predict_signature(inputs, outputs):
  """The "predict" SignatureDef from dicts name -> Tensor.

  What tf.compat.v1.saved_model.predict_signature_def makes, built without
  its deprecated helper, which logs a migration notice meant for
  TensorFlow 1 code.
  """
  def tensor_infos(tensors):
    return {name: tf.compat.v1.TensorInfo(
        name=tensor.name, dtype=tensor.dtype.as_datatype_enum,
        tensor_shape=tensor.shape.as_proto())
            for name, tensor in tensors.items()}

  return tf.compat.v1.saved_model.build_signature_def(
      inputs=tensor_infos(inputs), outputs=tensor_infos(outputs),
      method_name=tf.compat.v1.saved_model.PREDICT_METHOD_NAME)


def _served_predictions(predictions, receiver):
  """`predictions` less those that only pass on a feature no request feeds.

  A model_fn may return a feature among its predictions (run_squad's
  "unique_ids"); served, it would be the receiver's stand-in, not an answer.
  """
  stand_ins = [tensor for name, tensor in receiver.features.items()
               if name not in receiver.receiver_tensors]
  return {name: tensor for name, tensor in predictions.items()
          if not any(tensor is stand_in for stand_in in stand_ins)}


def _new_export_dir(export_dir_base):
  """export_dir_base/<unix time>, one second later if that exists."""
  seconds = int(time.time())
  while tf.io.gfile.exists(os.path.join(export_dir_base, str(seconds))):
    seconds += 1
  return os.path.join(export_dir_base, str(seconds))


def _saved_model_bytes(graph, assets):
  """About the bytes of a SavedModel of `graph`: its graph, its variables
  and the files `assets` ({name: path})."""
  return (graph.as_graph_def().ByteSize() +
          checkpointing.variables_bytes(graph) +
          sum(tf.io.gfile.stat(path).length
              for path in (assets or {}).values()))
