
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
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service')
            [CompletionResult]::new('--session-timeout', '--session-timeout', [CompletionResultType]::ParameterName, 'ZooKeeper session timeout: how long a dead holder keeps the lock')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Redis lease on the lock key, renewed at a third of it while held')
            [CompletionResult]::new('--queue-timeout', '--queue-timeout', [CompletionResultType]::ParameterName, 'Redis: how long a dead waiter keeps its place in the queue')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('lock', 'lock', [CompletionResultType]::ParameterValue, 'Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends')
            [CompletionResult]::new('trylock', 'trylock', [CompletionResultType]::ParameterValue, 'Like `lock --nonblock`: take KEY only if it is free now')
            [CompletionResult]::new('unlock', 'unlock', [CompletionResultType]::ParameterValue, 'Release KEY (a hold left by `lock` without a command)')
            [CompletionResult]::new('wait', 'wait', [CompletionResultType]::ParameterValue, 'Wait until KEY is free: take it in turn and release it at once')
            [CompletionResult]::new('reset', 'reset', [CompletionResultType]::ParameterValue, 'Force-release keys (by key, or by the source that holds them)')
            [CompletionResult]::new('keys', 'keys', [CompletionResultType]::ParameterValue, 'List held keys: holder, since when, how many wait')
            [CompletionResult]::new('serve', 'serve', [CompletionResultType]::ParameterValue, 'Run the built-in lock server')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script: `source <(lc-cli completions bash)`')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'lc-cli;lock' {
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock was not taken (held with -n, or timed out)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock was not taken (held with -n, or timed out)')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Run STRING through `sh -c`')
            [CompletionResult]::new('--shell-command', '--shell-command', [CompletionResultType]::ParameterName, 'Run STRING through `sh -c`')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'Grace between SIGTERM and SIGKILL when lc-cli must stop the command')
            [CompletionResult]::new('--source', '--source', [CompletionResultType]::ParameterName, 'Who holds the lock, for `reset --source` (default: this host''s name)')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service')
            [CompletionResult]::new('--session-timeout', '--session-timeout', [CompletionResultType]::ParameterName, 'ZooKeeper session timeout: how long a dead holder keeps the lock')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Redis lease on the lock key, renewed at a third of it while held')
            [CompletionResult]::new('--queue-timeout', '--queue-timeout', [CompletionResultType]::ParameterName, 'Redis: how long a dead waiter keeps its place in the queue')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Do not wait: if KEY is held, exit with the conflict status at once')
            [CompletionResult]::new('--nonblock', '--nonblock', [CompletionResultType]::ParameterName, 'Do not wait: if KEY is held, exit with the conflict status at once')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Do not wait: if KEY is held, exit with the conflict status at once')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lc-cli;trylock' {
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock was not taken (held with -n, or timed out)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock was not taken (held with -n, or timed out)')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Run STRING through `sh -c`')
            [CompletionResult]::new('--shell-command', '--shell-command', [CompletionResultType]::ParameterName, 'Run STRING through `sh -c`')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'Grace between SIGTERM and SIGKILL when lc-cli must stop the command')
            [CompletionResult]::new('--source', '--source', [CompletionResultType]::ParameterName, 'Who holds the lock, for `reset --source` (default: this host''s name)')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service')
            [CompletionResult]::new('--session-timeout', '--session-timeout', [CompletionResultType]::ParameterName, 'ZooKeeper session timeout: how long a dead holder keeps the lock')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Redis lease on the lock key, renewed at a third of it while held')
            [CompletionResult]::new('--queue-timeout', '--queue-timeout', [CompletionResultType]::ParameterName, 'Redis: how long a dead waiter keeps its place in the queue')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Do not wait: if KEY is held, exit with the conflict status at once')
            [CompletionResult]::new('--nonblock', '--nonblock', [CompletionResultType]::ParameterName, 'Do not wait: if KEY is held, exit with the conflict status at once')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Do not wait: if KEY is held, exit with the conflict status at once')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lc-cli;unlock' {
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service')
            [CompletionResult]::new('--session-timeout', '--session-timeout', [CompletionResultType]::ParameterName, 'ZooKeeper session timeout: how long a dead holder keeps the lock')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Redis lease on the lock key, renewed at a third of it while held')
            [CompletionResult]::new('--queue-timeout', '--queue-timeout', [CompletionResultType]::ParameterName, 'Redis: how long a dead waiter keeps its place in the queue')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lc-cli;wait' {
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Stop waiting after DURATION')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status on timeout')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status on timeout')
            [CompletionResult]::new('--source', '--source', [CompletionResultType]::ParameterName, 'Who holds the lock, for `reset --source` (default: this host''s name)')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service')
            [CompletionResult]::new('--session-timeout', '--session-timeout', [CompletionResultType]::ParameterName, 'ZooKeeper session timeout: how long a dead holder keeps the lock')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Redis lease on the lock key, renewed at a third of it while held')
            [CompletionResult]::new('--queue-timeout', '--queue-timeout', [CompletionResultType]::ParameterName, 'Redis: how long a dead waiter keeps its place in the queue')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lc-cli;reset' {
            [CompletionResult]::new('--source', '--source', [CompletionResultType]::ParameterName, 'Release every key held by these sources and withdraw their waiters (never taken from LC_SOURCE)')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service')
            [CompletionResult]::new('--session-timeout', '--session-timeout', [CompletionResultType]::ParameterName, 'ZooKeeper session timeout: how long a dead holder keeps the lock')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Redis lease on the lock key, renewed at a third of it while held')
            [CompletionResult]::new('--queue-timeout', '--queue-timeout', [CompletionResultType]::ParameterName, 'Redis: how long a dead waiter keeps its place in the queue')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lc-cli;keys' {
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service')
            [CompletionResult]::new('--session-timeout', '--session-timeout', [CompletionResultType]::ParameterName, 'ZooKeeper session timeout: how long a dead holder keeps the lock')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Redis lease on the lock key, renewed at a third of it while held')
            [CompletionResult]::new('--queue-timeout', '--queue-timeout', [CompletionResultType]::ParameterName, 'Redis: how long a dead waiter keeps its place in the queue')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'One JSON object per key, one per line')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lc-cli;serve' {
            [CompletionResult]::new('-l', '-l', [CompletionResultType]::ParameterName, 'Address to listen on (loopback by default; port 0 picks a free one)')
            [CompletionResult]::new('--listen', '--listen', [CompletionResultType]::ParameterName, 'Address to listen on (loopback by default; port 0 picks a free one)')
            [CompletionResult]::new('--data', '--data', [CompletionResultType]::ParameterName, 'Keep held keys in a write-ahead log at PATH, so they survive a restart')
            [CompletionResult]::new('--read-timeout', '--read-timeout', [CompletionResultType]::ParameterName, 'How long a client may take to send its whole request')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service')
            [CompletionResult]::new('--session-timeout', '--session-timeout', [CompletionResultType]::ParameterName, 'ZooKeeper session timeout: how long a dead holder keeps the lock')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Redis lease on the lock key, renewed at a third of it while held')
            [CompletionResult]::new('--queue-timeout', '--queue-timeout', [CompletionResultType]::ParameterName, 'Redis: how long a dead waiter keeps its place in the queue')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lc-cli;completions' {
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--server', '--server', [CompletionResultType]::ParameterName, 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'How long to keep trying to reach the service')
            [CompletionResult]::new('--session-timeout', '--session-timeout', [CompletionResultType]::ParameterName, 'ZooKeeper session timeout: how long a dead holder keeps the lock')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Redis lease on the lock key, renewed at a third of it while held')
            [CompletionResult]::new('--queue-timeout', '--queue-timeout', [CompletionResultType]::ParameterName, 'Redis: how long a dead waiter keeps its place in the queue')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more: how long the wait took, what runs, each server event')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lc-cli;help' {
            [CompletionResult]::new('lock', 'lock', [CompletionResultType]::ParameterValue, 'Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends')
            [CompletionResult]::new('trylock', 'trylock', [CompletionResultType]::ParameterValue, 'Like `lock --nonblock`: take KEY only if it is free now')
            [CompletionResult]::new('unlock', 'unlock', [CompletionResultType]::ParameterValue, 'Release KEY (a hold left by `lock` without a command)')
            [CompletionResult]::new('wait', 'wait', [CompletionResultType]::ParameterValue, 'Wait until KEY is free: take it in turn and release it at once')
            [CompletionResult]::new('reset', 'reset', [CompletionResultType]::ParameterValue, 'Force-release keys (by key, or by the source that holds them)')
            [CompletionResult]::new('keys', 'keys', [CompletionResultType]::ParameterValue, 'List held keys: holder, since when, how many wait')
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
