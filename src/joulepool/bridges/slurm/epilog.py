"""EpilogSlurmctld of the bridge: report a finished job's energy to Pool (§6.2; API.md release).

    python3 -m joulepool.bridges.slurm.epilog --config /etc/slurm/pool-bridge.toml

slurmctld runs it as SlurmUser at every job's end with SLURM_JOB_ID set (and without
SLURM_CONF, which the wrapper `pool slurm install-config` writes exports). Standard library
only, so the system's python3 can run it. If Pool cannot be reached after a few tries the
claim stays open; `pool slurm agent` releases it later from the same evidence.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from joulepool.bridges.slurm.config import (
    PoolUnreachable,
    read_bridge_config,
    read_token,
    slurm_env,
)
from joulepool.bridges.slurm.jobs import (
    RUNS_AGAIN,
    PoolClient,
    Report,
    list_jobs,
    record_run,
    report_job,
)
from joulepool.errors import InvalidInput, PoolError

RETRIES_S = (0.5, 1.0, 2.0)
HTTP_TIMEOUT_S = 10.0


def run_epilog(config_path: Path, job_id: int) -> Report | None:
    """Report job `job_id` (§6.2), retrying while Pool is unreachable; None if not the bridge's."""
    config = read_bridge_config(config_path)
    client = PoolClient(config.url, read_token(config.token_file), HTTP_TIMEOUT_S, config.ca_file)
    env = slurm_env()
    # For an array's id scontrol lists every task: keep this job's own record.
    jobs = [j for j in list_jobs(env, job_id) if j.job_id == job_id]
    if not jobs:
        return None
    if jobs[0].state in RUNS_AGAIN or jobs[0].end_s is None:
        # Requeued: this run ended, the job did not (slurmctld clears its EndTime at the
        # requeue and calls this script all the same); its claim stays open until it does,
        # and this run's energy is kept so that the release charges it too (§6.2).
        for pause in (*RETRIES_S, None):
            try:
                record_run(jobs[0], client, env, config.gpu_wait)
                break
            except PoolUnreachable:
                if pause is None:
                    raise
                time.sleep(pause)
        return None
    for pause in (*RETRIES_S, None):
        try:
            return report_job(jobs[0], client, env, config.gpu_wait, settle_after_s=None)
        except PoolUnreachable:
            if pause is None:
                raise
            time.sleep(pause)
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point for EpilogSlurmctld; exits 0 for a job that is not the bridge's."""
    parser = argparse.ArgumentParser(prog="pool-slurm-epilog", description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("/etc/slurm/pool-bridge.toml"))
    parser.add_argument("--job", type=int, help="the job id (default: $SLURM_JOB_ID)")
    args = parser.parse_args(argv)
    try:
        job = args.job if args.job is not None else _job_from_env()
        report = run_epilog(args.config, job)
    except PoolError as exc:
        print(f"pool slurm epilog: {exc.code}: {exc}", file=sys.stderr)
        return 1
    if report is not None:
        print(json.dumps(report.to_json(), sort_keys=True), file=sys.stderr)
    return 0


def _job_from_env() -> int:
    raw = os.environ.get("SLURM_JOB_ID", "")
    if not raw.isdigit():
        raise InvalidInput("SLURM_JOB_ID", f"must be a job id, got {raw!r}")
    return int(raw)


if __name__ == "__main__":
    sys.exit(main())
