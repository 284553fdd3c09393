# coding=utf-8
"""Derived files a later run reuses, and the sidecars that vouch for them.

A file a run makes and a later run may reuse instead of making it again
(the fine-tuning scripts' feature files, a Hugging Face model's conversion,
a reproduce.py cell's results) gets a sidecar when it is complete:
`<file>.meta.json`, holding what the file was made from (`depends_on`, a
JSON object the maker chooses, whose keys are the sidecar's) and, under
"file", its size, its sha256 and any further facts (e.g. its number of
records):

  {"task": "mrpc", "data_sha256": [...], ...,
   "file": {"bytes": 49143, "sha256": "9f2c...", "records": 200}}

Before reuse, `check` compares the file with its sidecar. A file without a
sidecar (its write did not finish), made from other inputs, of another
size (cut short by a full disk or an interrupted copy) or with another
checksum (damaged) is not reused; `check` says why, and the caller makes it
again or refuses it. A folder is vouched for file by file, by the sidecar
FOLDER_SIDECAR in it (`write_folder`, `check_folder`).

Paths are opened by userio/file_systems.py: local ones with Python's own
files, a remote one ("gs://...") through tf.io.gfile, imported only then,
so that light commands (reproduce.py) stay free of TensorFlow.
"""

import hashlib
import json
import os

from userio import disk_space
from userio import file_systems

SIDECAR_SUFFIX = ".meta.json"
# The sidecar's key of the file's description; no `depends_on` may use it.
FILE_KEY = "file"
# A folder's sidecar, in the folder, and its key of the files' descriptions.
FOLDER_SIDECAR = "files.meta.json"
FILES_KEY = "files"
_BLOCK = 1 << 20


def sidecar_path(path):
  """The sidecar of `path`."""
  return path + SIDECAR_SUFFIX


def describe_file(path):
  """{"bytes": size, "sha256": hex digest} of file `path`."""
  digest = hashlib.sha256()
  size = 0
  with file_systems.open_file(path, "rb") as reader:
    for block in iter(lambda: reader.read(_BLOCK), b""):
      digest.update(block)
      size += len(block)
  return {"bytes": size, "sha256": digest.hexdigest()}


def mismatch(path, recorded):
  """Why file `path` is not the file `recorded` describes (as
  `describe_file` did), or None when it is."""
  if not file_systems.exists(path):
    return "it does not exist"
  found = describe_file(path)
  if found["bytes"] != recorded.get("bytes"):
    return "it has %d bytes where %d were written (cut short or changed)" % (
        found["bytes"], recorded.get("bytes", -1))
  if found["sha256"] != recorded.get("sha256"):
    return "its bytes differ from those written (damaged or changed)"
  return None


def _write_json(path, value):
  """Writes `value` to `path` as JSON, through a temporary file."""
  folder, name = os.path.split(path)
  temporary = path + ".tmp"
  with disk_space.writing(folder or ".", name,
                          partial=lambda entry: entry == name + ".tmp"):
    with file_systems.open_file(temporary, "w") as writer:
      writer.write(json.dumps(value, indent=2, sort_keys=True) + "\n")
    if file_systems.is_remote(path):
      file_systems.gfile().rename(temporary, path, overwrite=True)
    else:
      os.replace(temporary, path)


def _read_json(path):
  """The JSON object in `path`, or None when absent or unreadable."""
  if not file_systems.exists(path):
    return None
  try:
    with file_systems.open_file(path, "r") as reader:
      value = json.load(reader)
  except (OSError, ValueError):
    return None
  return value if isinstance(value, dict) else None


def _normal(value):
  """`value` as it reads back from JSON (tuples as lists, sorted keys)."""
  return json.loads(json.dumps(value, sort_keys=True))


def remove(path):
  """Removes the sidecar of `path`, if any (before `path` is rewritten: a
  file without a sidecar is never reused)."""
  sidecar = sidecar_path(path)
  if file_systems.is_remote(sidecar):
    if file_systems.gfile().exists(sidecar):
      file_systems.gfile().remove(sidecar)
  elif os.path.exists(sidecar):
    os.remove(sidecar)


def write(path, depends_on, **facts):
  """Writes the sidecar of the complete file `path`: the keys of
  `depends_on` (a dict), and under FILE_KEY its size, checksum and `facts`
  (JSON values)."""
  if FILE_KEY in depends_on:
    raise ValueError("depends_on may not use the key %r." % FILE_KEY)
  record = dict(depends_on)
  record[FILE_KEY] = dict(facts, **describe_file(path))
  _write_json(sidecar_path(path), record)


def _changed_inputs(stored, depends_on):
  """Why `stored` (a sidecar's inputs) is not `depends_on`."""
  stored, depends_on = _normal(stored), _normal(depends_on)
  changed = sorted(key for key in set(stored) | set(depends_on)
                   if stored.get(key) != depends_on.get(key))
  return "it was made with another %s" % ", ".join(changed)


def read(path):
  """The sidecar of `path` as a dict, or None."""
  return _read_json(sidecar_path(path))


def check(path, depends_on):
  """Why `path` may not be reused as the file made from `depends_on`, or
  None when its sidecar vouches for it (same inputs, size and checksum).

  Returns:
    None, or a reason such as "it has 1200 bytes where 49143 were written
    (cut short or changed)".
  """
  if not file_systems.exists(path):
    return "it does not exist"
  name = os.path.basename(sidecar_path(path))
  record = read(path)
  if record is None:
    return ("it has no readable sidecar %s (an earlier write did not "
            "finish)" % name)
  written = record.pop(FILE_KEY, None)
  if _normal(record) != _normal(depends_on):
    return _changed_inputs(record, depends_on)
  if not isinstance(written, dict):
    return ("its sidecar %s records no size and checksum (an older "
            "format)" % name)
  return mismatch(path, written)


def describe_files(folder, names):
  """{name: describe_file} of the files `names` in `folder`."""
  return {name: describe_file(os.path.join(folder, name)) for name in names}


def check_files(folder, files):
  """Why the files of `folder` are not those `files` (describe_files'
  result) records, or None when they all are."""
  if not files:
    return "no file of it was recorded"
  for name, recorded in sorted(files.items()):
    reason = mismatch(os.path.join(folder, name), recorded)
    if reason is not None:
      return "%s: %s" % (name, reason)
  return None


def write_folder(folder, depends_on):
  """Vouches for every file of the complete `folder`: writes
  FOLDER_SIDECAR in it, the keys of `depends_on` and under FILES_KEY each
  file's size and checksum."""
  names = sorted(name for name in file_systems.listdir(folder)
                 if name != FOLDER_SIDECAR and
                 file_systems.isfile(os.path.join(folder, name)))
  record = dict(depends_on)
  record[FILES_KEY] = describe_files(folder, names)
  _write_json(os.path.join(folder, FOLDER_SIDECAR), record)


def check_folder(folder, depends_on):
  """Why `folder` may not be reused as the one made from `depends_on`, or
  None when its FOLDER_SIDECAR vouches for every file it recorded."""
  if not file_systems.isdir(folder):
    return "it does not exist"
  record = _read_json(os.path.join(folder, FOLDER_SIDECAR))
  if record is None:
    return ("it has no readable %s (an earlier write did not finish, or it "
            "was made by an older version)" % FOLDER_SIDECAR)
  files = record.pop(FILES_KEY, None)
  if _normal(record) != _normal(depends_on):
    return _changed_inputs(record, depends_on)
  return check_files(folder, files if isinstance(files, dict) else {})
