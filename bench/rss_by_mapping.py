# coding=utf-8
"""Where a command's resident memory lives at its peak, by kind of mapping.

Runs a command, reads /proc/PID/smaps every --interval seconds and, at the
sample with the largest resident set, splits it into shared libraries and
other files, the C heap, and anonymous mappings (TensorFlow's allocator,
glibc's thread arenas and large malloc blocks, thread stacks). With
--allocator_pages the command runs with TensorFlow's allocator logging on
(stderr only) and the pages that allocator ever handed out are counted from
its log, so the anonymous part splits into TensorFlow's tensors, that
allocator's chunk table (a 32nd of what it reserved) and the rest.

    python -m bench.rss_by_mapping --allocator_pages -- \
        python -m bench.process_memory --child --impl=ours --batch=2 \
        --checkpointing=true --inputs=fed

--timeline=FILE also writes every sample (seconds since the start, the
clock time, GiB by kind) as a JSON line, and --stderr=FILE keeps the command's log,
to line the two up.

The peak is of the samples, so it can miss a spike shorter than --interval;
`/usr/bin/time -v` gives the exact whole-process peak.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from userio import units

PAGE = 4096
CHUNK_TABLE_RATIO = 256 // 8  # bytes reserved per byte of chunk table
TIMEOUT_SECONDS = 3600

_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$")
_REGION = re.compile(r"Allocated memory at (0x[0-9a-f]+) to (0x[0-9a-f]+)")
_ALLOCATION = re.compile(r"\[mem-debug\] AllocateRaw,\w+,(\d+),(0x[0-9a-f]+)")


def kind_of(path, size):
  """The bucket of a mapping named `path` (smaps' last field) of `size`."""
  if path.startswith("/"):
    return "shared libraries" if ".so" in path else "other files"
  if path == "[heap]":
    return "C heap"
  if path:
    return "other"
  return ("anonymous, 64 MiB or more" if size >= 64 << 20
          else "anonymous, under 64 MiB")


def resident_by_kind(smaps_text):
  """{kind: resident bytes} of one /proc/PID/smaps text."""
  totals = {}
  kind = None
  for line in smaps_text.splitlines():
    mapping = _MAPPING.match(line)
    if mapping:
      size = int(mapping.group(2), 16) - int(mapping.group(1), 16)
      kind = kind_of(mapping.group(3).strip(), size)
    elif line.startswith("Rss:") and kind is not None:
      totals[kind] = totals.get(kind, 0) + int(line.split()[1]) * 1024
  return totals


def pages_handed_out(log_lines):
  """What TensorFlow's BFC allocator did, from its log
  (TF_CPP_VMODULE=bfc_allocator=4): each region it reserved and each
  allocation's size and address.

  Returns:
    (bytes of the 4 KiB pages it ever handed out, number of regions, bytes
    reserved in those regions).
  """
  regions = []
  touched = set()
  for line in log_lines:
    region = _REGION.search(line)
    if region:
      regions.append(tuple(int(value, 16) for value in region.groups()))
      continue
    allocation = _ALLOCATION.search(line)
    if allocation:
      size, address = int(allocation.group(1)), int(allocation.group(2), 16)
      touched.update(range(address // PAGE, (address + size - 1) // PAGE + 1))
  return (len(touched) * PAGE, len(regions),
          sum(end - start for start, end in regions))


def sample(command, interval, env, timeline, stderr_path):
  """Runs `command` with its standard error in `stderr_path`; returns (peak
  sample {kind: bytes}, exit code). Each sample goes to `timeline` (a file
  or None) as a JSON line."""
  with open(stderr_path, "w") as stderr, open(os.devnull, "w") as devnull:
    try:
      process = subprocess.Popen(command, stdout=devnull, stderr=stderr,
                                 env=env)
    except OSError as e:
      raise SystemExit("cannot run %s: %s; give a command after --." %
                       (command[0], e.strerror)) from e
  try:
    peak = _follow(process, command, interval, timeline)
  except BaseException:
    process.kill()  # not left running when sampling fails or is stopped
    process.wait(timeout=60)
    raise
  return peak, process.wait(timeout=60)


def _follow(process, command, interval, timeline):
  """Samples `process` until it exits; returns its largest sample."""
  peak = {}
  start = time.monotonic()
  deadline = start + TIMEOUT_SECONDS
  while process.poll() is None:
    if time.monotonic() > deadline:
      raise SystemExit("timed out after %d s: %s" % (TIMEOUT_SECONDS,
                                                     " ".join(command)))
    try:
      with open("/proc/%d/smaps" % process.pid) as smaps:
        totals = resident_by_kind(smaps.read())
    except (FileNotFoundError, ProcessLookupError):
      break
    if timeline is not None:
      row = {kind: round(value / units.GIB, 3) for kind, value in totals.items()}
      row["seconds"] = round(time.monotonic() - start, 2)
      row["clock"] = time.strftime("%H:%M:%S")
      row["total"] = round(sum(totals.values()) / units.GIB, 3)
      try:
        timeline.write(json.dumps(row) + "\n")
      except OSError as e:
        raise OSError(e.errno, e.strerror, timeline.name) from e
    if sum(totals.values()) > sum(peak.values()):
      peak = totals
    time.sleep(interval)
  return peak


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--interval", type=float, default=0.25,
                      help="seconds between samples")
  parser.add_argument("--allocator_pages", action="store_true",
                      help="count the pages TensorFlow's allocator handed "
                      "out (logs every allocation to stderr: slower)")
  parser.add_argument("--timeline", metavar="FILE",
                      help="write every sample to FILE as JSON lines")
  parser.add_argument("--stderr", metavar="FILE",
                      help="keep the command's standard error in FILE")
  parser.add_argument("command", nargs=argparse.REMAINDER,
                      help="-- then the command to run")
  args = parser.parse_args()
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  if not command:
    parser.error("give the command to run after --")
  env = dict(os.environ)
  if args.allocator_pages:
    env.update(TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="bfc_allocator=4")
  if args.interval <= 0:
    parser.error("--interval=%s: give a positive number of seconds" %
                 args.interval)
  timeline = None
  if args.timeline:
    try:
      timeline = open(args.timeline, "w", buffering=1)  # a line at a time
    except OSError as e:
      parser.error("--timeline=%s: %s" % (args.timeline, e.strerror))
  log_path = args.stderr
  if not log_path:
    handle, log_path = tempfile.mkstemp(prefix="rss_by_mapping_",
                                        suffix=".log")
    os.close(handle)
  try:
    peak, code = sample(command, args.interval, env, timeline, log_path)
    if timeline is not None:
      timeline.close()
    if args.allocator_pages:
      with open(log_path, errors="replace") as log:
        handed_out, regions, reserved = pages_handed_out(log)
  except OSError as e:
    parser.error("%s: %s" % (e.filename or log_path, e.strerror))
  finally:
    if not args.stderr and os.path.exists(log_path):
      os.unlink(log_path)
  result = {kind: round(value / units.GIB, 3) for kind, value in sorted(peak.items())}
  result["total"] = round(sum(peak.values()) / units.GIB, 3)
  if args.allocator_pages:
    result["TensorFlow allocator, pages handed out by exit"] = round(
        handed_out / units.GIB, 3)
    result["TensorFlow allocator regions"] = regions
    result["TensorFlow allocator, reserved in its regions"] = round(
        reserved / units.GIB, 3)
    # The allocator keeps an 8-byte chunk handle for every 256 bytes it
    # reserved, written when the region is made, so all of it is resident
    # however little of the region is used.
    result["TensorFlow allocator, its chunk table"] = round(
        reserved / CHUNK_TABLE_RATIO / units.GIB, 3)
  print(json.dumps(result, indent=1))
  if code:
    raise SystemExit("the command exited with %d" % code)


if __name__ == "__main__":
  sys.exit(main())
