ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `deadline` Nullable(Int64)
;
