ALTER TABLE agentlog.events ADD COLUMN IF NOT EXISTS `result_offset` Nullable(Int64), ADD COLUMN IF NOT EXISTS `result_sha256` Nullable(String), ADD COLUMN IF NOT EXISTS `result_size` Nullable(Int32)
;
