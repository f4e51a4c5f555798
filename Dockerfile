# The agentlog worker and sink image (docker-compose.yml builds it for both services).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY runtime ./runtime
COPY consumers ./consumers
COPY analytics ./analytics
COPY infra ./infra
COPY schemas ./schemas
COPY examples ./examples
COPY ui ./ui
RUN pip install --no-cache-dir -e .
# The editable install's own modules compiled in the image: a new container's worker would
# otherwise compile them at its first imports, on a recovery's critical path.
RUN python -m compileall -q runtime consumers analytics infra examples ui
ENTRYPOINT ["agentlog"]
CMD ["worker", "--app", "examples.refund_agent:app"]
