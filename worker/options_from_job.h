// The job's parsed flags as the options of a worker's parts: the one place in worker/, besides
// main, that sees JobOptions (shared/config/options.h). Each function fills one part's struct.
#pragma once

#include "shared/config/options.h"
#include "worker/backend/backend.h"
#include "worker/data/open.h"
#include "worker/exchange/exchange.h"
#include "worker/exchange/ps_client_options.h"
#include "worker/report/progress.h"
#include "worker/train/evaluation.h"
#include "worker/train/prediction.h"
#include "worker/train/trainer.h"

namespace pstrain {

BackendOptions backend_options(const JobOptions& o);
DataOptions data_options(const JobOptions& o);
PsClientOptions ps_client_options(const JobOptions& o);
ExchangeOptions exchange_options(const JobOptions& o);
// --embedding-dim's tables as model.json records them (dense and fields: the data's, left at
// Criteo's); dim 0 without tables.
EmbeddingSetup embedding_setup(const JobOptions& o);
EvaluateOptions evaluate_options(const JobOptions& o);  // --evaluate
PredictOptions predict_options(const JobOptions& o);    // --predict
TrainOptions train_options(const JobOptions& o);

}  // namespace pstrain
