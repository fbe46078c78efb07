-- Since 0.1: fencing (consumer option `fenced`) keeps a lease per fenced key
-- (Tier A) or slot (Tier B); its functions are in src/sql/functions/06_fencing.sql.

create table :KEYQ_SCHEMA.lease (
  consumer_id int not null references :KEYQ_SCHEMA.consumer on delete cascade,
  slot        int not null,
  key_hash    bigint not null,   -- hashtextextended(key, 0); Tier B leases the slot as key ''
  holder      text not null,     -- the batch's random token
  until       timestamptz not null,
  primary key (consumer_id, slot, key_hash)
);
