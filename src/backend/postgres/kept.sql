-- Kept holds (kept.rs): a hold that outlives its session (`lock KEY`
-- without a command, `--expire`, the rest of a `--hold-at-least` window) is
-- a row of lc_cli.kept, written by its holder at its grant, while it holds
-- the key's advisory lock; every lc-cli grant of the key reads it before
-- its command runs. Logged: it survives a restart and a crash of the
-- server. Run once, in one transaction, under the schema's own transaction
-- lock, by the first lc-cli that keeps a hold here.
BEGIN;
SELECT pg_advisory_xact_lock(1819435008, 1);
CREATE SCHEMA IF NOT EXISTS lc_cli;
CREATE SEQUENCE IF NOT EXISTS lc_cli.grants;
CREATE TABLE IF NOT EXISTS lc_cli.keys (id bigint PRIMARY KEY, key text NOT NULL);

-- One row per key at most: its lock id, the session that wrote it (pid:
-- while that session still holds the lock, its command runs), who, and
-- until when it is kept, on the server's clock ('infinity': until
-- `lc-cli unlock` or `reset`).
CREATE TABLE IF NOT EXISTS lc_cli.kept (
    key text PRIMARY KEY,
    id bigint NOT NULL,
    pid int NOT NULL,
    source text NOT NULL,
    peer text,
    token bigint,
    fields text NOT NULL,
    granted timestamptz NOT NULL,
    until timestamptz NOT NULL
);
COMMIT;
