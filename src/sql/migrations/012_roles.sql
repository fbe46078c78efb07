-- Least privilege (docs/roles.md): grants in keyq's terms. An application
-- role gets no table, sequence or index right at all; it calls the engine's
-- SECURITY DEFINER functions, and each of them checks the calling role
-- (the SET ROLE target, else the login) against this table.
--
-- A grant names a queue (and a consumer) by name, '*' for every one; a
-- grant outlives a dropped and re-created queue of the same name, like a
-- policy. role_id is the grantee's oid: a renamed role keeps its grants.
-- privilege: produce (queue_name), consume (queue_name, consumer_name),
-- operate (neither: '').

create table :KEYQ_SCHEMA.role_grant (
  role_id       oid not null,
  privilege     text not null check (privilege in ('produce', 'consume', 'operate')),
  queue_name    text not null default '',
  consumer_name text not null default '',
  granted_at    timestamptz not null default now(),
  primary key (role_id, privilege, queue_name, consumer_name)
);

-- An existing database keeps working for the roles a DBA gave table rights
-- before this version (the engine's functions ran with the caller's rights
-- then): each such role gets the keyq grant its table rights amounted to.
-- The table rights themselves are left as they are (docs/roles.md says how
-- to revoke them once the roles use the engine's grants).
insert into :KEYQ_SCHEMA.role_grant (role_id, privilege, queue_name, consumer_name)
select r.oid, g.privilege, g.queue_name, g.consumer_name
  from pg_catalog.pg_roles r
  cross join lateral (values
    ('produce', '*', '', pg_catalog.has_table_privilege(r.oid, pg_catalog.format('%I.event', :KEYQ_SCHEMA_NAME), 'INSERT')),
    ('consume', '*', '*', pg_catalog.has_table_privilege(r.oid, pg_catalog.format('%I.cursor', :KEYQ_SCHEMA_NAME), 'UPDATE')),
    ('operate', '', '', pg_catalog.has_table_privilege(r.oid, pg_catalog.format('%I.queue', :KEYQ_SCHEMA_NAME), 'INSERT'))
  ) g(privilege, queue_name, consumer_name, held)
 where g.held
   and not r.rolsuper
   and r.rolname !~ '^pg_'
   and not pg_catalog.pg_has_role(r.oid, current_user, 'USAGE')
   and pg_catalog.has_schema_privilege(r.oid, :KEYQ_SCHEMA_NAME, 'USAGE');
