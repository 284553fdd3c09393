# coding=utf-8
"""A corpus job (corpus/shard_job.py) that writes one output file per shard.

    shard k --work--> <output_prefix>-0000k-of-0000n<extension>.tmp
            --finish--> renamed to <output_prefix>-0000k-of-0000n<extension>

predictor.py's corpus predictions (prediction/batch_prediction.py) and
extract_features.py's sharded features and embeddings
(prediction/embedding_jobs.py) are such jobs: a subclass says how one
shard's file is written (`write_shard`), this module names, counts and
renames the files, and `run` runs the job on --runner=local or a Beam
runner. No file is renamed into place before every shard is written, and
the temporary files are removed however the run ends, so a failed run
leaves nothing.
"""

from absl import logging
import tensorflow as tf

from corpus import beam_pipeline
from corpus import shard_job
from userio import output_files

# A tally's count of the records a shard's file holds.
INPUTS = "inputs"


def shard_path(output_prefix, index, num_shards, extension):
  """<output_prefix>-0000k-of-0000n<extension>, the name of shard k of n."""
  return "%s-%05d-of-%05d%s" % (output_prefix, index, num_shards, extension)


class ShardFilesJob(shard_job.ShardJob):
  """Shard k (an input_records.Shard, or any spec with `index`, `begin` and
  `end`) is written to <output_prefix>-0000k-of-0000n<extension>.tmp;
  `finish` renames them all into place once every shard is written.

  Subclasses set `extension` (".jsonl"), `noun` (what a record of the
  output is, plural: "predictions") and define `write_shard`.
  """

  extension = None
  noun = None

  def __init__(self, output_prefix, num_shards):
    self.output_prefix = output_prefix
    self.num_shards = num_shards

  def write_shard(self, spec, path):
    """Writes the file of shard `spec` to `path` atomically (a retried
    shard leaves the same file); returns the number of records in it."""
    raise NotImplementedError

  def final_path(self, index):
    return shard_path(self.output_prefix, index, self.num_shards,
                      self.extension)

  def temp_path(self, index):
    return self.final_path(index) + output_files.TEMPORARY_SUFFIX

  def remove_temporary_files(self, indices):
    """Removes what shards `indices` may have left: their files
    (`temp_path`) and a file a worker killed inside an atomic write of one
    left beside it (`temp_path` + .tmp)."""
    for index in indices:
      for path in (self.temp_path(index),
                   self.temp_path(index) + output_files.TEMPORARY_SUFFIX):
        if tf.io.gfile.exists(path):
          tf.io.gfile.remove(path)

  def work(self, spec):
    count = self.write_shard(spec, self.temp_path(spec.index))
    return {"index": spec.index, INPUTS: count,
            shard_job.BYTES: spec.end - spec.begin}

  def tally(self, result):
    return {name: result[name] for name in (INPUTS, shard_job.BYTES)}

  def empty(self):
    return []

  def add(self, accumulator, result):
    accumulator.append(result)
    return accumulator

  def merge(self, accumulators):
    return [result for results in accumulators for result in results]

  def finish(self, accumulator):
    """Renames the shards' files into place, in shard order."""
    for result in sorted(accumulator, key=lambda r: r["index"]):
      tf.io.gfile.rename(self.temp_path(result["index"]),
                         self.final_path(result["index"]), overwrite=True)
    logging.info("Wrote %s", self.outputs(
        {INPUTS: sum(r[INPUTS] for r in accumulator)}))

  def outputs(self, totals):
    return "%d %s in %d shards: %s-*-of-%05d%s" % (
        totals[INPUTS], self.noun, self.num_shards, self.output_prefix,
        self.num_shards, self.extension)


def run(job, shards, runner, num_workers=None, beam_options=None):
  """Runs the ShardFilesJob `job` on `shards` on `runner`
  (shard_job.LOCAL_RUNNER: `num_workers` forked processes; else Beam with
  `beam_options`); a shard's temporary file is removed however the run
  ends.

  Raises:
    cli.UserError: a worker found bad input, or died.
  """
  total_bytes = sum(shard.end - shard.begin for shard in shards)
  try:
    if shard_job.is_local(runner):
      shard_job.run_local(job, shards, num_workers, total_bytes)
    else:
      beam_pipeline.run(job, shards, runner, beam_options, total_bytes)
  finally:
    job.remove_temporary_files(shard.index for shard in shards)
