#!/bin/sh
# tests/test_lindctl_install.sh — `make install` with a PREFIX and DESTDIR
# puts both binaries, a man page each (made from their --help: every
# subcommand's options appear in it) and bash completion for each; the
# completion functions complete commands, options and session names.
B=${LIND_BUILD:-build}
tmp=$(mktemp -d /tmp/lind-install-XXXXXX)
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
daemon=

if ! command -v help2man >/dev/null; then
  echo "SKIP install: help2man is not installed (make deps installs it)"
  exit 0
fi
if make --no-print-directory BUILD="$B" install PREFIX=/opt/lind DESTDIR="$tmp/root" >"$tmp/log" 2>&1; then
  pass make_install
else
  fail make_install "$(tail -n 5 "$tmp/log")"
  exit 1
fi
P="$tmp/root/opt/lind"
ok=1
for f in bin/lind bin/lindctl share/man/man1/lind.1 share/man/man1/lindctl.1 \
         share/bash-completion/completions/lind share/bash-completion/completions/lindctl; do
  [ -s "$P/$f" ] || { fail installed_files "$f missing"; ok=0; }
done
[ -x "$P/bin/lindctl" ] || { fail installed_files "lindctl not executable"; ok=0; }
[ $ok = 1 ] && pass installed_files

# The man pages say what --help says: each subcommand's options are there.
ok=1
page=$(man -l "$P/share/man/man1/lindctl.1" 2>/dev/null || cat "$P/share/man/man1/lindctl.1")
for w in "lindctl chat" "--template" "/switch NAME" "lindctl stress" "--plot" "lindctl sessions" "--version"; do
  printf '%s' "$page" | grep -q -- "$w" || { fail man_lindctl "no '$w' in the page"; ok=0; }
done
[ $ok = 1 ] && pass man_lindctl
ok=1
page=$(man -l "$P/share/man/man1/lind.1" 2>/dev/null || cat "$P/share/man/man1/lind.1")
for w in "lind serve" "--max-inflight" "lind score" "--after-generate" "lind bench-step" "1.0"; do
  printf '%s' "$page" | grep -q -- "$w" || { fail man_lind "no '$w' in the page"; ok=0; }
done
[ $ok = 1 ] && pass man_lind

# Completion: run the functions as bash would on a command line.
complete_words() {  # completion-file command-line... -> the candidates, one a line
  file=$1; shift
  PATH="$P/bin:$PATH" bash -c '
    . "$1"; shift
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()
    fn=$(complete -p "$1" | sed "s/.*-F \([^ ]*\) .*/\1/")
    $fn
    printf "%s\n" "${COMPREPLY[@]}"' _ "$file" "$@"
}
C="$P/share/bash-completion/completions"
got=$(complete_words "$C/lindctl" lindctl "")
echo "$got" | grep -qx chat && echo "$got" | grep -qx stress && echo "$got" | grep -qx -- --version &&
  pass complete_lindctl_commands || fail complete_lindctl_commands "$got"
got=$(complete_words "$C/lindctl" lindctl chat --te)
[ "$got" = "--temperature
--template" ] && pass complete_chat_options || fail complete_chat_options "$got"
got=$(complete_words "$C/lindctl" lindctl sessions "")
echo "$got" | grep -qx export && pass complete_sessions_sub || fail complete_sessions_sub "$got"
got=$(complete_words "$C/lind" lind serve --max-i)
[ "$got" = "--max-inflight" ] && pass complete_lind_serve || fail complete_lind_serve "$got"
got=$(complete_words "$C/lind" lind serve --backend "")
[ "$(echo $got)" = "cpu cuda auto" ] && pass complete_lind_backend || fail complete_lind_backend "$got"

# Session names come from the daemon named by --socket.
# (The daemon takes its socket from $LIND_SOCKET, as lindctl does.)
LIND_SOCKET="$tmp/s" "$B/lind" serve --model models/default --db "$tmp/db" --backend cpu >"$tmp/daemon.log" 2>&1 &
daemon=$!
# Up to 30 s (times LIND_TEST_TIME_SCALE) for the socket.
for i in $(seq 1 "$(awk "BEGIN { print int(300 * ${LIND_TEST_TIME_SCALE:-1}) }")"); do
  [ -S "$tmp/s" ] && break; sleep 0.1; done
[ -S "$tmp/s" ] && pass serve_honours_LIND_SOCKET || fail serve_honours_LIND_SOCKET "no socket at $tmp/s"
LIND_SOCKET="$tmp/s" "$B/lindctl" generate alpha-one "x" -n 1 >/dev/null 2>&1
"$B/lindctl" --socket "$tmp/s" generate alpha-two "x" -n 1 >/dev/null 2>&1
got=$(complete_words "$C/lindctl" lindctl --socket "$tmp/s" chat alpha)
[ "$(echo $got)" = "alpha-one alpha-two" ] && pass complete_session_names || fail complete_session_names "$got"
