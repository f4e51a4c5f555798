ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `whatif` Nullable(String), ADD COLUMN IF NOT EXISTS `whatif_change` Nullable(String)
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
    anyIf(child_of, type = 'RunStarted') AS parent_run_id,
    anyIf(whatif, type = 'RunStarted') AS whatif
FROM agentlog.events
WHERE fenced = 0 AND run_id != ''
GROUP BY run_id
;
CREATE OR REPLACE VIEW agentlog.whatif_runs AS
WITH
    forks AS (
        SELECT
            run_id,
            anyIf(whatif, type = 'RunStarted') AS whatif_id,
            anyIf(parent_run_id, type = 'RunStarted') AS origin_run_id,
            ifNull(anyIf(reset_position, type = 'RunStarted'), 0) AS fork_position,
            anyIf(whatif_change, type = 'RunStarted') AS change,
            minOrNullIf(occurred_at, type = 'RunStarted') AS started_at
        FROM agentlog.events
        WHERE fenced = 0 AND type = 'RunStarted' AND whatif IS NOT NULL
        GROUP BY run_id
    ),
    sides AS (
        SELECT f.run_id AS run_id, f.run_id AS side_run_id, f.fork_position AS fork_position FROM forks AS f
        UNION ALL
        SELECT f.run_id AS run_id, f.origin_run_id AS side_run_id, f.fork_position AS fork_position FROM forks AS f
    ),
    spent AS (
        SELECT
            s.run_id AS run_id,
            s.side_run_id AS side_run_id,
            sum(ifNull(c.input_tokens, 0) + ifNull(c.output_tokens, 0)) AS tokens,
            sum(ifNull(c.cost_usd, 0)) AS cost_usd,
            min(c.priced) AS priced
        FROM sides AS s
        INNER JOIN agentlog.model_calls AS c ON c.run_id = s.side_run_id
        WHERE c.position >= s.fork_position
        GROUP BY s.run_id, s.side_run_id
    ),
    decided AS (
        SELECT
            s.run_id AS run_id,
            s.side_run_id AS side_run_id,
            arrayMap(x -> x.2, arraySort(x -> x.1, groupArray((e.position, concat(e.tool, ' ', e.args))))) AS tool_calls
        FROM sides AS s
        INNER JOIN agentlog.events AS e ON e.run_id = s.side_run_id
        WHERE e.fenced = 0 AND e.type = 'ToolCallScheduled' AND e.position >= s.fork_position
        GROUP BY s.run_id, s.side_run_id
    )
SELECT
    f.whatif_id AS whatif,
    f.run_id AS run_id,
    f.origin_run_id AS origin_run_id,
    f.fork_position AS fork_position,
    f.change AS change,
    f.started_at AS started_at,
    r.status AS status,
    o.status AS origin_status,
    r.workflow AS workflow,
    ifNull(dw.tool_calls, []) AS tool_calls,
    ifNull(dor.tool_calls, []) AS origin_tool_calls,
    toBool(tool_calls != origin_tool_calls OR r.status != o.status) AS changed,
    ifNull(sw.tokens, 0) AS tokens,
    ifNull(so.tokens, 0) AS origin_tokens,
    sw.cost_usd AS cost_usd,
    so.cost_usd AS origin_cost_usd
FROM forks AS f
LEFT JOIN agentlog.runs AS r ON r.run_id = f.run_id
LEFT JOIN agentlog.runs AS o ON o.run_id = f.origin_run_id
LEFT JOIN decided AS dw ON dw.run_id = f.run_id AND dw.side_run_id = f.run_id
LEFT JOIN decided AS dor ON dor.run_id = f.run_id AND dor.side_run_id = f.origin_run_id
LEFT JOIN spent AS sw ON sw.run_id = f.run_id AND sw.side_run_id = f.run_id
LEFT JOIN spent AS so ON so.run_id = f.run_id AND so.side_run_id = f.origin_run_id
SETTINGS join_use_nulls = 1
;
