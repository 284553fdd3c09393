"""bench/rss_by_mapping.py: the split of an smaps text by kind of mapping,
the pages counted from an allocator log, and one real run."""

import json
import os
import subprocess
import sys

from bench import rss_by_mapping
import conftest

# The tool as its users run it, from the repository's root.
_COMMAND = [sys.executable, "-m", "bench.rss_by_mapping"]

# Three mappings as /proc/PID/smaps lists them: a library, the heap and an
# anonymous 128 MiB one (the Rss lines are what counts).
_SMAPS = """\
7f0000000000-7f0000200000 r-xp 00000000 fd:01 123 /usr/lib/libfoo.so.1
Size:               2048 kB
Rss:                1024 kB
Pss:                1024 kB
55e000000000-55e000400000 rw-p 00000000 00:00 0 [heap]
Size:               4096 kB
Rss:                3000 kB
7e0000000000-7e0008000000 rw-p 00000000 00:00 0
Size:             131072 kB
Rss:               65536 kB
7d0000000000-7d0000100000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                  12 kB
"""


def test_resident_bytes_by_kind_of_mapping():
  totals = rss_by_mapping.resident_by_kind(_SMAPS)
  assert totals == {"shared libraries": 1024 * 1024,
                    "C heap": 3000 * 1024,
                    "anonymous, 64 MiB or more": 65536 * 1024,
                    "anonymous, under 64 MiB": 12 * 1024}


def test_pages_handed_out_count_each_page_once():
  # Region at 0x10000 (64 KiB). Allocations: 4096 bytes at 0x10000 (page
  # 16), 5000 bytes at 0x11000 (pages 17 and 18), then 100 bytes at 0x12010
  # again inside page 18: three distinct pages.
  log = [
      "I bfc_allocator.cc:186] Allocated memory at 0x10000 to 0x20000",
      "I bfc_allocator.cc:329] [mem-debug] AllocateRaw,mklcpu,4096,0x10000,",
      "I bfc_allocator.cc:329] [mem-debug] AllocateRaw,mklcpu,5000,0x11000,",
      "I bfc_allocator.cc:695] [mem-debug] DeallocateRaw,mklcpu,5000,0x11000,",
      "I bfc_allocator.cc:329] [mem-debug] AllocateRaw,mklcpu,100,0x12010,",
  ]
  handed_out, regions, reserved = rss_by_mapping.pages_handed_out(log)
  assert (handed_out, regions, reserved) == (3 * 4096, 1, 0x10000)


def test_a_real_command_peaks_above_what_it_allocates(tmp_path):
  code = "import time; x = bytearray(96 << 20); time.sleep(0.6)"
  timeline = tmp_path / "timeline.jsonl"
  done = subprocess.run(
      _COMMAND + ["--interval=0.05", "--timeline=%s" % timeline, "--",
                  sys.executable, "-c", code],
      cwd=conftest.REPO_ROOT, capture_output=True, text=True, timeout=120,
      check=True)
  result = json.loads(done.stdout)
  assert result["anonymous, 64 MiB or more"] >= 96 / 1024
  assert result["total"] >= result["anonymous, 64 MiB or more"]
  rows = [json.loads(line) for line in timeline.read_text().splitlines()]
  assert len(rows) >= 2
  assert max(row["total"] for row in rows) == result["total"]
  assert [row["seconds"] for row in rows] == sorted(
      row["seconds"] for row in rows)


def test_a_command_that_cannot_start_is_one_line():
  done = subprocess.run(
      _COMMAND + ["--", "/nonexistent/command"], cwd=conftest.REPO_ROOT,
      capture_output=True, text=True, timeout=60, check=False)
  assert done.returncode != 0
  assert "Traceback" not in done.stderr
  assert done.stderr.strip().splitlines() == [
      "cannot run /nonexistent/command: No such file or directory; give a "
      "command after --."]


def _processes_mentioning(token):
  """PIDs whose command line contains `token`."""
  pids = []
  for name in os.listdir("/proc"):
    try:
      with open("/proc/%s/cmdline" % name, "rb") as cmdline:
        if token.encode() in cmdline.read():
          pids.append(int(name))
    except (OSError, ValueError):
      continue
  return pids


def test_a_timeline_that_cannot_be_written_stops_the_command():
  # Writing the first sample to /dev/full fails; the tool must end with one
  # line naming the file and stop (and reap) the command it started.
  token = "rss_by_mapping_test_%d" % os.getpid()
  done = subprocess.run(
      _COMMAND + ["--interval=0.05", "--timeline=/dev/full", "--",
                  sys.executable, "-c",
                  "import time; time.sleep(600)  # " + token],
      cwd=conftest.REPO_ROOT, capture_output=True, text=True, timeout=120,
      check=False)
  assert done.returncode == 2
  assert "Traceback" not in done.stderr
  assert done.stderr.strip().splitlines()[-1] == (
      "rss_by_mapping.py: error: /dev/full: No space left on device")
  assert _processes_mentioning(token) == []
