#!/usr/bin/env bash
# The step of the GitHub Action (action.yml at the repository's root):
# installs lc-cli, then runs INPUT_RUN under the lock INPUT_KEY and exits
# with what lc-cli exits with (the command's own status, or lc-cli's:
# README's exit table). It reads its inputs from INPUT_* variables, which
# action.yml sets from the action's inputs, so it runs the same way
# outside a runner:
#
#   INPUT_KEY=deploy/prod INPUT_RUN='./deploy.sh' INPUT_SERVER=127.0.0.1:22119 \
#     bash action/run.sh
#
# Two switches for its tests (tests/ci_action.rs, scripts/check-wheel.sh):
#   LC_CLI_ACTION_BIN=DIR        use DIR/lc-cli instead of installing one
#   LC_CLI_ACTION_PACKAGE=SPEC   what pip installs instead of lc-cli==INPUT_VERSION
#                                (a wheel file)
# Never `set -x` here: it would print the token.
set -euo pipefail

# The token: masked in the runner's log, kept out of every variable the
# command inherits, handed to lc-cli alone in LC_TOKEN (not in its argv).
token=${INPUT_TOKEN:-}
unset INPUT_TOKEN
if [ -n "$token" ] && [ "${GITHUB_ACTIONS:-}" = true ]; then
  echo "::add-mask::$token"
fi

# A wrong input: one line (an error annotation on a runner), exit 64 as
# lc-cli's own usage errors.
usage() {
  echo "::error title=lc-cli action::$*" >&2
  exit 64
}
key=${INPUT_KEY:-}
run=${INPUT_RUN:-}
wait=${INPUT_WAIT:-}
shared=${INPUT_SHARED:-false}
limit=${INPUT_LIMIT:-}
source_name=${INPUT_SOURCE:-}
note=${INPUT_NOTE:-}
newest=${INPUT_NEWEST:-false}
order=${INPUT_ORDER:-}
cancel_running=${INPUT_CANCEL_RUNNING:-false}
superseded_exit=${INPUT_SUPERSEDED_EXIT_CODE:-}
version=${INPUT_VERSION:-}
[ -n "$key" ] || usage "the input 'key' is empty"
case $key in -*) usage "the input 'key' may not start with '-'" ;; esac
[ -n "$run" ] || usage "the input 'run' is empty"
case $shared in true | false | '') ;; *) usage "the input 'shared' is 'true' or 'false', not '$shared'" ;; esac
[[ -z $limit || $limit =~ ^[1-9][0-9]*$ ]] || usage "the input 'limit' is a number of holders (1 or more), not '$limit'"
[[ -z $wait || $wait =~ ^[0-9A-Za-z.]+$ ]] || usage "the input 'wait' is a duration such as 30s or 5m, not '$wait'"
case $newest in true | false | '') ;; *) usage "the input 'newest' is 'true' or 'false', not '$newest'" ;; esac
case $cancel_running in true | false | '') ;; *) usage "the input 'cancel-running' is 'true' or 'false', not '$cancel_running'" ;; esac
[[ -z $order || $order =~ ^[0-9]+$ ]] || usage "the input 'order' is a number that grows with the version (such as github.run_number), not '$order'"
[[ -z $superseded_exit || $superseded_exit =~ ^[0-9]+$ ]] || usage "the input 'superseded-exit-code' is an exit status (0 to 255), not '$superseded_exit'"

# lc-cli itself: the wheel from PyPI, pinned, in a virtual environment of
# its own (nothing else of the job's Python changes).
if [ -n "${LC_CLI_ACTION_BIN:-}" ]; then
  lc=$LC_CLI_ACTION_BIN/lc-cli
else
  [[ $version =~ ^[0-9][0-9A-Za-z.+-]*$ ]] || usage "the input 'version' is a release of lc-cli such as 0.1.0, not '$version'"
  venv=${RUNNER_TEMP:-${TMPDIR:-/tmp}}/lc-cli-$version
  lc=$venv/bin/lc-cli
  if ! [ -x "$lc" ] || [ "$("$lc" --version 2>/dev/null)" != "lc-cli $version" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${LC_CLI_ACTION_PACKAGE:-lc-cli==$version}"
  fi
fi
"$lc" --version

opts=()
[ -n "$wait" ] && opts+=(-w "$wait")
[ "$shared" = true ] && opts+=(-s)
[ -n "$limit" ] && opts+=(--limit "$limit")
[ -n "$source_name" ] && opts+=(--source "$source_name")
[ -n "$note" ] && opts+=(--note "$note")
[ "$newest" = true ] && opts+=(--newest)
[ -n "$order" ] && opts+=(--order "$order")
[ "$cancel_running" = true ] && opts+=(--cancel-running)
[ -n "$superseded_exit" ] && opts+=(--superseded-exit-code "$superseded_exit")

# The server in LC_SERVER (an address may carry a password: not in argv);
# an empty input leaves the job's own LC_SERVER, else lc-cli's default.
[ -n "${INPUT_SERVER:-}" ] && export LC_SERVER=$INPUT_SERVER
# exec: lc-cli is the step's process, so the runner's signals (a
# cancelled job) reach it, and it stops the command and releases the key;
# its exit status is the step's. The command runs with bash as a `run:`
# step does, without the token.
if [ -n "$token" ]; then
  export LC_TOKEN=$token
fi
exec "$lc" lock "${opts[@]}" "$key" -- env -u LC_TOKEN bash --noprofile --norc -eo pipefail -c "$run"
