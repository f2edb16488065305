#!/bin/sh
# SIGINT or SIGTERM during `mxlab quantize --packed` leaves either every output file or none, and never a
# temporary file. The signal arrives at several moments (before, during and after the writes); whichever
# moment it hits, the folder must hold all five files or nothing.
# usage: interrupt_write.sh MXLAB DIR
set -u
mxlab=$1
dir=$2
status=0
for sig in INT TERM; do
  for delay in 0.1 0.3 0.6 1 1.5 2.5; do
    rm -rf "$dir"
    mkdir -p "$dir"
    "$mxlab" quantize mxfp4 gen:normal:0,1 --shape 4096x4096 --out "$dir/q" --packed --threads 1 2>/dev/null &
    pid=$!
    sleep "$delay"
    kill -"$sig" "$pid" 2>/dev/null
    wait "$pid"
    count=$(ls -A "$dir" | wc -l)
    if [ "$count" -ne 0 ] && [ "$count" -ne 3 ]; then
      echo "SIG$sig after ${delay}s left: $(ls -A "$dir" | tr '\n' ' ')"
      status=1
    fi
    if ls -A "$dir" | grep -q 'tmp\|partial'; then
      echo "SIG$sig after ${delay}s left a temporary file: $(ls -A "$dir" | tr '\n' ' ')"
      status=1
    fi
  done
done
rm -rf "$dir"
exit $status
