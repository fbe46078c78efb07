-- keyq engine, part 0 (first: the others call it): least privilege (docs/roles.md).
--
-- The engine's entry functions (entry_functions() below) run SECURITY
-- DEFINER as the role that migrated the schema (its owner), with
-- search_path pinned to pg_catalog, pg_temp; PUBLIC may execute none of the
-- schema's functions. An application role holds no right on a table: it
-- gets USAGE on the schema and EXECUTE on the entry functions its grants
-- need, and each entry function checks the caller with authorize() before
-- it reads or writes anything. migrate() applies all of this after it
-- creates the function set (src/engine/migrate.ts).
--
-- The caller is the SET ROLE target when one is set (Supabase's
-- authenticator pattern, SET LOCAL ROLE in a pooled transaction), else the
-- login (session_user): inside a SECURITY DEFINER function current_user is
-- the owner. Postgres lets a session set only a role its login is a member
-- of (SET ROLE, set_config, startup options and ALTER ROLE … SET alike), so
-- the caller is a role the session may act as anyway. Postgres checks
-- EXECUTE against the role that calls, too: both must pass.

-- The role calling the engine.
create function :KEYQ_SCHEMA.caller() returns oid
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  -- A catalog cache lookup: the pg_roles view joins pg_db_role_setting, and
  -- this runs in every entry function (0.13 ms a call on a 2-core server).
  return pg_catalog.to_regrole(pg_catalog.quote_ident(case pg_catalog.current_setting('role')
                                                        when 'none' then pg_catalog.session_user()::text
                                                        else pg_catalog.current_setting('role') end))::oid;
end $$;

-- Which entry function each grant reaches (operate reaches all of them; the
-- owner-only grant_access/revoke_access are in no list). The body of each
-- function still checks queue and consumer: EXECUTE is the outer door only.
create function :KEYQ_SCHEMA.entry_functions() returns table (fn text, privilege text)
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
  select f, p from (values
    ('send', 'produce'), ('send_batch', 'produce'), ('send_rows', 'produce'), ('status', 'produce'),
    ('subscribe', 'consume'), ('receive', 'consume'), ('receive_plain', 'consume'), ('receive_plain_rows', 'consume'),
    ('receive_exclusive', 'consume'), ('receive_ordered', 'consume'), ('receive_ordered_wire', 'consume'),
    ('receive_ordered_rows', 'consume'),
    ('prepare_exclusive', 'consume'), ('start_run', 'consume'),
    ('ack', 'consume'), ('fence', 'consume'), ('unfence', 'consume'), ('consumer_slot_of', 'consume'),
    ('blocked_keys', 'consume'), ('tick', 'consume'), ('maintain', 'consume'), ('status', 'consume'),
    ('dlq_list', 'consume'), ('dlq_count', 'consume'),
    ('create_queue', 'operate'), ('update_queue', 'operate'), ('drop_queue', 'operate'),
    ('list_queues', 'operate'), ('unsubscribe', 'operate'), ('dlq_replay', 'operate'),
    ('dlq_replay_where', 'operate'), ('dlq_purge', 'operate'), ('tick_all', 'operate'),
    ('rotate', 'operate'), ('list_grants', 'operate'),
    ('seek', 'operate'), ('key_history', 'operate'), ('replay_key', 'operate'), ('set_paused', 'operate'),
    ('settle_head', 'operate')
  ) v(f, p)
  union all
  -- operate reaches every function the other grants reach.
  select f, 'operate' from (values ('send'), ('send_batch'), ('send_rows'), ('status'), ('subscribe'), ('receive'),
    ('receive_plain'), ('receive_plain_rows'), ('receive_exclusive'), ('receive_ordered'), ('receive_ordered_wire'),
    ('receive_ordered_rows'), ('prepare_exclusive'),
    ('start_run'), ('ack'),
    ('fence'), ('unfence'), ('consumer_slot_of'), ('blocked_keys'), ('tick'), ('maintain'),
    ('dlq_list'), ('dlq_count')) v(f)
$$;

-- True when the caller may do `need` on queue (and consumer):
--   own       only the owner (a member of the role that owns the functions; superusers);
--   operate   the owner or an operate grant;
--   produce   … or a produce grant on queue (or '*');
--   consume   … or a consume grant on (queue, consumer), either may be '*';
--   housekeep … or a consume grant on any consumer of queue (policy ticks
--             and maintenance that run() does; forcing them is operate);
--   see       … or a produce or consume grant on queue (its status).
-- A grant counts for every role that has its grantee's privileges
-- (pg_has_role USAGE: membership with INHERIT, or after SET ROLE).
create function :KEYQ_SCHEMA.permits(need text, queue text default null, consumer text default null)
returns boolean
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare who oid := :KEYQ_SCHEMA.caller();
begin
  if who is null then
    return false;
  end if;
  if pg_has_role(who, current_user, 'USAGE') then
    return true;
  end if;
  if need = 'own' then
    return false;
  end if;
  return exists (
    select 1 from :KEYQ_SCHEMA.role_grant g
     where (g.privilege = 'operate'
            or (need = 'produce' and g.privilege = 'produce' and g.queue_name in (queue, '*'))
            or (need = 'consume' and g.privilege = 'consume' and g.queue_name in (queue, '*')
                and g.consumer_name in (consumer, '*'))
            or (need = 'housekeep' and g.privilege = 'consume' and g.queue_name in (queue, '*'))
            or (need = 'see' and g.privilege in ('produce', 'consume') and g.queue_name in (queue, '*')))
       and case when g.role_id = who then true
                when not exists (select 1 from pg_catalog.pg_roles r where r.oid = g.role_id) then false
                else pg_has_role(who, g.role_id, 'USAGE') end);
end $$;

-- Raises KQ020 (PERMISSION_DENIED) unless permits(need, queue, consumer).
-- Returns true so a function can call it first thing in its declarations.
create function :KEYQ_SCHEMA.authorize(need text, queue text default null, consumer text default null)
returns boolean
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare who text;
begin
  if :KEYQ_SCHEMA.permits(need, queue, consumer) then
    return true;
  end if;
  who := case current_setting('role') when 'none' then session_user::text else current_setting('role') end;
  raise exception '%', case need
      when 'produce' then format('Role "%s" may not send to queue "%s"; the schema owner grants it with grant({ role: "%s", produce: ["%s"] }).', who, queue, who, queue)
      when 'consume' then format('Role "%s" may not consume as consumer "%s" of queue "%s"; the schema owner grants it with grant({ role: "%s", consume: { %s: ["%s"] } }).', who, coalesce(consumer, '*'), coalesce(queue, '*'), who, coalesce(queue, '*'), coalesce(consumer, '*'))
      when 'housekeep' then format('Role "%s" may not tick or maintain queue "%s": that takes a consume grant on one of its consumers (policy ticks) or operate (forced ones).', who, queue)
      when 'see' then format('Role "%s" may not read the status of queue "%s"; it takes a produce or consume grant on it, or operate.', who, queue)
      when 'own' then format('Only the schema owner may change grants; role "%s" is not a member of "%s".', who, current_user)
      else format('Role "%s" may not %s: that takes the operate grant (grant({ role: "%s", operate: true }) by the schema owner).', who, need, who) end
    using errcode = 'KQ020', hint = 'KEYQ:PERMISSION_DENIED';
end $$;

-- Gives each role that holds grants (or only role r) USAGE on the schema and
-- EXECUTE on the entry functions its grants reach. migrate() calls it after
-- re-creating the function set (which drops every per-function grant).
create function :KEYQ_SCHEMA.apply_grants(r oid default null) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare g record; n int := 0;
begin
  for g in select distinct rl.rolname, p.oid::regprocedure as fn
             from :KEYQ_SCHEMA.role_grant rg
             join pg_catalog.pg_roles rl on rl.oid = rg.role_id
             join :KEYQ_SCHEMA.entry_functions() e on e.privilege = rg.privilege
             join pg_catalog.pg_proc p on p.proname = e.fn
                  and p.pronamespace = :KEYQ_SCHEMA_NAME::regnamespace
            where r is null or rg.role_id = r
  loop
    execute format('grant usage on schema %I to %I', :KEYQ_SCHEMA_NAME, g.rolname);
    execute format('grant execute on function %s to %I', g.fn, g.rolname);
    n := n + 1;
  end loop;
  return n;
end $$;

-- One role's grants as {role, produce: [queue…], consume: {queue: [consumer…]}, operate}.
create function :KEYQ_SCHEMA.role_json(r oid) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object(
    'role', (select rolname from pg_catalog.pg_roles where oid = r),
    'produce', coalesce((select jsonb_agg(queue_name order by queue_name) from :KEYQ_SCHEMA.role_grant
                          where role_id = r and privilege = 'produce'), '[]'),
    'consume', coalesce((select jsonb_object_agg(queue_name, cs) from (
                           select queue_name, jsonb_agg(consumer_name order by consumer_name) cs
                             from :KEYQ_SCHEMA.role_grant where role_id = r and privilege = 'consume'
                            group by queue_name) x), '{}'),
    'operate', exists (select 1 from :KEYQ_SCHEMA.role_grant where role_id = r and privilege = 'operate'))
$$;

-- Every role's grants, by role name (grants of dropped roles are left out).
create function :KEYQ_SCHEMA.list_grants() returns jsonb
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare ok boolean := :KEYQ_SCHEMA.authorize('operate');
begin
  return coalesce((select jsonb_agg(:KEYQ_SCHEMA.role_json(r.oid) order by r.rolname)
                     from pg_catalog.pg_roles r
                    where r.oid in (select role_id from :KEYQ_SCHEMA.role_grant)), '[]');
end $$;

-- The grantee's oid; KQ021 (ROLE_NOT_FOUND) when there is no such role.
create function :KEYQ_SCHEMA.role_oid(role text) returns oid
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare r oid;
begin
  select oid into r from pg_catalog.pg_roles where rolname = role;
  if not found then
    raise exception 'Role "%" does not exist; create it first (CREATE ROLE "%" LOGIN …, or NOLOGIN for a group).', role, role
      using errcode = 'KQ021', hint = 'KEYQ:ROLE_NOT_FOUND';
  end if;
  return r;
end $$;

-- Adds grants (idempotent). produce: queue names; consume: {"queue":
-- ["consumer", …]}; '*' names every queue or consumer. A named queue must
-- exist (a typo would otherwise grant nothing); a consumer need not yet
-- (the operator may subscribe it after). Owner only. Returns the role's grants.
create function :KEYQ_SCHEMA.grant_access(role text, produce text[] default '{}', consume jsonb default '{}',
                                          operate boolean default false) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare ok boolean := :KEYQ_SCHEMA.authorize('own'); r oid := :KEYQ_SCHEMA.role_oid(role); qn text;
begin
  -- Dropped roles' grants go first: their oid could come back as a new role's.
  delete from :KEYQ_SCHEMA.role_grant g where not exists (select 1 from pg_catalog.pg_roles x where x.oid = g.role_id);
  for qn in select unnest(produce) union select jsonb_object_keys(consume) loop
    if qn <> '*' then
      perform :KEYQ_SCHEMA.get_queue(qn);
    end if;
  end loop;
  insert into :KEYQ_SCHEMA.role_grant (role_id, privilege, queue_name, consumer_name)
  select r, 'produce', p, '' from unnest(produce) p
  union all
  select r, 'consume', c.key, x from jsonb_each(consume) c, jsonb_array_elements_text(c.value) x
  union all
  select r, 'operate', '', '' where operate
  on conflict do nothing;
  perform :KEYQ_SCHEMA.apply_grants(r);
  return :KEYQ_SCHEMA.role_json(r);
end $$;

-- Removes grants: the listed ones, or every one of the role with every_grant.
-- The role loses EXECUTE on the engine's functions its remaining grants do
-- not reach (and USAGE on the schema when none remains). Owner only.
create function :KEYQ_SCHEMA.revoke_access(role text, produce text[] default '{}', consume jsonb default '{}',
                                           operate boolean default false, every_grant boolean default false)
returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare ok boolean := :KEYQ_SCHEMA.authorize('own'); r oid := :KEYQ_SCHEMA.role_oid(role); f regprocedure;
begin
  delete from :KEYQ_SCHEMA.role_grant g
   where g.role_id = r
     and (every_grant
          or (g.privilege = 'produce' and g.queue_name = any (produce))
          or (g.privilege = 'consume' and (g.queue_name, g.consumer_name) in
                (select c.key, x from jsonb_each(consume) c, jsonb_array_elements_text(c.value) x))
          or (g.privilege = 'operate' and operate));
  for f in select p.oid from pg_catalog.pg_proc p where p.pronamespace = :KEYQ_SCHEMA_NAME::regnamespace loop
    execute format('revoke execute on function %s from %I', f, role);
  end loop;
  if not exists (select 1 from :KEYQ_SCHEMA.role_grant where role_id = r) then
    execute format('revoke usage on schema %I from %I', :KEYQ_SCHEMA_NAME, role);
  end if;
  perform :KEYQ_SCHEMA.apply_grants(r);
  return :KEYQ_SCHEMA.role_json(r);
end $$;
