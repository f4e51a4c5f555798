ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `compensates` Nullable(Int32)
;
