
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
            cand -s 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --server 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --connect-timeout 'How long to keep trying to reach the service'
            cand --session-timeout 'ZooKeeper session timeout: how long a dead holder keeps the lock'
            cand --ttl 'Redis lease on the lock key, renewed at a third of it while held'
            cand --queue-timeout 'Redis: how long a dead waiter keeps its place in the queue'
            cand -v 'Say more: how long the wait took, what runs, each server event'
            cand --verbose 'Say more: how long the wait took, what runs, each server event'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand lock 'Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends'
            cand trylock 'Like `lock --nonblock`: take KEY only if it is free now'
            cand unlock 'Release KEY (a hold left by `lock` without a command)'
            cand wait 'Wait until KEY is free: take it in turn and release it at once'
            cand reset 'Force-release keys (by key, or by the source that holds them)'
            cand keys 'List held keys: holder, since when, how many wait'
            cand serve 'Run the built-in lock server'
            cand completions 'Print a shell completion script: `source <(lc-cli completions bash)`'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'lc-cli;lock'= {
            cand -w 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)'
            cand --timeout 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)'
            cand --wait 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)'
            cand -E 'Exit status when the lock was not taken (held with -n, or timed out)'
            cand --conflict-exit-code 'Exit status when the lock was not taken (held with -n, or timed out)'
            cand -c 'Run STRING through `sh -c`'
            cand --shell-command 'Run STRING through `sh -c`'
            cand --kill-after 'Grace between SIGTERM and SIGKILL when lc-cli must stop the command'
            cand --source 'Who holds the lock, for `reset --source` (default: this host''s name)'
            cand -s 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --server 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --connect-timeout 'How long to keep trying to reach the service'
            cand --session-timeout 'ZooKeeper session timeout: how long a dead holder keeps the lock'
            cand --ttl 'Redis lease on the lock key, renewed at a third of it while held'
            cand --queue-timeout 'Redis: how long a dead waiter keeps its place in the queue'
            cand -n 'Do not wait: if KEY is held, exit with the conflict status at once'
            cand --nonblock 'Do not wait: if KEY is held, exit with the conflict status at once'
            cand --no-wait 'Do not wait: if KEY is held, exit with the conflict status at once'
            cand -v 'Say more: how long the wait took, what runs, each server event'
            cand --verbose 'Say more: how long the wait took, what runs, each server event'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lc-cli;trylock'= {
            cand -w 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)'
            cand --timeout 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)'
            cand --wait 'Stop waiting after DURATION (30s, 5m, or seconds such as 2.5)'
            cand -E 'Exit status when the lock was not taken (held with -n, or timed out)'
            cand --conflict-exit-code 'Exit status when the lock was not taken (held with -n, or timed out)'
            cand -c 'Run STRING through `sh -c`'
            cand --shell-command 'Run STRING through `sh -c`'
            cand --kill-after 'Grace between SIGTERM and SIGKILL when lc-cli must stop the command'
            cand --source 'Who holds the lock, for `reset --source` (default: this host''s name)'
            cand -s 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --server 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --connect-timeout 'How long to keep trying to reach the service'
            cand --session-timeout 'ZooKeeper session timeout: how long a dead holder keeps the lock'
            cand --ttl 'Redis lease on the lock key, renewed at a third of it while held'
            cand --queue-timeout 'Redis: how long a dead waiter keeps its place in the queue'
            cand -n 'Do not wait: if KEY is held, exit with the conflict status at once'
            cand --nonblock 'Do not wait: if KEY is held, exit with the conflict status at once'
            cand --no-wait 'Do not wait: if KEY is held, exit with the conflict status at once'
            cand -v 'Say more: how long the wait took, what runs, each server event'
            cand --verbose 'Say more: how long the wait took, what runs, each server event'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lc-cli;unlock'= {
            cand -s 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --server 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --connect-timeout 'How long to keep trying to reach the service'
            cand --session-timeout 'ZooKeeper session timeout: how long a dead holder keeps the lock'
            cand --ttl 'Redis lease on the lock key, renewed at a third of it while held'
            cand --queue-timeout 'Redis: how long a dead waiter keeps its place in the queue'
            cand -v 'Say more: how long the wait took, what runs, each server event'
            cand --verbose 'Say more: how long the wait took, what runs, each server event'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lc-cli;wait'= {
            cand -w 'Stop waiting after DURATION'
            cand --timeout 'Stop waiting after DURATION'
            cand --wait 'Stop waiting after DURATION'
            cand -E 'Exit status on timeout'
            cand --conflict-exit-code 'Exit status on timeout'
            cand --source 'Who holds the lock, for `reset --source` (default: this host''s name)'
            cand -s 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --server 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --connect-timeout 'How long to keep trying to reach the service'
            cand --session-timeout 'ZooKeeper session timeout: how long a dead holder keeps the lock'
            cand --ttl 'Redis lease on the lock key, renewed at a third of it while held'
            cand --queue-timeout 'Redis: how long a dead waiter keeps its place in the queue'
            cand -v 'Say more: how long the wait took, what runs, each server event'
            cand --verbose 'Say more: how long the wait took, what runs, each server event'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lc-cli;reset'= {
            cand --source 'Release every key held by these sources and withdraw their waiters (never taken from LC_SOURCE)'
            cand -s 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --server 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --connect-timeout 'How long to keep trying to reach the service'
            cand --session-timeout 'ZooKeeper session timeout: how long a dead holder keeps the lock'
            cand --ttl 'Redis lease on the lock key, renewed at a third of it while held'
            cand --queue-timeout 'Redis: how long a dead waiter keeps its place in the queue'
            cand -v 'Say more: how long the wait took, what runs, each server event'
            cand --verbose 'Say more: how long the wait took, what runs, each server event'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lc-cli;keys'= {
            cand -s 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --server 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --connect-timeout 'How long to keep trying to reach the service'
            cand --session-timeout 'ZooKeeper session timeout: how long a dead holder keeps the lock'
            cand --ttl 'Redis lease on the lock key, renewed at a third of it while held'
            cand --queue-timeout 'Redis: how long a dead waiter keeps its place in the queue'
            cand --json 'One JSON object per key, one per line'
            cand -v 'Say more: how long the wait took, what runs, each server event'
            cand --verbose 'Say more: how long the wait took, what runs, each server event'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lc-cli;serve'= {
            cand -l 'Address to listen on (loopback by default; port 0 picks a free one)'
            cand --listen 'Address to listen on (loopback by default; port 0 picks a free one)'
            cand --data 'Keep held keys in a write-ahead log at PATH, so they survive a restart'
            cand --read-timeout 'How long a client may take to send its whole request'
            cand -s 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --server 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --connect-timeout 'How long to keep trying to reach the service'
            cand --session-timeout 'ZooKeeper session timeout: how long a dead holder keeps the lock'
            cand --ttl 'Redis lease on the lock key, renewed at a third of it while held'
            cand --queue-timeout 'Redis: how long a dead waiter keeps its place in the queue'
            cand -v 'Say more: how long the wait took, what runs, each server event'
            cand --verbose 'Say more: how long the wait took, what runs, each server event'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lc-cli;completions'= {
            cand -s 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --server 'The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol), zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]'
            cand --connect-timeout 'How long to keep trying to reach the service'
            cand --session-timeout 'ZooKeeper session timeout: how long a dead holder keeps the lock'
            cand --ttl 'Redis lease on the lock key, renewed at a third of it while held'
            cand --queue-timeout 'Redis: how long a dead waiter keeps its place in the queue'
            cand -v 'Say more: how long the wait took, what runs, each server event'
            cand --verbose 'Say more: how long the wait took, what runs, each server event'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lc-cli;help'= {
            cand lock 'Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends'
            cand trylock 'Like `lock --nonblock`: take KEY only if it is free now'
            cand unlock 'Release KEY (a hold left by `lock` without a command)'
            cand wait 'Wait until KEY is free: take it in turn and release it at once'
            cand reset 'Force-release keys (by key, or by the source that holds them)'
            cand keys 'List held keys: holder, since when, how many wait'
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
        &'lc-cli;help;serve'= {
        }
        &'lc-cli;help;completions'= {
        }
        &'lc-cli;help;help'= {
        }
    ]
    $completions[$command]
}
