-- job_submit.lua of the joulepool Slurm bridge: the bridge is the module pool_bridge.lua
-- beside this file (docs/slurm.md, "Chaining"). A site with a job_submit.lua of its own
-- keeps it and adds these calls to it instead of installing this file.
-- `pool slurm install-config` rewrites the next line to the folder of pool_bridge.lua.
package.path = "/etc/slurm/?.lua;" .. package.path
local pool_bridge = require("pool_bridge")

function slurm_job_submit(job_desc, part_list, submit_uid)
  return pool_bridge.job_submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return pool_bridge.job_modify(job_desc, job_rec, part_list, modify_uid)
end

return slurm.SUCCESS
