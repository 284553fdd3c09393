"""What a user meets at the edges of a command: one-line errors and exit
statuses, output files that are never half-written, progress lines, and
a quiet TensorFlow import.
"""
