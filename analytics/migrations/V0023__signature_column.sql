ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `signature` Nullable(String)
;
