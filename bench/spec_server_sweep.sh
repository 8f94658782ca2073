#!/bin/sh
for rep in 1 2 3; do
  for c in 1 4 16; do
    n=$((c*2)); [ $c = 1 ] && n=3
    if [ $((rep % 2)) = 1 ]; then order="plain ngram"; else order="ngram plain"; fi
    for mode in $order; do
      echo "rep=$rep $(bench/spec_server_run.sh $mode $c $n 64)"
    done
  done
done
