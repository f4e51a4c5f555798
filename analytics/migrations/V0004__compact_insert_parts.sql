ALTER TABLE agentlog.events MODIFY SETTING min_bytes_for_wide_part = 268435456
;
