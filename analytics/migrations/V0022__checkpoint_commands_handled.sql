ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `commands_handled` Array(Int64)
;
