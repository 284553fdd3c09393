"""Benchmarks; run each from the project's root as `python -m bench.<name>`.
"""
