"""What the task scripts share: the official metrics of GLUE.
"""
