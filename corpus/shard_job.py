# coding=utf-8
"""A corpus job: work on every shard, combine the results, finish once.

create_pretraining_data.py --mode=scalable and create_vocab.py are both

    shards --work--> results --add/merge--> one accumulator --finish--> files

and a `ShardJob` holds those functions. Whoever runs a job calls the same
ones: `run_local` in worker processes forked on this machine
(corpus/workers.py, --runner=local, the default), corpus/beam_pipeline.py
as Apache Beam transforms on any Beam runner (--runner=DirectRunner,
DataflowRunner, FlinkRunner, ...). The files are the same bytes whatever
runs the job and with how many workers, because:

  * the shards are decided from the files' sizes alone
    (corpus.text_files.plan_shards) and each is read from its file's bytes
    alone (text_files.read_shard);
  * `work` depends on its shard only (a random seed comes from the shard's
    index, never from the order the shards are worked on);
  * `add` and `merge` are order-free (a sum, a set of results later sorted
    by shard index), and `finish` depends on the accumulator's value only.

`tally(result)` gives the counters of a shard's result (documents, words,
instances, bytes): progress lines locally, Beam counters on Beam.
"""

from absl import flags
from absl import logging

from corpus import workers
from userio import progress

# --runner's value for the forked worker processes of this machine.
LOCAL_RUNNER = "local"
# Seconds between two progress lines.
PROGRESS_INTERVAL = 30.0
# The counter of input bytes, which progress lines show as done/total.
BYTES = "bytes"
_MB = 1e6
_KB = 1e3


class ShardJob(object):
  """The functions of a corpus job (module docstring); subclasses must
  pickle (module-level classes with picklable fields), since workers and
  Beam runners get them by pickle."""

  # What the job does, the start of its progress lines and the namespace
  # of its Beam counters.
  name = "shards"
  # The flag that makes a shard smaller, for the advice when a worker dies
  # (out of memory?).
  size_flag = "--shard_size_mb"

  def work(self, spec):
    """The result of one shard (a corpus.text_files.ShardSpec)."""
    raise NotImplementedError

  def tally(self, result):
    """dict counter name -> int of a result; BYTES among them."""
    raise NotImplementedError

  def empty(self):
    """A new accumulator."""
    raise NotImplementedError

  def add(self, accumulator, result):
    """The accumulator with `result` added (may change and return it)."""
    raise NotImplementedError

  def merge(self, accumulators):
    """One accumulator holding all of `accumulators` (a list)."""
    raise NotImplementedError

  def finish(self, accumulator):
    """Writes the job's files from the accumulator of all results."""
    raise NotImplementedError

  def outputs(self, totals):
    """What `finish` writes, in words (e.g. "vocab.txt"), from the job's
    `totals` (tally's sums), for the last line of a run whose `finish` ran
    elsewhere."""
    raise NotImplementedError


def define_runner_flag(flag_values):
  """Defines --runner (absl) in `flag_values`; a script's --help lists it
  after flags.adopt_module_key_flags(shard_job)."""
  flags.DEFINE_string(
      "runner", LOCAL_RUNNER,
      "What runs the shards. local: --num_workers processes on this "
      "machine. Any other value is an Apache Beam runner (DirectRunner, "
      "DataflowRunner, FlinkRunner, SparkRunner, PortableRunner, ...; pip "
      "install -r requirements-beam.txt), and the command line's flags "
      "that this script does not define go to Beam's PipelineOptions (e.g. "
      "--project, --region, --temp_location, --direct_num_workers). The "
      "output is the same bytes on every runner.", flag_values=flag_values)


def is_local(runner):
  return runner == LOCAL_RUNNER


def progress_meter(job, total_bytes):
  """The progress.Progress of a job's input: in MB, or in kB for an input
  under a megabyte (whose MB would show as 0.0)."""
  unit, scale = ("MB", _MB) if total_bytes >= _MB else ("kB", _KB)
  return progress.Progress(job.name, total_bytes, unit=unit,
                           interval=PROGRESS_INTERVAL, scale=scale)


def show_tallies(meter, totals):
  """Sets the meter's other counts from `totals` (counter -> int)."""
  meter.counts.update({name: value for name, value in totals.items()
                       if name != BYTES})


def run_local(job, specs, num_workers, total_bytes):
  """Runs `job` on `specs` in `num_workers` forked processes; `finish` runs
  here. Logs progress lines of the input read.

  Returns:
    dict counter name -> total, as `tally` counts them.

  Raises:
    What `work` or `finish` raised (cli.UserError for bad input), or
    cli.UserError when a worker process died.
  """
  meter = progress_meter(job, total_bytes)
  accumulator = job.empty()
  totals = {}
  with workers.results_in_order(
      job.work, (((spec,), None) for spec in specs), num_workers,
      job.size_flag) as results:
    for result, _ in results:
      accumulator = job.add(accumulator, result)
      counts = job.tally(result)
      for name, value in counts.items():
        totals[name] = totals.get(name, 0) + value
      show_tallies(meter, totals)
      meter.advance(counts.get(BYTES, 0))
  meter.finish()
  log_totals(job, len(specs), totals)
  job.finish(accumulator)
  return totals


def log_totals(job, num_shards, totals):
  """Logs a job's totals, e.g. "Counting words: 1 shard, 28,945 bytes,
  814 documents, 9,120 words"."""
  logging.info("%s: %s", job.name, ", ".join(
      "{:,} {}".format(value, name[:-1] if value == 1 else name)
      for name, value in [("shards", num_shards)] + sorted(totals.items())))
