ALTER TABLE agentlog.events COMMENT COLUMN schema_version 'The schema registry version of the writer schema (the frame schema_id) under the record subject; filled by the sink from the frame, not an Avro field. 1 on rows stored before migration 9.'
;
