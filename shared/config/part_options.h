// The job's options as the parts in shared/ take them: each part has its own small struct, and
// these fill them from the parsed flags. Called by the mains and by their converters
// (ps/options_from_job.h, worker/options_from_job.h), which fill the structs of ps/ and worker/.
#pragma once

#include "shared/checkpoint/checkpoint_options.h"
#include "shared/checkpoint/job_fingerprint.h"
#include "shared/config/options.h"
#include "shared/net/curve.h"

namespace pstrain {

SecurityOptions security_options(const JobOptions& o);    // --curve, --insecure, --curve-key-file
JobIdentity job_identity(const JobOptions& o);            // what a checkpoint's fingerprint records
CheckpointOptions checkpoint_options(const JobOptions& o);  // --checkpoint-*, --resume*, the job's identity

}  // namespace pstrain
