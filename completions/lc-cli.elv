
use builtin;
use str;

set edit:completion:arg-completer[lc-cli] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'lc-cli'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'lc-cli'= {
            cand --server 'The lock service, for the subcommands that talk to one (as their own --server, which wins)'
            cand --connect-timeout 'Before the subcommand, as the subcommand''s --connect-timeout'
            cand --session-timeout 'session-timeout'
            cand --ttl 'ttl'
            cand --queue-timeout 'queue-timeout'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand lock 'Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends'
            cand trylock 'Take KEY only if it is free now, run COMMAND while holding it'
            cand unlock 'Release KEY (a hold left by `lock` without a command)'
            cand wait 'Wait until KEY is free: take it in turn and release it at once'
            cand reset 'Force-release keys (by key, or by the source that holds them)'
            cand keys 'List held keys: holder, since when, how many wait'
            cand mark 'Show KEY''s mark (the highest --order that ended with status 0), or clear it'
            cand history 'Show how KEY''s last holds ended: who, why, when, with what status'
            cand ping 'Say what the lock service is and whether a lock could be taken now'
            cand serve 'Run the built-in lock server'
            cand completions 'Print a shell completion script: `source <(lc-cli completions bash)`'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'lc-cli;lock'= {
            cand -w 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5; 0: like -n)'
            cand --timeout 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5; 0: like -n)'
            cand --wait 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5; 0: like -n)'
            cand -E 'Exit status when the lock was not taken (held with -n, or timed out); one line on stderr then says so and, where the service knows it, names the holder, since when, and the reset command that clears it (without -v, unlike flock; -q silences it)'
            cand --conflict-exit-code 'Exit status when the lock was not taken (held with -n, or timed out); one line on stderr then says so and, where the service knows it, names the holder, since when, and the reset command that clears it (without -v, unlike flock; -q silences it)'
            cand -c 'Run STRING through `sh -c`'
            cand --command 'Run STRING through `sh -c`'
            cand --kill-after 'Grace between SIGTERM and SIGKILL when lc-cli must stop the command'
            cand --expire 'Without a command only: the kept hold frees itself DURATION after it is granted (the next waiter gets KEY), unless `unlock` or `reset` ends it first; not on ZooKeeper without `zookeeper.extendedTypesEnabled=true`'
            cand --and 'Also hold KEY (repeatable): all the keys or none, taken in one global order (sorted by their bytes) so that no two requests deadlock; the command runs only while holding them all and gets every token in LC_LOCK_TOKENS (docs/several-keys.md); exclusive locks with a command only'
            cand --limit 'A counting semaphore: at most N holders at once, first come first served (N = 1 is an exclusive lock); every holder and waiter of KEY must give the same N'
            cand --slots 'A named pool: at most one holder per name, the command told its name in LC_SLOT (implies --limit with the count of names; a --limit that differs is refused)'
            cand --source 'Who holds the lock, for `reset --source` (default: this host''s name)'
            cand --note 'Why this hold, shown to whoever lists KEY (`keys`, the "held by" line): 1 to 200 bytes of text, no control characters; notes are visible to every client that may list keys, so no secrets'
            cand --order 'The version this run deploys (a commit time, a pipeline id: it grows with the version, 0 to 2^63-1): KEY remembers the highest order whose COMMAND ended with status 0 (its mark, `lc-cli mark KEY`); a lower order exits 80 without running, when it comes and when its turn comes; an equal order (a re-run) runs'
            cand --superseded-exit-code 'Exit status when superseded (79 by default; CI jobs often want 0)'
            cand --superseded-exit 'Exit status when superseded (79 by default; CI jobs often want 0)'
            cand --outdated-exit-code 'Exit status when outdated (80 by default)'
            cand --outdated-exit 'Exit status when outdated (80 by default)'
            cand --hold-at-least 'With a command only (issue 45): after COMMAND ends, KEY stays held until DURATION after the grant, as a kept hold that expires (`unlock` and `reset` clear it); a longer command releases at its end. Once per window on a fleet: docs/fleet-jobs.md. Not on PostgreSQL, nor ZooKeeper without TTL nodes (76)'
            cand --server 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)'
            cand --connect-timeout 'How long to keep trying to reach the service (name lookup included) [default: 2s]'
            cand -n 'Do not wait: if KEY is held, exit with the conflict status at once'
            cand --nonblock 'Do not wait: if KEY is held, exit with the conflict status at once'
            cand --no-wait 'Do not wait: if KEY is held, exit with the conflict status at once'
            cand -q 'No line on stderr for a conflict, a timeout, or a hold kept without a command'
            cand --quiet 'No line on stderr for a conflict, a timeout, or a hold kept without a command'
            cand -s 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served'
            cand --shared 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served'
            cand -x 'An exclusive lock (as flock -x): the default'
            cand --exclusive 'An exclusive lock (as flock -x): the default'
            cand --newest 'Newest wins: while this request waits, a newer --newest request on KEY (or a waiting one with a higher --order) supersedes it; it then exits 79 without running COMMAND. Never touches the running holder; requests without --newest are neither superseded nor supersede'
            cand --cancel-running 'Cancel-in-progress: a holder of KEY that took it with --cancel-running too is stopped (SIGTERM, --kill-after, SIGKILL; it exits 81) when this request comes, and this one gets KEY once its command has ended; a holder without it is never stopped'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lc-cli;trylock'= {
            cand -E 'Exit status when the lock was not taken (held with -n, or timed out); one line on stderr then says so and, where the service knows it, names the holder, since when, and the reset command that clears it (without -v, unlike flock; -q silences it)'
            cand --conflict-exit-code 'Exit status when the lock was not taken (held with -n, or timed out); one line on stderr then says so and, where the service knows it, names the holder, since when, and the reset command that clears it (without -v, unlike flock; -q silences it)'
            cand -c 'Run STRING through `sh -c`'
            cand --command 'Run STRING through `sh -c`'
            cand --kill-after 'Grace between SIGTERM and SIGKILL when lc-cli must stop the command'
            cand --expire 'Without a command only: the kept hold frees itself DURATION after it is granted (the next waiter gets KEY), unless `unlock` or `reset` ends it first; not on ZooKeeper without `zookeeper.extendedTypesEnabled=true`'
            cand --and 'Also hold KEY (repeatable): all the keys or none, taken in one global order (sorted by their bytes) so that no two requests deadlock; the command runs only while holding them all and gets every token in LC_LOCK_TOKENS (docs/several-keys.md); exclusive locks with a command only'
            cand --limit 'A counting semaphore: at most N holders at once, first come first served (N = 1 is an exclusive lock); every holder and waiter of KEY must give the same N'
            cand --slots 'A named pool: at most one holder per name, the command told its name in LC_SLOT (implies --limit with the count of names; a --limit that differs is refused)'
            cand --source 'Who holds the lock, for `reset --source` (default: this host''s name)'
            cand --note 'Why this hold, shown to whoever lists KEY (`keys`, the "held by" line): 1 to 200 bytes of text, no control characters; notes are visible to every client that may list keys, so no secrets'
            cand --order 'The version this run deploys (a commit time, a pipeline id: it grows with the version, 0 to 2^63-1): KEY remembers the highest order whose COMMAND ended with status 0 (its mark, `lc-cli mark KEY`); a lower order exits 80 without running, when it comes and when its turn comes; an equal order (a re-run) runs'
            cand --superseded-exit-code 'Exit status when superseded (79 by default; CI jobs often want 0)'
            cand --superseded-exit 'Exit status when superseded (79 by default; CI jobs often want 0)'
            cand --outdated-exit-code 'Exit status when outdated (80 by default)'
            cand --outdated-exit 'Exit status when outdated (80 by default)'
            cand --hold-at-least 'With a command only (issue 45): after COMMAND ends, KEY stays held until DURATION after the grant, as a kept hold that expires (`unlock` and `reset` clear it); a longer command releases at its end. Once per window on a fleet: docs/fleet-jobs.md. Not on PostgreSQL, nor ZooKeeper without TTL nodes (76)'
            cand --server 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)'
            cand --connect-timeout 'How long to keep trying to reach the service (name lookup included) [default: 2s]'
            cand -q 'No line on stderr for a conflict, a timeout, or a hold kept without a command'
            cand --quiet 'No line on stderr for a conflict, a timeout, or a hold kept without a command'
            cand -s 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served'
            cand --shared 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served'
            cand -x 'An exclusive lock (as flock -x): the default'
            cand --exclusive 'An exclusive lock (as flock -x): the default'
            cand --newest 'Newest wins: while this request waits, a newer --newest request on KEY (or a waiting one with a higher --order) supersedes it; it then exits 79 without running COMMAND. Never touches the running holder; requests without --newest are neither superseded nor supersede'
            cand --cancel-running 'Cancel-in-progress: a holder of KEY that took it with --cancel-running too is stopped (SIGTERM, --kill-after, SIGKILL; it exits 81) when this request comes, and this one gets KEY once its command has ended; a holder without it is never stopped'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lc-cli;unlock'= {
            cand --server 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)'
            cand --connect-timeout 'How long to keep trying to reach the service (name lookup included) [default: 2s]'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lc-cli;wait'= {
            cand -w 'Stop waiting after DURATION'
            cand --timeout 'Stop waiting after DURATION'
            cand --wait 'Stop waiting after DURATION'
            cand -E 'Exit status on timeout'
            cand --conflict-exit-code 'Exit status on timeout'
            cand --note 'Why this wait, shown to whoever lists KEY''s waiters and in the waiters'' status line: 1 to 200 bytes of text, no control characters; visible to every client that may list keys, so no secrets'
            cand --limit 'A counting semaphore: at most N holders at once, first come first served (N = 1 is an exclusive lock); every holder and waiter of KEY must give the same N'
            cand --slots 'A named pool: at most one holder per name, the command told its name in LC_SLOT (implies --limit with the count of names; a --limit that differs is refused)'
            cand --source 'Who holds the lock, for `reset --source` (default: this host''s name)'
            cand --server 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)'
            cand --connect-timeout 'How long to keep trying to reach the service (name lookup included) [default: 2s]'
            cand -q 'No line on stderr for a timeout'
            cand --quiet 'No line on stderr for a timeout'
            cand -s 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served'
            cand --shared 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served'
            cand -x 'An exclusive lock (as flock -x): the default'
            cand --exclusive 'An exclusive lock (as flock -x): the default'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lc-cli;reset'= {
            cand --source 'Release every key held by these sources and withdraw their waiters (never taken from LC_SOURCE)'
            cand --server 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)'
            cand --connect-timeout 'How long to keep trying to reach the service (name lookup included) [default: 2s]'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lc-cli;keys'= {
            cand --sort 'Order: by key, or by age (the oldest hold first: the stuck one)'
            cand --interval 'How often at most --watch lists the keys: every --interval where the service has no change feed, else when it tells a change'
            cand --server 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)'
            cand --connect-timeout 'How long to keep trying to reach the service (name lookup included) [default: 2s]'
            cand --json 'One JSON object per key, one per line'
            cand --waiters 'Also each waiter, in line order: its key, source, peer, since when it waits, mode (where the service knows them; with --json, a `waiters` array per key)'
            cand --watch 'A live view, refreshed every --interval until Ctrl-C: at a terminal, only the lines that changed are redrawn; with --json, one object per change (held, released, waiting, waits, left, error)'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lc-cli;mark'= {
            cand --server 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)'
            cand --connect-timeout 'How long to keep trying to reach the service (name lookup included) [default: 2s]'
            cand --clear 'Clear the mark, so that any --order runs again (after a rollback)'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lc-cli;history'= {
            cand --limit 'Show at most N holds (the service keeps at most its cap, 100 by default)'
            cand --server 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)'
            cand --connect-timeout 'How long to keep trying to reach the service (name lookup included) [default: 2s]'
            cand --json 'One JSON object per hold, one per line'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lc-cli;ping'= {
            cand --server 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)'
            cand --connect-timeout 'How long to keep trying to reach the service (name lookup included) [default: 2s]'
            cand --json 'One JSON object instead of the line'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lc-cli;serve'= {
            cand -l 'Address to listen on (loopback by default; port 0 picks a free one)'
            cand --listen 'Address to listen on (loopback by default; port 0 picks a free one)'
            cand --data 'Keep held keys in a write-ahead log at PATH, so they survive a restart'
            cand --read-timeout 'How long a client may take to send its whole request, from its connection on (its login is bounded by --login-timeout)'
            cand --login-timeout 'How long a new connection may take to log in: its TLS handshake and its first frame (with --token-file, the Hello with a token of the file), from its accept on; a connection not through by then is closed. A queued lock''s wait is not bounded by it'
            cand --manager 'Address of the manager port (KEYS, RSET, RSBS, KEYX) [default: the listen port + 1, on loopback when --listen is not; off with --token-file]'
            cand --metrics 'Serve Prometheus metrics over HTTP at ADDR/metrics (off by default)'
            cand --reclaim-grace 'Release a session hold (`lc-cli lock KEY -- CMD`) once its holder has not been heard from for DURATION; within it, a holder whose connection broke (or whose server restarted with --data) takes it back'
            cand --history 'Keep the last N ended holds of each key for `lc-cli history KEY` (with --data, in the log too, through restarts and compactions); 0 keeps none'
            cand --max-log-bytes 'Refuse new holds (one line, 76) while the log''s held keys, marks and history take half of SIZE (512MiB, 2G, bytes): the other half is the room the log grows into before a compaction rewrites it, so the file stays under SIZE and the volume needs SIZE and a half (the compaction''s new file beside it). Releases are always taken. Off by default'
            cand --max-connections 'Connections open at once; beyond it a new one is closed at once [default: the file limit (ulimit -n) less 64]'
            cand --max-connections-per-peer 'Connections open at once from one peer address; 0: no limit. A pool of hosts behind one NAT address (CI runners) counts as one peer, and each lc-cli holds one connection per lock held or waited for: raise it to what the pool holds and waits for at once, with room to spare'
            cand --max-pending-logins 'Connections still logging in at once (their TLS handshake and first frame not yet through); beyond it a new one is closed at once, so the rest of --max-connections stays for connections that logged in (with --token-file: that gave a token) [default: half of --max-connections]'
            cand --tls-cert 'Speak TLS on the lock port with this certificate (PEM, the chain after it); clients then use lcs://HOST:PORT?cacert=FILE. The manager and metrics ports stay plain'
            cand --tls-key 'The private key of --tls-cert (PEM)'
            cand --tls-client-ca 'Require a client certificate signed by this CA (PEM): mutual TLS; clients add cert=FILE&key=FILE to their lcs:// address'
            cand --token-file 'Require a token from every client (LC_TOKEN, LC_TOKEN_FILE or lc://:TOKEN@HOST): one per line of FILE, each optionally followed by its role, lock (the default: lock, release its own holds) or admin (also reset, and release any hold), then by name=NAME, the identity the log and keys show for it (else token:FINGERPRINT), keys=PATTERNS (the keys it may take: deploy/*,ci/*), held=N (the holds it may have at once, default 10000) and waits=N (its requests waiting in line at once, default 10000); SIGHUP reads FILE again. The manager port, which takes no token, is then off unless --manager names it'
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lc-cli;completions'= {
            cand -v 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand --verbose 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lc-cli;help'= {
            cand lock 'Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends'
            cand trylock 'Take KEY only if it is free now, run COMMAND while holding it'
            cand unlock 'Release KEY (a hold left by `lock` without a command)'
            cand wait 'Wait until KEY is free: take it in turn and release it at once'
            cand reset 'Force-release keys (by key, or by the source that holds them)'
            cand keys 'List held keys: holder, since when, how many wait'
            cand mark 'Show KEY''s mark (the highest --order that ended with status 0), or clear it'
            cand history 'Show how KEY''s last holds ended: who, why, when, with what status'
            cand ping 'Say what the lock service is and whether a lock could be taken now'
            cand serve 'Run the built-in lock server'
            cand completions 'Print a shell completion script: `source <(lc-cli completions bash)`'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'lc-cli;help;lock'= {
        }
        &'lc-cli;help;trylock'= {
        }
        &'lc-cli;help;unlock'= {
        }
        &'lc-cli;help;wait'= {
        }
        &'lc-cli;help;reset'= {
        }
        &'lc-cli;help;keys'= {
        }
        &'lc-cli;help;mark'= {
        }
        &'lc-cli;help;history'= {
        }
        &'lc-cli;help;ping'= {
        }
        &'lc-cli;help;serve'= {
        }
        &'lc-cli;help;completions'= {
        }
        &'lc-cli;help;help'= {
        }
    ]
    $completions[$command]
}
