# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_lc_cli_global_optspecs
    string join \n server= connect-timeout= session-timeout= ttl= queue-timeout= v/verbose h/help V/version
end

function __fish_lc_cli_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_lc_cli_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_lc_cli_using_subcommand
    set -l cmd (__fish_lc_cli_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c lc-cli -n "__fish_lc_cli_needs_command" -l server -d 'The lock service, for the subcommands that talk to one (as their own --server, which wins)' -r
complete -c lc-cli -n "__fish_lc_cli_needs_command" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -s h -l help -d 'Print help'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -s V -l version -d 'Print version'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "lock" -d 'Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "trylock" -d 'Take KEY only if it is free now, run COMMAND while holding it'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "unlock" -d 'Release KEY (a hold left by `lock` without a command)'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "wait" -d 'Wait until KEY is free: take it in turn and release it at once'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "reset" -d 'Force-release keys (by key, or by the source that holds them)'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "keys" -d 'List held keys: holder, since when, how many wait'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "mark" -d 'Show KEY\'s mark (the highest --order that ended with status 0), or clear it'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "history" -d 'Show how KEY\'s last holds ended: who, why, when, with what status'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "ping" -d 'Say what the lock service is and whether a lock could be taken now'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "serve" -d 'Run the built-in lock server'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "completions" -d 'Print a shell completion script: `source <(lc-cli completions bash)`'
complete -c lc-cli -n "__fish_lc_cli_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -s w -l timeout -l wait -d 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5; 0: like -n)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -s E -l conflict-exit-code -d 'Exit status when the lock was not taken (held with -n, or timed out); one line on stderr then says so and, where the service knows it, names the holder, since when, and the reset command that clears it (without -v, unlike flock; -q silences it)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -s c -l command -d 'Run STRING through `sh -c`' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l kill-after -d 'Grace between SIGTERM and SIGKILL when lc-cli must stop the command' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l expire -d 'Without a command only: the kept hold frees itself DURATION after it is granted (the next waiter gets KEY), unless `unlock` or `reset` ends it first; not on ZooKeeper without `zookeeper.extendedTypesEnabled=true`' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l and -d 'Also hold KEY (repeatable): all the keys or none, taken in one global order (sorted by their bytes) so that no two requests deadlock; the command runs only while holding them all and gets every token in LC_LOCK_TOKENS (docs/several-keys.md); exclusive locks with a command only' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l limit -d 'A counting semaphore: at most N holders at once, first come first served (N = 1 is an exclusive lock); every holder and waiter of KEY must give the same N' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l slots -d 'A named pool: at most one holder per name, the command told its name in LC_SLOT (implies --limit with the count of names; a --limit that differs is refused)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l source -d 'Who holds the lock, for `reset --source` (default: this host\'s name)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l note -d 'Why this hold, shown to whoever lists KEY (`keys`, the "held by" line): 1 to 200 bytes of text, no control characters; notes are visible to every client that may list keys, so no secrets' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l order -d 'The version this run deploys (a commit time, a pipeline id: it grows with the version, 0 to 2^63-1): KEY remembers the highest order whose COMMAND ended with status 0 (its mark, `lc-cli mark KEY`); a lower order exits 80 without running, when it comes and when its turn comes; an equal order (a re-run) runs' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l superseded-exit-code -l superseded-exit -d 'Exit status when superseded (79 by default; CI jobs often want 0)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l outdated-exit-code -l outdated-exit -d 'Exit status when outdated (80 by default)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l hold-at-least -d 'With a command only (issue 45): after COMMAND ends, KEY stays held until DURATION after the grant, as a kept hold that expires (`unlock` and `reset` clear it); a longer command releases at its end. Once per window on a fleet: docs/fleet-jobs.md. Not on PostgreSQL, nor ZooKeeper without TTL nodes (76)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l server -d 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l connect-timeout -d 'How long to keep trying to reach the service (name lookup included) [default: 2s]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -s n -l nonblock -l no-wait -d 'Do not wait: if KEY is held, exit with the conflict status at once'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -s q -l quiet -d 'No line on stderr for a conflict, a timeout, or a hold kept without a command'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -s s -l shared -d 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -s x -l exclusive -d 'An exclusive lock (as flock -x): the default'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l newest -d 'Newest wins: while this request waits, a newer --newest request on KEY (or a waiting one with a higher --order) supersedes it; it then exits 79 without running COMMAND. Never touches the running holder; requests without --newest are neither superseded nor supersede'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -l cancel-running -d 'Cancel-in-progress: a holder of KEY that took it with --cancel-running too is stopped (SIGTERM, --kill-after, SIGKILL; it exits 81) when this request comes, and this one gets KEY once its command has ended; a holder without it is never stopped'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand lock" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -s E -l conflict-exit-code -d 'Exit status when the lock was not taken (held with -n, or timed out); one line on stderr then says so and, where the service knows it, names the holder, since when, and the reset command that clears it (without -v, unlike flock; -q silences it)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -s c -l command -d 'Run STRING through `sh -c`' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l kill-after -d 'Grace between SIGTERM and SIGKILL when lc-cli must stop the command' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l expire -d 'Without a command only: the kept hold frees itself DURATION after it is granted (the next waiter gets KEY), unless `unlock` or `reset` ends it first; not on ZooKeeper without `zookeeper.extendedTypesEnabled=true`' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l and -d 'Also hold KEY (repeatable): all the keys or none, taken in one global order (sorted by their bytes) so that no two requests deadlock; the command runs only while holding them all and gets every token in LC_LOCK_TOKENS (docs/several-keys.md); exclusive locks with a command only' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l limit -d 'A counting semaphore: at most N holders at once, first come first served (N = 1 is an exclusive lock); every holder and waiter of KEY must give the same N' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l slots -d 'A named pool: at most one holder per name, the command told its name in LC_SLOT (implies --limit with the count of names; a --limit that differs is refused)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l source -d 'Who holds the lock, for `reset --source` (default: this host\'s name)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l note -d 'Why this hold, shown to whoever lists KEY (`keys`, the "held by" line): 1 to 200 bytes of text, no control characters; notes are visible to every client that may list keys, so no secrets' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l order -d 'The version this run deploys (a commit time, a pipeline id: it grows with the version, 0 to 2^63-1): KEY remembers the highest order whose COMMAND ended with status 0 (its mark, `lc-cli mark KEY`); a lower order exits 80 without running, when it comes and when its turn comes; an equal order (a re-run) runs' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l superseded-exit-code -l superseded-exit -d 'Exit status when superseded (79 by default; CI jobs often want 0)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l outdated-exit-code -l outdated-exit -d 'Exit status when outdated (80 by default)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l hold-at-least -d 'With a command only (issue 45): after COMMAND ends, KEY stays held until DURATION after the grant, as a kept hold that expires (`unlock` and `reset` clear it); a longer command releases at its end. Once per window on a fleet: docs/fleet-jobs.md. Not on PostgreSQL, nor ZooKeeper without TTL nodes (76)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l server -d 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l connect-timeout -d 'How long to keep trying to reach the service (name lookup included) [default: 2s]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -s q -l quiet -d 'No line on stderr for a conflict, a timeout, or a hold kept without a command'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -s s -l shared -d 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -s x -l exclusive -d 'An exclusive lock (as flock -x): the default'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l newest -d 'Newest wins: while this request waits, a newer --newest request on KEY (or a waiting one with a higher --order) supersedes it; it then exits 79 without running COMMAND. Never touches the running holder; requests without --newest are neither superseded nor supersede'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -l cancel-running -d 'Cancel-in-progress: a holder of KEY that took it with --cancel-running too is stopped (SIGTERM, --kill-after, SIGKILL; it exits 81) when this request comes, and this one gets KEY once its command has ended; a holder without it is never stopped'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand trylock" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand unlock" -l server -d 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand unlock" -l connect-timeout -d 'How long to keep trying to reach the service (name lookup included) [default: 2s]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand unlock" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand unlock" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -s w -l timeout -l wait -d 'Stop waiting after DURATION' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -s E -l conflict-exit-code -d 'Exit status on timeout' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -l note -d 'Why this wait, shown to whoever lists KEY\'s waiters and in the waiters\' status line: 1 to 200 bytes of text, no control characters; visible to every client that may list keys, so no secrets' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -l limit -d 'A counting semaphore: at most N holders at once, first come first served (N = 1 is an exclusive lock); every holder and waiter of KEY must give the same N' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -l slots -d 'A named pool: at most one holder per name, the command told its name in LC_SLOT (implies --limit with the count of names; a --limit that differs is refused)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -l source -d 'Who holds the lock, for `reset --source` (default: this host\'s name)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -l server -d 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -l connect-timeout -d 'How long to keep trying to reach the service (name lookup included) [default: 2s]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -s q -l quiet -d 'No line on stderr for a timeout'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -s s -l shared -d 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -s x -l exclusive -d 'An exclusive lock (as flock -x): the default'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand wait" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand reset" -l source -d 'Release every key held by these sources and withdraw their waiters (never taken from LC_SOURCE)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand reset" -l server -d 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand reset" -l connect-timeout -d 'How long to keep trying to reach the service (name lookup included) [default: 2s]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand reset" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand reset" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand keys" -l sort -d 'Order: by key, or by age (the oldest hold first: the stuck one)' -r -f -a "key\t''
age\t''"
complete -c lc-cli -n "__fish_lc_cli_using_subcommand keys" -l interval -d 'How often at most --watch lists the keys: every --interval where the service has no change feed, else when it tells a change' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand keys" -l server -d 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand keys" -l connect-timeout -d 'How long to keep trying to reach the service (name lookup included) [default: 2s]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand keys" -l json -d 'One JSON object per key, one per line'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand keys" -l waiters -d 'Also each waiter, in line order: its key, source, peer, since when it waits, mode (where the service knows them; with --json, a `waiters` array per key)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand keys" -l watch -d 'A live view, refreshed every --interval until Ctrl-C: at a terminal, only the lines that changed are redrawn; with --json, one object per change (held, released, waiting, waits, left, error)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand keys" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand keys" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand mark" -l server -d 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand mark" -l connect-timeout -d 'How long to keep trying to reach the service (name lookup included) [default: 2s]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand mark" -l clear -d 'Clear the mark, so that any --order runs again (after a rollback)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand mark" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand mark" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand history" -l limit -d 'Show at most N holds (the service keeps at most its cap, 100 by default)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand history" -l server -d 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand history" -l connect-timeout -d 'How long to keep trying to reach the service (name lookup included) [default: 2s]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand history" -l json -d 'One JSON object per hold, one per line'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand history" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand ping" -l server -d 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand ping" -l connect-timeout -d 'How long to keep trying to reach the service (name lookup included) [default: 2s]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand ping" -l json -d 'One JSON object instead of the line'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand ping" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand ping" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -s l -l listen -d 'Address to listen on (loopback by default; port 0 picks a free one)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l data -d 'Keep held keys in a write-ahead log at PATH, so they survive a restart' -r -F
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l read-timeout -d 'How long a client may take to send its whole request, from its connection on (its login is bounded by --login-timeout)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l login-timeout -d 'How long a new connection may take to log in: its TLS handshake and its first frame (with --token-file, the Hello with a token of the file), from its accept on; a connection not through by then is closed. A queued lock\'s wait is not bounded by it' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l manager -d 'Address of the manager port (KEYS, RSET, RSBS, KEYX) [default: the listen port + 1, on loopback when --listen is not; off with --token-file]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l metrics -d 'Serve Prometheus metrics over HTTP at ADDR/metrics (off by default)' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l reclaim-grace -d 'Release a session hold (`lc-cli lock KEY -- CMD`) once its holder has not been heard from for DURATION; within it, a holder whose connection broke (or whose server restarted with --data) takes it back' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l history -d 'Keep the last N ended holds of each key for `lc-cli history KEY` (with --data, in the log too, through restarts and compactions); 0 keeps none' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l max-log-bytes -d 'Refuse new holds (one line, 76) while the log\'s held keys, marks and history take half of SIZE (512MiB, 2G, bytes): the other half is the room the log grows into before a compaction rewrites it, so the file stays under SIZE and the volume needs SIZE and a half (the compaction\'s new file beside it). Releases are always taken. Off by default' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l max-connections -d 'Connections open at once; beyond it a new one is closed at once [default: the file limit (ulimit -n) less 64]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l max-connections-per-peer -d 'Connections open at once from one peer address; 0: no limit. A pool of hosts behind one NAT address (CI runners) counts as one peer, and each lc-cli holds one connection per lock held or waited for: raise it to what the pool holds and waits for at once, with room to spare' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l max-pending-logins -d 'Connections still logging in at once (their TLS handshake and first frame not yet through); beyond it a new one is closed at once, so the rest of --max-connections stays for connections that logged in (with --token-file: that gave a token) [default: half of --max-connections]' -r
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l tls-cert -d 'Speak TLS on the lock port with this certificate (PEM, the chain after it); clients then use lcs://HOST:PORT?cacert=FILE. The manager and metrics ports stay plain' -r -F
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l tls-key -d 'The private key of --tls-cert (PEM)' -r -F
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l tls-client-ca -d 'Require a client certificate signed by this CA (PEM): mutual TLS; clients add cert=FILE&key=FILE to their lcs:// address' -r -F
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -l token-file -d 'Require a token from every client (LC_TOKEN, LC_TOKEN_FILE or lc://:TOKEN@HOST): one per line of FILE, each optionally followed by its role, lock (the default: lock, release its own holds) or admin (also reset, and release any hold), then by name=NAME, the identity the log and keys show for it (else token:FINGERPRINT), keys=PATTERNS (the keys it may take: deploy/*,ci/*), held=N (the holds it may have at once, default 10000) and waits=N (its requests waiting in line at once, default 10000); SIGHUP reads FILE again. The manager port, which takes no token, is then off unless --manager names it' -r -F
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand serve" -s h -l help -d 'Print help'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand completions" -s v -l verbose -d 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand completions" -s h -l help -d 'Print help'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "lock" -d 'Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "trylock" -d 'Take KEY only if it is free now, run COMMAND while holding it'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "unlock" -d 'Release KEY (a hold left by `lock` without a command)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "wait" -d 'Wait until KEY is free: take it in turn and release it at once'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "reset" -d 'Force-release keys (by key, or by the source that holds them)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "keys" -d 'List held keys: holder, since when, how many wait'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "mark" -d 'Show KEY\'s mark (the highest --order that ended with status 0), or clear it'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "history" -d 'Show how KEY\'s last holds ended: who, why, when, with what status'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "ping" -d 'Say what the lock service is and whether a lock could be taken now'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "serve" -d 'Run the built-in lock server'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "completions" -d 'Print a shell completion script: `source <(lc-cli completions bash)`'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand help; and not __fish_seen_subcommand_from lock trylock unlock wait reset keys mark history ping serve completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lc-cli -n "__fish_lc_cli_using_subcommand completions" -f -a "bash zsh fish elvish powershell"
