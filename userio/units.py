# coding=utf-8
"""Units the commands report sizes in."""

# Bytes in a gibibyte: memory figures are printed in GiB throughout.
GIB = 2**30
_BINARY_UNITS = (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10))


def describe_bytes(size):
  """`size` bytes in the largest binary unit it reaches, e.g. "23.4 MiB",
  "812 bytes"."""
  for name, unit in _BINARY_UNITS:
    if size >= unit:
      return "%.1f %s" % (size / unit, name)
  return "%d bytes" % size
