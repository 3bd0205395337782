#!/usr/bin/env bash
# Builds the Debian package with cargo-deb, lints it, installs it, checks
# what it installed, and removes it again (CI runs this; it needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deb >/dev/null 2>&1 || cargo install cargo-deb --locked --quiet
command -v lintian >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -q lintian
cargo build --release --locked
deb=$(cargo deb --no-build --quiet 2>/dev/null | tail -1)
[ -f "$deb" ] || deb=$(ls -t "${CARGO_TARGET_DIR:-target}"/debian/lc-cli_*.deb | head -1)
echo "package: $deb"
# No errors (warnings are shown, not fatal).
lintian --fail-on error --suppress-tags-from-file scripts/lintian-suppressed "$deb"
dpkg -i "$deb"
trap 'dpkg -r lc-cli >/dev/null 2>&1 || true' EXIT
test "$(command -v lc-cli)" = /usr/bin/lc-cli
lc-cli --version
man -w lc-cli
for page in man/*.1; do test -f "/usr/share/man/man1/$(basename "$page").gz"; done
# bash completion from the system directory, as bash-completion loads it.
completed=$(bash -c '. /usr/share/bash-completion/completions/lc-cli
  COMP_WORDS=(lc-cli tryl); COMP_CWORD=1; COMP_LINE="lc-cli tryl"; COMP_POINT=${#COMP_LINE}
  func=$(complete -p lc-cli | sed -n "s/.*-F \([^ ]*\).*/\1/p")
  "$func" lc-cli tryl lc-cli; printf "%s\n" "${COMPREPLY[@]}"')
echo "$completed" | grep -qx trylock
test -f /usr/share/zsh/vendor-completions/_lc-cli
test -f /usr/share/fish/vendor_completions.d/lc-cli.fish
systemd-analyze verify --man=no /lib/systemd/system/lc-cli-serve.service
# Installed, not enabled.
! systemctl is-enabled lc-cli-serve >/dev/null 2>&1
files=$(dpkg -L lc-cli)
dpkg -r lc-cli
trap - EXIT
left=""
for f in $files; do
  [ -f "$f" ] && left="$left $f"
done
if [ -n "$left" ]; then echo "left behind by dpkg -r:$left" >&2; exit 1; fi
echo "package check passed: $(basename "$deb")"
