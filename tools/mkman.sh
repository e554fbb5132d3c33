#!/bin/sh
# tools/mkman.sh BUILD — man pages for lind and lindctl, made by help2man from
# the binaries' own --help and --version text, with every subcommand's
# --help as a section, so the pages never say other than the programs do.
# Writes BUILD/man/lind.1 and BUILD/man/lindctl.1.
set -e
B=${1:-build}
mkdir -p "$B/man"
for prog in lind lindctl; do
  case $prog in
    lind) subs="info score generate serve bench-step"; what="serve and run recurrent language models" ;;
    lindctl) subs="chat generate sessions stats stress"; what="talk to a running lind serve" ;;
  esac
  inc="$B/man/$prog.h2m"
  {
    echo "[COMMANDS]"
    for s in $subs; do
      echo ".SS \"$prog $s\""
      echo ".nf"
      # roff: a leading dot or quote would be a request; backslashes escape.
      "$B/$prog" "$s" --help | sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"
      echo ".fi"
    done
    if [ $prog = lind ]; then
      echo "[FILES]"
      echo ".TP"
      echo "PREFIX/share/lind/models/default"
      echo "the shipped model, which lind serve takes when no --model is given and the working directory has no models/default"
      echo ".TP"
      echo "PREFIX/lib/systemd/system/lind.service"
      echo "the systemd unit (Type=notify; systemctl reload sends SIGHUP, which reopens --log-file)"
    fi
    echo "[SEE ALSO]"
    if [ $prog = lind ]; then echo "lindctl(1); README.md, docs/DAEMON.md and docs/PROTOCOL.md in the source tree"
    else echo "lind(1); docs/LINDCTL.md and docs/PROTOCOL.md in the source tree"; fi
  } > "$inc"
  help2man --no-info --section=1 --name="$what" --include="$inc" \
           --output="$B/man/$prog.1" "$B/$prog"
  rm -f "$inc"
done
