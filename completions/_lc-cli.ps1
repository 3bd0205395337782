
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'lc-cli' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'lc-cli'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'lc-cli' {
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service, for the subcommands that talk to one (as their own --server, which wins)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Before the subcommand, as the subcommand''s --connect-timeout')
            [CompletionResult]::new('--session-timeout', '--session-timeout', [CompletionResultType]::ParameterName, 'session-timeout')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'ttl')
            [CompletionResult]::new('--queue-timeout', '--queue-timeout', [CompletionResultType]::ParameterName, 'queue-timeout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('lock', 'lock', [CompletionResultType]::ParameterValue, 'Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends')
            [CompletionResult]::new('trylock', 'trylock', [CompletionResultType]::ParameterValue, 'Take KEY only if it is free now, run COMMAND while holding it')
            [CompletionResult]::new('unlock', 'unlock', [CompletionResultType]::ParameterValue, 'Release KEY (a hold left by `lock` without a command)')
            [CompletionResult]::new('wait', 'wait', [CompletionResultType]::ParameterValue, 'Wait until KEY is free: take it in turn and release it at once')
            [CompletionResult]::new('reset', 'reset', [CompletionResultType]::ParameterValue, 'Force-release keys (by key, or by the source that holds them)')
            [CompletionResult]::new('keys', 'keys', [CompletionResultType]::ParameterValue, 'List held keys: holder, since when, how many wait')
            [CompletionResult]::new('mark', 'mark', [CompletionResultType]::ParameterValue, 'Show KEY''s mark (the highest --order that ended with status 0), or clear it')
            [CompletionResult]::new('history', 'history', [CompletionResultType]::ParameterValue, 'Show how KEY''s last holds ended: who, why, when, with what status')
            [CompletionResult]::new('ping', 'ping', [CompletionResultType]::ParameterValue, 'Say what the lock service is and whether a lock could be taken now')
            [CompletionResult]::new('serve', 'serve', [CompletionResultType]::ParameterValue, 'Run the built-in lock server')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script: `source <(lc-cli completions bash)`')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'lc-cli;lock' {
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5; 0: like -n)')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5; 0: like -n)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5; 0: like -n)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock was not taken (held with -n, or timed out); one line on stderr then says so and, where the service knows it, names the holder, since when, and the reset command that clears it (without -v, unlike flock; -q silences it)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock was not taken (held with -n, or timed out); one line on stderr then says so and, where the service knows it, names the holder, since when, and the reset command that clears it (without -v, unlike flock; -q silences it)')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Run STRING through `sh -c`')
            [CompletionResult]::new('--command', '--command', [CompletionResultType]::ParameterName, 'Run STRING through `sh -c`')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'Grace between SIGTERM and SIGKILL when lc-cli must stop the command')
            [CompletionResult]::new('--expire', '--expire', [CompletionResultType]::ParameterName, 'Without a command only: the kept hold frees itself DURATION after it is granted (the next waiter gets KEY), unless `unlock` or `reset` ends it first; not on ZooKeeper without `zookeeper.extendedTypesEnabled=true`')
            [CompletionResult]::new('--and', '--and', [CompletionResultType]::ParameterName, 'Also hold KEY (repeatable): all the keys or none, taken in one global order (sorted by their bytes) so that no two requests deadlock; the command runs only while holding them all and gets every token in LC_LOCK_TOKENS (docs/several-keys.md); exclusive locks with a command only')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'A counting semaphore: at most N holders at once, first come first served (N = 1 is an exclusive lock); every holder and waiter of KEY must give the same N')
            [CompletionResult]::new('--slots', '--slots', [CompletionResultType]::ParameterName, 'A named pool: at most one holder per name, the command told its name in LC_SLOT (implies --limit with the count of names; a --limit that differs is refused)')
            [CompletionResult]::new('--source', '--source', [CompletionResultType]::ParameterName, 'Who holds the lock, for `reset --source` (default: this host''s name)')
            [CompletionResult]::new('--note', '--note', [CompletionResultType]::ParameterName, 'Why this hold, shown to whoever lists KEY (`keys`, the "held by" line): 1 to 200 bytes of text, no control characters; notes are visible to every client that may list keys, so no secrets')
            [CompletionResult]::new('--order', '--order', [CompletionResultType]::ParameterName, 'The version this run deploys (a commit time, a pipeline id: it grows with the version, 0 to 2^63-1): KEY remembers the highest order whose COMMAND ended with status 0 (its mark, `lc-cli mark KEY`); a lower order exits 80 without running, when it comes and when its turn comes; an equal order (a re-run) runs')
            [CompletionResult]::new('--superseded-exit-code', '--superseded-exit-code', [CompletionResultType]::ParameterName, 'Exit status when superseded (79 by default; CI jobs often want 0)')
            [CompletionResult]::new('--superseded-exit', '--superseded-exit', [CompletionResultType]::ParameterName, 'Exit status when superseded (79 by default; CI jobs often want 0)')
            [CompletionResult]::new('--outdated-exit-code', '--outdated-exit-code', [CompletionResultType]::ParameterName, 'Exit status when outdated (80 by default)')
            [CompletionResult]::new('--outdated-exit', '--outdated-exit', [CompletionResultType]::ParameterName, 'Exit status when outdated (80 by default)')
            [CompletionResult]::new('--hold-at-least', '--hold-at-least', [CompletionResultType]::ParameterName, 'With a command only (issue 45): after COMMAND ends, KEY stays held until DURATION after the grant, as a kept hold that expires (`unlock` and `reset` clear it); a longer command releases at its end. Once per window on a fleet: docs/fleet-jobs.md. Not on PostgreSQL, nor ZooKeeper without TTL nodes (76)')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service (name lookup included) [default: 2s]')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Do not wait: if KEY is held, exit with the conflict status at once')
            [CompletionResult]::new('--nonblock', '--nonblock', [CompletionResultType]::ParameterName, 'Do not wait: if KEY is held, exit with the conflict status at once')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Do not wait: if KEY is held, exit with the conflict status at once')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'No line on stderr for a conflict, a timeout, or a hold kept without a command')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'No line on stderr for a conflict, a timeout, or a hold kept without a command')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served')
            [CompletionResult]::new('-x', '-x', [CompletionResultType]::ParameterName, 'An exclusive lock (as flock -x): the default')
            [CompletionResult]::new('--exclusive', '--exclusive', [CompletionResultType]::ParameterName, 'An exclusive lock (as flock -x): the default')
            [CompletionResult]::new('--newest', '--newest', [CompletionResultType]::ParameterName, 'Newest wins: while this request waits, a newer --newest request on KEY (or a waiting one with a higher --order) supersedes it; it then exits 79 without running COMMAND. Never touches the running holder; requests without --newest are neither superseded nor supersede')
            [CompletionResult]::new('--cancel-running', '--cancel-running', [CompletionResultType]::ParameterName, 'Cancel-in-progress: a holder of KEY that took it with --cancel-running too is stopped (SIGTERM, --kill-after, SIGKILL; it exits 81) when this request comes, and this one gets KEY once its command has ended; a holder without it is never stopped')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lc-cli;trylock' {
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock was not taken (held with -n, or timed out); one line on stderr then says so and, where the service knows it, names the holder, since when, and the reset command that clears it (without -v, unlike flock; -q silences it)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock was not taken (held with -n, or timed out); one line on stderr then says so and, where the service knows it, names the holder, since when, and the reset command that clears it (without -v, unlike flock; -q silences it)')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Run STRING through `sh -c`')
            [CompletionResult]::new('--command', '--command', [CompletionResultType]::ParameterName, 'Run STRING through `sh -c`')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'Grace between SIGTERM and SIGKILL when lc-cli must stop the command')
            [CompletionResult]::new('--expire', '--expire', [CompletionResultType]::ParameterName, 'Without a command only: the kept hold frees itself DURATION after it is granted (the next waiter gets KEY), unless `unlock` or `reset` ends it first; not on ZooKeeper without `zookeeper.extendedTypesEnabled=true`')
            [CompletionResult]::new('--and', '--and', [CompletionResultType]::ParameterName, 'Also hold KEY (repeatable): all the keys or none, taken in one global order (sorted by their bytes) so that no two requests deadlock; the command runs only while holding them all and gets every token in LC_LOCK_TOKENS (docs/several-keys.md); exclusive locks with a command only')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'A counting semaphore: at most N holders at once, first come first served (N = 1 is an exclusive lock); every holder and waiter of KEY must give the same N')
            [CompletionResult]::new('--slots', '--slots', [CompletionResultType]::ParameterName, 'A named pool: at most one holder per name, the command told its name in LC_SLOT (implies --limit with the count of names; a --limit that differs is refused)')
            [CompletionResult]::new('--source', '--source', [CompletionResultType]::ParameterName, 'Who holds the lock, for `reset --source` (default: this host''s name)')
            [CompletionResult]::new('--note', '--note', [CompletionResultType]::ParameterName, 'Why this hold, shown to whoever lists KEY (`keys`, the "held by" line): 1 to 200 bytes of text, no control characters; notes are visible to every client that may list keys, so no secrets')
            [CompletionResult]::new('--order', '--order', [CompletionResultType]::ParameterName, 'The version this run deploys (a commit time, a pipeline id: it grows with the version, 0 to 2^63-1): KEY remembers the highest order whose COMMAND ended with status 0 (its mark, `lc-cli mark KEY`); a lower order exits 80 without running, when it comes and when its turn comes; an equal order (a re-run) runs')
            [CompletionResult]::new('--superseded-exit-code', '--superseded-exit-code', [CompletionResultType]::ParameterName, 'Exit status when superseded (79 by default; CI jobs often want 0)')
            [CompletionResult]::new('--superseded-exit', '--superseded-exit', [CompletionResultType]::ParameterName, 'Exit status when superseded (79 by default; CI jobs often want 0)')
            [CompletionResult]::new('--outdated-exit-code', '--outdated-exit-code', [CompletionResultType]::ParameterName, 'Exit status when outdated (80 by default)')
            [CompletionResult]::new('--outdated-exit', '--outdated-exit', [CompletionResultType]::ParameterName, 'Exit status when outdated (80 by default)')
            [CompletionResult]::new('--hold-at-least', '--hold-at-least', [CompletionResultType]::ParameterName, 'With a command only (issue 45): after COMMAND ends, KEY stays held until DURATION after the grant, as a kept hold that expires (`unlock` and `reset` clear it); a longer command releases at its end. Once per window on a fleet: docs/fleet-jobs.md. Not on PostgreSQL, nor ZooKeeper without TTL nodes (76)')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service (name lookup included) [default: 2s]')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'No line on stderr for a conflict, a timeout, or a hold kept without a command')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'No line on stderr for a conflict, a timeout, or a hold kept without a command')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served')
            [CompletionResult]::new('-x', '-x', [CompletionResultType]::ParameterName, 'An exclusive lock (as flock -x): the default')
            [CompletionResult]::new('--exclusive', '--exclusive', [CompletionResultType]::ParameterName, 'An exclusive lock (as flock -x): the default')
            [CompletionResult]::new('--newest', '--newest', [CompletionResultType]::ParameterName, 'Newest wins: while this request waits, a newer --newest request on KEY (or a waiting one with a higher --order) supersedes it; it then exits 79 without running COMMAND. Never touches the running holder; requests without --newest are neither superseded nor supersede')
            [CompletionResult]::new('--cancel-running', '--cancel-running', [CompletionResultType]::ParameterName, 'Cancel-in-progress: a holder of KEY that took it with --cancel-running too is stopped (SIGTERM, --kill-after, SIGKILL; it exits 81) when this request comes, and this one gets KEY once its command has ended; a holder without it is never stopped')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lc-cli;unlock' {
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service (name lookup included) [default: 2s]')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lc-cli;wait' {
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status on timeout')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status on timeout')
            [CompletionResult]::new('--note', '--note', [CompletionResultType]::ParameterName, 'Why this wait, shown to whoever lists KEY''s waiters and in the waiters'' status line: 1 to 200 bytes of text, no control characters; visible to every client that may list keys, so no secrets')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'A counting semaphore: at most N holders at once, first come first served (N = 1 is an exclusive lock); every holder and waiter of KEY must give the same N')
            [CompletionResult]::new('--slots', '--slots', [CompletionResultType]::ParameterName, 'A named pool: at most one holder per name, the command told its name in LC_SLOT (implies --limit with the count of names; a --limit that differs is refused)')
            [CompletionResult]::new('--source', '--source', [CompletionResultType]::ParameterName, 'Who holds the lock, for `reset --source` (default: this host''s name)')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service (name lookup included) [default: 2s]')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'No line on stderr for a timeout')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'No line on stderr for a timeout')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'A shared lock (as flock -s): held together with other shared holders, never with an exclusive one; in line with them, first come first served')
            [CompletionResult]::new('-x', '-x', [CompletionResultType]::ParameterName, 'An exclusive lock (as flock -x): the default')
            [CompletionResult]::new('--exclusive', '--exclusive', [CompletionResultType]::ParameterName, 'An exclusive lock (as flock -x): the default')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lc-cli;reset' {
            [CompletionResult]::new('--source', '--source', [CompletionResultType]::ParameterName, 'Release every key held by these sources and withdraw their waiters (never taken from LC_SOURCE)')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service (name lookup included) [default: 2s]')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lc-cli;keys' {
            [CompletionResult]::new('--sort', '--sort', [CompletionResultType]::ParameterName, 'Order: by key, or by age (the oldest hold first: the stuck one)')
            [CompletionResult]::new('--interval', '--interval', [CompletionResultType]::ParameterName, 'How often at most --watch lists the keys: every --interval where the service has no change feed, else when it tells a change')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service (name lookup included) [default: 2s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'One JSON object per key, one per line')
            [CompletionResult]::new('--waiters', '--waiters', [CompletionResultType]::ParameterName, 'Also each waiter, in line order: its key, source, peer, since when it waits, mode (where the service knows them; with --json, a `waiters` array per key)')
            [CompletionResult]::new('--watch', '--watch', [CompletionResultType]::ParameterName, 'A live view, refreshed every --interval until Ctrl-C: at a terminal, only the lines that changed are redrawn; with --json, one object per change (held, released, waiting, waits, left, error)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lc-cli;mark' {
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service (name lookup included) [default: 2s]')
            [CompletionResult]::new('--clear', '--clear', [CompletionResultType]::ParameterName, 'Clear the mark, so that any --order runs again (after a rollback)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lc-cli;history' {
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Show at most N holds (the service keeps at most its cap, 100 by default)')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service (name lookup included) [default: 2s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'One JSON object per hold, one per line')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lc-cli;ping' {
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service [env: LC_SERVER] [default: 127.0.0.1:22119]: host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql:// (--help shows each address)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service (name lookup included) [default: 2s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'One JSON object instead of the line')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lc-cli;serve' {
            [CompletionResult]::new('-l', '-l', [CompletionResultType]::ParameterName, 'Address to listen on (loopback by default; port 0 picks a free one)')
            [CompletionResult]::new('--listen', '--listen', [CompletionResultType]::ParameterName, 'Address to listen on (loopback by default; port 0 picks a free one)')
            [CompletionResult]::new('--data', '--data', [CompletionResultType]::ParameterName, 'Keep held keys in a write-ahead log at PATH, so they survive a restart')
            [CompletionResult]::new('--read-timeout', '--read-timeout', [CompletionResultType]::ParameterName, 'How long a client may take to send its whole request, from its connection on (its login is bounded by --login-timeout)')
            [CompletionResult]::new('--login-timeout', '--login-timeout', [CompletionResultType]::ParameterName, 'How long a new connection may take to log in: its TLS handshake and its first frame (with --token-file, the Hello with a token of the file), from its accept on; a connection not through by then is closed. A queued lock''s wait is not bounded by it')
            [CompletionResult]::new('--manager', '--manager', [CompletionResultType]::ParameterName, 'Address of the manager port (KEYS, RSET, RSBS, KEYX) [default: the listen port + 1, on loopback when --listen is not; off with --token-file]')
            [CompletionResult]::new('--metrics', '--metrics', [CompletionResultType]::ParameterName, 'Serve Prometheus metrics over HTTP at ADDR/metrics (off by default)')
            [CompletionResult]::new('--reclaim-grace', '--reclaim-grace', [CompletionResultType]::ParameterName, 'Release a session hold (`lc-cli lock KEY -- CMD`) once its holder has not been heard from for DURATION; within it, a holder whose connection broke (or whose server restarted with --data) takes it back')
            [CompletionResult]::new('--history', '--history', [CompletionResultType]::ParameterName, 'Keep the last N ended holds of each key for `lc-cli history KEY` (with --data, in the log too, through restarts and compactions); 0 keeps none')
            [CompletionResult]::new('--max-log-bytes', '--max-log-bytes', [CompletionResultType]::ParameterName, 'Refuse new holds (one line, 76) while the log''s held keys, marks and history take half of SIZE (512MiB, 2G, bytes): the other half is the room the log grows into before a compaction rewrites it, so the file stays under SIZE and the volume needs SIZE and a half (the compaction''s new file beside it). Releases are always taken. Off by default')
            [CompletionResult]::new('--max-connections', '--max-connections', [CompletionResultType]::ParameterName, 'Connections open at once; beyond it a new one is closed at once [default: the file limit (ulimit -n) less 64]')
            [CompletionResult]::new('--max-connections-per-peer', '--max-connections-per-peer', [CompletionResultType]::ParameterName, 'Connections open at once from one peer address; 0: no limit. A pool of hosts behind one NAT address (CI runners) counts as one peer, and each lc-cli holds one connection per lock held or waited for: raise it to what the pool holds and waits for at once, with room to spare')
            [CompletionResult]::new('--max-pending-logins', '--max-pending-logins', [CompletionResultType]::ParameterName, 'Connections still logging in at once (their TLS handshake and first frame not yet through); beyond it a new one is closed at once, so the rest of --max-connections stays for connections that logged in (with --token-file: that gave a token) [default: half of --max-connections]')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Speak TLS on the lock port with this certificate (PEM, the chain after it); clients then use lcs://HOST:PORT?cacert=FILE. The manager and metrics ports stay plain')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'The private key of --tls-cert (PEM)')
            [CompletionResult]::new('--tls-client-ca', '--tls-client-ca', [CompletionResultType]::ParameterName, 'Require a client certificate signed by this CA (PEM): mutual TLS; clients add cert=FILE&key=FILE to their lcs:// address')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Require a token from every client (LC_TOKEN, LC_TOKEN_FILE or lc://:TOKEN@HOST): one per line of FILE, each optionally followed by its role, lock (the default: lock, release its own holds) or admin (also reset, and release any hold), then by name=NAME, the identity the log and keys show for it (else token:FINGERPRINT), keys=PATTERNS (the keys it may take: deploy/*,ci/*), held=N (the holds it may have at once, default 10000) and waits=N (its requests waiting in line at once, default 10000); SIGHUP reads FILE again. The manager port, which takes no token, is then off unless --manager names it')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lc-cli;completions' {
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event (global: before or after the subcommand)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lc-cli;help' {
            [CompletionResult]::new('lock', 'lock', [CompletionResultType]::ParameterValue, 'Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends')
            [CompletionResult]::new('trylock', 'trylock', [CompletionResultType]::ParameterValue, 'Take KEY only if it is free now, run COMMAND while holding it')
            [CompletionResult]::new('unlock', 'unlock', [CompletionResultType]::ParameterValue, 'Release KEY (a hold left by `lock` without a command)')
            [CompletionResult]::new('wait', 'wait', [CompletionResultType]::ParameterValue, 'Wait until KEY is free: take it in turn and release it at once')
            [CompletionResult]::new('reset', 'reset', [CompletionResultType]::ParameterValue, 'Force-release keys (by key, or by the source that holds them)')
            [CompletionResult]::new('keys', 'keys', [CompletionResultType]::ParameterValue, 'List held keys: holder, since when, how many wait')
            [CompletionResult]::new('mark', 'mark', [CompletionResultType]::ParameterValue, 'Show KEY''s mark (the highest --order that ended with status 0), or clear it')
            [CompletionResult]::new('history', 'history', [CompletionResultType]::ParameterValue, 'Show how KEY''s last holds ended: who, why, when, with what status')
            [CompletionResult]::new('ping', 'ping', [CompletionResultType]::ParameterValue, 'Say what the lock service is and whether a lock could be taken now')
            [CompletionResult]::new('serve', 'serve', [CompletionResultType]::ParameterValue, 'Run the built-in lock server')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script: `source <(lc-cli completions bash)`')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'lc-cli;help;lock' {
            break
        }
        'lc-cli;help;trylock' {
            break
        }
        'lc-cli;help;unlock' {
            break
        }
        'lc-cli;help;wait' {
            break
        }
        'lc-cli;help;reset' {
            break
        }
        'lc-cli;help;keys' {
            break
        }
        'lc-cli;help;mark' {
            break
        }
        'lc-cli;help;history' {
            break
        }
        'lc-cli;help;ping' {
            break
        }
        'lc-cli;help;serve' {
            break
        }
        'lc-cli;help;completions' {
            break
        }
        'lc-cli;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
