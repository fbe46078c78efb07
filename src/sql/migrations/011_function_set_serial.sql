-- Function sets of one keyq version are ordered by a serial (bumped by the
-- build whenever the set's hash changes): migrate() never replaces a newer
-- set of its own version, and refuses a different set with the same serial,
-- instead of two builds replacing each other's functions on every start.
alter table :KEYQ_SCHEMA.function_set add column serial int not null default 0;
