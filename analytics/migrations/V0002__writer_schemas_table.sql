CREATE TABLE IF NOT EXISTS agentlog.writer_schemas (
    schema_id Int32,
    record String,
    full_name String,
    fields Array(String),
    columns Array(String),
    definition String,
    first_seen DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY schema_id
;
