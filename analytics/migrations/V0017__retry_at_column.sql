ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `retry_at` Nullable(DateTime64(3, 'UTC'))
;
