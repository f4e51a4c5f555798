CREATE TABLE IF NOT EXISTS agentlog.payloads (
    partition UInt32,
    offset Int64,
    run_id String,
    sha256 String,
    size UInt64,
    content String
)
ENGINE = ReplacingMergeTree
ORDER BY (partition, offset)
;
CREATE OR REPLACE VIEW agentlog.model_calls AS
WITH
    calls AS (
        SELECT
    run_id,
    position,
    anyIf(model, type = 'ModelCallScheduled') AS model,
    anyIf(prompt_version, type = 'ModelCallScheduled') AS prompt_version,
    anyIf(args_hash, type = 'ModelCallScheduled') AS args_hash,
    sumIf(input_tokens, type = 'ModelCallCompleted') AS input_tokens,
    sumIf(output_tokens, type = 'ModelCallCompleted') AS output_tokens,
    sumIf(cached_tokens, type = 'ModelCallCompleted') AS cached_tokens,
    anyIf(response_model, type = 'ModelCallCompleted') AS response_model,
    ifNull(response_model, ifNull(model, '')) AS priced_model,
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
    ),
    prompts AS (
    SELECT
        run_id,
        position,
        message_count,
        params,
        if(empty(message_slots),
           arrayMap(i -> toInt64(first_new + i), range(toUInt64(length(new_messages)))),
           arrayFlatten(arrayMap(
               i -> arrayMap(k -> toInt64(message_slots[2 * i - 1] + k), range(toUInt64(message_slots[2 * i]))),
               range(1, toUInt64(intDiv(length(message_slots), 2) + 1))))) AS slots
    FROM (
        SELECT run_id, position, offset, message_count, message_slots, new_messages, params,
            ifNull(sum(length(new_messages)) OVER (
                PARTITION BY run_id ORDER BY offset ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS first_new
        FROM agentlog.events
        WHERE fenced = 0 AND type = 'ModelCallScheduled'
    )
    ),
    sequences AS (
    SELECT s.run_id AS run_id,
        arrayMap(m -> if(startsWith(m, '{"agentlog_blob":') AND indexOf(b.shas, JSONExtractString(m, 'agentlog_blob', 'sha256')) > 0,
                         b.contents[indexOf(b.shas, JSONExtractString(m, 'agentlog_blob', 'sha256'))],
                         m),
                 s.sequence) AS sequence
    FROM (
    SELECT run_id,
        arrayFlatten(arrayMap(x -> x.2, arraySort(x -> x.1, groupArray((offset, arrayMap(
            (r, b) -> if(r = '', b, concat('{"content":', toJSONString(b), ',"role":', toJSONString(r), '}')), new_roles, new_messages)))))) AS sequence
    FROM agentlog.events
    WHERE fenced = 0 AND type = 'ModelCallScheduled'
    GROUP BY run_id
    ) AS s
    LEFT JOIN (
        SELECT refs.run_id AS run_id, groupArray(p.sha256) AS shas, groupArray(p.content) AS contents
        FROM (
            SELECT DISTINCT run_id, JSONExtractString(m, 'agentlog_blob', 'sha256') AS sha256
            FROM agentlog.events ARRAY JOIN new_messages AS m
            WHERE fenced = 0 AND type = 'ModelCallScheduled' AND startsWith(m, '{"agentlog_blob":')
        ) AS refs
        INNER JOIN (
            SELECT sha256, any(content) AS content FROM agentlog.payloads
            WHERE sha256 IN (
                SELECT JSONExtractString(m, 'agentlog_blob', 'sha256') FROM agentlog.events ARRAY JOIN new_messages AS m
                WHERE type = 'ModelCallScheduled' AND startsWith(m, '{"agentlog_blob":'))
            GROUP BY sha256
        ) AS p ON p.sha256 = refs.sha256
        GROUP BY refs.run_id
    ) AS b ON b.run_id = s.run_id
    ),
    starts AS (
        SELECT run_id, max(ifNull(reset_position, 0)) AS reset_position
        FROM agentlog.events WHERE fenced = 0 AND type = 'RunStarted' GROUP BY run_id
    )
SELECT
    calls.run_id AS run_id,
    calls.position AS position,
    calls.model AS model,
    calls.* EXCEPT (run_id, position, model),
    if(prompts.message_count >= 0,
       concat('[', arrayStringConcat(arrayMap(s -> sequences.sequence[s + 1], prompts.slots), ','), ']'),
       NULL) AS messages,
    prompts.params AS params,
    if(p.model = '' OR (calls.input_tokens IS NULL AND calls.output_tokens IS NULL), NULL,
       (ifNull(calls.input_tokens, 0) - ifNull(calls.cached_tokens, 0)) * p.input_per_token
       + ifNull(calls.cached_tokens, 0) * p.cached_per_token
       + ifNull(calls.output_tokens, 0) * p.output_per_token) AS cost_usd,
    p.model != '' AS priced,
    -- Copied from the original by a reset or fork (positions before its cut): not a call this run
    -- made, so not a cost of its own (audit cost leaves them out).
    toBool(calls.position < ifNull(starts.reset_position, 0)) AS copied
FROM calls
LEFT JOIN prompts ON prompts.run_id = calls.run_id AND prompts.position = calls.position
LEFT JOIN sequences ON sequences.run_id = calls.run_id
LEFT JOIN starts ON starts.run_id = calls.run_id
ASOF LEFT JOIN agentlog.model_prices AS p
    ON p.model = calls.priced_model AND ifNull(calls.scheduled_at, toDateTime64(0, 3, 'UTC')) >= p.from_date
SETTINGS join_use_nulls = 0, output_format_json_escape_forward_slashes = 0
;
