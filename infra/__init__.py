"""Starting and stopping the local services agentlog runs against.

PostgreSQL 15 (the schema registry's storage), the AxonOps schema registry and one Apache
Kafka KRaft node, each a detached process with its data, pid file and log under the state
folder. ``infra.stack`` ties them together; ``infra.cli`` is the ``agentlog infra`` command.
"""
