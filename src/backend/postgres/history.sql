-- A key's history (history.rs): each hold's row in lc_cli.holds from its
-- grant, moved to lc_cli.history when it ends, at most 100 kept per key
-- (crate::backend::history::DEFAULT_HISTORY). Run once, in one
-- transaction, under the schema's own transaction lock, by the first
-- lc-cli whose grant finds it missing; every function ends in _v1 so that
-- a later lc-cli can add its own beside them.
BEGIN;
SELECT pg_advisory_xact_lock(1819435008, 1);
CREATE SCHEMA IF NOT EXISTS lc_cli;
CREATE SEQUENCE IF NOT EXISTS lc_cli.grants;
CREATE TABLE IF NOT EXISTS lc_cli.keys (id bigint PRIMARY KEY, key text NOT NULL);

-- One row per running hold: its session (pid), the advisory lock it holds
-- (lock_id: the key's, or its --limit slot's), and what history keeps.
CREATE TABLE IF NOT EXISTS lc_cli.holds (
    pid int NOT NULL,
    key text NOT NULL,
    lock_id bigint NOT NULL,
    source text NOT NULL,
    ident text,
    peer text,
    mode bigint NOT NULL,
    token bigint,
    slot int,
    granted timestamptz NOT NULL,
    waited_ms bigint,
    fields text NOT NULL,
    PRIMARY KEY (pid, key)
);

CREATE SEQUENCE IF NOT EXISTS lc_cli.history_seq;
CREATE TABLE IF NOT EXISTS lc_cli.history (
    seq bigint PRIMARY KEY DEFAULT nextval('lc_cli.history_seq'),
    key text NOT NULL,
    source text NOT NULL,
    ident text,
    peer text,
    mode bigint NOT NULL,
    token bigint,
    slot int,
    granted timestamptz,
    waited_ms bigint,
    ended_at timestamptz NOT NULL,
    ended text NOT NULL,
    status int,
    by text,
    fields text NOT NULL
);
CREATE INDEX IF NOT EXISTS history_key ON lc_cli.history (key, seq);

-- The cap: the newest 100 entries of a key are kept.
CREATE OR REPLACE FUNCTION lc_cli.history_cap_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM lc_cli.history WHERE key = NEW.key AND seq < (
        SELECT h.seq FROM lc_cli.history h WHERE h.key = NEW.key
        ORDER BY h.seq DESC OFFSET 99 LIMIT 1);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS history_cap ON lc_cli.history;
CREATE TRIGGER history_cap AFTER INSERT ON lc_cli.history
    FOR EACH ROW EXECUTE FUNCTION lc_cli.history_cap_v1();

-- Whether session p_pid still holds the advisory lock p_lock_id (pg_locks
-- is readable by every role, unlike other roles' pg_stat_activity rows).
CREATE OR REPLACE FUNCTION lc_cli.holding_v1(p_pid int, p_lock_id bigint) RETURNS bool
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.pid = p_pid
          AND ((l.classid::int8 << 32) | l.objid::int8) = p_lock_id
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
$$;

-- Moves the holds of p_key (NULL: every key) by the sessions p_pids to the history, ended as
-- p_ended (with the command's status, and who ended it); the count moved.
CREATE OR REPLACE FUNCTION lc_cli.ended_v1(
    p_key text, p_pids int[], p_ended text, p_status int, p_by text) RETURNS int
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM lc_cli.holds h
        WHERE (p_key IS NULL OR h.key = p_key) AND h.pid = ANY(p_pids) RETURNING h.*),
    kept AS (
        INSERT INTO lc_cli.history (key, source, ident, peer, mode, token, slot, granted,
                                    waited_ms, ended_at, ended, status, by, fields)
        SELECT g.key, g.source, g.ident, g.peer, g.mode, g.token, g.slot, g.granted,
               g.waited_ms, clock_timestamp(), p_ended, p_status, p_by, g.fields
        FROM gone g ORDER BY g.granted RETURNING 1)
    SELECT count(*)::int FROM kept
$$;

-- The holds of p_key whose session no longer holds its lock (it died, was
-- cut off, the server restarted): moved to the history as freed, ended
-- when they were found.
CREATE OR REPLACE FUNCTION lc_cli.sweep_v1(p_key text) RETURNS int
LANGUAGE sql AS $$
    SELECT lc_cli.ended_v1(p_key, ARRAY(
        SELECT h.pid FROM lc_cli.holds h
        WHERE h.key = p_key AND NOT lc_cli.holding_v1(h.pid, h.lock_id)), 'freed', NULL, NULL)
$$;

-- At a grant: the dead holds of the key are swept, and this session's
-- hold recorded, if it holds p_lock_id (a grant given back at once, as a
-- superseded one is, records nothing). Its token: p_token, else the one
-- this session drew last (p_current: sent right behind the statement that
-- drew it), else one drawn here. The token, or NULL where nothing is held.
CREATE OR REPLACE FUNCTION lc_cli.hold_v1(
    p_key text, p_lock_id bigint, p_source text, p_mode bigint, p_token bigint,
    p_current bool, p_slot int, p_waited_ms bigint, p_fields text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    t bigint;
BEGIN
    IF NOT lc_cli.holding_v1(pg_backend_pid(), p_lock_id) THEN
        RETURN NULL;
    END IF;
    t := CASE WHEN p_current THEN currval('lc_cli.grants')
              ELSE coalesce(p_token, nextval('lc_cli.grants')) END;
    PERFORM lc_cli.sweep_v1(p_key);
    INSERT INTO lc_cli.holds (pid, key, lock_id, source, ident, peer, mode, token, slot,
                              granted, waited_ms, fields)
    VALUES (pg_backend_pid(), p_key, p_lock_id, p_source, current_user,
            host(inet_client_addr()), p_mode, t, p_slot, clock_timestamp(), p_waited_ms, p_fields)
    ON CONFLICT (pid, key) DO UPDATE SET
        lock_id = excluded.lock_id, source = excluded.source, ident = excluded.ident,
        peer = excluded.peer, mode = excluded.mode, token = excluded.token,
        slot = excluded.slot, granted = excluded.granted, waited_ms = excluded.waited_ms,
        fields = excluded.fields;
    RETURN t;
END
$$;
COMMIT;
