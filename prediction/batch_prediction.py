# coding=utf-8
"""Predicting a corpus of files with an export: a corpus job
(corpus/shard_job.py) whose shards are whole batches of input records.

    shards of records --work--> <output>-0000k-of-0000n.jsonl.tmp
                      --finish--> renamed to <output>-0000k-of-0000n.jsonl

The same job runs in --num_workers forked processes (--runner=local) or as
Apache Beam transforms on any runner (corpus/beam_pipeline.py). The output
bytes are the same on every runner and with any number of workers, and
equal to predictor.py's one-process output, because a row's floats depend
only on the rows of its model call, and the model calls are the same:

  * the shards are runs of --batch_size * --batches_per_shard records of
    one file (input_records.plan), so a batch is the same records whatever
    runs it: batch j of a file holds its records [j * batch_size,
    (j + 1) * batch_size), the batches predictor.py makes of the file;
  * a batch goes through the predictor's own predict_batch, which sorts
    and pads its rows the same way every time;
  * every worker process loads the export once and keeps it
    (`shared_predictor`), as RunInference's shared model handle does, and
    runs it with TensorFlow's default thread pools on the same machine type.

Beam's RunInference is not used: its BatchElements groups elements by the
time they take and by the bundles the runner forms, so the batches, and
with them the last bits of the floats, would change with the runner and
the load.
"""

import collections
import json

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from corpus import shard_files
from prediction import exported_models
from prediction import input_records
from runner import serving_input
from userio import cli
from userio import output_files

# The keys that say where a record without an "id" came from.
FILE_KEY, LINE_KEY = "file", "line"
OUTPUT_EXTENSION = ".jsonl"
_SIGNATURES = ("serving_default", serving_input.TEXT_SIGNATURE)

PredictionSettings = collections.namedtuple(
    "PredictionSettings", ["export_path", "options", "batch_size", "inputs"])
PredictionSettings.__doc__ = """What a worker needs: the SavedModel
folder, the predictor's options (a tuple of (name, value) pairs, as
exported_models.load takes them), the lines per model call, and the
input_records.InputSettings."""

# The predictors this process has loaded, by PredictionSettings'
# export_path and options: a worker loads an export once for all its
# shards.
_PREDICTORS = {}


def check_export(path):
  """Refuses an export without the signatures the command needs, from its
  saved_model.pb alone (before TensorFlow loads the model).

  Raises:
    cli.UserError naming the export and the fix.
  """
  saved_model = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(
      tf.io.gfile.join(path, exported_models.SAVED_MODEL_FILE), "rb") as f:
    saved_model.ParseFromString(f.read())
  found = {name for graph in saved_model.meta_graphs
           for name in graph.signature_def}
  missing = [name for name in _SIGNATURES if name not in found]
  if missing:
    raise cli.UserError(
        "--export_dir: %s has no %s signature (it has %s)" % (
            path, " or ".join(missing), ", ".join(sorted(found)) or "none"),
        fix="Export the model again with this project's fine-tuning script "
        "(--export_dir, from its --output_dir; no training needed).")


def shared_predictor(settings):
  """The predictor of `settings`, loaded once per process."""
  key = (settings.export_path, settings.options)
  if key not in _PREDICTORS:
    _PREDICTORS[key] = exported_models.load(settings.export_path,
                                            **dict(settings.options))
  return _PREDICTORS[key]


def predict_batches(predictor, task, records, batch_size):
  """Yields (batch, results) for consecutive batches of `batch_size`
  records (a list of input_records.Record) from the list's start; results
  are the predictor's dicts, one per record."""
  for start in range(0, len(records), batch_size):
    batch = records[start:start + batch_size]
    yield batch, predictor.predict_batch(
        [r.values[0] if task == exported_models.NER_TASK else r.values
         for r in batch])


def output_line(record, result, path=None):
  """The JSON line of one prediction: the record's "id" first, when it has
  one, else (with `path`, its file) "file" and "line"; then the result."""
  if record.id is not None:
    result = dict(id=record.id, **result)
  elif path is not None:
    result = {FILE_KEY: path, LINE_KEY: record.line, **result}
  return json.dumps(result, ensure_ascii=False) + "\n"


class PredictionJob(shard_files.ShardFilesJob):
  """Shard k (an input_records.Shard) is predicted into
  <output_prefix>-0000k-of-0000n.jsonl, as corpus/shard_files.py writes
  and renames shard files."""

  name = "Predicting"
  size_flag = "--batches_per_shard"
  extension = OUTPUT_EXTENSION
  noun = "predictions"

  def __init__(self, settings, output_prefix, num_shards):
    super().__init__(output_prefix, num_shards)
    self.settings = settings

  def write_shard(self, spec, path):
    """Predicts one shard's records into the JSON lines file `path`."""
    records = input_records.read_shard(spec, self.settings.inputs)
    predictor = shared_predictor(self.settings)
    lines = []
    for batch, results in predict_batches(
        predictor, self.settings.inputs.task, records,
        self.settings.batch_size):
      lines += [output_line(r, result, spec.path)
                for r, result in zip(batch, results)]
    output_files.write_text(path, "".join(lines), flag="--output_file")
    return len(records)
