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

# Installed to a PREFIX of its own (no DESTDIR), `lind serve` without
# --model finds the installed model from any working directory, and the
# systemd unit names the installed binary and passes systemd-analyze verify.
P2="$tmp/prefix"
if make --no-print-directory BUILD="$B" install PREFIX="$P2" >"$tmp/log2" 2>&1; then
  pass make_install_prefix
else
  fail make_install_prefix "$(tail -n 5 "$tmp/log2")"
  exit 1
fi
if cmp -s models/default/model.safetensors "$P2/share/lind/models/default/model.safetensors" &&
   cmp -s models/default/config.json "$P2/share/lind/models/default/config.json"; then
  pass installed_model
else
  fail installed_model "$(ls -l "$P2/share/lind/models/default" 2>&1)"
fi
U="$P2/lib/systemd/system/lind.service"
if grep -qx "ExecStart=$P2/bin/lind serve --socket /run/lind/lind.sock --db /var/lib/lind/lind.db" "$U" &&
   grep -qx "Type=notify" "$U" && grep -qx 'ExecReload=/bin/kill -HUP $MAINPID' "$U"; then
  pass unit_file
else
  fail unit_file "$(grep -E '^(ExecStart|Type|ExecReload)=' "$U" 2>&1)"
fi
if command -v systemd-analyze >/dev/null; then
  out=$(systemd-analyze verify --man=no "$U" 2>&1) && pass unit_verifies || fail unit_verifies "$out"
else
  echo "SKIP unit_verifies: systemd-analyze is not installed (make deps installs systemd)"
fi

mkdir -p "$tmp/elsewhere"
kill $daemon 2>/dev/null; wait $daemon 2>/dev/null
(cd "$tmp/elsewhere" && exec "$P2/bin/lind" serve --socket "$tmp/e.sock" --db "$tmp/e.db" --backend cpu) \
  >"$tmp/e.log" 2>&1 &
daemon=$!
# Waits for events, not for time: the socket can exist before the start
# line is written, and a turn's line can follow its answer to the client.
wait_until() {   # shell condition; 0 once it holds (up to 60 s times LIND_TEST_TIME_SCALE)
  n=$(awk "BEGIN { print int(600 * ${LIND_TEST_TIME_SCALE:-1}) }")
  i=0
  while [ $i -lt "$n" ]; do
    eval "$1" && return 0
    kill -0 $daemon 2>/dev/null || { eval "$1"; return $?; }
    sleep 0.1
    i=$((i + 1))
  done
  return 1
}
wait_until '[ -S "$tmp/e.sock" ] && grep -q " info start model=" "$tmp/e.log"'
real=$(cd "$P2/share/lind/models/default" && pwd -P)
if [ -S "$tmp/e.sock" ] && grep -q " info start model=$real " "$tmp/e.log" &&
   "$B/lindctl" --socket "$tmp/e.sock" generate installed "In the beginning" -n 5 >/dev/null 2>&1 &&
   wait_until 'grep -q " info turn session=installed op=generate in=[0-9]* out=5 " "$tmp/e.log"'; then
  pass installed_serve_from_elsewhere
else
  fail installed_serve_from_elsewhere "$(tail -n 3 "$tmp/e.log")"
fi
kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; daemon=

# A lind with no model beside it and none in the working directory says
# where it looked (it used to fail on the relative models/default alone).
mkdir -p "$tmp/bare/bin"
cp "$P2/bin/lind" "$tmp/bare/bin/lind"
out=$(cd "$tmp/elsewhere" && "$tmp/bare/bin/lind" serve --socket "$tmp/b.sock" --db "$tmp/b.db" --backend cpu 2>&1)
rc=$?
case "$out" in
  *"no --model given"*"$tmp/bare/bin/../share/lind/models/default"*) [ $rc = 1 ] && pass no_model_says_where ||
      fail no_model_says_where "exit $rc: $out" ;;
  *) fail no_model_says_where "exit $rc: $out" ;;
esac
