// parse_job_options (declared in shared/config/options.h): the flags and config file (shared/config/options.cc),
// then the roles and peers the environment gives (TF_CONFIG, Slurm, Open MPI: shared/config/cluster_env.h),
// then the defaults and checks. Kept apart so that options.cc and cluster_env.cc do not need each
// other: cluster_env depends on the options, the options on nothing of the environment.
#include "shared/config/cluster_env.h"
#include "shared/config/options.h"

namespace pstrain {

std::optional<JobOptions> parse_job_options(Role role, int argc, const char* const* argv, const EnvMap& env) {
  GivenOptions given;
  std::optional<JobOptions> o = parse_flags(role, argc, argv, &given);
  if (!o || o->print_kernels) return o;  // --kernels is about the machine, not a job: nothing to check
  resolve_cluster(role, read_cluster_env(env), given, &*o);
  if (o->origin.evaluator) return o;
  finish_job_options(&*o);
  return o;
}

std::optional<JobOptions> parse_job_options(Role role, int argc, const char* const* argv) {
  return parse_job_options(role, argc, argv, process_environment());
}

}  // namespace pstrain
