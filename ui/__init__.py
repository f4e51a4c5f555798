"""``agentlog ui``: a read-only web UI over the audit store -- runs, a run's timeline, two runs' diff.

Pages are rendered on the server (``ui.pages`` with jinja2 templates, the timeline as SVG by
``ui.svg``) with a little JavaScript for clicks and live refresh; templates and assets ship as
package data. The UI reads ``analytics`` and nothing that writes (an import-linter contract).
"""
