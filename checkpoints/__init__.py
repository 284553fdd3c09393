"""Checkpoints and output folders: the checkpoints a run's folder holds and
the checks before a run depends on one, the record of what made an output
folder, and Hugging Face names and conversion.
"""
