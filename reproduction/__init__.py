"""reproduce.py's parts: what runs (plan), running it resumably
(scheduler) and what the results say (report).
"""
