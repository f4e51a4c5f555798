ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `details` Nullable(String), ADD COLUMN IF NOT EXISTS `beat_at` Nullable(DateTime64(3, 'UTC'))
;
