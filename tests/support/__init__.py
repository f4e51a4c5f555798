"""Helpers shared by the test folders (no tests here): the services and deployments, worker and
sink processes, reading the log back, waiting on conditions with a deadline, and the scripted apps
the worker subprocesses load (``support.agent_apps:app``)."""
