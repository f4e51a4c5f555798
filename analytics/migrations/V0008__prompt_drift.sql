ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `recorded_prompt_version` Nullable(String), ADD COLUMN IF NOT EXISTS `issued_prompt_version` Nullable(String), ADD COLUMN IF NOT EXISTS `recorded_args_hash` Nullable(String), ADD COLUMN IF NOT EXISTS `issued_args_hash` Nullable(String)
;
CREATE OR REPLACE VIEW agentlog.prompt_drift AS
SELECT
    run_id,
    occurred_at,
    position,
    model,
    recorded_prompt_version,
    issued_prompt_version,
    recorded_args_hash,
    issued_args_hash,
    concat('position ', toString(position), ' decided under prompt ', ifNull(recorded_prompt_version, 'none'),
           '; code now issues ', ifNull(issued_prompt_version, 'none')) AS detail,
    topic, partition, offset, seq
FROM agentlog.events
WHERE fenced = 0 AND type = 'PromptDrifted'
;
