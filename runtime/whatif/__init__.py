"""What-if over production (``agentlog whatif``): recorded runs replayed as dry forks under a changed
prompt, model or code, and a report of which decisions change and what it costs.

By job: ``selection`` (which runs), ``change`` (what changes, checked against them), ``forks``
(where each run is cut, the forks started a window at a time), ``histories`` (many runs read in one
pass), ``state`` (a started what-if read back from the log), ``report`` (the comparison) and
``session`` (the steps in order: prepare, start, resume, report).
"""
