# coding=utf-8
"""A corpus job (corpus/shard_job.py) as an Apache Beam pipeline.

    Create(shard specs) | Reshuffle | ParDo(job.work) | CombineGlobally(
        job.add / job.merge) | Map(job.finish)

The transforms call the job's own functions, the ones --runner=local calls,
so the files written are the same bytes on every runner. The specs are
planned in the launching process from the files' sizes
(corpus.text_files.plan_shards); Reshuffle spreads them over the workers.
`finish` runs once, on one worker, after every shard succeeded.

Options. The script's absl flags are parsed first, leaving the flags it
does not define (userio.cli.run(known_only=True)); those go to Beam's
PipelineOptions, with --runner (and --num_workers, which Beam's Dataflow
options share with --runner=local). A flag that neither the script nor
any of Beam's option classes knows is refused in one line.

Failures. Bad input found on a worker (cli.UserError) travels back inside
the runner's error text, marked (`_mark`); the launching process finds the
mark and ends with that one line. Apache Beam is imported here only, and
only with a Beam --runner: its absence, or that of a runner's extra
packages (apache-beam[gcp] for DataflowRunner), is one line naming what to
install.
"""

import logging as logging_module
import os
import re

from absl import logging

from corpus import shard_job
from userio import cli
from userio import disk_space
from userio import verbosity

_INSTALL = ("pip install -r requirements-beam.txt (it pins apache-beam)")
# Runners whose Python code needs an extra of apache-beam.
_EXTRAS = {"DataflowRunner": "gcp", "TestDataflowRunner": "gcp"}
# The mark around a user error's message in a worker's exception.
_MARK = "[[corpus-user-error]]"
_MARKED = re.compile(re.escape(_MARK) + r"(.*?)" + re.escape(_MARK))
# Beam's option of its workers' log level: their INFO lines (channels
# opened, harness started) are noise unless -v 1 asks for details.
_WORKER_LOG_LEVEL = "--default_sdk_harness_log_level"
_TERMINAL_STATES = ("DONE", "FAILED", "CANCELLED", "UPDATED", "DRAINED")
# The project's root folder, which the workers must import it from.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _one_line(error):
  return " ".join(str(error).split())


def _import_beam(runner):
  """The apache_beam module; cli.UserError naming the package if missing."""
  try:
    import apache_beam  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise cli.UserError(
        "--runner=%s needs Apache Beam, which is not installed: %s, or pass "
        "--runner=%s." % (runner, _INSTALL, shard_job.LOCAL_RUNNER)) from None
  return apache_beam


def _missing_package(runner, error):
  extra = _EXTRAS.get(runner)
  package = "'apache-beam[%s]'" % extra if extra else "apache-beam"
  return cli.UserError(
      "--runner=%s: %s; install %s at the version requirements-beam.txt "
      "pins." % (runner, _one_line(error), package))


def check_local_args(runner, args):
  """Refuses flags left over by absl with the local runner: without Beam,
  nothing else would read them."""
  if shard_job.is_local(runner) and args:
    raise cli.UserError(
        "%s: not a flag of this script (see --help); Apache Beam's options "
        "apply with a Beam --runner only." % " ".join(args))


def pipeline_options(runner, args, num_workers=None):
  """Beam's PipelineOptions of `args` (the flags absl left) and --runner.

  Raises:
    cli.UserError: Beam is missing, or an arg is no option of Beam's.
  """
  _import_beam(runner)
  # pylint: disable=g-import-not-at-top
  from apache_beam.options import pipeline_options as beam_options
  parser = beam_options._BeamArgumentParser(allow_abbrev=False)  # pylint: disable=protected-access
  for options_class in beam_options.PipelineOptions.__subclasses__():
    options_class._add_argparse_args(parser)  # pylint: disable=protected-access
  _, unknown = parser.parse_known_args(args)
  if unknown:
    raise cli.UserError(
        "%s: neither a flag of this script (see --help) nor an option of "
        "Apache Beam's PipelineOptions." % " ".join(unknown))
  extra = ["--runner=" + runner]
  if not verbosity.details() and not any(
      arg.startswith(_WORKER_LOG_LEVEL) for arg in args):
    extra.append(_WORKER_LOG_LEVEL + "=WARNING")
  if num_workers is not None:
    extra.append("--num_workers=%d" % num_workers)
  return beam_options.PipelineOptions(list(args) + extra)


def _mark(error):
  return "%s%s%s" % (_MARK, _one_line(error), _MARK)


def user_error_in(error):
  """The cli.UserError a worker's marked message inside `error` names, or
  None."""
  found = _MARKED.search(str(error))
  return cli.UserError(found.group(1)) if found else None


class _WorkerFailure(Exception):
  """A cli.UserError (or disk_space.WriteFailed) of a worker, as a message
  the runner passes back."""


def _calling(function, *args):
  try:
    return function(*args)
  except (cli.UserError, disk_space.WriteFailed) as e:
    raise _WorkerFailure(_mark(e)) from None


def _transforms(beam, job):
  """The DoFn and CombineFn of `job`."""

  class Work(beam.DoFn):
    """job.work on one shard, its tallies as Beam counters."""

    def process(self, spec):
      result = _calling(job.work, spec)
      for name, value in job.tally(result).items():
        beam.metrics.Metrics.counter(job.name, name).inc(value)
      yield result

  class Combine(beam.CombineFn):
    """job.add / job.merge as a Beam combiner."""

    def create_accumulator(self):
      return job.empty()

    def add_input(self, accumulator, result):
      return job.add(accumulator, result)

    def merge_accumulators(self, accumulators):
      return job.merge(list(accumulators))

    def extract_output(self, accumulator):
      return accumulator

  return Work(), Combine()


def run(job, specs, runner, options, total_bytes):
  """Runs `job` on `specs` with Beam's `options` (`pipeline_options`);
  logs progress lines while the runner reports counters, then the totals.

  Raises:
    cli.UserError: bad input (as a worker found it), a missing package, or
      a job that did not end DONE.
  """
  beam = _import_beam(runner)
  # Local runners start workers as new Python processes: they import the
  # project's modules from its folder.
  os.environ["PYTHONPATH"] = os.pathsep.join(
      p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)
  if not verbosity.details():
    logging_module.getLogger("apache_beam").setLevel(logging_module.WARNING)
  work, combine = _transforms(beam, job)
  try:
    pipeline = beam.Pipeline(options=options)
    _ = (pipeline
         | "Shards" >> beam.Create(specs)
         | "Spread" >> beam.Reshuffle()
         | "Work" >> beam.ParDo(work)
         | "Combine" >> beam.CombineGlobally(combine)
         | "Finish" >> beam.Map(lambda accumulator: _calling(job.finish,
                                                            accumulator)))
    result = pipeline.run()
    totals = _follow(result, job, total_bytes)
  except ImportError as e:
    raise _missing_package(runner, e) from None
  except cli.UserError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    found = user_error_in(e)
    if found is None:
      raise
    raise found from None
  shard_job.log_totals(job, len(specs), totals)
  return totals


def _follow(result, job, total_bytes):
  """Waits for the job's end, logging progress from its counters.

  Returns:
    dict counter name -> total.
  """
  meter = shard_job.progress_meter(job, total_bytes)
  while str(result.state).split(".")[-1] not in _TERMINAL_STATES:
    result.wait_until_finish(duration=int(shard_job.PROGRESS_INTERVAL * 1e3))
    _show(meter, _counters(result, job))
  state = str(result.wait_until_finish() or result.state).split(".")[-1]
  if state != "DONE":
    raise cli.UserError("The Beam job ended %s; see the runner's log for "
                        "why." % state)
  totals = _counters(result, job)
  _show(meter, totals)
  meter.finish()
  return totals


def _show(meter, totals):
  meter.done = totals.get(shard_job.BYTES, 0)
  shard_job.show_tallies(meter, totals)
  meter.advance(0)


def _counters(result, job):
  """dict counter name -> value of the job's Beam counters so far."""
  from apache_beam.metrics.metric import MetricsFilter  # pylint: disable=g-import-not-at-top
  counters = {}
  try:
    query = result.metrics().query(MetricsFilter().with_namespace(job.name))
  except NotImplementedError:
    return counters
  for counter in query["counters"]:
    value = counter.committed
    if value is None:
      value = counter.attempted
    counters[counter.key.metric.name] = (
        counters.get(counter.key.metric.name, 0) + (value or 0))
  logging.debug("Beam counters: %s", counters)
  return counters
