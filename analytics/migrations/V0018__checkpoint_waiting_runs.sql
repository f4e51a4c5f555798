ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `waiting_runs` Map(String, Int64), ADD COLUMN IF NOT EXISTS `waiting_timers` Map(String, Int64)
;
