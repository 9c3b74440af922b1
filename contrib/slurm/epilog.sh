#!/bin/sh
# An epilog.d dispatcher for slurmd (docs/slurm.md, "Chaining"): Epilog=/etc/slurm/epilog.sh
# runs every executable piece of epilog.d beside it, in name order, each one even when an
# earlier one failed (so no piece's failure skips the bridge's report of the job's GPU
# energy), and exits with the first failure's status.
# The bridge's piece: ln -s /etc/slurm/pool-gpu-epilog.sh /etc/slurm/epilog.d/50-pool-gpu
dir="$(dirname "$0")/epilog.d"
rc=0
for piece in "$dir"/*; do
  [ -f "$piece" ] && [ -x "$piece" ] || continue
  "$piece"
  status=$?
  [ "$rc" -eq 0 ] && rc=$status
done
exit "$rc"
