# coding=utf-8
"""The optimizers optimization.create_optimizer builds, by the names the
--optimizer flag takes.

Kept apart from optimization.py, which loads TensorFlow, so that flag
definitions (and so --help) and the memory planner do without it.
"""

OPTIMIZERS = ("adamw", "lamb")
