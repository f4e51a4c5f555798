CREATE OR REPLACE VIEW agentlog.runs AS
SELECT
    run_id,
    any(topic) AS topic,
    any(partition) AS partition,
    anyIf(workflow, type IN ('RunStarted', 'RunRejected')) AS workflow,
    argMaxIf(type, offset, type IN ('RunStarted', 'RunParked', 'RunCompleted', 'RunFailed', 'RunCancelled', 'RunContinuedAsNew', 'RunRejected')) AS last_status_event,
    multiIf(
        last_status_event = 'RunCompleted', 'completed',
        last_status_event = 'RunFailed', 'failed',
        last_status_event = 'RunCancelled', 'cancelled',
        last_status_event = 'RunContinuedAsNew', 'continued_as_new',
        last_status_event = 'RunRejected', 'rejected',
        last_status_event = 'RunParked', 'parked',
        'running') AS status,
    minOrNullIf(occurred_at, type = 'RunStarted') AS started_at,
    maxOrNullIf(occurred_at, type IN ('RunCompleted', 'RunFailed', 'RunCancelled', 'RunContinuedAsNew', 'RunRejected')) AS ended_at,
    max(occurred_at) AS last_event_at,
    count() AS events,
    sum(size) AS bytes,
    max(seq) AS last_seq,
    countIf(type = 'RunParked') AS parked_times
FROM agentlog.events
WHERE fenced = 0 AND run_id != ''
GROUP BY run_id
;
CREATE OR REPLACE VIEW agentlog.model_calls AS
SELECT
    run_id,
    position,
    anyIf(model, type = 'ModelCallScheduled') AS model,
    anyIf(prompt_version, type = 'ModelCallScheduled') AS prompt_version,
    minOrNullIf(occurred_at, type = 'ModelCallScheduled') AS scheduled_at,
    maxOrNullIf(occurred_at, type IN ('ModelCallCompleted', 'ModelCallFailed')) AS finished_at,
    countIf(type = 'ModelCallScheduled') AS scheduled,
    countIf(type IN ('ModelCallCompleted', 'ModelCallFailed')) AS attempts,
    countIf(type = 'ModelCallCompleted') AS completions,
    countIf(type = 'ModelCallFailed') AS failures,
    maxIf(attempt, type IN ('ModelCallCompleted', 'ModelCallFailed')) AS last_attempt,
    multiIf(
        completions > 0, 'completed',
        countIf(type = 'ModelCallFailed' AND ifNull(final, true)) > 0, 'failed',
        attempts > 0, 'retrying',
        'pending') AS outcome,
    argMaxIf(latency_us, offset, type IN ('ModelCallCompleted', 'ModelCallFailed')) AS last_latency_us,
    sumIf(latency_us, type IN ('ModelCallCompleted', 'ModelCallFailed')) AS total_latency_us,
    ifNull(maxIf(in_doubt, type IN ('ModelCallCompleted', 'ModelCallFailed')), false) AS was_in_doubt,
    any(topic) AS topic,
    any(partition) AS partition
FROM agentlog.events
WHERE fenced = 0 AND type IN ('ModelCallScheduled', 'ModelCallCompleted', 'ModelCallFailed')
GROUP BY run_id, position
;
CREATE OR REPLACE VIEW agentlog.tool_calls AS
SELECT
    run_id,
    position,
    anyIf(tool, type = 'ToolCallScheduled') AS tool,
    anyIf(idempotency_key, type = 'ToolCallScheduled') AS idempotency_key,
    ifNull(anyIf(effect, type = 'ToolCallScheduled'), false) AS effecting,
    anyIf(args_hash, type = 'ToolCallScheduled') AS args_hash,
    minOrNullIf(occurred_at, type = 'ToolCallScheduled') AS scheduled_at,
    maxOrNullIf(occurred_at, type IN ('ToolCallCompleted', 'ToolCallFailed')) AS finished_at,
    countIf(type = 'ToolCallScheduled') AS scheduled,
    countIf(type IN ('ToolCallCompleted', 'ToolCallFailed')) AS attempts,
    countIf(type = 'ToolCallCompleted') AS completions,
    countIf(type = 'ToolCallFailed') AS failures,
    maxIf(attempt, type IN ('ToolCallCompleted', 'ToolCallFailed')) AS last_attempt,
    multiIf(
        completions > 0, 'completed',
        countIf(type = 'ToolCallFailed' AND ifNull(final, true)) > 0, 'failed',
        attempts > 0, 'retrying',
        'pending') AS outcome,
    argMaxIf(latency_us, offset, type IN ('ToolCallCompleted', 'ToolCallFailed')) AS last_latency_us,
    sumIf(latency_us, type IN ('ToolCallCompleted', 'ToolCallFailed')) AS total_latency_us,
    ifNull(maxIf(in_doubt, type IN ('ToolCallCompleted', 'ToolCallFailed')), false) AS was_in_doubt,
    any(topic) AS topic,
    any(partition) AS partition
FROM agentlog.events
WHERE fenced = 0 AND type IN ('ToolCallScheduled', 'ToolCallCompleted', 'ToolCallFailed')
GROUP BY run_id, position
;
CREATE OR REPLACE VIEW agentlog.divergences AS
SELECT
    run_id,
    occurred_at,
    multiIf(type = 'Redecided', 'redecided', type = 'NonDeterminismDetected', 'non_determinism', 'parked') AS kind,
    position,
    multiIf(
        type = 'Redecided',
        concat('check: ', ifNull(check, ''), '; original: ', ifNull(original, ''),
               '; replacement: ', ifNull(replacement, ''),
               if(ifNull(reason, '') != '', concat('; reason: ', reason), '')),
        type = 'NonDeterminismDetected',
        concat(ifNull(message, ''), ' (history: ', ifNull(expected, ''), '; code issued: ', ifNull(issued, ''), ')'),
        ifNull(reason, '')) AS detail,
    original, check, replacement, expected, issued, message, reason,
    topic, partition, offset, seq
FROM agentlog.events
WHERE fenced = 0 AND type IN ('Redecided', 'NonDeterminismDetected', 'RunParked')
;
CREATE OR REPLACE VIEW agentlog.history_size AS
SELECT
    run_id,
    workflow,
    status,
    events,
    bytes,
    toBool(events >= {warn_events:UInt64} OR bytes >= {warn_bytes:UInt64}) AS over_warn,
    toBool(events >= {limit_events:UInt64} OR bytes >= {limit_bytes:UInt64}) AS over_limit
FROM agentlog.runs
;
