ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `child_run_id` Nullable(String), ADD COLUMN IF NOT EXISTS `child_status` Nullable(String), ADD COLUMN IF NOT EXISTS `parent_close` Nullable(String), ADD COLUMN IF NOT EXISTS `cancel` Nullable(Bool), ADD COLUMN IF NOT EXISTS `child_of` Nullable(String), ADD COLUMN IF NOT EXISTS `spend` Nullable(String)
;
CREATE OR REPLACE VIEW agentlog.runs AS
SELECT
    run_id,
    any(topic) AS topic,
    any(partition) AS partition,
    anyIf(workflow, type IN ('RunStarted', 'RunRejected')) AS workflow,
    argMaxIf(type, offset, type IN ('RunStarted', 'RunCompleted', 'RunFailed', 'RunCancelled', 'RunParked', 'RunRejected', 'RunContinuedAsNew')) AS last_status_event,
    multiIf(
        last_status_event = 'RunStarted', 'running',
        last_status_event = 'RunCompleted', 'completed',
        last_status_event = 'RunFailed', 'failed',
        last_status_event = 'RunCancelled', 'cancelled',
        last_status_event = 'RunParked', 'parked',
        last_status_event = 'RunRejected', 'rejected',
        last_status_event = 'RunContinuedAsNew', 'continued_as_new',
        'unknown') AS status,
    minOrNullIf(occurred_at, type = 'RunStarted') AS started_at,
    maxOrNullIf(occurred_at, type IN ('RunCompleted', 'RunFailed', 'RunCancelled', 'RunParked', 'RunRejected', 'RunContinuedAsNew')) AS ended_at,
    max(occurred_at) AS last_event_at,
    count() AS events,
    sum(size) AS bytes,
    max(seq) AS last_seq,
    countIf(type = 'RunParked') AS parked_times,
    anyIf(budget, type = 'RunStarted') AS budget,
    anyIf(child_of, type = 'RunStarted') AS parent_run_id
FROM agentlog.events
WHERE fenced = 0 AND run_id != ''
GROUP BY run_id
;
