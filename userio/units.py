# coding=utf-8
"""Units the commands report sizes in."""

# Bytes in a gibibyte: memory figures are printed in GiB throughout.
GIB = 2**30
