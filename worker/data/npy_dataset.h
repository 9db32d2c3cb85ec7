// A data set of two .npy files (docs/data.md): features of shape (N, ...) as float32 (used as
// they are) or uint8 (multiplied by a scale), and labels of an integer dtype of shape (N,).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker/data/dataset.h"
#include "worker/data/records.h"

namespace pstrain {

// Checks both files completely at open, streaming them once in bounded chunks: the headers,
// equal record counts, every label against `labels_range`, every float feature finite. Records
// are then read with pread. Gzip files are decompressed once into cache_dir. uint8 features are
// multiplied by `scale` (0: 1/255). sample_shape(): (N, C, H, W) -> {C, H, W}, (N, H, W) ->
// {1, H, W}, (N, D) -> {D}, (N,) -> {1}. Throws pstrain::Error naming the file and the problem.
std::unique_ptr<Dataset> open_npy_dataset(const std::string& features, const std::string& labels,
                                          const std::string& cache_dir, double scale,
                                          const LabelRange& labels_range);

// The same with float targets instead of labels (--loss bce | mse | huber): `targets` of shape
// (N,) or (N, K), float32, float64 or integers, K targets per record (target_width(),
// num_classes()), each checked at open against `rule` (pstrain::UsageError naming the file, the
// record and the value).
std::unique_ptr<Dataset> open_npy_target_dataset(const std::string& features, const std::string& targets,
                                                 const std::string& cache_dir, double scale, const TargetRule& rule);

// The sample_shape() open_npy_dataset gives for `features`, from its header alone (cheap).
std::vector<size_t> npy_sample_shape(const std::string& features, const std::string& cache_dir);

}  // namespace pstrain
