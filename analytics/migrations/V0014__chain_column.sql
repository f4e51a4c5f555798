ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `chain` Nullable(String)
;
