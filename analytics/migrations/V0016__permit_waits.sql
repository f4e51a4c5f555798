ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `limit` Nullable(String), ADD COLUMN IF NOT EXISTS `key` Nullable(String), ADD COLUMN IF NOT EXISTS `dimension` Nullable(String), ADD COLUMN IF NOT EXISTS `needed` Nullable(Int64), ADD COLUMN IF NOT EXISTS `waited_ms` Nullable(Int64)
;
CREATE OR REPLACE VIEW agentlog.permit_waits AS
SELECT
    run_id,
    position,
    attempt,
    `limit`,
    `key`,
    dimension,
    waited_ms,
    occurred_at AS granted_at,
    occurred_at - toIntervalMillisecond(ifNull(waited_ms, 0)) AS waiting_since,
    concat('position ', toString(position), ' (attempt ', toString(ifNull(attempt, 1)), ') waited ',
           toString(round(ifNull(waited_ms, 0) / 1000, 1)), ' s for ',
           ifNull(`limit`, '?'), if(isNull(`key`), '', concat('[', `key`, ']')), ' ',
           multiIf(dimension = 'requests_per_minute', 'requests/min',
                   dimension = 'tokens_per_minute', 'tokens/min',
                   dimension = 'concurrent', 'concurrent calls', ifNull(dimension, '?'))) AS detail,
    topic, partition, offset, seq
FROM agentlog.events
WHERE fenced = 0 AND type = 'PermitGranted'
;
