"""Checkpoints and output folders: checks before a run depends on them,
the record of what made an output folder, and Hugging Face names and
conversion.
"""
