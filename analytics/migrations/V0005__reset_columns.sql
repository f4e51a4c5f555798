ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `reset_position` Nullable(Int32), ADD COLUMN IF NOT EXISTS `key_root` Nullable(String)
;
