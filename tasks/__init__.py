"""What the task scripts share: the layout of one text or a pair of texts,
and the official metrics of GLUE.
"""
