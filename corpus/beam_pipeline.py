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

Failures. Bad input found on a worker (cli.UserError, or a full disk) does
not fail the worker's bundle (which runners retry, and whose traceback
they print): the worker counts a Beam counter whose name is the error's one
line (`_report`), the shard yields no result, and `finish` is skipped. The
job ends DONE, and the launching process ends with the line of the first
shard in order that failed. Apache Beam is imported here only, and
only with a Beam --runner: its absence, or that of a runner's extra
packages (apache-beam[gcp] for DataflowRunner), is one line naming what to
install.
"""

import contextlib
import logging as logging_module
import os
import re
import threading
import typing

from absl import logging

from corpus import beam_output
from corpus import shard_job
from userio import cli
from userio import disk_space
from userio import verbosity

_INSTALL = ("pip install -r requirements-beam.txt (it pins apache-beam)")
# Runners whose Python code needs an extra of apache-beam.
_EXTRAS = {"DataflowRunner": "gcp", "TestDataflowRunner": "gcp"}
# The namespaces of the counters whose names carry user errors and
# warnings back from the workers.
_ERRORS = "user errors"
_WARNINGS = "warnings"
_FINISH_ORDER = 10 ** 10 - 1
# What a worker reports as one line rather than fails with.
_USER_ERRORS = (cli.UserError, disk_space.WriteFailed)
# Beam's option of its workers' log level: their INFO lines (channels
# opened, harness started) are noise unless -v 1 asks for details.
_WORKER_LOG_LEVEL = "--default_sdk_harness_log_level"
_TERMINAL_STATES = ("DONE", "FAILED", "CANCELLED", "UPDATED", "DRAINED")
# The project's root folder, which the workers must import it from.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# argparse's error about one option, e.g. "argument --direct_num_workers:
# invalid int value: 'two'", and the fixes of its usual problems.
_OPTION_ERROR = re.compile(r"argument (\S+): (.*)", re.DOTALL)
_CHOICES = re.compile(r"(invalid choice: .*) \(choose from (.*)\)",
                      re.DOTALL)
_FIXES = (("invalid int value", "pass a whole number"),
          ("invalid float value", "pass a number"),
          ("expected one argument", "give it a value (%(option)s=VALUE)"),
          ("ignored explicit argument",
           "it takes no value: pass %(option)s alone"))
# The runner's log, in the run's own temporary folder.
_RUNNER_LOG = "runner.log"
# A worker process lost on a runner that does not run its work again
# (DirectRunner): the runner, how the worker ended, the runner, the job's
# size flag.
_LOST_WORKER = (
    "A worker process of %s %s, and %s does not run a lost worker's shards "
    "again; nothing was written. Run the command again (with a lower "
    "%s or --direct_num_workers if memory ran out).")


def _one_line(error):
  return " ".join(str(error).split())


def _import_beam(runner):
  """The apache_beam module; cli.UserError naming the package if missing."""
  try:
    with beam_output.quiet_import():
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
  _, unknown = _options_parser(beam_options).parse_known_args(args)
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


def _options_parser(beam_options):
  """The parser of every class of Beam's PipelineOptions, whose errors are
  cli.UserError (argparse's would print Beam's whole usage and exit)."""

  class Parser(beam_options._BeamArgumentParser):  # pylint: disable=protected-access
    """Beam's own parser class, ending in one line."""

    def error(self, message):
      raise cli.UserError(_option_error(message))

  parser = Parser(allow_abbrev=False)
  for options_class in beam_options.PipelineOptions.__subclasses__():
    options_class._add_argparse_args(parser)  # pylint: disable=protected-access
  return parser


def _option_error(message):
  """argparse's `message` about a Beam option, with the fix."""
  found = _OPTION_ERROR.fullmatch(message)
  if not found:
    return ("Apache Beam's PipelineOptions: %s; see Beam's documentation of "
            "its options." % _one_line(message))
  option, problem = found.groups()
  choices = _CHOICES.fullmatch(problem)
  if choices:
    problem, fix = choices.group(1), "choose from " + choices.group(2)
  else:
    fix = next((fix for start, fix in _FIXES if problem.startswith(start)),
               "see Beam's documentation of the option")
  return "Apache Beam's option %s: %s; %s." % (
      option, _one_line(problem), fix % {"option": option})


def _error_key(order, error):
  """The name of the counter that carries a user error back: ordered by
  `order` (a shard's index; _FINISH_ORDER for `finish`), then the one-line
  message."""
  return "%010d %s" % (order, _one_line(error))


def _report(beam, order, error):
  beam.metrics.Metrics.counter(_ERRORS, _error_key(order, error)).inc()


class _ThisThreadsWarnings(logging_module.Filter):
  """Takes the warnings this thread logs through absl out of the log and
  keeps their messages."""

  def __init__(self):
    super().__init__()
    self._thread = threading.get_ident()
    self.messages = []

  def filter(self, record):
    if (record.thread != self._thread or
        record.levelno < logging_module.WARNING):
      return True
    self.messages.append(record.getMessage())
    return False


@contextlib.contextmanager
def _relaying_warnings(beam, order):
  """Within it, the warnings the job logs (a document cut in two) become
  Beam counters, named as `_error_key` names errors, which the launching
  process logs at the end: a worker's own log is the runner's, apart from
  the command's lines, and a warning retried with its bundle comes once."""
  collected = _ThisThreadsWarnings()
  logging.get_absl_logger().addFilter(collected)
  try:
    yield
  finally:
    logging.get_absl_logger().removeFilter(collected)
    for message in collected.messages:
      beam.metrics.Metrics.counter(_WARNINGS,
                                   _error_key(order, message)).inc()


def _transforms(beam, job):
  """The DoFn, CombineFn and finishing function of `job`.

  A shard whose `work` raises a user error yields (error, None) instead of
  (None, result) and reports the error (`_report`); the accumulator is
  [job accumulator, whether any shard failed], and `finish` runs only when
  none did.
  """

  class Work(beam.DoFn):
    """job.work on one shard, its tallies as Beam counters."""

    def process(self, spec):
      try:
        with _relaying_warnings(beam, spec.index):
          result = job.work(spec)
      except _USER_ERRORS as e:
        _report(beam, spec.index, e)
        yield True, None
        return
      for name, value in job.tally(result).items():
        beam.metrics.Metrics.counter(job.name, name).inc(value)
      yield False, result

  class Combine(beam.CombineFn):
    """job.add / job.merge as a Beam combiner, with the failed flag."""

    def create_accumulator(self):
      return [job.empty(), False]

    def add_input(self, accumulator, failed_and_result):
      failed, result = failed_and_result
      if failed:
        accumulator[1] = True
      else:
        accumulator[0] = job.add(accumulator[0], result)
      return accumulator

    def merge_accumulators(self, accumulators):
      accumulators = list(accumulators)
      return [job.merge([a[0] for a in accumulators]),
              any(a[1] for a in accumulators)]

    def extract_output(self, accumulator):
      return accumulator

  def finish(accumulator):
    job_accumulator, failed = accumulator
    if failed:
      return
    try:
      with _relaying_warnings(beam, _FINISH_ORDER):
        job.finish(job_accumulator)
    except _USER_ERRORS as e:
      _report(beam, _FINISH_ORDER, e)

  return Work(), Combine(), finish


def run(job, specs, runner, options, total_bytes):
  """Runs `job` on `specs` with Beam's `options` (`pipeline_options`);
  logs progress lines while the runner reports counters, the warnings of
  the workers, then the totals. What the runner and its workers print
  themselves is kept out of the terminal, and their temporary files in a
  folder removed at the end (corpus/beam_output.py).

  Raises:
    cli.UserError: bad input (as a worker found it: that of the first shard
      in order that found any), a missing package, a worker process lost,
      or a job that did not end DONE.
  """
  beam = _import_beam(runner)
  # Local runners start workers as new Python processes: they import the
  # project's modules from its folder.
  os.environ["PYTHONPATH"] = os.pathsep.join(
      p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)
  meter = shard_job.progress_meter(job, total_bytes)
  with beam_output.own_temporary_folder() as folder:
    with beam_output.aside(os.path.join(folder, _RUNNER_LOG)):
      result, totals = _run_pipeline(beam, job, specs, runner, options, meter)
  errors = sorted(_counters(result, _ERRORS))
  if errors:
    raise cli.UserError(errors[0].partition(" ")[2])
  for warning in sorted(_counters(result, _WARNINGS)):
    logging.warning("%s", warning.partition(" ")[2])
  meter.finish()
  shard_job.log_totals(job, len(specs), totals)
  logging.info("Wrote %s", job.outputs(totals))
  return totals


def _run_pipeline(beam, job, specs, runner, options, meter):
  """Builds the pipeline and runs it to its end (`_follow`).

  Returns:
    (Beam's result, dict counter name -> total of the job's counters).
  """
  work, combine, finish = _transforms(beam, job)
  try:
    pipeline = beam.Pipeline(options=options)
  except ValueError as e:
    # Beam's own check of the options (e.g. Dataflow's project, region and
    # buckets), before anything runs.
    raise cli.UserError("--runner=%s: %s" % (runner, _one_line(e))) from None
  _ = (pipeline
       | "Shards" >> beam.Create(specs)
       | "Spread" >> beam.Reshuffle()
       # Any: pickled as they are (Beam's inferred types would give a failed
       # shard's None a coder of dicts).
       | "Work" >> beam.ParDo(work).with_output_types(typing.Any)
       | "Combine" >> beam.CombineGlobally(combine)
       | "Finish" >> beam.Map(finish))
  with beam_output.LostWorkers() as lost:
    try:
      result = pipeline.run()
      return result, _follow(result, job, meter)
    except ImportError as e:
      raise _missing_package(runner, e) from None
    except cli.UserError:
      raise
    except Exception:  # pylint: disable=broad-except
      ending = lost.ending()
      if ending is None:
        raise
      raise cli.UserError(_LOST_WORKER % (runner, ending, runner,
                                          job.size_flag)) from None


def _follow(result, job, meter):
  """Waits for the job's end, showing progress from its counters on
  `meter` (a progress.Progress of the input's bytes).

  Returns:
    dict counter name -> total.
  """
  while str(result.state).split(".")[-1] not in _TERMINAL_STATES:
    result.wait_until_finish(duration=int(shard_job.PROGRESS_INTERVAL * 1e3))
    _show(meter, _counters(result, job.name))
  state = str(result.wait_until_finish() or result.state).split(".")[-1]
  if state != "DONE":
    raise cli.UserError("The Beam job ended %s; see the runner's log for "
                        "why." % state)
  totals = _counters(result, job.name)
  _show(meter, totals)
  return totals


def _show(meter, totals):
  meter.done = totals.get(shard_job.BYTES, 0)
  shard_job.show_tallies(meter, totals)
  meter.advance(0)


def _counters(result, namespace):
  """dict counter name -> value of the Beam counters of `namespace` so
  far."""
  from apache_beam.metrics.metric import MetricsFilter  # pylint: disable=g-import-not-at-top
  counters = {}
  try:
    query = result.metrics().query(MetricsFilter().with_namespace(namespace))
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
