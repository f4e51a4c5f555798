"""Integration tests that need more than the root conftest's fixtures (which apply here too)."""
