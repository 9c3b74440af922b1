#!/bin/sh
# A prolog.d dispatcher for slurmd (docs/slurm.md, "Chaining"): Prolog=/etc/slurm/prolog.sh
# runs every executable piece of prolog.d beside it, in name order, with slurmd's
# environment (SLURM_JOB_ID, SLURM_JOB_GPUS, ...). A piece that fails fails the prolog:
# Slurm then drains the node and requeues the job, so the pieces after it do not run.
# The bridge's piece: ln -s /etc/slurm/pool-gpu-prolog.sh /etc/slurm/prolog.d/50-pool-gpu
dir="$(dirname "$0")/prolog.d"
for piece in "$dir"/*; do
  [ -f "$piece" ] && [ -x "$piece" ] || continue
  "$piece" || exit $?
done
exit 0
