"""The benchmarks' apps with limits declared on every model and tool, far above anything a benchmark
sends: what the limiter costs a step when no limit is near (issue 36's budget: at most 5 % of worker
CPU per step). ``BENCH_LIMITS_FAR=1`` makes bench/_deploy.py start workers on these instead.

Each call then pays what a limited call pays on its fast path -- its needs worked out (the prompt's
tokens estimated), a permit of each taken from the worker's share and given back, the tokens
corrected from the usage -- and the workers share the limits over the limits topic."""

from __future__ import annotations

from bench.e2e_app import app as e2e
from examples.refund_agent import app as refund
from runtime.workflow.app import App

FAR_REQUESTS = 10_000_000.0  # a minute: about 170,000 a second
FAR_TOKENS = 10_000_000_000.0
FAR_CONCURRENT = 100_000


def _declare_far(app: App) -> App:
    app.limit(
        "models-far",
        models=tuple(app.models),
        requests_per_minute=FAR_REQUESTS,
        tokens_per_minute=FAR_TOKENS,
        concurrent=FAR_CONCURRENT,
    )
    app.limit(
        "tools-far", tools=tuple(app.tools), requests_per_minute=FAR_REQUESTS, concurrent=FAR_CONCURRENT
    )
    return app


_declare_far(refund)
_declare_far(e2e)
