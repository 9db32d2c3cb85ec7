#include "shared/config/part_options.h"

#include "shared/config/feature_schema.h"
#include "shared/config/job_topology.h"
#include "shared/train/augment_options.h"

namespace pstrain {

SecurityOptions security_options(const JobOptions& o) {
  SecurityOptions s;
  s.curve = o.curve;
  s.insecure = o.insecure;
  s.key_file = o.curve_key_file;
  return s;
}

JobIdentity job_identity(const JobOptions& o) {
  JobIdentity j;
  j.mode = o.mode;
  j.staleness = o.staleness;
  j.backup_workers = o.backup_workers;
  j.model = o.model;
  j.hidden = o.hidden;
  j.optimizer = o.optimizer;
  j.seed = o.seed;
  j.shuffle = o.shuffle;
  j.train_data = o.train_data;
  j.data_dir = o.data_dir;
  j.num_workers = o.num_workers;
  j.worker_batches = worker_shares(o);
  j.label_smoothing = o.label_smoothing;
  j.augment = AugmentOptions{o.augment_flip, o.augment_shift, o.seed}.text();  // "" without augmentation
  if (o.loss != Loss::kSoftmax) {  // the fingerprint's "loss"; absent for softmax, as before there were others
    j.loss = std::string(loss_name(o.loss)) +
             (o.loss == Loss::kHuber ? " delta " + fingerprint_number(o.huber_delta) : std::string());
  }
  if (o.embedding_dim > 0) {
    j.embeddings = "dim " + std::to_string(o.embedding_dim) + " tables " + o.embedding_tables +
                   " optimizer " + o.embedding_optimizer + " lr " + fingerprint_number(o.embedding_lr) +
                   " min-count " + std::to_string(o.embedding_min_count) + " expiry " +
                   std::to_string(o.embedding_expiry);
    // Only a pool other than the default is written, so the checkpoints of jobs from before
    // --embedding-pool (sum) keep their fingerprint and resume.
    const EmbeddingPool pool = parse_job_choices(o).embedding_pool;
    if (pool != EmbeddingPool::kSum) j.embeddings += std::string(" pool ") + embedding_pool_name(pool);
    // The schema decides the IDs (and so the keys); absent without --schema, as before it.
    if (!o.schema.empty()) j.embeddings += " schema " + load_feature_schema(o.schema).canonical();
  }
  return j;
}

CheckpointOptions checkpoint_options(const JobOptions& o) {
  CheckpointOptions c;
  c.dir = o.checkpoint_dir;
  c.every = o.checkpoint_every;
  c.secs = o.checkpoint_secs;
  c.keep = o.keep_checkpoints;
  c.resume = o.resume;
  c.resume_auto = o.resume_auto;
  c.resume_allow = o.resume_allow;
  c.errors = o.checkpoint_errors;
  c.job = job_identity(o);
  c.table_shards = job_topology(o).table_shards;  // hybrid mode: the PS shards' tables
  return c;
}

}  // namespace pstrain
