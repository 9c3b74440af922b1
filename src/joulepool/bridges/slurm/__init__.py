"""The Slurm bridge: Slurm asks Pool before a job starts, and tells it what the job spent.

- `job_submit.lua` (shipped beside this file) runs inside slurmctld at submission and asks
  `pool serve` for a verdict (API.md `POST /v1/claims`): Admit lets the job go on, Deny
  rejects it with Pool's reason, Queue holds it as an administrator with the reason.
- `pool slurm agent` re-asks Pool for held jobs when the ledger moves and releases their
  holds, in submission order per entitlement.
- `pool slurm epilog` (EpilogSlurmctld) reports the job's energy from sacct
  (API.md `POST /v1/claims/{id}/release`), graded by what the evidence supports (§2.3, §2.5).
- `pool slurm status` lists each held job with its Pool reason.

Installing, the mapping file, fail-open/closed and grades: docs/slurm.md.
"""
