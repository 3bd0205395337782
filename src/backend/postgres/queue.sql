-- What deploy queues keep in PostgreSQL (queue.rs): the requests' fields,
-- the keys' marks, and the functions that read and change them. Run once,
-- in one transaction, under the schema's own transaction lock; every name
-- ends in _v1 so that a later lc-cli can add its own beside them.
BEGIN;
SELECT pg_advisory_xact_lock(1819435008, 1);
CREATE SCHEMA IF NOT EXISTS lc_cli;
CREATE SEQUENCE IF NOT EXISTS lc_cli.grants;
CREATE TABLE IF NOT EXISTS lc_cli.keys (id bigint PRIMARY KEY, key text NOT NULL);

-- One row per lc-cli session that waits or holds with fields: gone with
-- the session (its release, or the next arrival on the key finds it dead);
-- unlogged, so a crash of the server empties it, as it ends the sessions.
-- by_*: the marker a newer --newest request writes (superseded).
CREATE SEQUENCE IF NOT EXISTS lc_cli.request_ids;
CREATE UNLOGGED TABLE IF NOT EXISTS lc_cli.requests (
    pid int PRIMARY KEY,
    rid bigint NOT NULL,
    started timestamptz,
    id bigint NOT NULL,
    key text NOT NULL,
    source text NOT NULL,
    fields text NOT NULL,
    ord bigint,
    newest bool NOT NULL,
    cancel bool NOT NULL,
    since timestamptz NOT NULL,
    by_pid int,
    by_source text,
    by_fields text);
CREATE INDEX IF NOT EXISTS requests_id ON lc_cli.requests (id);

-- Per key, the highest --order whose command ended with status 0.
CREATE TABLE IF NOT EXISTS lc_cli.marks (key text PRIMARY KEY, mark bigint NOT NULL);

-- Whether the session of a row still lives: it waits for or holds the
-- row's lock, or it is the very session that wrote it (between its row and
-- its lock call); a pid reused by a later session is not the row's.
CREATE OR REPLACE FUNCTION lc_cli.live_v1(r lc_cli.requests) RETURNS bool
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.pid = r.pid AND l.locktype = 'advisory' AND l.objsubid = 1
          AND ((l.classid::int8 << 32) | l.objid::int8) = r.id)
    OR EXISTS (
        SELECT 1 FROM pg_stat_activity a
        WHERE a.pid = r.pid
          AND (a.backend_start = r.started
               OR (a.backend_start IS NULL AND r.since > clock_timestamp() - interval '10 s')))
$$;

-- The pid that holds lock `id` exclusively, if any.
CREATE OR REPLACE FUNCTION lc_cli.holder_v1(id bigint) RETURNS int
LANGUAGE sql STABLE AS $$
    SELECT l.pid FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.mode = 'ExclusiveLock' AND ((l.classid::int8 << 32) | l.objid::int8) = id
    LIMIT 1
$$;

-- A request's arrival, before its lock call (pipelined behind it): under
-- the key's transaction lock, so arrivals and grants of one key are seen
-- one after the other. Outdated (order below the mark): no row, no wait.
-- --newest: superseded at once by a waiting --newest request of a higher
-- order; else it marks every waiting --newest request (by_*), which the
-- next statement interrupts. --cancel-running: notifies a holder that took
-- the key with it (not of a higher order), aimed at its request id, and
-- listens for its own. Then its row, and 'go'.
CREATE OR REPLACE FUNCTION lc_cli.arrive_v1(
    p_id bigint, p_key text, p_source text, p_fields text,
    p_ord bigint, p_newest bool, p_cancel bool,
    OUT verdict text, OUT mark bigint, OUT by_source text, OUT by_fields text, OUT rid bigint)
LANGUAGE plpgsql AS $$
DECLARE
    me int := pg_backend_pid();
    hp int;
    w lc_cli.requests;
    h lc_cli.requests;
BEGIN
    PERFORM pg_advisory_xact_lock(1819435010, hashtext(p_key));
    DELETE FROM lc_cli.requests r WHERE r.pid = me OR (r.id = p_id AND NOT lc_cli.live_v1(r));
    SELECT m.mark INTO mark FROM lc_cli.marks m WHERE m.key = p_key;
    IF p_ord < mark THEN
        verdict := 'outdated';
        RETURN;
    END IF;
    hp := lc_cli.holder_v1(p_id);
    IF p_newest THEN
        SELECT r.* INTO w FROM lc_cli.requests r
        WHERE r.id = p_id AND r.key = p_key AND r.pid IS DISTINCT FROM hp AND r.newest
          AND r.by_pid IS NULL AND r.ord > p_ord
        ORDER BY r.ord DESC LIMIT 1;
        IF FOUND THEN
            verdict := 'superseded';
            by_source := w.source;
            by_fields := w.fields;
            RETURN;
        END IF;
        UPDATE lc_cli.requests r SET by_pid = me, by_source = p_source, by_fields = p_fields
        WHERE r.id = p_id AND r.key = p_key AND r.pid IS DISTINCT FROM hp AND r.newest
          AND r.by_pid IS NULL;
    END IF;
    IF p_cancel AND hp IS NOT NULL THEN
        SELECT r.* INTO h FROM lc_cli.requests r WHERE r.pid = hp AND r.id = p_id;
        IF FOUND AND h.cancel AND h.by_pid IS NULL AND NOT coalesce(p_ord < h.ord, false) THEN
            PERFORM pg_notify('lc_cli_cancel_' || hp,
                              h.rid || E'\n' || p_source || E'\n' || p_fields);
        END IF;
    END IF;
    IF p_cancel THEN
        EXECUTE format('LISTEN %I', 'lc_cli_cancel_' || me);
    END IF;
    rid := nextval('lc_cli.request_ids');
    INSERT INTO lc_cli.requests
    VALUES (me, rid, (SELECT a.backend_start FROM pg_stat_activity a WHERE a.pid = me),
            p_id, p_key, p_source, p_fields, p_ord, p_newest, p_cancel, clock_timestamp(),
            NULL, NULL, NULL);
    verdict := 'go';
END
$$;

-- After the arrival's commit: interrupts the lock calls of the waiters it
-- marked (pg_cancel_backend). One marked between its row and its lock
-- call may not wait yet: looked for again, every 2 ms up to 100 ms, until
-- each marked session waits (and is interrupted), holds (it finds the
-- marker at its grant), or has left. Returns how many it could not
-- interrupt (no right to signal their sessions): those leave at their turn.
CREATE OR REPLACE FUNCTION lc_cli.interrupt_v1(p_id bigint) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    me int := pg_backend_pid();
    p int;
    done int[] := '{}';
    refused int := 0;
BEGIN
    FOR i IN 1..50 LOOP
        FOR p IN
            SELECT r.pid FROM lc_cli.requests r JOIN pg_locks l ON l.pid = r.pid
            WHERE r.id = p_id AND r.by_pid = me AND NOT r.pid = ANY (done)
              AND l.locktype = 'advisory' AND l.objsubid = 1 AND NOT l.granted
              AND ((l.classid::int8 << 32) | l.objid::int8) = p_id
        LOOP
            done := done || p;
            BEGIN
                PERFORM pg_cancel_backend(p);
            EXCEPTION WHEN insufficient_privilege THEN
                refused := refused + 1;
            END;
        END LOOP;
        PERFORM pg_stat_clear_snapshot();
        EXIT WHEN NOT EXISTS (
            SELECT 1 FROM lc_cli.requests r
            WHERE r.id = p_id AND r.by_pid = me AND NOT r.pid = ANY (done)
              AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.pid)
              AND NOT EXISTS (
                  SELECT 1 FROM pg_locks l
                  WHERE l.pid = r.pid AND l.locktype = 'advisory' AND l.objsubid = 1
                    AND ((l.classid::int8 << 32) | l.objid::int8) = p_id));
        PERFORM pg_sleep(0.002);
    END LOOP;
    RETURN refused;
END
$$;

-- At the grant of a request with fields: under the key's transaction lock,
-- so that an arrival that marked it is seen. Superseded meanwhile, or its
-- order below the mark: the lock is given back at once, the row goes.
-- Else the key's name and the grant's token.
CREATE OR REPLACE FUNCTION lc_cli.granted_v1(
    p_id bigint, p_key text,
    OUT verdict text, OUT mark bigint, OUT by_source text, OUT by_fields text, OUT token bigint)
LANGUAGE plpgsql AS $$
DECLARE
    r lc_cli.requests;
BEGIN
    PERFORM pg_advisory_xact_lock(1819435010, hashtext(p_key));
    SELECT * INTO r FROM lc_cli.requests WHERE pid = pg_backend_pid();
    SELECT m.mark INTO mark FROM lc_cli.marks m WHERE m.key = p_key;
    IF r.by_pid IS NOT NULL THEN
        verdict := 'superseded';
        by_source := r.by_source;
        by_fields := r.by_fields;
    ELSIF r.ord < mark THEN
        verdict := 'outdated';
    ELSE
        INSERT INTO lc_cli.keys (id, key) VALUES (p_id, p_key) ON CONFLICT (id) DO NOTHING;
        token := nextval('lc_cli.grants');
        verdict := 'held';
        RETURN;
    END IF;
    PERFORM pg_advisory_unlock_all();
    DELETE FROM lc_cli.requests WHERE pid = pg_backend_pid();
END
$$;
COMMIT;
