"""Permits for the calls a deployment's runs make, shared by every worker (``permits`` is the seam)."""
