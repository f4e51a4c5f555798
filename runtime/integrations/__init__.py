"""Agents written with other frameworks, made durable on agentlog.

One module per framework (``pydantic_ai``, ``openai_agents``), each built on agentlog's public
workflow API (``App``, ``Context``) and on the framework's own public seams; each needs its
optional extra (``pip install 'agentlog[pydantic-ai]'``, ``'agentlog[openai-agents]'``). Nothing
else in agentlog imports them (an import-linter contract in pyproject.toml keeps it so).
"""
