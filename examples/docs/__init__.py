"""Programs the documentation shows in parts (mkdocs snippets): each runs whole in a test
(tests/unit/test_docs_examples.py on the in-memory log, tests/integration/test_docs_service_examples.py
on the real services), so what the pages show is code that runs."""
