"""Model clients a workflow registers by name (``App.model``)."""
