"""The Avro schemas of agentlog's records (one ``.avsc`` per record) and the registry policy
(``policy.json``), shipped as package data so an installed agentlog finds them with
``importlib.resources`` (see ``runtime.log.schemas.catalog``). No code lives here."""
